"""The daemon's per-delegate histogram and build_info (issue 24): every child plugin the
daemon's executor runs is timed with bounded labels (daemon/delegates.py) and shows on
/metrics as netattach_delegate_duration_seconds; netattach_build_info names the release,
the commit stamped at build time (buildinfo.py) and the Python. Real executables (small
scripts) run through the real process executor; the daemon around the registry is a
stand-in."""
from __future__ import annotations

import platform
import threading
from types import SimpleNamespace

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from netattach import __version__, buildinfo
from netattach.cni import invoke
from netattach.cni.errors import ChildError, ConfigError, TryAgain
from netattach.daemon import cache, metrics
from netattach.daemon.delegates import OTHER, TimedExecutor

PLUGINS = {
    "good": "#!/bin/sh\ncat >/dev/null\necho '{\"cniVersion\":\"1.0.0\"}'\n",
    "bad": "#!/bin/sh\ncat >/dev/null\necho '{\"code\":7,\"msg\":\"no\"}'\nexit 1\n",
    "slow": "#!/bin/sh\nexec sleep 30\n",
}


@pytest.fixture
def bin_dir(tmp_path):
    for name, text in PLUGINS.items():
        (tmp_path / name).write_text(text)
        (tmp_path / name).chmod(0o755)
    return tmp_path


def run(executor: TimedExecutor, bin_dir, plugin: str, command: str = "ADD",
        timeout: float = 30.0):
    path = executor.find(plugin, [str(bin_dir)])
    return executor.run(path, command, {"cniVersion": "1.0.0", "name": "n", "type": plugin},
                        invoke.PluginEnv(container_id="c1", ifname="net1"), timeout)


def test_each_execution_is_reported_with_its_type_command_and_result(bin_dir):
    timed = TimedExecutor(invoke.PROCESS_EXECUTOR)
    seen: list[tuple[str, str, str, float]] = []
    timed.observers.append(lambda *a: seen.append(a))
    assert run(timed, bin_dir, "good") == {"cniVersion": "1.0.0"}
    with pytest.raises(ChildError) as e:  # the inner executor's exception, unchanged
        run(timed, bin_dir, "bad", "DEL")
    assert e.value.code == 7
    with pytest.raises(TryAgain):  # killed at its timeout
        run(timed, bin_dir, "slow", "CHECK", timeout=0.2)
    assert [s[:3] for s in seen] == [("good", "ADD", "success"), ("bad", "DEL", "failure"),
                                     ("slow", "CHECK", "timeout")]
    assert all(s[3] > 0 for s in seen) and seen[2][3] >= 0.2


def test_an_observer_that_fails_changes_no_answer_and_no_error(bin_dir):
    """A metric is never the reason a CNI call fails or loses its child's error."""
    timed = TimedExecutor(invoke.PROCESS_EXECUTOR)
    seen: list[str] = []

    def broken(*_: object) -> None:
        raise ValueError("broken observer")
    timed.observers += [broken, lambda *a: seen.append(a[2])]
    assert run(timed, bin_dir, "good") == {"cniVersion": "1.0.0"}
    with pytest.raises(ChildError) as e:
        run(timed, bin_dir, "bad", "DEL")
    assert e.value.code == 7
    assert seen == ["success", "failure"]  # the observers after it still ran


def test_a_plugin_not_found_runs_nothing_and_makes_no_series(bin_dir):
    timed = TimedExecutor(invoke.PROCESS_EXECUTOR)
    seen: list[tuple] = []
    timed.observers.append(lambda *a: seen.append(a))
    with pytest.raises(ConfigError):
        run(timed, bin_dir, "made-up-by-a-tenant")
    assert seen == []


def test_plugin_types_are_bounded(bin_dir):
    """Past max_types distinct names, "other": no plugin dir makes series without end."""
    timed = TimedExecutor(invoke.PROCESS_EXECUTOR, max_types=1)
    seen: list[tuple] = []
    timed.observers.append(lambda *a: seen.append(a))
    run(timed, bin_dir, "good")
    with pytest.raises(ChildError):
        run(timed, bin_dir, "bad")
    run(timed, bin_dir, "good")
    assert [s[0] for s in seen] == ["good", OTHER, "good"]


def test_the_chroot_root_shows_through():
    """invoke.host_path reads the executor's `root` (the --chroot-dir)."""
    assert TimedExecutor(SimpleNamespace(root="/host")).root == "/host"  # type: ignore[arg-type]
    assert TimedExecutor(invoke.PROCESS_EXECUTOR).root is None
    assert invoke.host_path(TimedExecutor(invoke.PROCESS_EXECUTOR), "/x") == "/x"


def stand_in_daemon(executor: TimedExecutor) -> SimpleNamespace:
    return SimpleNamespace(
        stats=SimpleNamespace(lock=threading.Lock(), requests={}, attachments=0, misses={},
                              refused={}, abandoned=0, observers=[]),
        in_flight=0, calls=SimpleNamespace(waiting=lambda: 0, saturated_for=lambda: 0.0),
        pods=cache.WatchCache(cache.PODS, "/y", None, lambda: None),
        nads=cache.WatchCache(cache.NADS, "/x", None, lambda: None, cache.nad_trimmer(1024)),
        publisher=SimpleNamespace(sent=0, failed=0, dropped=0, pending=lambda: 0),
        hotplug=SimpleNamespace(lock=threading.Lock(), changes={}, queued=lambda: 0),
        dra=None, executor=executor)


def samples(text: str, name: str) -> dict[tuple, float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name:
                out[tuple(sorted(s.labels.items()))] = s.value
    return out


def test_the_histogram_and_build_info_on_metrics(bin_dir, monkeypatch, tmp_path):
    stamp = tmp_path / "build-commit"
    stamp.write_text("ab" * 20 + "-dirty\n")
    monkeypatch.setattr(metrics, "commit", lambda: buildinfo.commit(str(stamp)))
    timed = TimedExecutor(invoke.PROCESS_EXECUTOR)
    d = stand_in_daemon(timed)
    registry = metrics.registry_for(d)  # type: ignore[arg-type]
    run(timed, bin_dir, "good")
    run(timed, bin_dir, "good", "DEL")
    with pytest.raises(ChildError):
        run(timed, bin_dir, "bad")
    text = generate_latest(registry).decode()
    count = samples(text, "netattach_delegate_duration_seconds_count")
    assert count == {
        (("command", "ADD"), ("plugin_type", "good"), ("result", "success")): 1.0,
        (("command", "DEL"), ("plugin_type", "good"), ("result", "success")): 1.0,
        (("command", "ADD"), ("plugin_type", "bad"), ("result", "failure")): 1.0}
    buckets = samples(text, "netattach_delegate_duration_seconds_bucket")
    assert {dict(k)["le"] for k in buckets} == {*(repr(b) for b in metrics.DELEGATE_BUCKETS),
                                               "+Inf"}
    assert samples(text, "netattach_build_info") == {
        (("commit", "ab" * 20 + "-dirty"), ("python", platform.python_version()),
         ("version", __version__)): 1.0}


def test_commit_reads_the_stamp_and_refuses_anything_else(tmp_path):
    stamp = tmp_path / "c"
    assert buildinfo.commit(str(stamp)) == "unknown"  # no stamp: a virtualenv
    for text, want in (("0123456789abcdef0123456789abcdef01234567\n",
                        "0123456789abcdef0123456789abcdef01234567"),
                       ("0123456789abcdef0123456789abcdef01234567-dirty",
                        "0123456789abcdef0123456789abcdef01234567-dirty"),
                       ("unknown\n", "unknown"), ("0123", "unknown"),
                       ("'; rm -rf /\n", "unknown"), ("\xff\xfe", "unknown")):
        stamp.write_bytes(text.encode("latin-1"))
        assert buildinfo.commit(str(stamp)) == want, text


def test_the_virtualenvs_version_line_says_unknown():
    from netattach import cli
    assert cli.version_line() == (f"netattach {__version__} (commit unknown; CNI 0.1.0, "
                                  "0.2.0, 0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0)")
