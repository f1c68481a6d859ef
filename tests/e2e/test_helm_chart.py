"""charts/netattach/ as an admin renders it, with the test bed's Helm (`make testbin-helm`,
the pinned helm.sh/helm/v3 module) and kubectl: `helm lint` of each value set; with default
values `helm template` renders exactly the objects `kubectl kustomize deploy/` builds, with
`mode: thick` those of `kubectl kustomize deploy/thick/`, with `policies.enabled` also those
of deploy/policies/ (object by object); each value reaches the objects it names; values that
cannot work fail the render, naming the key; the API server accepts what the chart renders
with everything on (dry run). docs/helm.md's presets table is the chart's.
(The real node installs and upgrades it: tests/node/test_node_helm.py.)
"""
from __future__ import annotations

import argparse
import re
import tomllib

import pytest
import yaml

from netattach import daemon, install
from netattach_testbed import cluster as cl
from netattach_testbed import helm as hm

DOCS = cl.REPO_ROOT / "docs" / "helm.md"
IMAGE = "ghcr.io/netattach/netattach"
VERSION = tomllib.loads((cl.REPO_ROOT / "pyproject.toml").read_text())["project"]["version"]
# (kind, name) of the objects only the DRA driver's RBAC brings (deploy/thick/rbac.yaml)
DRA_RBAC = {("ClusterRole", "netattach-daemon-dra"), ("ClusterRoleBinding", "netattach-daemon-dra"),
            ("ValidatingAdmissionPolicy", "netattach-daemon-dra-slices"),
            ("ValidatingAdmissionPolicyBinding", "netattach-daemon-dra-slices")}
# value sets that render (helm lint checks each)
VALUE_SETS = [
    (),
    ("mode=thick",),
    ("mode=thick", "dra.enabled=true", "dra.deviceClass=true"),
    ("mode=thick", "dra.rbac=false"),
    ("cni.preset=k3s",),
    ("mode=thick", "cni.preset=microk8s"),
    ("cni.preset=openshift", "cni.confDir=/etc/cni/other"),
    ("policies.enabled=true", "policies.allowedPluginTypes=macvlan\\,host-local"),
    ("mode=thick", "metrics.serviceMonitor.enabled=true", "metrics.serviceMonitor.interval=15s"),
    ("image.repository=registry.example.com/netattach", "image.tag=9.9.9"),
]


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    """Helm's config, cache and data dirs for this module's commands."""
    return tmp_path_factory.mktemp("helm-home")


def _normal(value):
    """`value` with every run of blank lines in a string cut to one line break: kubectl's
    kustomize re-emits a folded (`>-`) CEL expression whose lines are more indented with
    a blank line between them, which CEL reads as the same expression; nothing else is
    normalised."""
    if isinstance(value, dict):
        return {k: _normal(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_normal(v) for v in value]
    if isinstance(value, str):
        return re.sub(r"\n\n+", "\n", value)
    return value


def by_key(docs: list[dict]) -> dict[tuple[str, str, str], dict]:
    """The documents by (kind, namespace, name), normalised; two of one key fail."""
    out = {}
    for d in docs:
        key = (d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"])
        assert key not in out, f"two objects {key}"
        out[key] = _normal(d)
    return out


def assert_same_objects(helm_docs: list[dict], kustomize_docs: list[dict]) -> None:
    got, want = by_key(helm_docs), by_key(kustomize_docs)
    assert sorted(got) == sorted(want)
    for key in want:
        assert got[key] == want[key], f"{key} differs:\n{yaml.safe_dump(got[key])}\n---\n" \
                                      f"{yaml.safe_dump(want[key])}"


def daemonset(docs: list[dict]) -> dict:
    [ds] = [d for d in docs if d["kind"] == "DaemonSet"]
    return ds


def containers(docs: list[dict]) -> dict[str, dict]:
    return {c["name"]: c for c in daemonset(docs)["spec"]["template"]["spec"]["containers"]}


def _parse(add_arguments, argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_arguments(parser)
    return parser.parse_args(argv)


def installer_args(docs: list[dict]) -> argparse.Namespace:
    c = containers(docs)["install"]
    return _parse(install.add_arguments, c["command"][2:] + c["args"])


def daemon_args(docs: list[dict]) -> argparse.Namespace:
    c = containers(docs)["daemon"]
    return _parse(daemon.add_arguments, c["command"][2:] + c["args"])


def kinds_and_names(docs: list[dict]) -> set[tuple[str, str]]:
    return {(d["kind"], d["metadata"]["name"]) for d in docs}


# ---------------------------------------------------------------- lint, the chart's own

def test_helm_is_the_pinned_one(home):
    out = hm.run(home, "version", "--short").stdout
    assert out.strip() == cl.gomod_version(hm.HELM_GOMOD, "helm.sh/helm/v3")


@pytest.mark.parametrize("values", VALUE_SETS, ids=lambda v: ",".join(v) or "defaults")
def test_helm_lint(home, values):
    args = ["lint", str(hm.CHART_DIR), "--strict", "--namespace", hm.NAMESPACE]
    for value in values:
        args += ["--set", value]
    p = hm.run(home, *args, check=False)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "0 chart(s) failed" in p.stdout


def test_chart_version_and_default_image_are_this_release(home):
    chart = yaml.safe_load((hm.CHART_DIR / "Chart.yaml").read_text())
    assert chart["version"] == chart["appVersion"] == VERSION
    for values in VALUE_SETS[:3]:
        assert {c["image"] for c in containers(hm.template(home, *values)).values()} == {
            f"{IMAGE}:{VERSION}"}


# ---------------------------------------------------------------- the same objects as deploy/

def test_default_values_render_what_kubectl_kustomize_deploy_builds(home):
    assert_same_objects(hm.template(home), cl.kustomize(cl.DEPLOY_DIR))


def test_thick_mode_renders_what_kubectl_kustomize_deploy_thick_builds(home):
    assert_same_objects(hm.template(home, "mode=thick"), cl.kustomize(cl.DEPLOY_DIR / "thick"))


@pytest.mark.parametrize("mode", ["thin", "thick"])
def test_policies_render_what_kubectl_kustomize_deploy_policies_builds(home, mode):
    base = hm.template(home, f"mode={mode}")
    with_policies = hm.template(home, f"mode={mode}", "policies.enabled=true")
    extra = [d for d in with_policies if d not in base]
    assert_same_objects(extra, cl.kustomize(cl.DEPLOY_DIR / "policies"))
    assert [d for d in with_policies if d in base] == base


def test_crd_is_helms_crds_dir_and_only_there(home):
    """The CRD is in crds/ (installed by `helm install`, never deleted by `helm uninstall`,
    which would delete every NetworkAttachmentDefinition), not among the templates."""
    docs = hm.template(home, include_crds=False)
    assert "CustomResourceDefinition" not in {d["kind"] for d in docs}
    assert len(hm.template(home)) == len(docs) + 1


# ---------------------------------------------------------------- each value

def test_image_repository_and_tag_reach_every_container(home):
    docs = hm.template(home, "mode=thick", "image.repository=registry.example.com/netattach",
                       "image.tag=9.9.9", "image.pullPolicy=Always")
    assert {(c["image"], c["imagePullPolicy"]) for c in containers(docs).values()} == {
        ("registry.example.com/netattach:9.9.9", "Always")}
    assert len(containers(docs)) == 2


# the presets as the chart defines them; docs/helm.md's table must say the same
PRESETS = {
    "": ("/etc/cni/net.d", "/opt/cni/bin"),
    "rke2": ("/etc/cni/net.d", "/opt/cni/bin"),
    "k3s": ("/var/lib/rancher/k3s/agent/etc/cni/net.d", "/var/lib/rancher/k3s/data/cni"),
    "microk8s": ("/var/snap/microk8s/current/args/cni-network",
                 "/var/snap/microk8s/current/opt/cni/bin"),
    "openshift": ("/etc/kubernetes/cni/net.d", "/var/lib/cni/bin"),
}


@pytest.mark.parametrize("mode", ["thin", "thick"])
@pytest.mark.parametrize("preset", list(PRESETS))
def test_cni_preset_mounts_the_hosts_dirs_and_tells_the_installer(home, preset, mode):
    """Each preset: the host's conf and bin dirs are the volumes the installer works in,
    and its --host-conf-dir/--host-bin-dir (the paths the conflist names) when they are not
    the defaults; the thick daemon mounts the conf dir at the host's path."""
    conf, bin_ = PRESETS[preset]
    docs = hm.template(home, f"mode={mode}", f"cni.preset={preset}")
    spec = daemonset(docs)["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    args = installer_args(docs)
    mounts = {m["mountPath"]: volumes[m["name"]]["hostPath"]["path"]
              for m in containers(docs)["install"]["volumeMounts"]
              if "hostPath" in volumes[m["name"]]}
    assert mounts[args.conf_dir] == args.host_conf_dir == conf
    assert mounts[args.bin_dir] == args.host_bin_dir == bin_
    flags = containers(docs)["install"]["args"]
    assert any(a.startswith("--host-conf-dir=") for a in flags) == (conf != "/etc/cni/net.d")
    if mode == "thick":
        [m] = [m for m in containers(docs)["daemon"]["volumeMounts"] if m["name"] == "cni-conf"]
        assert (m["mountPath"], m.get("readOnly")) == (conf, True)


def test_cni_dirs_given_win_over_the_preset(home):
    docs = hm.template(home, "cni.preset=k3s", "cni.confDir=/srv/cni/conf")
    args = installer_args(docs)
    assert (args.host_conf_dir, args.host_bin_dir) == (
        "/srv/cni/conf", "/var/lib/rancher/k3s/data/cni")


def test_docs_presets_table_is_the_charts():
    rows = re.findall(r"^\| `([\w\"]*)`[^|]*\| `([^`]+)` \| `([^`]+)` \|", DOCS.read_text(), re.M)
    assert {name.strip('"'): (conf, bin_) for name, conf, bin_ in rows} == PRESETS


def test_dra_on_runs_the_driver_with_its_rbac_and_device_class(home):
    docs = hm.template(home, "mode=thick", "dra.enabled=true", "dra.deviceClass=true")
    assert daemon_args(docs).dra is True
    assert DRA_RBAC <= kinds_and_names(docs)
    [dc] = [d for d in docs if d["kind"] == "DeviceClass"]
    assert dc["metadata"]["name"] == "cni.networking.x-k8s.io"
    assert "cni.dra.networking.x-k8s.io" in dc["spec"]["selectors"][0]["cel"]["expression"]


def test_dra_off_by_default_and_its_rbac_left_out_on_request(home):
    thick = hm.template(home, "mode=thick")
    assert daemon_args(thick).dra is False
    assert DRA_RBAC <= kinds_and_names(thick)      # as deploy/thick/ has them
    assert "DeviceClass" not in {d["kind"] for d in thick}
    without = hm.template(home, "mode=thick", "dra.rbac=false")
    assert kinds_and_names(without) == kinds_and_names(thick) - DRA_RBAC
    # on: its RBAC whatever dra.rbac says
    assert DRA_RBAC <= kinds_and_names(hm.template(home, "mode=thick", "dra.enabled=true",
                                                   "dra.rbac=false"))


def test_resources_tolerations_priority_and_extra_args_reach_the_pod(home):
    docs = hm.template(home, "mode=thick", "install.resources.limits.memory=200Mi",
                       "daemon.resources.requests.cpu=250m", "tolerations[0].key=a",
                       "tolerations[0].operator=Exists", "tolerations[0].effect=NoSchedule",
                       "priorityClassName=netattach-critical", "logLevel=debug",
                       "install.extraArgs[0]=--hotplug",
                       "daemon.extraArgs[0]=--dra-interfaces=eth1")
    spec = daemonset(docs)["spec"]["template"]["spec"]
    assert spec["tolerations"] == [{"key": "a", "operator": "Exists", "effect": "NoSchedule"}]
    assert spec["priorityClassName"] == "netattach-critical"
    c = containers(docs)
    assert c["install"]["resources"]["limits"]["memory"] == "200Mi"
    assert c["daemon"]["resources"]["requests"] == {"cpu": "250m", "memory": "64Mi"}
    assert installer_args(docs).hotplug is True
    assert installer_args(docs).log_level == daemon_args(docs).log_level == "debug"
    assert daemon_args(docs).dra_interfaces == "eth1"
    # the default: the node-critical class, every taint tolerated
    spec = daemonset(hm.template(home))["spec"]["template"]["spec"]
    assert (spec["priorityClassName"], spec["tolerations"]) == (
        "system-node-critical", [{"operator": "Exists"}])


def test_metrics_service_and_service_monitor_select_the_daemons(home):
    assert not {"Service", "ServiceMonitor"} & {d["kind"] for d in hm.template(home, "mode=thick")}
    docs = hm.template(home, "mode=thick", "metrics.serviceMonitor.enabled=true",
                       "metrics.serviceMonitor.labels.release=prom",
                       "daemon.metricsPort=9300")
    [svc] = [d for d in docs if d["kind"] == "Service"]
    [sm] = [d for d in docs if d["kind"] == "ServiceMonitor"]
    pod_labels = daemonset(docs)["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    assert svc["spec"]["clusterIP"] == "None"
    [port] = svc["spec"]["ports"]
    [cport] = containers(docs)["daemon"]["ports"]
    assert (port["port"], port["targetPort"]) == (9300, cport["name"])
    assert cport["containerPort"] == daemon_args(docs).metrics_port == 9300
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert sm["spec"]["namespaceSelector"] == {"matchNames": [svc["metadata"]["namespace"]]}
    assert sm["spec"]["endpoints"] == [{"port": port["name"], "path": "/metrics"}]
    assert sm["metadata"]["labels"]["release"] == "prom"


def test_policies_allowlist_value_reaches_their_configmap(home):
    docs = hm.template(home, "policies.enabled=true",
                       "policies.allowedPluginTypes=macvlan\\,host-local")
    [cm] = [d for d in docs if d["kind"] == "ConfigMap"]
    assert cm["data"] == {"allowedPluginTypes": "macvlan,host-local"}


@pytest.mark.parametrize(("values", "key"), [
    (("mode=thin", "dra.enabled=true"), "dra.enabled"),
    (("metrics.service.enabled=true",), "metrics.service.enabled"),
    (("metrics.serviceMonitor.enabled=true",), "metrics.serviceMonitor.enabled"),
])
def test_values_that_cannot_work_fail_naming_the_key(home, values, key):
    with pytest.raises(cl.ClusterError, match=re.escape(key)):
        hm.template(home, *values)


# values.schema.json: (--set value, the path Helm's refusal names)
BAD_VALUES = [
    ("mode=thik", "/mode"),
    ("cni.preset=k3d", "/cni/preset"),
    ("cni.confDir=etc/cni", "/cni/confDir"),
    ("cni.confDir=/etc/cni #x", "/cni/confDir"),
    ("cni.binDir=/opt/cni/bin\nx: y", "/cni/binDir"),
    ("cni.binDir=/opt/a: b", "/cni/binDir"),
    ("logLevel=loud", "/logLevel"),
    ("logFormat=xml", "/logFormat"),
    ("installerLogLevel=verbose", "/installerLogLevel"),
    ("image.pullPolicy=Sometimes", "/image/pullPolicy"),
    ("image.repository=registry.example.com/a #b", "/image/repository"),
    ("image.tag=1.0: x", "/image/tag"),
    ("priorityClassName=a: b", "/priorityClassName"),
    ("daemon.metricsPort=70000", "/daemon/metricsPort"),
    ("daemon.metricsPort=0", "/daemon/metricsPort"),
    ("metrics.serviceMonitor.interval=15s # x", "/metrics/serviceMonitor/interval"),
]


@pytest.mark.parametrize(("value", "path"), BAD_VALUES, ids=[v for v, _ in BAD_VALUES])
@pytest.mark.parametrize("verb", ["lint", "template"])
def test_bad_value_is_refused_naming_it(home, verb, value, path):
    """A value no node could use, or one that would add or cut YAML (a newline, ": ",
    " #"), is refused by the schema before anything renders, naming the value."""
    args = [verb, *(["netattach"] if verb == "template" else []), str(hm.CHART_DIR),
            "--namespace", hm.NAMESPACE, "--set", value]
    p = hm.run(home, *args, check=False)
    assert p.returncode != 0, p.stdout
    assert f"at '{path}'" in p.stdout + p.stderr, p.stdout + p.stderr


def test_a_numeric_looking_tag_keeps_its_digits(home, tmp_path):
    """`--set image.tag=1.10` renders `:1.10` (not the number 1.1), an integer tag its
    digits; a values file's unquoted 1.10 (a YAML number) is refused, naming the value."""
    for tag in ("1.10", "110"):
        assert {c["image"] for c in containers(hm.template(home, f"image.tag={tag}")).values()} \
            == {f"{IMAGE}:{tag}"}
    values = tmp_path / "values.yaml"
    values.write_text("image:\n  tag: 1.10\n")
    p = hm.run(home, "template", "netattach", str(hm.CHART_DIR), "--namespace", hm.NAMESPACE,
               "-f", str(values), check=False)
    assert p.returncode != 0 and "at '/image/tag'" in p.stderr, p.stderr


def test_log_values_reach_the_installer_and_the_daemon_only_when_set(home):
    docs = hm.template(home, "mode=thick", "logLevel=verbose", "logFormat=json",
                       "installerLogLevel=debug")
    i, d = installer_args(docs), daemon_args(docs)
    assert (i.log_level, i.log_format, i.installer_log_level, i.installer_log_format) == (
        "verbose", "json", "debug", "json")
    assert (d.log_level, d.log_format) == ("verbose", "json")
    flags = containers(hm.template(home, "mode=thick"))
    assert not [a for c in flags.values() for a in c["args"]
                if a.startswith(("--log-format", "--installer-log"))]


def _live_daemonset(admin_api, mode: str) -> None:
    """The API server's kube-system/netattach DaemonSet as the mode's kustomization has
    it (server-side apply; the test bed's cluster has no node, so no pod runs)."""
    overlay = cl.DEPLOY_DIR / ("thick" if mode == "thick" else "")
    cl.apply_documents(admin_api, [d for d in cl.kustomize(overlay) if d["kind"] == "DaemonSet"])


def test_thin_mode_keeps_thick_rbac_while_the_live_daemonset_runs_as_netattach_daemon(
        cluster, admin_api, home):
    """An upgrade thick -> thin (`helm template --dry-run=server` renders as an upgrade
    does, `lookup` reading the API server): while the live DaemonSet's pods run as
    netattach-daemon the thin render keeps thick mode's RBAC, so the old thick pods'
    tokens keep working until each is replaced; once the live DaemonSet is thin's, the
    thin render is deploy/'s alone."""
    thick_rbac = kinds_and_names(hm.template(home, "mode=thick")) - kinds_and_names(
        hm.template(home))

    def thin_live() -> list[dict]:
        out = hm.run(home, "template", "netattach", str(hm.CHART_DIR), "--namespace",
                     hm.NAMESPACE, "--dry-run=server", kubeconfig=cluster.admin_kubeconfig)
        return [d for d in yaml.safe_load_all(out.stdout) if d]

    assert thick_rbac >= {("ServiceAccount", "netattach-daemon"),
                          ("ClusterRoleBinding", "netattach-daemon"),
                          ("RoleBinding", "netattach-daemon-installer")}
    try:
        _live_daemonset(admin_api, "thick")
        kept = thin_live()
        assert thick_rbac <= kinds_and_names(kept)
        assert daemonset(kept) == daemonset(hm.template(home))     # thin mode's pods
    finally:
        _live_daemonset(admin_api, "thin")
    # the next upgrade: the live DaemonSet is thin's, the render deploy/'s alone
    assert kinds_and_names(thin_live()) == kinds_and_names(hm.template(home, include_crds=False))


def test_another_namespace_fails(home):
    with pytest.raises(cl.ClusterError, match="kube-system"):
        hm.template(home, namespace="default")


# ---------------------------------------------------------------- the API server

def test_everything_on_is_accepted_by_the_api_server(admin_api, home):
    """Thick mode, the DRA driver, the policies and the metrics Service, dry run (the
    DeviceClass and the ServiceMonitor aside: the test bed's client applies neither)."""
    docs = hm.template(home, "mode=thick", "dra.enabled=true", "policies.enabled=true",
                       "metrics.service.enabled=true", "cni.preset=k3s")
    cl.apply_documents(admin_api, [d for d in docs if d["kind"] != "CustomResourceDefinition"],
                       dry_run=True)
