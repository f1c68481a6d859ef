"""Thick mode's pure pieces, with fakes: the shim's constants and messages, the watch
cache's trimming and event handling, the publisher's ordering, retries and DEL
cancellation, the network-status write that survives the daemon (sent under the
container's lock while its state holds it; re-sent at start when its pod is unchanged),
the shim's wire protocol and decoder. The real-component tests are
tests/e2e/test_thick_mode.py."""
from __future__ import annotations

import ast
import json
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import netattach_shim as shim
from netattach import __version__
from netattach.cni.version import SUPPORTED_VERSIONS
from netattach.daemon import cache, podapi, server
from netattach.kube.client import KubeError
from netattach.node.state import PendingStatus, SavedState
from netattach.node.statestore import StateStore
from netattach.spec.pod import PodRef
from netattach_shim import wire


def test_shim_versions_are_the_plugins():
    assert shim.SUPPORTED_VERSIONS == SUPPORTED_VERSIONS
    assert shim.RELEASE == __version__


@pytest.mark.parametrize("stamp, shown", [
    ("0123456789abcdef0123456789abcdef01234567\n", "0123456789abcdef0123456789abcdef01234567"),
    ("0123456789abcdef0123456789abcdef01234567-dirty", "0123456789abcdef0123456789abcdef01234567-dirty"),
    ("../../etc/passwd", "unknown"), ("0123456789ABCDEF0123456789ABCDEF01234567", "unknown"),
    ("\xff\xfe", "unknown"), (None, "unknown")])
def test_shim_build_line_names_the_stamped_commit(tmp_path, monkeypatch, stamp, shown):
    """The shim's VERSION line (issue 24) reads the stamp beside its module; anything but
    a stamp's form reads as "unknown", as netattach.commit does."""
    import netattach
    module = tmp_path / "netattach_shim" / "__init__.py"
    module.parent.mkdir()
    module.write_text("")
    if stamp is not None:
        (module.parent / shim.COMMIT_FILE).write_bytes(stamp.encode("latin-1"))
        assert netattach.commit(str(module.parent / shim.COMMIT_FILE)) == shown
    monkeypatch.setattr(shim, "__file__", str(module))
    assert shim.build_line() == (f"netattach-shim {__version__} (commit {shown}; "
                                 f"CNI {', '.join(SUPPORTED_VERSIONS)})")


def test_shim_version_writes_its_line_to_stderr_only(capfd):
    code, out = shim.shim({"CNI_COMMAND": "VERSION"}, b"")
    captured = capfd.readouterr()
    assert code == 0 and captured.out == "" and captured.err == shim.build_line() + "\n"
    assert json.loads(out)["supportedVersions"] == list(SUPPORTED_VERSIONS)


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


@given(st.dictionaries(st.sampled_from(wire.CNI_ENV),
                       st.text(st.characters(blacklist_characters="\0",
                                             blacklist_categories=("Cs",)))),
       st.binary())
def test_wire_request_round_trip(environ, stdin):
    assert wire.decode_request(wire.encode_request(environ, stdin)) == (environ, stdin)


@pytest.mark.parametrize("data", [
    b"", b"CNI_COMMAND=ADD", b"CNI_COMMAND=ADD\0", b"PATH=/bin\0\0{}",
    b"CNI_COMMAND\0\0{}", b"CNI_COMMAND=ADD\0CNI_COMMAND=DEL\0\0{}",
])
def test_wire_request_refused(data):
    with pytest.raises(ValueError):
        wire.decode_request(data)


def test_wire_answer():
    assert server.answer(0, {"cniVersion": "1.1.0"}) == b'0\n{"cniVersion": "1.1.0"}'
    assert server.answer(1, None) == b"1\n"
    assert wire.decode_answer(server.answer(1, None)) == (1, b"")
    for partial in (b"", b"0", b"2\n{}", b"x\n"):
        with pytest.raises(ValueError):
            wire.decode_answer(partial)


def test_shim_script_runs_the_artifacts_interpreter_isolated():
    from netattach.install.binary import shim_script
    text = shim_script("/opt/cni/bin/.netattach-0123456789ab/shim/bin/python3").decode()
    lines = text.splitlines()
    assert lines[0] == "#!/opt/cni/bin/.netattach-0123456789ab/shim/bin/python3 -SI"
    assert lines[-2:] == ["from netattach_shim import main", "main()"]
    # the longest host path the line holds on every kernel (BINPRM_BUF_SIZE 128 < 5.1)
    longest = "/" + "d" * (127 - len("#!/ -SI"))
    assert len(shim_script(longest).split(b"\n")[0]) == 127


@pytest.mark.parametrize("interpreter", [
    "relative/python3", "/with space/python3", "/tab\tpython3", "/new\nline", "/quote'x",
    "/" + "d" * 121, "", "/é/python3"])
def test_shim_script_refuses_what_a_shebang_cannot_hold(interpreter):
    from netattach.install.binary import shim_script
    from netattach.install.files import InstallError
    with pytest.raises(InstallError, match="--host-bin-dir"):
        shim_script(interpreter)


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


def test_an_event_waiting_for_its_retry_does_not_hold_the_network_status(monkeypatch):
    """A container's Events and its status writes are two queues (daemon/podapi.py): the
    ADD queues each AddedInterface Event before its network-status PATCH, and an Event
    that failed and waits for its retry must not hold the PATCH back that long."""
    monkeypatch.setattr(podapi, "RETRY_PAUSES", (600.0,))
    calls: list[str] = []
    p = podapi.Publisher(lambda: FakeKube([503], calls), workers=2)
    p.submit("c1", "event", send("event"), podapi.EVENTS)
    sent = threading.Event()
    p.submit("c1", "patch", lambda kube: (kube.calls.append("patch"), sent.set()))
    assert sent.wait(30)  # a hang guard: the event's retry is 600 s away
    assert calls == ["event", "patch"] and (p.sent, p.failed) == (1, 1)
    p.cancel("c1")  # the DEL: the event is not retried
    assert p.drain(30) and p.dropped == 1


def held_send(what: str):
    """A send of `what` that waits for `release` once it has set `entered`: (send,
    entered, release)."""
    entered, release = threading.Event(), threading.Event()

    def run(kube: FakeKube) -> None:
        entered.set()
        release.wait(30)
        kube.calls.append(what)
    return run, entered, release


def test_del_does_not_wait_for_an_event_being_sent():
    """An Event in flight changes nothing a DEL undoes: cancel returns while it is still
    being sent (the DEL does not pay its round trip); the writes queued after it go."""
    calls: list[str] = []
    slow, entered, release = held_send("event 1")
    p = publisher([], calls)
    p.submit("c1", "event 1", slow, podapi.EVENTS)
    p.submit("c1", "event 2", send("event 2"), podapi.EVENTS)
    assert entered.wait(30)
    p.cancel("c1")  # returns with event 1 still in flight
    assert not release.is_set()
    release.set()
    assert p.drain(30) and calls == ["event 1"] and p.dropped == 1


def test_a_failed_adds_warning_queued_behind_its_events_is_sent_whatever_the_del():
    """A failed ADD queues its ErrorAddingNetwork Warning after the AddedInterface Events
    of the interfaces it rolled back, and the runtime DELs the sandbox at once: the DEL
    drops the Events still queued, never the Warning (podapi.WARNINGS), which is what
    tells the pod's owner why."""
    calls: list[str] = []
    slow, entered, release = held_send("event eth0")
    p = publisher([], calls)
    p.submit("c1", "event eth0", slow, podapi.EVENTS)
    p.submit("c1", "event net1", send("event net1"), podapi.EVENTS)
    assert entered.wait(30)  # the one worker is held by the first Event
    p.submit("c1", "warning", send("warning"), podapi.WARNINGS)
    p.cancel("c1")  # the runtime's DEL
    release.set()
    assert p.drain(30)
    assert sorted(calls) == ["event eth0", "warning"] and p.dropped == 1


def test_the_daemons_calls_share_one_client_reloaded_each_minute(tmp_path):
    """SharedClient: one loaded client (one connection) for every live read and queued
    write, each Kube with its own budget; the token file read again after
    CLIENT_REUSE_SECONDS, so a rotated token is used."""
    from tests.unit.test_kube_transport import write
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


# -- the network-status write that survives the daemon (podapi.status_sender, republish)

STATUS = {"k8s.v1.cni.cncf.io/network-status": '[{"name": "cluster-net"}]'}


class Patcher:
    """A Kube for status_sender: answers `script` in order (None: 200, else that status)
    and records (namespace, name, annotations, uid) of every PATCH."""

    def __init__(self, *script: int | None):
        self.script = list(script)
        self.patches: list[tuple[str, str, dict[str, str], str | None]] = []

    def patch_pod_annotations(self, namespace: str, name: str, annotations: dict[str, str],
                              uid: str | None = None) -> None:
        self.patches.append((namespace, name, annotations, uid))
        status = self.script.pop(0) if self.script else None
        if status is not None:
            raise KubeError(f"HTTP {status}", status)


def pending_state(store: StateStore, cid: str = "c1", uid: str = "u1",
                  name: str = "p", netns: str = "/proc/self/ns/net") -> PendingStatus:
    pending = PendingStatus(uid, dict(STATUS))
    store.save(SavedState(container_id=cid, netns=netns, ifname="eth0",
                          pod=PodRef("ns", name, uid), status_pending=pending))
    return pending


def test_the_status_is_sent_while_pending_then_cleared(tmp_path):
    store = StateStore(str(tmp_path))
    pending = pending_state(store)
    kube = Patcher()
    podapi.status_sender(store, "c1", "ns", "p", pending)(kube)
    assert kube.patches == [("ns", "p", STATUS, "u1")]
    assert store.load("c1").status_pending is None
    with pytest.raises(podapi.NotSent, match="no longer holds it"):  # sent: never again
        podapi.status_sender(store, "c1", "ns", "p", pending)(kube)
    store.release("c1")
    with pytest.raises(podapi.NotSent, match="gone"):  # DEL'd
        podapi.status_sender(store, "c1", "ns", "p", pending)(kube)
    assert len(kube.patches) == 1


@pytest.mark.parametrize("status, cleared", [(404, True), (422, True), (503, False),
                                             (0, False), (403, False)])
def test_a_failed_status_patch_stays_pending_unless_the_pod_is_gone(tmp_path, status, cleared):
    store = StateStore(str(tmp_path))
    pending = pending_state(store)
    with pytest.raises(KubeError):
        podapi.status_sender(store, "c1", "ns", "p", pending)(Patcher(status))
    assert (store.load("c1").status_pending is None) is cleared


def test_a_status_not_sent_any_more_is_dropped_by_the_publisher(tmp_path):
    store = StateStore(str(tmp_path))
    pending = pending_state(store)
    kube = Patcher()
    p = podapi.Publisher(lambda: kube, workers=1)
    send = podapi.status_sender(store, "c1", "ns", "p", pending)
    p.submit("c1", "patch", send)
    p.submit("c1", "patch again", send)
    assert p.drain(30)
    assert len(kube.patches) == 1 and (p.sent, p.dropped) == (1, 1)


def test_a_status_write_waits_for_the_containers_lock(tmp_path):
    """An operation on the container (a DEL) holds its lock: the PATCH is not sent
    before it ends, and then not at all when it removed the state."""
    store = StateStore(str(tmp_path))
    pending = pending_state(store)
    kube = Patcher()
    p = podapi.Publisher(lambda: kube, workers=1)
    with store.lock("c1"):
        p.submit("c1", "patch", podapi.status_sender(store, "c1", "ns", "p", pending))
        assert not p.drain(0.2) and kube.patches == []
        store.release("c1")
    assert p.drain(30) and kube.patches == [] and p.dropped == 1


def pods_cache(*pods: dict) -> cache.WatchCache:
    c = cache.WatchCache(cache.PODS, "/api/v1/pods", None, lambda: None)
    for pod in pods:
        c._apply({"type": "ADDED", "object": pod}, "1")
    c.synced.set()
    return c


def pod(uid: str, name: str = "p", **meta: str) -> dict:
    return {"metadata": {"name": name, "namespace": "ns", "uid": uid, "resourceVersion": "3",
                         **meta}}


def test_cache_keeps_the_deletion_timestamp():
    deleting = pod("u1", deletionTimestamp="2026-01-01T00:00:00Z")
    assert cache.trim(deleting)["metadata"]["deletionTimestamp"] == "2026-01-01T00:00:00Z"


@pytest.mark.parametrize("cached, reason", [
    (pod("u1"), None),
    (None, "the pod is gone"),
    (pod("u2"), "the pod was re-created (UID u2, the status is for u1)"),
    (pod("u1", deletionTimestamp="2026-01-01T00:00:00Z"), "the pod is being deleted"),
])
def test_stale_reason(cached, reason):
    got = podapi.stale_reason(PendingStatus("u1", STATUS), cached)
    assert got == reason if reason is None else got.startswith(reason)


def test_republish_sends_what_an_earlier_daemon_left_and_drops_the_stale(tmp_path):
    store = StateStore(str(tmp_path))
    sent = pending_state(store, "c1", "u1")
    pending_state(store, "c2", "u-old")  # its pod was re-created since
    pending_state(store, "c3", "u3", name="q")  # its pod was deleted since
    store.save(SavedState(container_id="c4", netns="/x", ifname="eth0",
                          pod=PodRef("ns", "p", "u1")))  # nothing pending
    pending_state(store, "c6", "u1", netns="/run/netns/gone")  # its sandbox is gone
    queued: list[tuple[str, str]] = []
    kube = Patcher()

    def submit(cid: str, what: str, send) -> None:
        queued.append((cid, what))
        send(kube)

    pods = pods_cache(pod("u1"))
    assert podapi.republish(store, ["c1", "c2", "c3", "c4", "c5", "c6"], pods, submit) == 1
    assert queued == [("c1", "patch pod ns/p status (re-sent)")]
    assert kube.patches == [("ns", "p", sent.annotations, "u1")]
    assert [store.load(c).status_pending for c in ("c1", "c2", "c3", "c6")] == [None] * 4


# ---------------------------------------------------------------- bounded work (issue 21)

@pytest.mark.parametrize("config, seconds", [
    (None, 5 + 2 * 60 + 10),
    ({}, 135),
    ({"apiTimeout": 2, "delegateTimeout": 3}, 2 + 2 * 3 + 10),
    ({"defaultNetworks": ["a", "b"], "delegateTimeout": 10}, 5 + 4 * 10 + 10),
    ({"readinessindicatorfile": "/run/ready", "readinessTimeout": 7}, 7 + 5 + 120 + 10),
    ({"readinessTimeout": 7}, 135),  # no file: an ADD does not wait
    ({"readinessindicatorfile": "/run/ready"}, 30 + 135),
    ({"apiTimeout": True, "delegateTimeout": "9", "readinessTimeout": -1,
      "defaultNetworks": "a,b"}, 135),  # not numbers of seconds: the defaults
    ({"delegateTimeout": float("nan"), "apiTimeout": float("inf")}, 135),
])
def test_shim_answer_timeout_comes_from_the_conf(config, seconds):
    assert shim.answer_timeout(config) == seconds


@pytest.mark.parametrize("stdin, settings", [
    (b'{"cniVersion": "1.0.0"}', ("/run/netattach/netattach.sock", 135)),
    (b'{"daemonSocketDir": "/x", "delegateTimeout": 1}', ("/x/netattach.sock", 17)),
    (b'{"dele\\u0067ateTimeout": 1}', ("/run/netattach/netattach.sock", 17)),
    (b'{"a": {"delegateTimeout": 1}}', ("/run/netattach/netattach.sock", 135)),
])
def test_shim_reads_its_settings_decoding_only_when_needed(stdin, settings):
    assert shim.settings_of(stdin) == settings


def silent_daemon(tmp_path: Path):
    """A socket that accepts (the kernel's backlog) and never answers: a daemon stopped
    or hung."""
    import socket
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(tmp_path / "netattach.sock"))
    s.listen()
    return s


def test_shim_gives_up_after_its_answer_timeout_and_falls_back(tmp_path, monkeypatch):
    """No answer within answer_timeout: an ADD fails with code 11 naming the pod and the
    timeout (the daemon abandons it once the connection closes); DEL, GC and CHECK run
    in thin mode from the saved state, as when the daemon is down; STATUS answers 50."""
    monkeypatch.setattr(shim, "ANSWER_MARGIN", 0.0)
    listener = silent_daemon(tmp_path)
    stdin = json.dumps({"cniVersion": "1.0.0", "daemonSocketDir": str(tmp_path),
                        "apiTimeout": 0.1, "delegateTimeout": 0.1}).encode()
    env = {"CNI_COMMAND": "ADD", "CNI_ARGS": "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p"}
    try:
        code, out = shim.shim(env, stdin)
        doc = json.loads(out)
        assert code == 1 and doc["code"] == 11, doc
        assert doc["msg"].startswith("pod ns/p: ADD interrupted: netattach daemon at ")
        assert "no answer within 0.3 s" in doc["msg"] and "abandons the ADD" in doc["details"]
        thin: list[tuple[str, str]] = []
        monkeypatch.setattr(shim, "run_thin", lambda environ, data, why: thin.append(
            (environ["CNI_COMMAND"], why)))
        for command in ("DEL", "GC", "CHECK"):
            code, out = shim.shim({**env, "CNI_COMMAND": command}, stdin)
            assert code == 1 and json.loads(out)["code"] == 999  # no thin plugin here
        assert [c for c, _ in thin] == ["DEL", "GC", "CHECK"]
        assert all("no answer within 0.3 s" in why for _, why in thin)
        code, out = shim.shim({**env, "CNI_COMMAND": "STATUS"}, stdin)
        assert code == 1 and json.loads(out)["code"] == 50
    finally:
        listener.close()


def test_peer_gone_is_the_shims_close_not_its_end_of_request():
    import socket
    daemon_end, shim_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with daemon_end:
        assert not server.peer_gone(daemon_end)
        shim_end.sendall(b"request")
        shim_end.shutdown(socket.SHUT_WR)  # what the shim does after its request
        assert daemon_end.recv(100) == b"request" and daemon_end.recv(100) == b""
        assert not server.peer_gone(daemon_end)
        shim_end.close()
        assert server.peer_gone(daemon_end)
    assert server.peer_gone(daemon_end)  # closed here too: gone, no exception


def test_the_daemons_flags_default_to_the_servers_bounds():
    import argparse

    from netattach import daemon
    parser = argparse.ArgumentParser()
    daemon.add_arguments(parser)
    args = parser.parse_args([])
    assert args.max_queued == server.DEFAULT_MAX_QUEUED
    assert args.saturation_timeout == server.DEFAULT_SATURATION_TIMEOUT


@pytest.mark.parametrize("environ, who", [
    ({"CNI_ARGS": "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p", "CNI_CONTAINERID": "c"}, "pod ns/p"),
    ({"CNI_ARGS": "broken", "CNI_CONTAINERID": "c"}, "container c"),
    ({}, "request"),
])
def test_the_daemon_names_the_pod_of_a_call_it_refuses(environ, who):
    assert server.describe(environ) == who


@pytest.mark.parametrize("stdin, version", [
    (b'{"cniVersion": "0.4.0"}', "0.4.0"),
    (b'{"cniVersion": "9.9.9"}', SUPPORTED_VERSIONS[-1]),
    (b"[]", SUPPORTED_VERSIONS[-1]),
    (b"not json", SUPPORTED_VERSIONS[-1]),
])
def test_the_daemons_own_errors_take_the_confs_version(stdin, version):
    assert server.cni_version_of(stdin) == version
