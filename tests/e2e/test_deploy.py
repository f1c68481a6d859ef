"""deploy/ as an admin applies it: every kustomization built by the real kubectl's
kustomize (the test bed's, `kubectl kustomize`, what `kubectl apply -k` applies), the
objects each mode makes, one `images:` entry of an admin's overlay reaching every
container, the API server accepting what is built (the session's `cluster` fixture
applies thin mode; thick mode and the examples are applied dry-run), and the pieces
agreeing with each other: the DaemonSet's ServiceAccount is the one the RBAC binds,
its mounts are where the installer looks by default, its command and probes are valid
installer flags, the thick daemon's socket and root dirs are mounted, and the image
recipe (Containerfile) puts the executable where the DaemonSet runs it.
"""
from __future__ import annotations

import argparse
import functools
import os
import posixpath
import re
from pathlib import Path

import pytest
import yaml
from kubernetes import client as k8s

from netattach import __version__, daemon, install
from netattach.install import conf_keys
from netattach_testbed import cluster as cl

CONTAINERFILE = cl.REPO_ROOT / "Containerfile"
IMAGE = "ghcr.io/netattach/netattach"
# Each kustomization an admin builds (a dir under deploy/) -> the containers of its
# DaemonSet (None: it has none).
KUSTOMIZATIONS: dict[str, list[str] | None] = {
    ".": ["install"],                      # thin mode: kubectl apply -k deploy/
    "thick": ["install", "daemon"],         # kubectl apply -k deploy/thick/
    "examples": None,                       # NADs and pods
    "examples/netconf": ["install", "daemon"],  # thick + conf keys from a ConfigMap
    "policies": None,                       # admission policies (tests/e2e/test_policies.py)
}
NOT_BUILT_ALONE = {"base", "components/netconf"}  # built through the ones above
NO_DAEMONSET = {f"deploy/{rel}" for rel, names in KUSTOMIZATIONS.items() if names is None}


@functools.cache
def built(rel: str) -> tuple[dict, ...]:
    """The documents `kubectl kustomize deploy/<rel>` builds (once per session)."""
    return tuple(cl.kustomize(cl.DEPLOY_DIR / rel))


def daemonset(rel: str) -> dict:
    [doc] = [d for d in built(rel) if d["kind"] == "DaemonSet"]
    return doc


def _thick_daemonset() -> dict:
    """deploy/thick's DaemonSet as kustomize builds it."""
    return daemonset("thick")


def containers(doc: dict) -> dict[str, dict]:
    spec = doc["spec"]["template"]["spec"]
    return {c["name"]: c for c in spec.get("initContainers", []) + spec["containers"]}


def kinds_and_names(rel: str) -> set[tuple[str, str]]:
    return {(d["kind"], d["metadata"]["name"]) for d in built(rel)}


def _installer_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="netattach install", exit_on_error=False)
    install.add_arguments(parser)
    return parser.parse_args(argv)


def _daemon_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="netattach daemon", exit_on_error=False)
    daemon.add_arguments(parser)
    return parser.parse_args(argv)


# ---------------------------------------------------------------- what kustomize builds

def test_every_kustomization_is_built_by_kubectl():
    """Every kustomization under deploy/ is one of KUSTOMIZATIONS (so each is tested)
    or built through them, and kubectl builds each of the former."""
    found = {os.path.relpath(p.parent, cl.DEPLOY_DIR)
             for p in cl.DEPLOY_DIR.rglob("kustomization.yaml")}
    assert found == set(KUSTOMIZATIONS) | NOT_BUILT_ALONE
    for rel, names in KUSTOMIZATIONS.items():
        docs = built(rel)
        assert docs, rel
        assert ([list(containers(d)) for d in docs if d["kind"] == "DaemonSet"]
                == ([names] if names else [])), rel


def test_thin_and_thick_objects():
    rbac = {("ServiceAccount", "netattach"), ("ClusterRole", "netattach"),
            ("ClusterRoleBinding", "netattach"), ("Role", "netattach-installer"),
            ("RoleBinding", "netattach-installer")}
    crd = ("CustomResourceDefinition", "network-attachment-definitions.k8s.cni.cncf.io")
    assert kinds_and_names(".") == {crd, *rbac, ("DaemonSet", "netattach")}
    assert kinds_and_names("thick") == kinds_and_names(".") | {
        ("ServiceAccount", "netattach-daemon"), ("ClusterRole", "netattach-daemon"),
        ("ClusterRoleBinding", "netattach-daemon"), ("RoleBinding", "netattach-daemon-installer"),
        ("ClusterRole", "netattach-daemon-dra"),
        ("ClusterRoleBinding", "netattach-daemon-dra"),
        ("ValidatingAdmissionPolicy", "netattach-daemon-dra-slices"),
        ("ValidatingAdmissionPolicyBinding", "netattach-daemon-dra-slices")}
    assert {d["kind"] for d in built("examples")} == {"NetworkAttachmentDefinition", "Pod"}
    assert all("namespace" not in d["metadata"] for d in built("examples"))


@pytest.mark.parametrize("rel", [r for r, names in KUSTOMIZATIONS.items() if names])
def test_one_images_entry_of_an_admins_overlay_reaches_every_container(rel, tmp_path):
    """The admin's own overlay, with deploy/<rel> as its resource and one `images:`
    entry (docs/install.md): every container of the DaemonSet runs that image."""
    overlay = tmp_path / "my-netattach"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "resources": [os.path.relpath(cl.DEPLOY_DIR / rel, overlay)],
        "images": [{"name": IMAGE, "newName": "registry.example.com/netattach",
                    "newTag": "9.9.9"}]}))
    [ds] = [d for d in cl.kustomize(overlay) if d["kind"] == "DaemonSet"]
    got = {name: c["image"] for name, c in containers(ds).items()}
    assert got == {name: "registry.example.com/netattach:9.9.9"
                   for name in KUSTOMIZATIONS[rel] or ()}
    # and deploy/ itself names one image, this version's, everywhere
    assert {c["image"] for c in containers(daemonset(rel)).values()} == {
        f"{IMAGE}:{__version__}"}


def test_netconf_example_mounts_its_configmap_where_the_installer_reads_it(tmp_path):
    """deploy/examples/netconf: the ConfigMap (hashed name) is the volume the install
    container mounts, --netconf-file is its key netconf.yaml there, and the installer
    accepts the document in thick mode."""
    [cm] = [d for d in built("examples/netconf") if d["kind"] == "ConfigMap"]
    assert cm["metadata"]["name"].startswith("netattach-netconf-")
    assert cm["metadata"]["namespace"] == "kube-system"
    ds = daemonset("examples/netconf")
    c = containers(ds)["install"]
    args = _installer_args(c["command"][2:] + c["args"])
    volumes = {v["name"]: v for v in ds["spec"]["template"]["spec"]["volumes"]}
    [mount] = [m for m in c["volumeMounts"]
               if volumes[m["name"]].get("configMap", {}).get("name") == cm["metadata"]["name"]]
    assert args.netconf_file == f"{mount['mountPath']}/netconf.yaml"
    document = tmp_path / "netconf.yaml"
    document.write_text(cm["data"]["netconf.yaml"])
    assert conf_keys.load_document(str(document), thick=args.mode == "thick")
    assert args.mode == "thick"


# ---------------------------------------------------------------- the base (thin mode)

def test_daemonset_accepted_as_written(admin_api):
    ds = k8s.AppsV1Api(admin_api).read_namespaced_daemon_set("netattach", "kube-system")
    pod = ds.spec.template.spec
    rbac = {d["kind"]: d for d in built(".") if d["kind"] == "ServiceAccount"}
    sa = rbac["ServiceAccount"]["metadata"]
    assert (ds.metadata.namespace, pod.service_account_name) == (sa["namespace"], sa["name"])
    assert pod.host_network is True
    assert pod.node_selector == {"kubernetes.io/os": "linux"}
    assert [(t.operator, t.key, t.effect) for t in pod.tolerations] == [("Exists", None, None)]
    # on a node the old pod stops before the new one starts (docs/install.md, "Updates")
    ru = ds.spec.update_strategy.rolling_update
    assert (ds.spec.update_strategy.type, ru.max_surge, ru.max_unavailable) == (
        "RollingUpdate", 0, 1)
    [c] = pod.containers
    assert c.resources.requests["cpu"] and c.resources.requests["memory"]
    assert c.resources.limits["memory"]
    for probe in (c.startup_probe, c.readiness_probe):
        assert probe._exec.command == c.command[:1] + ["install", "--check"]
    assert c.startup_probe.period_seconds < c.readiness_probe.period_seconds
    assert c.security_context.allow_privilege_escalation is False
    assert c.security_context.read_only_root_filesystem is True
    assert c.security_context.capabilities.drop == ["ALL"]
    assert c.security_context.seccomp_profile.type == "RuntimeDefault"


def test_daemonset_mounts_the_host_dirs_where_the_installer_looks():
    """The host's CNI dirs where the installer's defaults look, and its --run-dir (the
    record its probes read) on a volume of the pod's own, writable."""
    spec = daemonset(".")["spec"]["template"]["spec"]
    [c] = spec["containers"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    host = {m["mountPath"]: volumes[m["name"]]["hostPath"]["path"]
            for m in c["volumeMounts"] if "hostPath" in volumes[m["name"]]}
    args = _installer_args(c["command"][2:] + c.get("args", []))
    # the state dir's parent too: on an uninstall the installer counts the sandboxes
    # netattach attached there, and removes the state dir itself when there are none
    assert host == {args.bin_dir: args.host_bin_dir, args.conf_dir: args.host_conf_dir,
                    os.path.dirname(args.state_dir): os.path.dirname(args.cni_dir)}
    assert os.path.basename(args.state_dir) == os.path.basename(args.cni_dir)
    [run] = [m for m in c["volumeMounts"] if m["mountPath"] == args.run_dir]
    assert "emptyDir" in volumes[run["name"]] and not run.get("readOnly")
    assert args.cleanup_on_exit is True


def test_daemonset_probes_are_valid_flagless_installer_commands():
    [c] = daemonset(".")["spec"]["template"]["spec"]["containers"]
    for probe in ("startupProbe", "readinessProbe"):
        command = c[probe]["exec"]["command"]
        assert command == [c["command"][0], "install", "--check"]
        assert _installer_args(command[2:]).check is True


def test_containerfile_installs_what_the_daemonset_runs():
    text = CONTAINERFILE.read_text()
    [c] = daemonset(".")["spec"]["template"]["spec"]["containers"]
    exe = c["command"][0]
    # the build stage moves the onedir build into the tree (/out) the final stage copies
    # as one layer, at the directory the DaemonSet execs from
    final_copy = re.findall(r"^COPY --from=build (\S+) (\S+)$", text, re.M)
    moved = re.findall(r"\bmv /dist/netattach (\S+)", text)
    assert final_copy and len(moved) == 1, (final_copy, moved)
    src, dest = final_copy[-1]
    within = posixpath.relpath(posixpath.join(moved[0], "netattach"), src)
    assert not within.startswith(".."), (moved, src)
    assert exe == posixpath.join(dest, within, "netattach")
    assert re.search(rf'^ENTRYPOINT \["{re.escape(exe)}"\]$', text, re.M)
    # every source the build stage copies exists in the repo
    for srcs in re.findall(r"^COPY (?!--from)(.+) \S+$", text, re.M):
        for src in srcs.split():
            assert (cl.REPO_ROOT / src).exists(), f"Containerfile copies missing {src}"
    assert c["image"].endswith(f":{__version__}")


def test_examples_accepted_by_the_api_server(admin_api, k8s_namespace):
    docs = cl.apply_documents(admin_api, list(built("examples")), dry_run=True,
                              namespace=k8s_namespace)
    assert {d["kind"] for d in docs} >= {"NetworkAttachmentDefinition", "Pod"}


# ---------------------------------------------------------------- thick mode

def test_thick_overlay_agrees_with_itself_and_is_accepted(admin_api):
    """deploy/thick: the installer writes the thick conflist (its flagless probes check
    what it was told); the daemon's flags parse, its socket dir is the installer's
    daemonSocketDir, its probes hit its metrics port, it runs the children in the
    host's root (privileged, the host's / mounted HostToContainer at --chroot-dir);
    every mount has a volume; its ServiceAccount is the one thick/rbac.yaml binds; the
    API server accepts the DaemonSet (dry run)."""
    ds = _thick_daemonset()
    spec = ds["spec"]["template"]["spec"]
    cs = containers(ds)
    install_args = _installer_args(cs["install"]["args"])
    assert install_args.mode == "thick"
    for probe in ("startupProbe", "readinessProbe"):
        assert cs["install"][probe]["exec"]["command"][1:] == ["install", "--check"]
    d = cs["daemon"]
    assert d["command"][1:] == ["daemon"]
    daemon_args = _daemon_args(d["args"])
    assert daemon_args.socket_dir == install_args.daemon_socket_dir
    assert {e["name"] for e in d["env"]} >= {"NODE_NAME"}
    for probe in ("livenessProbe", "readinessProbe"):
        assert d[probe]["httpGet"]["port"] == daemon_args.metrics_port
    volumes = {v["name"]: v for v in spec["volumes"]}
    for c in cs.values():
        assert {m["name"] for m in c["volumeMounts"]} <= set(volumes)
    [root] = [m for m in d["volumeMounts"] if m["mountPath"] == daemon_args.chroot_dir]
    assert volumes[root["name"]]["hostPath"]["path"] == "/"
    assert root["mountPropagation"] == "HostToContainer" and not root.get("readOnly")
    assert d["securityContext"]["privileged"] is True
    assert spec["hostPID"] is True
    [sa] = [doc for doc in cl.load_manifests([cl.THICK_DIR / "rbac.yaml"])
            if doc["kind"] == "ServiceAccount"]
    assert spec["serviceAccountName"] == sa["metadata"]["name"]
    k8s.AppsV1Api(admin_api).replace_namespaced_daemon_set(
        "netattach", "kube-system", ds, dry_run="All")


def test_thick_daemon_mounts_only_what_it_uses_and_its_image_read_only():
    """The daemon (privileged, for its children) writes nothing to its image
    (readOnlyRootFilesystem) and mounts exactly the host dirs it reads or writes itself,
    at the host's paths (its defaults and the conflist's), read-only where it only reads:
    no bin dir (children are found in the --chroot-dir) and no /var/log (it logs to
    stderr; the conflist's logFile is the thin fallback's, on the host)."""
    from netattach.daemon import dra
    from netattach.node import devices
    from netattach.spec import netconf
    ds = _thick_daemonset()
    spec = ds["spec"]["template"]["spec"]
    d = containers(ds)["daemon"]
    args = _daemon_args(d["args"])
    assert d["securityContext"]["readOnlyRootFilesystem"] is True
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["mountPath"]: (volumes[m["name"]]["hostPath"]["path"], bool(m.get("readOnly")))
              for m in d["volumeMounts"]}
    writes, reads = False, True
    assert mounts == {
        netconf.DEFAULT_CONF_DIR: (netconf.DEFAULT_CONF_DIR, reads),
        # the state dir and libcni's cache (a DEL without state reads and removes its entry)
        os.path.dirname(args.cni_dir): (os.path.dirname(args.cni_dir), writes),
        args.socket_dir: (args.socket_dir, writes),
        "/var/run/netns": ("/var/run/netns", reads),
        os.path.dirname(devices.KUBELET_SOCKET): (os.path.dirname(devices.KUBELET_SOCKET), reads),
        os.path.dirname(devices.DEVINFO_DIR): (os.path.dirname(devices.DEVINFO_DIR), writes),
        dra.DEFAULT_REGISTRY_DIR: (dra.DEFAULT_REGISTRY_DIR, writes),
        dra.DEFAULT_PLUGIN_DIR: (dra.DEFAULT_PLUGIN_DIR, writes),
        args.chroot_dir: ("/", writes),
    }
    assert args.cni_dir == netconf.DEFAULT_CNI_DIR and args.log_file is None
    # every volume of the pod is some container's
    used = {m["name"] for c in containers(ds).values() for m in c["volumeMounts"]}
    assert used == set(volumes)


def test_netconf_example_accepted_by_the_api_server(admin_api):
    docs = [d for d in built("examples/netconf") if d["kind"] in ("ConfigMap", "DaemonSet")]
    cl.apply_documents(admin_api, docs, dry_run=True)


def test_deploy_paths_named_in_the_docs_exist():
    """Every deploy/ path README.md and docs/*.md name is there (a moved manifest leaves
    no stale instruction behind)."""
    texts = [cl.REPO_ROOT / "README.md", *sorted((cl.REPO_ROOT / "docs").glob("*.md"))]
    for doc in texts:
        for path in set(re.findall(r"\bdeploy/[\w./-]*[\w/]", doc.read_text())):
            assert (cl.REPO_ROOT / path).exists(), f"{doc.name} names {path}"


def test_kubectl_is_the_test_beds():
    """The kustomize these tests build with is the test bed's kubectl (the version an
    admin's kubectl of the tested Kubernetes has), not whatever is on PATH."""
    assert Path(cl.kubectl()).parent == cl.k8s_bin_dir()


# ---------------------------------------------------------------- the docs' commands

FENCE = re.compile(r"^( *)```(\w*)\n(.*?)^\1```", re.M | re.S)
HEREDOC = re.compile(r"^cat > (\S+) <<'EOF'\n(.*?)^EOF$", re.M | re.S)
BUILD = re.compile(r"^kubectl (?:apply -k|delete -k|kustomize) (\S+)", re.M)


def doc_files_and_builds(text: str) -> tuple[dict[str, str], list[str]]:
    """What a doc shows: the files it has the reader write (a yaml block whose first
    line is `# <path>`, or a `cat > <path> <<'EOF'` heredoc) -> their text, and the
    dirs its commands build (`kubectl apply -k`, `delete -k`, `kustomize`), in order."""
    files: dict[str, str] = {}
    builds: list[str] = []
    for indent, lang, body in FENCE.findall(text):
        body = "\n".join(line[len(indent):] for line in body.splitlines()) + "\n"
        first = body.split("\n", 1)[0]
        if lang == "yaml" and re.fullmatch(r"# [\w./-]+", first):
            files[first[2:]] = body
        elif lang == "sh":
            files.update({path: content for path, content in HEREDOC.findall(body)})
            builds += BUILD.findall(body)
    return files, builds


def check_built_daemonset(docs: list[dict], images: list[dict], tmp_path: Path) -> None:
    """A DaemonSet the docs build: every container's image is the overlay's `images:`
    one (this version's without); the installer's CNI dirs are mounted from the host
    dirs it writes into the conflist (--host-*), in thick mode the daemon sees the conf
    dir at that host path too; a --netconf-file is a mounted ConfigMap's key the
    installer accepts."""
    [ds] = [d for d in docs if d["kind"] == "DaemonSet"]
    want = ({f"{i.get('newName', IMAGE)}:{i['newTag']}" for i in images} if images
            else {f"{IMAGE}:{__version__}"})
    cs = containers(ds)
    assert {c["image"] for c in cs.values()} == want
    c = cs["install"]
    args = _installer_args(c["command"][2:] + c["args"])
    volumes = {v["name"]: v for v in ds["spec"]["template"]["spec"]["volumes"]}
    mounts = {m["mountPath"]: volumes[m["name"]] for m in c["volumeMounts"]}
    assert mounts[args.conf_dir]["hostPath"]["path"] == args.host_conf_dir
    assert mounts[args.bin_dir]["hostPath"]["path"] == args.host_bin_dir
    if "daemon" in cs:
        seen = {m["mountPath"]: volumes[m["name"]] for m in cs["daemon"]["volumeMounts"]}
        assert seen[args.host_conf_dir]["hostPath"]["path"] == args.host_conf_dir
    if args.netconf_file:
        directory, key = os.path.split(args.netconf_file)
        name = mounts[directory]["configMap"]["name"]
        [cm] = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == name]
        (tmp_path / key).write_text(cm["data"][key])
        conf_keys.load_document(str(tmp_path / key), thick=args.mode == "thick")


@pytest.mark.parametrize(("doc", "overlays_in_clone"), [
    ("docs/install.md", False),  # the reader's overlays beside the clone
    ("README.md", True),         # in it
])
def test_every_kustomization_the_docs_show_builds(doc, overlays_in_clone, tmp_path):
    """Each file the doc has the reader write is written, each dir its commands apply
    is built by kubectl from a copy of deploy/, and what is built is consistent
    (check_built_daemonset)."""
    import shutil
    files, builds = doc_files_and_builds((cl.REPO_ROOT / doc).read_text())
    clone = tmp_path / "netattach"
    shutil.copytree(cl.DEPLOY_DIR, clone / "deploy")
    work = clone if overlays_in_clone else tmp_path
    for path, text in files.items():
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        (work / path).write_text(text)
    assert builds, f"{doc} shows no kubectl command"
    for directory in dict.fromkeys(builds):
        where = (clone if directory.startswith("deploy/") else work) / directory
        docs = cl.kustomize(where)
        kust = yaml.safe_load((where / "kustomization.yaml").read_text())
        if directory.rstrip("/") not in NO_DAEMONSET:
            check_built_daemonset(docs, kust.get("images", []), tmp_path)
