"""README "Install on a cluster", line by line, on the real node: each shell block is run
as written (bash, the admin's kubectl on PATH, in a clone of the repository), and what
it promises is checked: the DaemonSet rolled out, pods get every network, the image of
an admin's overlay reaches every container, the uninstall leaves no netattach file."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.testbed import cluster as cl
from tests.testbed import node as nd

README = cl.REPO_ROOT / "README.md"
NETWORKS = "k8s.v1.cni.cncf.io/networks"
MARKERS = ("readme-install-thin", "readme-install-thick", "readme-install-own-image",
           "readme-uninstall")


def test_every_shell_block_of_the_install_section_is_run_here():
    section = README.read_text().split("## Install on a cluster", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"(?:<!-- ([\w-]+) -->\n)?```sh\n", section)
    assert tuple(blocks) == MARKERS


def run_block(node: nd.RealNode, marker: str, cwd: Path) -> str:
    """Run README's shell block after `<!-- marker -->` with bash (-e: every line must
    succeed) in `cwd`, as an admin with the test bed's kubectl first on PATH; stdout."""
    script = nd.doc_block(README, marker, "sh")
    assert node.cluster is not None
    env = {**os.environ, "KUBECONFIG": str(node.cluster.admin_kubeconfig),
           "PATH": f"{node.k8s_bin}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    p = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"README block {marker} failed:\n{script}\n{p.stdout}\n{p.stderr}"
    return p.stdout


@pytest.fixture
def clone(tmp_path) -> Path:
    """The reader's clone of this repository (what the commands need of it: deploy/)."""
    shutil.copytree(cl.DEPLOY_DIR, tmp_path / "netattach" / "deploy")
    return tmp_path / "netattach"


def _pod_gets_every_network(node: nd.RealNode, namespace: str) -> None:
    name = nd.unique_name("readme")
    nd.apply_objects(node, [nd.pod_manifest(namespace, name, {NETWORKS: "net-a,other/net-b@data0"})])
    nd.wait_running(node, namespace, name)
    assert sorted(node.pod_addresses(namespace, name)) == ["data0", "eth0", "lo", "net1"]
    nd.delete_pod(node, namespace, name)
    assert node.ipam_allocations() == []


@pytest.mark.parametrize("mode", ["thin", "thick"])
def test_install_and_uninstall_as_the_readme_says(real_node, node_image, node_scenario, clone,
                                                  mode):
    out = run_block(real_node, f"readme-install-{mode}", clone)
    assert 'daemon set "netattach" successfully rolled out' in out
    containers = {c["name"] for c in
                  nd.daemonset(real_node)["spec"]["template"]["spec"]["containers"]}
    assert containers == ({"install"} if mode == "thin" else {"install", "daemon"})
    _pod_gets_every_network(real_node, node_scenario.namespace)
    if mode == "thin":
        run_block(real_node, "readme-uninstall", clone)
    else:  # the block's comment: thick mode deletes its own overlay
        real_node.kubectl("delete", "-k", str(clone / "deploy" / "thick"))
    nd.wait_gone(real_node)
    assert nd.netattach_files(real_node) == []


def test_own_image_overlay_as_the_readme_says(real_node, node_image, node_scenario, clone):
    # the push: the README's registry reference, imported as every image here is
    real_node.ctr("images", "tag", "--force", node_image,
                  "registry.example.com/netattach:0.1.0")
    run_block(real_node, "readme-install-own-image", clone)
    images = {c["image"] for c in
              nd.daemonset(real_node)["spec"]["template"]["spec"]["containers"]}
    assert images == {"registry.example.com/netattach:0.1.0"}
    _pod_gets_every_network(real_node, node_scenario.namespace)
    real_node.kubectl("delete", "-k", str(clone / "my-netattach"))
    nd.wait_gone(real_node)
    assert nd.netattach_files(real_node) == []
