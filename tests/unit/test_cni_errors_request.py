"""CNI errors and request parsing (CNI_* environment + stdin). Pure: no root, no plugins."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from netattach.cni import errors
from netattach.cni.errors import ChildError, CniError
from netattach.cni.request import (
    MAX_STDIN,
    CniRequest,
    parse_cni_args,
    parse_request,
    validate_container_id,
    validate_ifname,
)

CONF = json.dumps({"cniVersion": "1.0.0", "name": "net", "type": "bridge"}).encode()


def env(**kw: str) -> dict[str, str]:
    base = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "abc123", "CNI_NETNS": "/var/run/netns/x",
            "CNI_IFNAME": "eth0", "CNI_PATH": "/opt/cni/bin"}
    base.update(kw)
    return {k: v for k, v in base.items() if v is not None}


def code_of(environ: dict, stdin: bytes = CONF) -> int:
    with pytest.raises(CniError) as e:
        parse_request(environ, stdin)
    return e.value.code


# ------------------------------------------------------------------ errors

def test_well_known_codes():
    assert (errors.INCOMPATIBLE_VERSION, errors.UNSUPPORTED_FIELD, errors.UNKNOWN_CONTAINER,
            errors.INVALID_ENV, errors.IO_FAILURE, errors.DECODE_FAILURE, errors.INVALID_CONFIG,
            errors.TRY_AGAIN, errors.NOT_AVAILABLE, errors.LIMITED_CONNECTIVITY) == \
        (1, 2, 3, 4, 5, 6, 7, 11, 50, 51)


def test_error_to_dict_omits_empty_details():
    e = errors.ConfigError("bad config")
    assert e.to_dict("1.0.0") == {"cniVersion": "1.0.0", "code": 7, "msg": "bad config"}
    assert str(e) == "bad config"


def test_error_to_dict_with_details():
    e = errors.TryAgain("busy", "try later")
    assert e.to_dict("0.4.0") == {"cniVersion": "0.4.0", "code": 11, "msg": "busy",
                                  "details": "try later"}
    assert str(e) == "busy; try later"
    assert (e.code, e.msg, e.details) == (11, "busy", "try later")


def test_child_error_is_a_cni_error_with_plugin_and_stderr():
    e = ChildError(999, "boom", "d", plugin="bridge", stderr="trace")
    assert isinstance(e, CniError)
    assert (e.code, e.msg, e.details, e.plugin, e.stderr) == (999, "boom", "d", "bridge", "trace")
    assert e.to_dict("1.1.0")["msg"] == "boom"


# ------------------------------------------------------------------ commands and env

def test_add_request_parsed():
    req = parse_request(env(CNI_ARGS="IgnoreUnknown=1;K8S_POD_NAME=p;K8S_POD_NAMESPACE=ns",
                            CNI_PATH="/a::/b:"), CONF)
    assert isinstance(req, CniRequest)
    assert (req.command, req.container_id, req.netns, req.ifname) == \
        ("ADD", "abc123", "/var/run/netns/x", "eth0")
    assert req.args == (("IgnoreUnknown", "1"), ("K8S_POD_NAME", "p"), ("K8S_POD_NAMESPACE", "ns"))
    assert req.path == ("/a", "/b")
    assert req.config == {"cniVersion": "1.0.0", "name": "net", "type": "bridge"}
    assert req.stdin == CONF
    assert req.arg("K8S_POD_NAME") == "p" and req.arg("nope") is None


@pytest.mark.parametrize("command", ["", "add", "GET", "ADD ", "FOO"])
def test_unknown_command(command):
    with pytest.raises(CniError) as e:
        parse_request(env(CNI_COMMAND=command), CONF)
    assert e.value.code == 4
    if command:
        assert repr(command) in e.value.msg


def test_missing_command_variable():
    environ = env()
    del environ["CNI_COMMAND"]
    assert code_of(environ) == 4


@pytest.mark.parametrize("command,required", [
    ("ADD", ["CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_PATH"]),
    ("CHECK", ["CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_PATH"]),
    ("DEL", ["CNI_CONTAINERID", "CNI_IFNAME", "CNI_PATH"]),
    ("STATUS", ["CNI_PATH"]),
    ("GC", ["CNI_PATH"]),
])
def test_all_missing_variables_named_in_one_error(command, required):
    with pytest.raises(CniError) as e:
        parse_request({"CNI_COMMAND": command}, CONF)
    assert e.value.code == 4
    for name in required:
        assert name in e.value.msg
    for name in {"CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_PATH"} - set(required):
        assert name not in e.value.msg


def test_empty_variable_counts_as_missing():
    with pytest.raises(CniError) as e:
        parse_request(env(CNI_NETNS=""), CONF)
    assert e.value.code == 4 and "CNI_NETNS" in e.value.msg


def test_del_without_netns():
    req = parse_request(env(CNI_COMMAND="DEL", CNI_NETNS=None), CONF)
    assert req.command == "DEL" and req.netns == ""


@pytest.mark.parametrize("command", ["STATUS", "GC"])
def test_status_gc_need_only_path(command):
    req = parse_request({"CNI_COMMAND": command, "CNI_PATH": "/opt/cni/bin"}, CONF)
    assert req.command == command and req.container_id == "" and req.ifname == ""
    assert req.path == ("/opt/cni/bin",)


def test_version_needs_nothing():
    req = parse_request({"CNI_COMMAND": "VERSION"}, b"")
    assert req.command == "VERSION" and req.config is None
    req = parse_request({"CNI_COMMAND": "VERSION"}, b'{"cniVersion": "1.1.0"}')
    assert req.config == {"cniVersion": "1.1.0"}
    assert code_of({"CNI_COMMAND": "VERSION"}, b"{nope") == 6


# ------------------------------------------------------------------ container id, ifname

@pytest.mark.parametrize("cid", ["a", "0", "abc-DEF_1.2", "f" * 64])
def test_valid_container_ids(cid):
    validate_container_id(cid)
    assert parse_request(env(CNI_CONTAINERID=cid), CONF).container_id == cid


@pytest.mark.parametrize("cid", ["-abc", "_a", ".a", "a b", "a/b", "a;b", "a\n", "é", "a:b"])
def test_invalid_container_ids(cid):
    with pytest.raises(CniError) as e:
        parse_request(env(CNI_CONTAINERID=cid), CONF)
    assert e.value.code == 4 and repr(cid) in e.value.msg


@pytest.mark.parametrize("ifname", ["eth0", "net1", "a", "x" * 15, "a.b", "a-b_c", "a@b"])
def test_valid_ifnames(ifname):
    validate_ifname(ifname)
    assert parse_request(env(CNI_IFNAME=ifname), CONF).ifname == ifname


@pytest.mark.parametrize("ifname", [".", "..", "x" * 16, "a/b", "a:b", "a b", "a\tb", "a\nb",
                                    "é" * 8])
def test_invalid_ifnames(ifname):
    with pytest.raises(CniError) as e:
        parse_request(env(CNI_IFNAME=ifname), CONF)
    assert e.value.code == 4 and repr(ifname) in e.value.msg


@pytest.mark.parametrize("command", ["ADD", "DEL", "CHECK"])
@pytest.mark.parametrize("var", ["CNI_NETNS", "CNI_PATH"])
def test_nul_in_a_path_variable_is_code_4(command, var):
    """A NUL would make the first os.stat() of the path raise ValueError (code 999)."""
    with pytest.raises(CniError) as e:
        parse_request({**env(CNI_COMMAND=command), var: "/var/run/netns/a\0b"}, CONF)
    assert e.value.code == 4 and var in e.value.msg


def test_ids_checked_before_stdin():
    assert code_of(env(CNI_IFNAME="a/b"), b"not json") == 4


def test_gc_validates_given_ifname():
    assert code_of({"CNI_COMMAND": "GC", "CNI_PATH": "/x", "CNI_IFNAME": ".."}) == 4


# ------------------------------------------------------------------ CNI_ARGS

def test_cni_args_parse():
    assert parse_cni_args("") == ()
    assert parse_cni_args("A=1;B=;C=x=y;;") == (("A", "1"), ("B", ""), ("C", "x=y"))


@pytest.mark.parametrize("text", ["A", "A=1;B", "=1", "A=1;=2"])
def test_cni_args_invalid(text):
    with pytest.raises(CniError) as e:
        parse_request(env(CNI_ARGS=text), CONF)
    assert e.value.code == 4


def test_arg_last_value_wins():
    req = parse_request(env(CNI_ARGS="K=1;K=2"), CONF)
    assert req.arg("K") == "2"


# ------------------------------------------------------------------ stdin

@pytest.mark.parametrize("stdin", [b"", b"  ", b"{", b"[]", b"3", b'"s"', b"null",
                                   b'{"a": NaN}', b"\xff\xfe\x00", b'{"a": 1} x'])
def test_bad_stdin_is_decode_failure(stdin):
    with pytest.raises(CniError) as e:
        parse_request(env(), stdin)
    assert e.value.code == 6


def test_huge_stdin_rejected():
    big = b'{"a": "' + b"x" * MAX_STDIN + b'"}'
    with pytest.raises(CniError) as e:
        parse_request(env(), big)
    assert e.value.code == 6 and "too large" in e.value.msg


def test_deep_nesting_rejected():
    deep = b"[" * 100000 + b"]" * 100000
    with pytest.raises(CniError) as e:
        parse_request(env(), deep)
    assert e.value.code == 6


@pytest.mark.parametrize("command", ["DEL", "CHECK", "STATUS", "GC"])
def test_every_command_but_version_needs_an_object(command):
    environ = env(CNI_COMMAND=command)
    assert code_of(environ, b"[]") == 6
    assert parse_request(environ, CONF).config["name"] == "net"


# ------------------------------------------------------------------ properties

_keys = st.sampled_from(["CNI_COMMAND", "CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME",
                         "CNI_ARGS", "CNI_PATH", "OTHER"])
_values = st.one_of(st.sampled_from(["ADD", "DEL", "CHECK", "VERSION", "STATUS", "GC", "",
                                     "eth0", "abc", "/p:/q", "A=1;B=2"]), st.text(max_size=40))
_stdin = st.one_of(st.binary(max_size=200), st.just(CONF),
                   st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                                lambda c: st.lists(c, max_size=4)
                                | st.dictionaries(st.text(max_size=6), c, max_size=4),
                                max_leaves=20).map(lambda o: json.dumps(o).encode()))


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(_keys, _values), _stdin)
def test_parse_request_raises_only_cni_errors(environ, stdin):
    try:
        req = parse_request(environ, stdin)
    except CniError as e:
        assert e.code in (4, 6)
        return
    assert req.command in ("ADD", "DEL", "CHECK", "VERSION", "STATUS", "GC")
    if req.command != "VERSION":
        assert isinstance(req.config, dict)
