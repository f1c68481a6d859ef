"""namespaceIsolation as a rule of its own (networks.check_isolation, issue 21): which
NetworkAttachmentDefinitions an element of either pod annotation may name, and what the
refusal says. Pure: a configuration, a pod reference and a parsed element."""
import pytest

from netattach.commands.networks import InvalidSelection, check_isolation
from netattach.spec.netconf import parse_netconf
from netattach.spec.pod import PodRef
from netattach.spec.selection import (
    DEFAULT_NETWORK_ANNOTATION,
    NETWORKS_ANNOTATION,
    parse_network_selection,
)

BASE = {"cniVersion": "1.0.0", "name": "netattach", "type": "netattach",
        "clusterNetwork": "/etc/cni/net.d/10-bridge.conf"}
POD = PodRef("team-a", "web", "uid-1")
ANNOTATIONS = (NETWORKS_ANNOTATION, DEFAULT_NETWORK_ANNOTATION)


def element(value: str, default_namespace: str):
    """The one element of an annotation value, resolved as its annotation resolves it:
    the pod's namespace for the networks annotation, multusNamespace for default-network
    (networks._pod_default_network)."""
    (out,) = parse_network_selection(value, default_namespace)
    return out


@pytest.mark.parametrize("annotation", ANNOTATIONS)
@pytest.mark.parametrize("extra,ref", [
    ({}, "team-b/net"),  # isolation off: anything
    ({"namespaceIsolation": True}, "team-a/net"),  # the pod's own namespace
    ({"namespaceIsolation": True}, "default/net"),  # Multus' default globalNamespaces
    ({"namespaceIsolation": True, "globalNamespaces": "shared, infra"}, "infra/net"),
    ({"namespaceIsolation": True, "globalNamespaces": ["shared"]}, "shared/net"),
])
def test_allowed(annotation, extra, ref):
    check_isolation(parse_netconf({**BASE, **extra}), POD, element(ref, "kube-system"),
                    annotation)


@pytest.mark.parametrize("annotation", ANNOTATIONS)
@pytest.mark.parametrize("extra,ref,allowed", [
    ({}, "team-b/net", "team-a, default"),
    ({"globalNamespaces": []}, "default/net", "team-a"),
    ({"globalNamespaces": "shared"}, "default/net", "team-a, shared"),
    # multusNamespace is no exception (Multus allows none for the networks annotation)
    ({"multusNamespace": "kube-system"}, "kube-system/net", "team-a, default"),
    # a global namespace that is the pod's own is listed once
    ({"globalNamespaces": "team-a"}, "team-b/net", "team-a"),
])
def test_refused_names_pod_annotation_nad_and_rule(annotation, extra, ref, allowed):
    conf = parse_netconf({**BASE, "namespaceIsolation": True, **extra})
    with pytest.raises(InvalidSelection) as e:
        check_isolation(conf, POD, element(ref, "kube-system"), annotation)
    assert e.value.code == 7
    ns = ref.split("/")[0]
    assert e.value.msg == (
        f"pod team-a/web: {annotation}: network {ref}: namespace isolation "
        f"(namespaceIsolation) forbids pods in namespace team-a to use "
        f"NetworkAttachmentDefinitions in namespace {ns} (allowed: the pod's namespace and "
        f"globalNamespaces: {allowed})")


def test_an_unqualified_default_network_is_in_multus_namespace_and_isolated():
    """The default-network annotation resolves an unqualified name in multusNamespace, as
    Multus does: isolated, that is another namespace than the pod's, refused unless it is
    global. The networks annotation resolves it in the pod's own: allowed."""
    conf = parse_netconf({**BASE, "namespaceIsolation": True})
    with pytest.raises(InvalidSelection, match="in namespace kube-system"):
        check_isolation(conf, POD, element("alt", conf.multus_namespace),
                        DEFAULT_NETWORK_ANNOTATION)
    check_isolation(conf, POD, element("alt", POD.namespace), NETWORKS_ANNOTATION)
    global_conf = parse_netconf({**BASE, "namespaceIsolation": True,
                                 "globalNamespaces": "kube-system"})
    check_isolation(global_conf, POD, element("alt", conf.multus_namespace),
                    DEFAULT_NETWORK_ANNOTATION)
