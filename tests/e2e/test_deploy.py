"""deploy/ as an admin applies it: every manifest is accepted by the real API server
(the session's `cluster` fixture server-side applies DEPLOY_MANIFESTS, the list in
deploy/kustomization.yaml), and the pieces agree with each other: the DaemonSet's
ServiceAccount is the one deploy/rbac.yaml binds, its mounts are where the
installer looks by default, its command and probe are valid installer flags, and
the image recipe (Containerfile) puts the executable where the DaemonSet runs it.
"""
from __future__ import annotations

import argparse
import os
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
    # the state dir's parent too: on an uninstall the installer counts the sandboxes
    # netattach attached there, and removes the state dir itself when there are none
    state_parent = os.path.dirname(args.cni_dir)
    assert mounted == {args.host_bin_dir: args.bin_dir, args.host_conf_dir: args.conf_dir,
                       state_parent: os.path.dirname(args.state_dir)}
    assert os.path.basename(args.state_dir) == os.path.basename(args.cni_dir)
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


THICK_DIR = cl.DEPLOY_DIR / "thick"


def _thick_daemonset() -> dict:
    """deploy/thick's DaemonSet: the base with the overlay's strategic merge patch applied
    as kustomize applies it here (containers and volumes merged by name, a container's
    fields replaced by the patch's; other keys of the pod spec replaced)."""
    import yaml
    kust = yaml.safe_load((THICK_DIR / "kustomization.yaml").read_text())
    assert kust["resources"] == ["../", "rbac.yaml"]
    [patch_ref] = kust["patches"]
    [patch] = cl.load_manifests([THICK_DIR / patch_ref["path"]])
    doc = _daemonset_doc()
    spec, pspec = doc["spec"]["template"]["spec"], patch["spec"]["template"]["spec"]
    for key, value in pspec.items():
        if key in ("containers", "volumes"):
            merged = {item["name"]: item for item in spec.get(key, [])}
            for item in value:
                merged[item["name"]] = {**merged.get(item["name"], {}), **item}
            spec[key] = list(merged.values())
        else:
            spec[key] = value
    return doc


def test_thick_overlay_agrees_with_itself_and_is_accepted(admin_api):
    """deploy/thick: the installer writes the thick conflist and its probe checks that
    one; the daemon's flags parse, its socket dir is the installer's daemonSocketDir, its
    probes hit its metrics port; every mount has a volume; its ServiceAccount is the one
    thick/rbac.yaml binds; the API server accepts the DaemonSet (dry run)."""
    from netattach import daemon
    ds = _thick_daemonset()
    spec = ds["spec"]["template"]["spec"]
    containers = {c["name"]: c for c in spec["containers"]}
    install_args = _installer_args(containers["install"]["args"])
    assert install_args.mode == "thick"
    probe = containers["install"]["readinessProbe"]["exec"]["command"]
    assert probe[1:3] == ["install", "--check"]
    probe_args = _installer_args(probe[3:])
    assert (probe_args.mode, probe_args.daemon_socket_dir) == (
        "thick", install_args.daemon_socket_dir)
    d = containers["daemon"]
    assert d["command"][1:] == ["daemon"]
    parser = argparse.ArgumentParser(prog="netattach daemon", exit_on_error=False)
    daemon.add_arguments(parser)
    daemon_args = parser.parse_args(d["args"])
    assert daemon_args.socket_dir == install_args.daemon_socket_dir
    assert {e["name"] for e in d["env"]} >= {"NODE_NAME"}
    for probe in ("livenessProbe", "readinessProbe"):
        assert d[probe]["httpGet"]["port"] == daemon_args.metrics_port
    volumes = {v["name"] for v in spec["volumes"]}
    for c in containers.values():
        assert {m["name"] for m in c["volumeMounts"]} <= volumes
    rbac = {doc["kind"]: doc for doc in cl.load_manifests([THICK_DIR / "rbac.yaml"])}
    assert spec["serviceAccountName"] == rbac["ServiceAccount"]["metadata"]["name"]
    k8s.AppsV1Api(admin_api).replace_namespaced_daemon_set(
        "netattach", "kube-system", ds, dry_run="All")
