"""Every parser of outside input, driven by hypothesis with at least 10,000 examples each.

Property: whatever the input, a valid value comes out, or the one error kind the code
documents: a CniError with a code, or the module's own error that the orchestrator turns into
CNI code 7. Never another exception, never a traceback. Targets:

* selection: the k8s.v1.cni.cncf.io/networks annotation, both formats (selection.py);
* nad-config: a NAD's spec.config, and .conf/.conflist/.json files (delegates.py);
* request: CNI_* environment + stdin -> CniRequest (cni/request.py);
* result: a result of any version converted to any version (cni/result.py);
* cli: cli.cni_main in-process, every command: one JSON document with a code, or a valid
  answer. An audit hook proves that no child runs, no socket connects and nothing is
  written outside the test's temp dir.

Each target runs EXAMPLES examples, seeded (derandomize) and without an example database,
so CI runs the same examples every time. The body of each target counts the examples it
ran; tests/conftest.py prints the counts at the end of the run, and a target that ran
fewer than EXAMPLES fails.

Cost. Hypothesis spends about 0.7 ms per example on the simplest strategy, and 4 to 12 ms
on nested ones (a JSON list of selection elements: 10.6 ms, measured on the 2-core VM), so
10,000 nested examples per target would take minutes. The structured inputs are therefore
built by plain functions from one hypothesis-drawn seed (`seeded`): as cheap as the
simplest strategy, deterministic, and from a space of 2**64 seeds, so hypothesis never
stops early by exhausting it. Hypothesis' own `text` and `binary` strategies run beside
them for what they are good at (odd Unicode, edge sizes). A failure names its seed
(`build(random.Random(143))`): the builder called with that Random gives the input.
"""
from __future__ import annotations

import copy
import json
import logging
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from netattach import cli
from netattach.cni.errors import CniError
from netattach.cni.names import is_dns1123_label, is_valid_ifname
from netattach.cni.request import COMMANDS, MAX_STDIN, CniRequest, parse_request, validate_ifname
from netattach.cni.result import convert_result, result_version
from netattach.cni.version import SUPPORTED_VERSIONS
from netattach.spec.delegates import DelegateError, config_from_nad, load_conf_file
from netattach.spec.selection import (
    MAX_ANNOTATION_BYTES,
    NETWORKS_ANNOTATION,
    NetworkSelectionElement,
    SelectionError,
    parse_network_selection,
)

EXAMPLES = 10_000

# No health check is suppressed: the strategies are cheap and never filter.
SETTINGS = settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None)


def run_target(property_runs: dict, name: str, strategy, check: Callable[[Any], None]) -> None:
    """Run `check` on EXAMPLES examples of `strategy`; record and assert how many ran."""
    ran = 0

    @SETTINGS
    @given(strategy)
    def prop(value):
        nonlocal ran
        ran += 1
        check(value)

    started = time.monotonic()
    prop()
    property_runs[name] = {"examples": ran, "seconds": time.monotonic() - started}
    assert ran >= EXAMPLES, f"{name}: hypothesis ran {ran} examples, fewer than {EXAMPLES}"


def seeded(build: Callable[[random.Random], Any]):
    """The strategy of build(Random(seed)), seed drawn by hypothesis from 2**64 values."""
    return st.integers(0, 2**64 - 1).map(lambda seed: build(random.Random(seed)))


# ---------------------------------------------------------------- building blocks

_CHARS = ("aZ09-._/@,:; \t\n\r\x00\x7f\xa0é\u2028\udcff\ufeff😀[]{}\"'\\=%?#" + "abcxyz" * 4)


def _text(r: random.Random, n: int = 12, chars: str = _CHARS) -> str:
    if r.random() < 0.05:  # anything Unicode has, lone surrogates included
        return "".join(chr(r.randrange(0x110000)) for _ in range(r.randrange(n + 1)))
    return "".join(r.choice(chars) for _ in range(r.randrange(n + 1)))


def _json(r: random.Random, depth: int = 2) -> Any:
    """Any JSON value, nested up to `depth`."""
    kind = r.randrange(10 if depth else 7)
    if kind == 0:
        return None
    if kind == 1:
        return r.random() < 0.5
    if kind == 2:
        return r.choice([0, 1, -1, 65535, 65536, 2**63 - 1, 2**63, r.randint(-2**70, 2**70)])
    if kind == 3:
        return r.choice([0.5, -0.0, 1e308, r.uniform(-1e6, 1e6)])
    if kind in (4, 5, 6):
        return _text(r)
    if kind in (7, 8):
        return [_json(r, depth - 1) for _ in range(r.randrange(4))]
    return {_text(r, 8): _json(r, depth - 1) for _ in range(r.randrange(4))}


def _pick(r: random.Random, pool: list, junk: float = 0.15) -> Any:
    """Mostly one of `pool`, sometimes any JSON value."""
    return _json(r) if r.random() < junk else r.choice(pool)


def _mutate(r: random.Random, text: str) -> str:
    """`text` with one character inserted, replaced or cut off: broken JSON near valid JSON."""
    at, char = r.randrange(len(text) + 1), r.choice('[]{}",:\\ \x00é\udcffx0')
    how = r.randrange(3)
    if how == 0:
        return text[:at] + char + text[at:]
    return text[:at] + char + text[at + 1:] if how == 1 else text[:at]


def _nesting(r: random.Random) -> str:
    """JSON nested 1 to 3000 deep: past the recursion limit, jsonutil must refuse it."""
    n, opener = r.randint(1, 3000), r.choice(["[", '{"a":'])
    return opener * n + "1" + ("]" if opener == "[" else "}") * n


def _maybe_broken(r: random.Random, text: str) -> str:
    """Valid `text` mostly; else mutated, or replaced by deep nesting or any text."""
    kind = r.randrange(10)
    if kind < 7:
        return text
    if kind == 7:
        return _mutate(r, text)
    return _nesting(r) if kind == 8 else _text(r, 30)


# ---------------------------------------------------------------- selection

_LABELS = ["a", "net-a", "x9", "0", "ns-1", "other", "a" * 63,  # valid DNS-1123 labels
           "Bad_Name", "A", "-a", "a-", "a" * 64, "a.b", "..", ".", "", " ", "é", "a\x00",
           "a b", "a\nb", "%2e%2e", "\udcff"]
_IFNAMES = ["eth0", "net1", "data0", "x" * 15, "é" * 7, "x" * 16, "é" * 8, "a:b", "a b",
            "a/b", ".", "..", "...", "a\tb", "a\xa0", "\udcff", ""]
_ADDRS = ["10.0.0.5/24", "10.0.0.5", "2001:db8::1/64", "2001:db8::1", "10.0.0.1/33",
          "10.0.0.1/024", "10.0.0.1/255.255.255.0", "fe80::1%eth0", "x", "", "::ffff:10.0.0.1"]
_HW = ["02:00:00:00:00:01", "02-00-00-00-00-0A", "0200.0000.0001", "01:00:00:00:00:01",
       "00:00:00:00:00:00", "02:00:00:00:00", "zz:00:00:00:00:01",
       "24:8a:07:03:00:8d:ae:2f", "248a.0703.008d.ae2f", "24:8a:07:03:00:8d:ae"]
_BW_KEYS = ["ingressRate", "ingressBurst", "egressRate", "egressBurst", "rate"]


def _label(r: random.Random) -> str:
    return r.choice(_LABELS) if r.random() < 0.8 else _text(r, 10, "abz09-._A/@, ")


def _ifname(r: random.Random) -> str:
    return r.choice(_IFNAMES) if r.random() < 0.8 else _text(r, 17, "abz09-.:/ ")


def _port_mapping(r: random.Random) -> dict:
    keys = r.sample(["hostPort", "containerPort", "protocol", "hostIP", "hostport"],
                    r.randrange(6))
    return {k: r.choice([r.randint(-1, 70_000), _json(r, 0)]) if k.endswith(("Port", "port"))
            else _pick(r, ["tcp", "UDP", "sctp", "icmp", None, ""]) if k == "protocol"
            else _pick(r, _ADDRS) for k in keys}


_ELEMENT_VALUES: dict[str, Callable[[random.Random], Any]] = {
    "namespace": lambda r: _label(r) if r.random() < 0.9 else _json(r, 0),
    "interface": lambda r: _ifname(r) if r.random() < 0.9 else _json(r, 0),
    "interfaceRequest": _ifname,
    "ips": lambda r: [_pick(r, _ADDRS) for _ in range(r.randrange(4))],
    "mac": lambda r: _pick(r, _HW),
    "infiniband-guid": lambda r: _pick(r, _HW),
    "cni-args": _json,
    "portMappings": lambda r: [_port_mapping(r) for _ in range(r.randrange(3))],
    "bandwidth": lambda r: {k: r.choice([r.randint(-1, 2**64), _json(r, 0)])
                            for k in r.sample(_BW_KEYS, r.randrange(4))},
    "default-route": lambda r: [_pick(r, _ADDRS) for _ in range(r.randrange(3))],
    "ipam-claim-reference": lambda r: _pick(r, ["claim-1", "my.claim", "Bad", ""]),
    "deviceID": lambda r: _pick(r, ["0000:03:00.1", ""]),
    "org.example/key": _json,
    "Name": _json,
}


def _element(r: random.Random) -> Any:
    if r.random() < 0.05:
        return _json(r)
    element = {} if r.random() < 0.03 else {"name": _label(r) if r.random() < 0.9 else _json(r, 0)}
    for key in r.sample(list(_ELEMENT_VALUES), r.randrange(5)):
        element[key] = _ELEMENT_VALUES[key](r)
    return element


def _annotation(r: random.Random) -> str:
    kind = r.randrange(10)
    if kind < 4:
        items = [(_label(r) + "/" if r.random() < 0.4 else "") + _label(r)
                 + ("@" + _ifname(r) if r.random() < 0.3 else "") for _ in range(r.randint(1, 6))]
        return _maybe_broken(r, r.choice([",", ", ", " , ", ",,", "\t,"]).join(items))
    if kind < 8:
        return _maybe_broken(r, r.choice(["", " ", "\n\t"]) + json.dumps(
            [_element(r) for _ in range(r.randrange(6))]))
    if kind == 8:
        return json.dumps(_json(r))
    # over the size cap (refused before parsing, so cheap)
    return r.choice(["a,", "é", "\udcff"]) * (MAX_ANNOTATION_BYTES // 2 + r.randint(1, 4096))


def check_selection(value: str) -> None:
    try:
        elements = parse_network_selection(value, "pod-ns")
    except SelectionError as e:
        assert str(e).startswith(f"invalid {NETWORKS_ANNOTATION} annotation")
        assert e.reason and len(str(e)) < 2000
        return
    interfaces = [e.interface for e in elements if e.interface is not None]
    assert len(interfaces) == len(set(interfaces))
    assert sum(e.default_route is not None for e in elements) <= 1
    for i, e in enumerate(elements):
        assert isinstance(e, NetworkSelectionElement) and e.index == i
        assert is_dns1123_label(e.name) and is_dns1123_label(e.namespace)
        assert e.interface is None or is_valid_ifname(e.interface)
        assert e.mac is None or (len(e.mac) == 17 and e.mac == e.mac.lower())
        assert e.ips is None or (e.ips and all(isinstance(ip, str) for ip in e.ips))
        assert not (e.ips and e.ipam_claim_reference)


def test_selection_annotation(property_runs):
    run_target(property_runs, "selection", st.one_of(seeded(_annotation), st.text(max_size=40)),
               check_selection)


# ---------------------------------------------------------------- nad-config

_TYPES = ["bridge", "macvlan", "tuning", "", "../x", "a/b", "/bin/sh", ".", "..", None, 1]
_VERSIONS = list(SUPPORTED_VERSIONS) + ["", "0.3", "2.0.0", "1.0.0-rc1", "x", None, 1]
_FLAGS = [True, False, "true", "False", "yes", 1, None]


def _plugin(r: random.Random) -> Any:
    if r.random() < 0.05:
        return _json(r)
    plugin = {"type": r.choice(_TYPES)} if r.random() < 0.9 else {}
    for key in r.sample(["name", "cniVersion", "capabilities", "ipam"], r.randrange(3)):
        plugin[key] = {"name": lambda: _pick(r, ["p", ""]),
                       "cniVersion": lambda: r.choice(_VERSIONS),
                       "capabilities": lambda: {k: _pick(r, [True, False]) for k in
                                                r.sample(["ips", "mac", "x"], r.randrange(3))},
                       "ipam": lambda: _json(r)}[key]()
    return plugin


def _conf(r: random.Random) -> dict:
    conf: dict = {}
    if r.random() < 0.9:
        conf["cniVersion"] = r.choice(_VERSIONS)
    if r.random() < 0.8:
        conf["name"] = _pick(r, ["net-a", "other", "", None, "a/b", "Bad Name"])
    if r.random() < 0.5:
        conf["plugins"] = ([_plugin(r) for _ in range(r.randrange(4))] if r.random() < 0.9
                           else _json(r))
    if r.random() < 0.6:
        conf["type"] = r.choice(_TYPES)
    for key in r.sample(["cniVersions", "disableCheck", "disableGC", "loadOnlyInlinedPlugins",
                         "capabilities", "org.example"], r.randrange(3)):
        conf[key] = ([r.choice(_VERSIONS) for _ in range(r.randrange(3))] if key == "cniVersions"
                     else r.choice(_FLAGS) if key[0] in "dl" else _json(r))
    return conf


def _config_text(r: random.Random) -> str:
    if r.random() < 0.1:
        return r.choice(["", "  \n", "[]", "null", '"{}"', "NaN", json.dumps(_json(r)),
                         '{"name": "n", "type": "bridge", "x": Infinity}'])
    return _maybe_broken(r, json.dumps(_conf(r)))


def _nad_case(r: random.Random) -> tuple[str, Any]:
    mode = r.choice(["nad", "nad", "nad", ".conf", ".conflist", ".json"])
    if mode == "nad":
        spec = {"config": _config_text(r)} if r.random() < 0.9 else r.choice(
            [None, {}, {"config": None}, {"config": _json(r)}, _json(r)])
        return mode, spec
    kind = r.randrange(10)
    data = (_config_text(r).encode("utf-8", "surrogatepass") if kind < 8
            else b"\xef\xbb\xbf" + json.dumps(_conf(r)).encode() if kind == 8
            else bytes(r.randrange(256) for _ in range(r.randrange(30))))
    return mode, data


def check_network_config(config, nad_data: dict | None) -> None:
    assert isinstance(config.name, str) and config.name
    assert config.cni_version in SUPPORTED_VERSIONS
    assert config.plugins and all(isinstance(p, dict) and isinstance(p.get("type"), str)
                                  and p["type"] for p in config.plugins)
    assert isinstance(config.raw, dict) and isinstance(config.source, str)
    if nad_data is not None:  # a NAD: "plugins" makes a list; name injected when absent
        assert config.is_list == ("plugins" in nad_data)
        if nad_data.get("name") in (None, ""):
            assert config.name == "net-a"


def check_nad_config(case: tuple[str, Any], tmp: Path) -> None:
    mode, data = case
    if mode == "nad":
        try:
            config = config_from_nad({"metadata": {"name": "net-a", "namespace": "ns"},
                                      "spec": data}, default_name="net-a")
        except DelegateError as e:
            assert e.network == "ns/net-a" and "NetworkAttachmentDefinition ns/net-a" in str(e)
            assert e.__cause__ is None or (isinstance(e.__cause__, CniError)
                                           and e.__cause__.code in (1, 7))
            return
        text = data.get("config") if isinstance(data, dict) else None
        if config is None:
            assert not isinstance(text, str) or not text.strip()
            return
        check_network_config(config, json.loads(text))
        return
    path = tmp / f"10-net{mode}"
    path.write_bytes(data)
    try:
        config = load_conf_file(str(path))
    except DelegateError as e:
        assert e.network == str(path) and str(path) in str(e)
        assert e.__cause__ is None or (isinstance(e.__cause__, CniError)
                                       and e.__cause__.code in (1, 7))
        return
    check_network_config(config, None)
    assert config.source == str(path)
    assert config.is_list or mode != ".conflist"


def test_nad_config(property_runs, tmp_path):
    run_target(property_runs, "nad-config", seeded(_nad_case),
               lambda case: check_nad_config(case, tmp_path))


# ---------------------------------------------------------------- request

_ENV_VALUES = {
    "CNI_COMMAND": list(COMMANDS) + ["", "add", "BOGUS", "ADD\x00"],
    "CNI_CONTAINERID": ["abc123", "a" * 64, "A.b_c-9", "../../etc", "a/b", "", ".hidden",
                        "-x", "a b", "a\x00b", "é", "\udcff", "x" * 300],
    "CNI_NETNS": ["/var/run/netns/x", "", "/proc/1/ns/net", "../x", "/x/\udcff"],
    "CNI_IFNAME": _IFNAMES,
    "CNI_ARGS": ["", "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p", "A=1;;B=2;",
                 "=x", "novalue", "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=../../secrets/s",
                 "K8S_POD_NAMESPACE=a/b;K8S_POD_NAME=p", "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=\udcff",
                 "A=b=c", ";"],
    "CNI_PATH": ["/opt/cni/bin", "/a:/b", "", ":::", "relative"],
}


def _environ(r: random.Random) -> dict[str, str]:
    env = {key: values[0] if key != "CNI_COMMAND" else r.choice(COMMANDS)
           for key, values in _ENV_VALUES.items() if r.random() < 0.85}
    for key in r.sample(list(_ENV_VALUES), r.randrange(3)):  # the hostile part
        env[key] = r.choice(_ENV_VALUES[key]) if r.random() < 0.8 else _text(r, 20)
    return env


_NETCONF = {"cniVersion": "1.0.0", "name": "na", "type": "netattach",
            "clusterNetwork": "/nonexistent/10-x.conf"}
_BAD_STDIN = [b"", b"  \n", b'{"a": NaN}', b'{"a": "\xff"}', b"\xef\xbb\xbf{}", b'{"a":1}{"b":2}',
              b'{"a":1', b" " * (MAX_STDIN + 1), b'{"cniVersion": "1.0.0"}' + b" " * MAX_STDIN]


def _stdin(r: random.Random) -> bytes:
    kind = r.randrange(10)
    if kind < 5:
        conf = dict(_NETCONF)
        for key in r.sample(sorted(_NETCONF), r.randrange(3)):
            conf[key] = _json(r, 1)
        return _maybe_broken(r, json.dumps(conf)).encode("utf-8", "surrogatepass")
    if kind < 7:
        return json.dumps(_json(r)).encode()
    if kind < 9:
        return r.choice(_BAD_STDIN)
    return bytes(r.randrange(256) for _ in range(r.randrange(40)))


def check_request(case: tuple[dict, bytes]) -> None:
    environ, stdin = case
    try:
        req = parse_request(environ, stdin)
    except CniError as e:
        assert e.code in (4, 6) and e.msg
        return
    assert isinstance(req, CniRequest) and req.command in COMMANDS and req.stdin == stdin
    if req.command == "VERSION":
        assert req.config is None or isinstance(req.config, dict)
        return
    assert isinstance(req.config, dict)
    if req.command in ("ADD", "CHECK", "DEL") or req.container_id:
        assert req.container_id[0].isascii() and req.container_id[0].isalnum()
        assert "/" not in req.container_id
    if req.command in ("ADD", "CHECK", "DEL") or req.ifname:
        validate_ifname(req.ifname)
    assert all(req.path) and all(k for k, _ in req.args)


def test_cni_request(property_runs):
    run_target(property_runs, "request",
               st.one_of(seeded(lambda r: (_environ(r), _stdin(r))),
                         st.tuples(seeded(_environ), st.binary(max_size=40))),
               check_request)


# ---------------------------------------------------------------- result

_RESULT_ADDRS = ["10.0.0.2/24", "10.0.0.2", "2001:db8::2/64", "fe80::1", "::ffff:10.0.0.1/96",
                 "0.0.0.0/0", "::/0", "x", ""]


def _route(r: random.Random) -> Any:
    if r.random() < 0.05:
        return _json(r, 1)
    route = {"dst": _pick(r, _RESULT_ADDRS)}
    for key in r.sample(["gw", "mtu", "advmss", "priority", "table", "scope"], r.randrange(4)):
        route[key] = _pick(r, _RESULT_ADDRS) if key == "gw" else _json(r, 0)
    return route


def _some(r: random.Random, make: Callable[[random.Random], Any], n: int = 3) -> Any:
    """A list of `make`'s values, or (rarely) any JSON value where a list belongs."""
    return [make(r) for _ in range(r.randrange(n + 1))] if r.random() < 0.9 else _json(r, 1)


def _dns(r: random.Random) -> Any:
    if r.random() < 0.1:
        return _json(r, 1)
    return {k: _some(r, lambda r: _pick(r, _RESULT_ADDRS)) if k == "nameservers" else _json(r, 1)
            for k in r.sample(["nameservers", "domain", "search", "options"], r.randrange(5))}


def _result(r: random.Random) -> Any:
    result: dict = {}
    if r.random() < 0.8:
        result["cniVersion"] = r.choice(_VERSIONS)
    if r.random() < 0.4:  # the 0.1.0/0.2.0 shape
        for key in r.sample(["ip4", "ip6"], r.randrange(3)):
            result[key] = {k: _some(r, _route) if k == "routes" else _pick(r, _RESULT_ADDRS)
                           for k in r.sample(["ip", "gateway", "routes"], r.randrange(4))}
    elif r.random() < 0.95:  # the 0.3.0 .. 1.1.0 shape
        result["interfaces"] = _some(r, lambda r: {k: _json(r, 0) for k in r.sample(
            ["name", "mac", "sandbox", "mtu", "socketPath", "pciID"], r.randrange(7))})
        result["ips"] = _some(r, lambda r: {"address": _pick(r, _RESULT_ADDRS), **{
            k: _pick(r, ["4", "6", "5", 4, None]) if k == "version" else
            _pick(r, [0, 1, 2, -1]) if k == "interface" else _pick(r, _RESULT_ADDRS)
            for k in r.sample(["version", "gateway", "interface"], r.randrange(4))}})
        result["routes"] = _some(r, _route)
    else:
        return _json(r)
    if r.random() < 0.5:
        result["dns"] = _dns(r)
    return result


_SHAPES = {"020": {"cniVersion", "ip4", "ip6", "dns"},
           "1xx": {"cniVersion", "interfaces", "ips", "routes", "dns"}}


def check_result(case: tuple[Any, Any, Any]) -> None:
    result, to_version, default_version = case
    before = copy.deepcopy(result)
    try:
        out = convert_result(result, to_version, default_version)
    except CniError as e:
        assert e.code in (1, 6) and e.msg
        assert result == before
        return
    assert result == before  # the input is never changed
    assert out["cniVersion"] == to_version
    assert json.loads(json.dumps(out)) == out
    source = result_version(result, default_version or to_version)
    if source == to_version:
        assert out == {**result, "cniVersion": to_version}
        return
    if to_version in ("0.1.0", "0.2.0"):
        assert set(out) <= _SHAPES["020"] and ("ip4" in out or "ip6" in out)
        assert all(isinstance(out[k]["ip"], str) for k in ("ip4", "ip6") if k in out)
    else:
        assert set(out) <= _SHAPES["1xx"]
        for ip in out.get("ips", []):
            assert isinstance(ip["address"], str) and ip["address"]
            assert ("version" in ip) == (to_version in ("0.3.0", "0.3.1", "0.4.0"))
    assert convert_result(out, to_version) == out


def test_result_conversion(property_runs):
    run_target(property_runs, "result", seeded(
        lambda r: (_result(r), r.choice(_VERSIONS), r.choice(_VERSIONS))), check_result)


# ---------------------------------------------------------------- cli


class Watch:
    """A process-wide audit hook (it cannot be removed, so it is installed once and
    switched on only around cni_main): any process creation, socket connection, or
    write, create, rename or delete outside `allowed` is recorded as a violation."""

    _installed: Watch | None = None
    _CHILD = {"subprocess.Popen", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
              "os.forkpty", "os.system", "pty.spawn", "socket.connect"}
    # event -> positions of the paths it changes (a symlink's target is not changed)
    _PATHS = {"os.mkdir": (0,), "os.rename": (0, 1), "os.remove": (0,), "os.rmdir": (0,),
              "os.symlink": (1,), "os.link": (1,), "os.chmod": (0,), "os.chown": (0,),
              "os.truncate": (0,), "os.utime": (0,), "shutil.rmtree": (0,),
              "shutil.copyfile": (1,), "shutil.move": (0, 1)}
    _WRITE = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC

    def __init__(self) -> None:
        self.allowed = ""
        self.on = False
        self.violations: list[str] = []

    @classmethod
    def get(cls) -> Watch:
        if cls._installed is None:
            cls._installed = cls()
            sys.addaudithook(cls._installed._hook)
        return cls._installed

    def _inside(self, path) -> bool:
        if isinstance(path, int):
            return True  # an fd (or dir_fd) opened earlier, when the path was checked
        path = os.path.abspath(os.fsdecode(path))
        return path == self.allowed or path.startswith(self.allowed + os.sep)

    def _hook(self, event: str, args: tuple) -> None:
        if not self.on:
            return
        if event in self._CHILD:
            self.violations.append(f"{event} {args!r:.200}")
        elif event == "open":
            path, _mode, flags = args
            if flags & self._WRITE and not self._inside(path):
                self.violations.append(f"open for writing {path!r}")
        elif event in self._PATHS:
            if not all(self._inside(args[i]) for i in self._PATHS[event]):
                self.violations.append(f"{event} {args!r:.200}")


def _base_netconf(tmp: str) -> dict:
    """A valid netattach config whose every path is in `tmp`. Its cluster default network's
    plugin is nowhere, so an ADD plans, saves state and fails at the first exec."""
    return {"cniVersion": "1.1.0", "name": "na", "type": "netattach",
            "clusterNetwork": f"{tmp}/conf/10-default.conf", "cniDir": f"{tmp}/state",
            "confDir": f"{tmp}/conf", "binDir": f"{tmp}/bin", "logFile": f"{tmp}/netattach.log",
            "logLevel": "debug", "logToStderr": False, "kubeconfig": f"{tmp}/missing.kubeconfig",
            "podResourcesSocket": f"{tmp}/kubelet.sock", "deviceInfoDir": f"{tmp}/devinfo"}


# Some resolve: to a config whose plugin is absent (10-default.conf), or whose type is a
# path (hostile.conf); others cannot.
_CLUSTER_NETWORKS = ["{tmp}/missing.conf", "{tmp}/conf", "{tmp}/conf/10-default.conf",
                     "default-net", "{tmp}/hostile.conf", "{tmp}/a\x00b.conf", "cluster-net",
                     "kube-system/net", "../../etc/x", "Bad_Name/x", "a/b/c", "ns/../../x",
                     "ns/x?y", ""]
_NETCONF_VALUES: dict[str, Callable[[random.Random], Any]] = {
    "cniVersion": lambda r: r.choice(_VERSIONS),
    "name": lambda r: _json(r, 0),
    "type": lambda r: _pick(r, ["netattach", ""]),
    "clusterNetwork": lambda r: _pick(r, _CLUSTER_NETWORKS),
    "defaultNetworks": lambda r: _some(r, _label),
    "logLevel": lambda r: _pick(r, ["debug", "verbose", "error", "loud"]),
    "namespaceIsolation": lambda r: r.choice(_FLAGS),
    "globalNamespaces": lambda r: _label(r) if r.random() < 0.5 else _some(r, _label),
    "systemNamespaces": lambda r: _some(r, _label),
    "multusNamespace": lambda r: _label(r),
    "capabilities": _json, "runtimeConfig": _json, "prevResult": _json,
    "apiTimeout": lambda r: r.choice([0.5, 0, -1, 5000, "1", None]),
    # bad values only for the path keys: a valid one would lead out of the temp dir
    "cniDir": lambda r: r.choice(["", 1, None, [], "{tmp}/a\x00b"]),
    "logFile": lambda r: r.choice(["", 1, None, "{tmp}/a\x00b"]),
    "kubeconfig": lambda r: r.choice(["", 1, None, "{tmp}/a\x00b"]),
    "readinessindicatorfile": lambda r: r.choice(["", 1, None, "{tmp}/conf"]),  # conf exists
    "cni.dev/valid-attachments": lambda r: _some(r, lambda r: {
        "containerID": _pick(r, ["abc123", "x"]), "ifname": _pick(r, ["eth0"])}),
}


def _cli_case(r: random.Random, tmp: str) -> tuple[dict, bytes]:
    # execve passes C strings: an environment value holds no NUL (lone surrogates, from
    # bytes that are not UTF-8, it can).
    environ = {k: v.replace("\x00", "") for k, v in _environ(r).items()}
    environ["CNI_COMMAND"] = r.choice(list(COMMANDS) + ["", "add"])
    if r.random() < 0.8:
        conf = _base_netconf(tmp)
        for key in r.sample(list(_NETCONF_VALUES), r.randrange(4)):
            value = _NETCONF_VALUES[key](r)
            conf[key] = value.replace("{tmp}", tmp) if isinstance(value, str) else value
        # Not _maybe_broken: a mutated path could lead out of the temp dir.
        return environ, json.dumps(conf).encode()
    # Anything else; not _stdin's netconf, whose paths lead out of the temp dir.
    return environ, (json.dumps(_json(r)).encode() if r.random() < 0.5
                     else _nesting(r).encode() if r.random() < 0.5 else r.choice(_BAD_STDIN))


def check_cli(case: tuple[dict, bytes], tmp: str, watch: Watch, logging_errors: list) -> None:
    environ, stdin = case
    command = environ["CNI_COMMAND"]
    logging_errors.clear()
    watch.on = True
    try:
        doc, status = cli.cni_main(environ, stdin)
    finally:
        watch.on = False
    assert not watch.violations, watch.violations
    assert not logging_errors, "a log record could not be written (traceback on stderr)"
    text = json.dumps(doc)  # what cli.main writes: one line, one document
    assert "\n" not in text and json.loads(text) == doc
    state_dir = f"{tmp}/state"
    assert not os.path.exists(state_dir) or not any(  # no lock file outlives an operation
        n.endswith(".lock") for n in os.listdir(state_dir))
    if status == 1:
        assert set(doc) <= {"cniVersion", "code", "msg", "details"}
        assert isinstance(doc["code"], int) and doc["code"] != 999, doc
        assert isinstance(doc["msg"], str) and doc["msg"] and isinstance(doc["cniVersion"], str)
        return
    assert status == 0
    if command == "VERSION":
        assert doc["supportedVersions"] == list(SUPPORTED_VERSIONS)
        assert doc["cniVersion"] in SUPPORTED_VERSIONS and set(doc) == {
            "cniVersion", "supportedVersions"}
    else:  # no plugin to run: ADD cannot succeed; the others print nothing
        assert doc is None and command not in ("ADD", "VERSION")


def test_cli_in_process(property_runs, monkeypatch):
    # tmpfs: state files are fsync'ed, which costs milliseconds on a disk
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    tmp = os.path.realpath(tempfile.mkdtemp(prefix="netattach-prop-", dir=shm))
    for d in ("conf", "bin"):
        os.mkdir(f"{tmp}/{d}")
    Path(f"{tmp}/conf/10-default.conf").write_text(json.dumps(
        {"cniVersion": "1.1.0", "name": "default-net", "type": "netattach-prop-absent"}))
    Path(f"{tmp}/hostile.conf").write_text(json.dumps(
        {"cniVersion": "1.0.0", "name": "hostile", "type": "../../../bin/sh"}))
    watch = Watch.get()
    watch.allowed, watch.violations = tmp, []
    logging_errors: list = []
    monkeypatch.setattr(logging.Handler, "handleError",
                        lambda self, record: logging_errors.append(record))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    logger = logging.getLogger("netattach")
    saved = (list(logger.handlers), logger.level, logger.propagate)
    try:
        # The lazy imports of every command (and of the API transport) happen here, unwatched.
        for cmd in COMMANDS:
            cli.cni_main({"CNI_COMMAND": cmd, "CNI_CONTAINERID": "warm", "CNI_IFNAME": "eth0",
                          "CNI_NETNS": "/x", "CNI_PATH": "/x",
                          "CNI_ARGS": "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p"},
                         json.dumps(_base_netconf(tmp)).encode())
        run_target(property_runs, "cli", seeded(lambda r: _cli_case(r, tmp)),
                   lambda case: check_cli(case, tmp, watch, logging_errors))
        assert "Traceback" not in Path(f"{tmp}/netattach.log").read_text(errors="replace")
    finally:
        logger.handlers[:], logger.level, logger.propagate = saved
        shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------- netattach's own config

_JUNK = (None, True, False, 0, -1, 1, 2.5, 0.0, 3600, 3600.5, -0.0, "", "x", "a\x00b", "panic",
         "debug", [], ["a"], ["a", 1], [""], {}, {"a": True}, {"a": 1}, {"maxAge": 1},
         {"maxAge": -1}, {"compress": True}, {"maxSize": 1.0}, {"maxBackups": True},
         {"other": 1}, 10**20, float("inf"))


def _netconf_case(r: random.Random) -> dict:
    """A config near netconf.SCHEMA: required keys usually there, every other key now and
    then, each value either of its kind or any JSON value from _JUNK."""
    from netattach.spec.netconf import SCHEMA
    conf: dict[str, Any] = {}
    for key in SCHEMA["properties"]:
        if r.random() < (0.9 if key in SCHEMA["required"] else 0.25):
            conf[key] = r.choice(_JUNK + (_text(r, 8), [_text(r, 4)], r.uniform(-5, 4000)))
    if r.random() < 0.1:
        conf[_text(r, 5)] = r.choice(_JUNK)  # unknown keys are allowed
    return conf


def test_generated_netconf_validator_agrees_with_jsonschema(property_runs):
    """The exec'd path checks netattach's config with the validator generated from
    netconf.SCHEMA (hack/gen-netconf-validator.py, issue 11); it accepts exactly what
    jsonschema (draft 2020-12) accepts, and the key its error names is one jsonschema
    names too (issue 22: its error is the one reported, jsonschema is not imported)."""
    from jsonschema import Draft202012Validator

    from netattach.spec import _netconf_validator
    from netattach.spec.netconf import SCHEMA
    reference = Draft202012Validator(SCHEMA)

    def check(conf):
        try:
            _netconf_validator.validate(conf)
            fast = True
        except _netconf_validator.JsonSchemaValueException as e:
            fast = False
            paths = {".".join(str(p) for p in err.absolute_path)
                     for err in reference.iter_errors(conf)}
            assert e.path in paths, (conf, e.path, paths)
        assert fast == reference.is_valid(conf), (conf, list(reference.iter_errors(conf)))

    run_target(property_runs, "netconf-schema", seeded(_netconf_case), check)
