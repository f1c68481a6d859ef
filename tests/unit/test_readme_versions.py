"""README's "Tested with" table, and every version README and docs/kubernetes-versions.md
give of a test-bed component, are the pins the tests run: the tools modules'
hack/testbin/*/go.mod (what mk/testbin.mk builds) and hack/image/base.env (the image's
CPython). A bumped go.mod fails here until the docs say the new version."""
from __future__ import annotations

import re
import tomllib

from netattach_testbed import cluster as cl
from netattach_testbed import image as im

ROOT = cl.REPO_ROOT
README = ROOT / "README.md"
VERSIONS_DOC = ROOT / "docs" / "kubernetes-versions.md"
TESTBIN = ROOT / "hack" / "testbin"


def pinned() -> dict[str, set[str]]:
    """component, as README's table names it -> the versions the pins give it."""
    def gomod(module_dir: str, module: str) -> str:
        return cl.gomod_version(TESTBIN / module_dir / "go.mod", module)
    return {
        "Kubernetes": {gomod("k8s", "k8s.io/kubernetes"), gomod("k8s-oldest", "k8s.io/kubernetes")},
        "etcd": {gomod("k8s", "go.etcd.io/etcd/server/v3")},
        "containerd": {gomod("containerd", "github.com/containerd/containerd/v2")},
        "CNI plugins": {gomod("cni", "github.com/containernetworking/plugins")},
        "Multus CNI": {gomod("multus", "gopkg.in/k8snetworkplumbingwg/multus-cni.v4")},
        "Helm": {gomod("helm", "helm.sh/helm/v3")},
        "Python": {im.base_env()["IMAGE_PYTHON_VERSION"]},
    }


def table(text: str) -> dict[str, set[str]]:
    """The "Tested with" section's table: component -> its versions (a component may
    have several rows)."""
    section = text.split("\n## Tested with\n", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, set[str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) == 3 and cells[0] not in ("component", "---"):
            rows.setdefault(cells[0], set()).add(cells[1])
    return rows


def test_the_tested_with_table_is_the_pins():
    assert table(README.read_text()) == pinned()


def test_the_table_reader_sees_a_drifted_row():
    text = README.read_text().replace("| etcd | v", "| etcd | v9", 1)
    assert table(text)["etcd"] != pinned()["etcd"]


# "<component> vX.Y.Z" as the prose writes it (`etcd` v3.7.0, the CNI reference plugins
# v1.9.1, Multus CNI v4.2.3...)
PROSE = re.compile(r"(Kubernetes|`?etcd`?|containerd|CNI (?:reference )?plugins|Multus CNI|Helm)"
                   r" (v\d+\.\d+\.\d+)")


def test_every_version_the_prose_gives_is_a_pin():
    versions = pinned()
    for doc in (README, VERSIONS_DOC):
        found = PROSE.findall(doc.read_text())
        assert found, doc
        for name, version in found:
            key = name.strip("`")
            key = "CNI plugins" if key.startswith("CNI") else key
            assert version in versions[key], (doc.name, name, version, versions[key])


def test_every_version_of_the_versions_page_is_a_pin():
    # its tables too; besides the components, it names what the modules pin for
    # kubectl's kustomize, the oldest API server's etcd client and its staging modules
    oldest = TESTBIN / "k8s-oldest" / "go.mod"
    allowed = set().union(*pinned().values()) | {
        cl.gomod_version(gomod, "sigs.k8s.io/kustomize/kustomize/v5")
        for gomod in (cl.K8S_GOMOD, oldest)} | {
        cl.gomod_version(oldest, "go.etcd.io/etcd/client/v3"),
        re.search(r"^\tk8s\.io/api => k8s\.io/api (v\S+)$", oldest.read_text(), re.M)[1]}
    found = set(re.findall(r"\bv\d+\.\d+\.\d+\b", VERSIONS_DOC.read_text()))
    assert found and found <= allowed, found - allowed


def test_the_oldest_kubernetes_is_the_oldest_minor_upstream_supports():
    # upstream patches the three newest minors; the main tools module is the newest
    main, oldest = (tuple(int(x) for x in cl.gomod_version(gomod, "k8s.io/kubernetes")
                          .removeprefix("v").split(".")[:2])
                    for gomod in (cl.K8S_GOMOD, cl.K8S_OLDEST_GOMOD))
    assert oldest == (main[0], main[1] - 2)


def test_the_tests_python_floor_is_the_images():
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    image = im.base_env()["IMAGE_PYTHON_VERSION"]
    assert requires == ">=" + ".".join(image.split(".")[:2])
    assert f"the tests run on {requires.removeprefix('>=')}+" in README.read_text()
