"""deploy/ as an admin applies it: every manifest is accepted by the real API server
(the session's `cluster` fixture server-side applies DEPLOY_MANIFESTS, the list in
deploy/kustomization.yaml), and the pieces agree with each other: the DaemonSet's
ServiceAccount is the one deploy/rbac.yaml binds, its mounts are where the
installer looks by default, its command and probe are valid installer flags, and
the image recipe (Containerfile) puts the executable where the DaemonSet runs it.
"""
from __future__ import annotations

import argparse
import re

from kubernetes import client as k8s

from netattach import __version__, install
from tests.testbed import cluster as cl

EXAMPLES_DIR = cl.DEPLOY_DIR / "examples"
CONTAINERFILE = cl.REPO_ROOT / "Containerfile"


def _daemonset_doc() -> dict:
    [doc] = cl.load_manifests([cl.DEPLOY_DIR / "daemonset.yaml"])
    return doc


def _installer_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="netattach install", exit_on_error=False)
    install.add_arguments(parser)
    return parser.parse_args(argv)


def test_kustomization_lists_every_manifest():
    on_disk = {p.name for p in cl.DEPLOY_DIR.glob("*.yaml")} - {"kustomization.yaml"}
    assert sorted(p.name for p in cl.DEPLOY_MANIFESTS) == sorted(on_disk)


def test_daemonset_accepted_as_written(admin_api):
    ds = k8s.AppsV1Api(admin_api).read_namespaced_daemon_set("netattach", "kube-system")
    pod = ds.spec.template.spec
    rbac = {d["kind"]: d for d in cl.load_manifests([cl.DEPLOY_DIR / "rbac.yaml"])}
    sa = rbac["ServiceAccount"]["metadata"]
    assert (ds.metadata.namespace, pod.service_account_name) == (sa["namespace"], sa["name"])
    assert pod.host_network is True
    assert pod.node_selector == {"kubernetes.io/os": "linux"}
    assert [(t.operator, t.key, t.effect) for t in pod.tolerations] == [("Exists", None, None)]
    [c] = pod.containers
    assert c.resources.requests["cpu"] and c.resources.requests["memory"]
    assert c.resources.limits["memory"]
    assert c.readiness_probe._exec.command[:3] == c.command[:1] + ["install", "--check"]
    assert c.security_context.allow_privilege_escalation is False
    assert c.security_context.capabilities.drop == ["ALL"]


def test_daemonset_mounts_the_host_dirs_where_the_installer_looks():
    spec = _daemonset_doc()["spec"]["template"]["spec"]
    [c] = spec["containers"]
    host = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"]}
    mounted = {host[m["name"]]: m["mountPath"] for m in c["volumeMounts"]}
    args = _installer_args(c["command"][2:] + c.get("args", []))
    assert mounted == {args.host_bin_dir: args.bin_dir, args.host_conf_dir: args.conf_dir}
    assert args.cleanup_on_exit is True


def test_daemonset_probe_is_a_valid_installer_command():
    [c] = _daemonset_doc()["spec"]["template"]["spec"]["containers"]
    probe = c["readinessProbe"]["exec"]["command"]
    assert probe[0] == c["command"][0] and probe[1] == "install"
    assert _installer_args(probe[2:]).check is True


def test_containerfile_installs_what_the_daemonset_runs():
    text = CONTAINERFILE.read_text()
    [c] = _daemonset_doc()["spec"]["template"]["spec"]["containers"]
    exe = c["command"][0]
    # the final stage copies the onedir build to the directory the DaemonSet execs from
    final_copy = re.findall(r"^COPY --from=build \S+ (\S+)$", text, re.M)
    assert final_copy and exe == f"{final_copy[-1]}/netattach"
    assert re.search(rf'^ENTRYPOINT \["{re.escape(exe)}"\]$', text, re.M)
    # every source the build stage copies exists in the repo
    for srcs in re.findall(r"^COPY (?!--from)(.+) \S+$", text, re.M):
        for src in srcs.split():
            assert (cl.REPO_ROOT / src).exists(), f"Containerfile copies missing {src}"
    assert c["image"].endswith(f":{__version__}")


def test_examples_accepted_by_the_api_server(admin_api, k8s_namespace):
    paths = sorted(EXAMPLES_DIR.glob("*.yaml"))
    assert paths, "deploy/examples/ holds no example"
    docs = cl.apply_manifests(admin_api, paths, dry_run=True, namespace=k8s_namespace)
    assert {d["kind"] for d in docs} >= {"NetworkAttachmentDefinition", "Pod"}
