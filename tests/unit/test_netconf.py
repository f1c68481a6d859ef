"""The meta-plugin's configuration: Multus keys, defaults, errors naming the key."""
import pytest

from netattach.cni.errors import CniError
from netattach.netconf import parse_netconf

BASE = {"cniVersion": "1.0.0", "name": "netattach", "type": "netattach",
        "clusterNetwork": "/etc/cni/net.d/10-bridge.conf"}


def test_defaults():
    c = parse_netconf(dict(BASE))
    assert (c.conf_dir, c.cni_dir, c.bin_dir) == ("/etc/cni/net.d", "/var/lib/cni/netattach",
                                                 "/opt/cni/bin")
    assert c.multus_namespace == "kube-system" and c.system_namespaces == ("kube-system",)
    assert c.namespace_isolation is False and c.global_namespaces == ()
    assert c.runtime_config == {} and c.default_networks == ()


def test_multus_keys_and_global_namespaces_string():
    c = parse_netconf({**BASE, "kubeconfig": "/k", "defaultNetworks": ["a", "b/c"],
                       "namespaceIsolation": True, "globalNamespaces": "default, shared",
                       "logLevel": "debug", "logToStderr": False, "logFile": "/l",
                       "runtimeConfig": {"portMappings": []}, "someVendorKey": {"x": 1}})
    assert c.global_namespaces == ("default", "shared")
    assert c.default_networks == ("a", "b/c") and c.kubeconfig == "/k"
    assert c.runtime_config == {"portMappings": []}


@pytest.mark.parametrize("patch,key", [
    ({"clusterNetwork": 3}, "clusterNetwork"),
    ({"logLevel": "loud"}, "logLevel"),
    ({"namespaceIsolation": "yes"}, "namespaceIsolation"),
    ({"defaultNetworks": "a,b"}, "defaultNetworks"),
    ({"multusNamespace": "Kube_System"}, "multusNamespace"),
    ({"capabilities": {"ips": "true"}}, "capabilities.ips"),
    ({"delegateTimeout": 0}, "delegateTimeout"),
    ({"cniVersion": "one"}, "cniVersion"),
])
def test_bad_value_names_the_key(patch, key):
    with pytest.raises(CniError) as e:
        parse_netconf({**BASE, **patch})
    assert e.value.code == 7 and repr(key) in e.value.msg


def test_missing_cluster_network():
    with pytest.raises(CniError, match="clusterNetwork"):
        parse_netconf({k: v for k, v in BASE.items() if k != "clusterNetwork"})
