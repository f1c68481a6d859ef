"""Thick mode's pure pieces, with fakes: the shim's constants and messages, the watch
cache's trimming and event handling, the publisher's ordering, retries and DEL
cancellation. The real-component tests are tests/e2e/test_thick_mode.py."""
from __future__ import annotations

import ast
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import netattach_shim as shim
from netattach.cni.version import SUPPORTED_VERSIONS
from netattach.daemon import cache, podapi, server
from netattach.kube import KubeError


def test_shim_versions_are_the_plugins():
    assert shim.SUPPORTED_VERSIONS == SUPPORTED_VERSIONS


def test_shim_imports_only_the_standard_library():
    tree = ast.parse(Path(shim.__file__).read_text())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
             for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree)
              if isinstance(n, ast.ImportFrom) and n.module and n.level == 0}
    assert names - {"__future__"} <= set(sys.stdlib_module_names)


@pytest.mark.parametrize("config, path", [
    ({"daemonSocketDir": "/x"}, "/x/netattach.sock"),
    ({}, "/run/netattach/netattach.sock"),
    ({"daemonSocketDir": ""}, "/run/netattach/netattach.sock"),
    ({"daemonSocketDir": 3}, "/run/netattach/netattach.sock"),
    (None, "/run/netattach/netattach.sock"),
])
def test_shim_socket_path(config, path):
    assert shim.socket_path(config) == path


def test_shim_without_a_daemon(tmp_path, monkeypatch):
    monkeypatch.setattr(shim, "ADD_WAIT_SECONDS", 0.0)
    stdin = b'{"cniVersion": "0.4.0", "daemonSocketDir": "%s"}' % str(tmp_path).encode()
    env = {"CNI_COMMAND": "ADD", "CNI_ARGS": "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p"}
    code, out = shim.shim(env, stdin)
    assert code == 1 and b'"code": 11' in out and b"pod ns/p" in out
    assert str(tmp_path).encode() in out and b'"cniVersion": "0.4.0"' in out
    code, out = shim.shim({**env, "CNI_COMMAND": "STATUS"}, stdin)
    assert code == 1 and b'"code": 50' in out
    code, out = shim.shim({"CNI_COMMAND": "VERSION"}, b"")
    assert code == 0 and b'"supportedVersions"' in out


@pytest.mark.parametrize("stdin, path", [
    (b'{"cniVersion": "1.0.0"}', "/run/netattach/netattach.sock"),
    (b'{"daemonSocketDir": "/x"}', "/x/netattach.sock"),
    (b'{"daemon\\u0053ocketDir": "/y"}', "/y/netattach.sock"),
    (b'{"a": {"daemonSocketDir": "/z"}}', "/run/netattach/netattach.sock"),
    (b'not json daemonSocketDir', "/run/netattach/netattach.sock"),
])
def test_shim_finds_the_socket_dir_decoding_only_when_needed(stdin, path):
    assert shim.socket_path_of(stdin) == path


@given(st.dictionaries(st.sampled_from(shim.CNI_ENV),
                       st.text(st.characters(blacklist_characters="\0",
                                             blacklist_categories=("Cs",)))),
       st.binary())
def test_wire_request_round_trip(environ, stdin):
    assert server.parse_request(shim.request_bytes(environ, stdin)) == (environ, stdin)


@pytest.mark.parametrize("data", [
    b"", b"CNI_COMMAND=ADD", b"CNI_COMMAND=ADD\0", b"PATH=/bin\0\0{}",
    b"CNI_COMMAND\0\0{}", b"CNI_COMMAND=ADD\0CNI_COMMAND=DEL\0\0{}",
])
def test_wire_request_refused(data):
    with pytest.raises(ValueError):
        server.parse_request(data)


def test_wire_answer():
    assert server.answer(0, {"cniVersion": "1.1.0"}) == b'0\n{"cniVersion": "1.1.0"}'
    assert server.answer(1, None) == b"1\n"


def test_unfrozen_environment():
    env = {"LD_LIBRARY_PATH": "/bundle", "LD_LIBRARY_PATH_ORIG": "/orig", "_PYI_X": "1",
           "PATH": "/bin"}
    assert shim._unfrozen(env) == {"LD_LIBRARY_PATH": "/orig", "PATH": "/bin"}
    assert shim._unfrozen({"LD_LIBRARY_PATH": "/bundle"}) == {}


def test_cache_keeps_only_what_the_orchestrator_reads():
    pod = {"metadata": {"name": "p", "namespace": "n", "uid": "u", "resourceVersion": "7",
                        "annotations": {"a": "b"}, "managedFields": [{}] * 50},
           "spec": {"containers": [{}]}, "status": {"phase": "Running"}}
    assert cache.trim(pod) == {"metadata": {"name": "p", "namespace": "n", "uid": "u",
                                            "resourceVersion": "7", "annotations": {"a": "b"}}}
    nad = {"metadata": {"name": "x", "namespace": "n"}, "spec": {"config": "{}"}}
    assert cache.trim(nad) == nad


def test_cache_applies_watch_events():
    c = cache.WatchCache(cache.NADS, "/x", None, lambda: None)
    obj = {"metadata": {"name": "a", "namespace": "n", "resourceVersion": "5"},
           "spec": {"config": "{}"}}
    assert c._apply({"type": "ADDED", "object": obj}, "1") == "5"
    assert c.get("n", "a") == obj
    assert c._apply({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}},
                    "5") == "9"
    assert c._apply({"type": "DELETED", "object": {**obj, "metadata": {
        **obj["metadata"], "resourceVersion": "10"}}}, "9") == "10"
    assert c.get("n", "a") is None and len(c) == 0
    with pytest.raises(cache.Gone):
        c._apply({"type": "ERROR", "object": {"code": 410}}, "10")


class FakeKube:
    """Answers `script` in order: None succeeds, a status raises KubeError(status)."""

    def __init__(self, script: list[int | None], calls: list[str]):
        self.script, self.calls = script, calls


def publisher(script: list[int | None], calls: list[str]) -> podapi.Publisher:
    return podapi.Publisher(lambda: FakeKube(script, calls), workers=1)


def send(what: str):
    def run(kube: FakeKube) -> None:
        kube.calls.append(what)
        status = kube.script.pop(0) if kube.script else None
        if status is not None:
            raise KubeError(f"{what}: HTTP {status}", status)
    return run


def test_publisher_sends_in_order_and_retries(monkeypatch):
    monkeypatch.setattr(podapi, "RETRY_PAUSES", (0.0, 0.0))
    calls: list[str] = []
    p = publisher([503, None, None, None], calls)
    for what in ("patch", "event 1", "event 2"):
        p.submit("c1", what, send(what))
    assert p.drain(30)
    assert calls == ["patch", "patch", "event 1", "event 2"]
    assert (p.sent, p.failed, p.dropped) == (3, 1, 0)


def test_publisher_gives_up_on_final_answers(monkeypatch):
    monkeypatch.setattr(podapi, "RETRY_PAUSES", (0.0, 0.0))
    calls: list[str] = []
    p = publisher([422, 0, 0, 0], calls)
    p.submit("c1", "patch", send("patch"))
    p.submit("c1", "event", send("event"))
    assert p.drain(30)
    assert calls == ["patch", "event", "event", "event"]  # 422: final; 0: retried, given up
    assert (p.sent, p.dropped) == (0, 2)


def test_del_cancels_what_is_queued_and_waits_for_the_send_in_progress():
    calls: list[str] = []
    entered, release = threading.Event(), threading.Event()

    def slow(kube: FakeKube) -> None:
        entered.set()
        release.wait(30)
        kube.calls.append("patch")

    p = publisher([], calls)
    p.submit("c1", "patch", slow)
    p.submit("c1", "event", send("event"))
    assert entered.wait(30)
    cancelled = threading.Event()
    t = threading.Thread(target=lambda: (p.cancel("c1"), cancelled.set()))
    t.start()
    assert not cancelled.wait(0.2)  # still sending the PATCH: DEL waits
    release.set()
    t.join(30)
    assert cancelled.is_set() and p.drain(30)
    assert calls == ["patch"] and p.dropped == 1  # the event was dropped, not sent


def test_the_daemons_calls_share_one_client_reloaded_each_minute(tmp_path):
    """SharedClient: one loaded client (one connection) for every live read and queued
    write, each Kube with its own budget; the token file read again after
    CLIENT_REUSE_SECONDS, so a rotated token is used."""
    from tests.unit.test_transport import write
    (tmp_path / "token").write_text("first")
    now = [100.0]
    shared = server.SharedClient(write(tmp_path, {"server": "http://127.0.0.1:1"},
                                       {"tokenFile": "token"}), clock=lambda: now[0])
    a, b = shared.kube(2.0, "apiTimeout"), shared.kube(5.0, "--api-timeout")
    assert a._http is b._http and (a.timeout, b.timeout) == (2.0, 5.0)
    (tmp_path / "token").write_text("second")
    now[0] += server.CLIENT_REUSE_SECONDS - 1
    assert shared.kube(2.0, "apiTimeout")._http is a._http
    now[0] += 1
    c = shared.kube(2.0, "apiTimeout")
    assert c._http is not a._http and c._http._headers["Authorization"] == "Bearer second"


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20)


@given(_json_values, st.sampled_from(["", " ", "\n\t "]), st.booleans())
def test_shim_decodes_as_json_loads(value, space, ascii_only):
    """The shim's decoder (the C scanner, json.loads as the fallback) reads every
    document as json.loads does, NaN and non-ASCII text included."""
    import json
    import math
    data = (space + json.dumps(value, ensure_ascii=ascii_only) + space).encode()
    got, want = shim._decode(data), json.loads(data)
    if isinstance(want, float) and math.isnan(want):
        assert isinstance(got, float) and math.isnan(got)
    else:
        assert json.dumps(got) == json.dumps(want)


@pytest.mark.parametrize("data", [b"", b"{", b"1 2", b'{"a": 1} x', b"\xff\xfe", b"[" * 100000])
def test_shim_decodes_no_json_as_none(data):
    assert shim._decode(data) is None


@pytest.mark.parametrize("stdin, version", [
    (b'{"cniVersion": "0.4.0"}', "0.4.0"), (b'{"cniVersion": "9.9.9"}', "1.1.0"), (b"", "1.1.0")])
def test_shim_version_is_json(stdin, version):
    import json
    code, out = shim.shim({"CNI_COMMAND": "VERSION"}, stdin)
    assert code == 0 and out == json.dumps(
        {"cniVersion": version, "supportedVersions": list(SUPPORTED_VERSIONS)}).encode()
