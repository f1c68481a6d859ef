"""The meta-plugin's configuration: Multus keys, defaults, errors naming the key."""
import pytest

from netattach.cni.errors import CniError
from netattach.spec.netconf import parse_netconf

BASE = {"cniVersion": "1.0.0", "name": "netattach", "type": "netattach",
        "clusterNetwork": "/etc/cni/net.d/10-bridge.conf"}


def test_defaults():
    c = parse_netconf(dict(BASE))
    assert (c.conf_dir, c.cni_dir, c.bin_dir) == ("/etc/cni/net.d", "/var/lib/cni/netattach",
                                                 "/opt/cni/bin")
    # Multus' confDir default is searched after netattach's, so on-disk NAD configs are
    # found after a switch; its globalNamespaces default is "default"
    assert c.conf_dirs == ("/etc/cni/net.d", "/etc/cni/multus/net.d")
    assert c.multus_namespace == "kube-system" and c.system_namespaces == ("kube-system",)
    assert c.namespace_isolation is False and c.global_namespaces == ("default",)
    assert c.runtime_config == {} and c.default_networks == ()
    assert c.claim_config_sources == "any"  # a claim's own CNI config runs, as before
    # network-status ips as bare addresses, as Multus writes them (docs/behaviour.md)
    assert c.network_status_ip_format == "address" and c.network_status_cidr is False


@pytest.mark.parametrize("value", ["any", "class"])
def test_claim_config_sources(value):
    assert parse_netconf({**BASE, "claimConfigSources": value}).claim_config_sources == value


@pytest.mark.parametrize("value, cidr", [("address", False), ("cidr", True)])
def test_network_status_ip_format(value, cidr):
    c = parse_netconf({**BASE, "networkStatusIPFormat": value})
    assert (c.network_status_ip_format, c.network_status_cidr) == (value, cidr)


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
    ({"claimConfigSources": "FromClass"}, "claimConfigSources"),
    ({"claimConfigSources": True}, "claimConfigSources"),
    ({"networkStatusIPFormat": "CIDR"}, "networkStatusIPFormat"),
    ({"networkStatusIPFormat": True}, "networkStatusIPFormat"),
    ({"cniVersion": "one"}, "cniVersion"),
])
def test_bad_value_names_the_key(patch, key):
    with pytest.raises(CniError) as e:
        parse_netconf({**BASE, **patch})
    assert e.value.code == 7 and repr(key) in e.value.msg


@pytest.mark.parametrize("patch,says", [
    ({"apiTimeout": 0}, "key 'apiTimeout': must be bigger than 0 (got 0)"),
    ({"logLevel": "loud"}, "key 'logLevel': must be one of ['panic', 'error', 'warning', "
                           "'info', 'debug', 'verbose'] (got 'loud')"),
    ({"logOptions": {"maxSize": -1}},
     "key 'logOptions.maxSize': must be bigger than or equal to 0 (got -1)"),
    ({"logOptions": {"maxsize": 1}}, "key 'logOptions': must not contain ['maxsize'] properties"),
    # several unknown keys: in the config's order, the same in every run
    ({"logOptions": {"zeta": 1, "alpha": 2, "maxAge": 1}},
     "key 'logOptions': must not contain ['zeta', 'alpha'] properties"),
    ({"defaultNetworks": ["a", ""]},
     "key 'defaultNetworks.1': must be longer than or equal to 1 characters (got '')"),
    ({"globalNamespaces": 5}, "key 'globalNamespaces': must be one of: string, array of string "
                              "(got 5)"),
    ({"retired": {}}, "key 'retired': must contain ['conflist'] properties"),
    ({"maxNetworksPerPod": 1.5}, "key 'maxNetworksPerPod': must be integer (got 1.5)"),
])
def test_a_schema_error_says_where_what_is_expected_and_what_was_found(patch, says):
    """The generated validator words the error itself (no jsonschema at run time)."""
    with pytest.raises(CniError) as e:
        parse_netconf({**BASE, **patch})
    assert e.value.code == 7 and e.value.msg == "invalid netattach configuration: " + says


def test_a_long_value_found_is_cut_short():
    with pytest.raises(CniError) as e:
        parse_netconf({**BASE, "kubeconfig": "x" * 200 + "\x00"})  # a NUL: refused
    assert e.value.msg.startswith("invalid netattach configuration: key 'kubeconfig': must "
                                  "match pattern ")
    assert e.value.msg.endswith("(got '" + "x" * 76 + "...)") and len(e.value.msg) < 200


def test_a_config_missing_a_required_key_is_named_at_the_top_level():
    with pytest.raises(CniError) as e:
        parse_netconf({"cniVersion": "1.0.0", "type": "netattach"})
    assert e.value.msg == ("invalid netattach configuration: key '(top level)': must contain "
                           "['clusterNetwork'] properties")


def test_missing_cluster_network():
    with pytest.raises(CniError, match="clusterNetwork"):
        parse_netconf({k: v for k, v in BASE.items() if k != "clusterNetwork"})


def test_an_explicit_conf_dir_is_the_only_one():
    assert parse_netconf({**BASE, "confDir": "/x"}).conf_dirs == ("/x",)


@pytest.mark.parametrize("value, expected", [
    (None, ("default",)), ("", ("default",)), (" ", ("default",)),  # Multus: "" is the default
    ("a,b", ("a", "b")), (["a", " b "], ("a", "b")), ([], ()),
])
def test_global_namespaces_as_multus_reads_them(value, expected):
    conf = {**BASE} if value is None else {**BASE, "globalNamespaces": value}
    assert parse_netconf(conf).global_namespaces == expected


def test_multus_keys_not_honoured_are_named():
    c = parse_netconf({**BASE, "delegates": [{"type": "flannel"}], "socketDir": "/run/m",
                       "retryDeleteOnError": False, "logOptions": {"maxSize": 10},
                       "auxiliaryCNIChainName": "chain"})
    assert sorted(c.unhonoured) == ["delegates", "retryDeleteOnError", "socketDir"]
    assert c.log_options == {"maxSize": 10} and c.auxiliary_chain == "chain"
    assert parse_netconf({**BASE, "retryDeleteOnError": True}).unhonoured == {}


@pytest.mark.parametrize("patch, key", [
    ({"logOptions": {"maxSize": -1}}, "logOptions.maxSize"),
    ({"logOptions": {"compress": "yes"}}, "logOptions.compress"),
    ({"auxiliaryCNIChainName": "../x"}, "auxiliaryCNIChainName"),
])
def test_bad_multus_values_name_the_key(patch, key):
    with pytest.raises(CniError) as e:
        parse_netconf({**BASE, **patch})
    assert e.value.code == 7 and repr(key) in e.value.msg


@pytest.mark.parametrize("version", ["2.0.0", "1.2.0", "1.0"])
def test_an_unsupported_version_is_code_1(version):
    with pytest.raises(CniError) as e:
        parse_netconf({**BASE, "cniVersion": version})
    assert e.value.code == 1 and version in e.value.msg


def test_log_options_absent_and_empty_differ():
    """Absent: no rotation (netattach's behaviour); {}: Multus' defaults for every key."""
    assert parse_netconf(dict(BASE)).log_options is None
    assert parse_netconf({**BASE, "logOptions": {}}).log_options == {}
    with pytest.raises(CniError) as e:  # a typo is not silently ignored
        parse_netconf({**BASE, "logOptions": {"maxsize": 10}})
    assert e.value.code == 7 and "logOptions" in e.value.msg
