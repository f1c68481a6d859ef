"""Finding and running a plugin executable, with tiny script plugins. No root needed."""
from __future__ import annotations

import os
import stat
import sys

import pytest

from netattach.cni import chroot, invoke
from netattach.cni.errors import ChildError, CniError
from netattach.cni.invoke import PluginEnv, exec_plugin, find_plugin

ENV = PluginEnv(container_id="c1", netns="/var/run/netns/x", ifname="eth0", args="A=1",
                path="/opt/cni/bin")


def script(dirpath, name: str, body: str) -> str:
    path = os.path.join(dirpath, name)
    with open(path, "w") as f:
        f.write(f"#!{sys.executable}\nimport json, os, sys\n{body}\n")
    os.chmod(path, 0o755)
    return path


# ------------------------------------------------------------------ find_plugin

@pytest.mark.parametrize("ptype", ["", ".", "..", "a/b", "../bridge", "/bin/sh", "a\0b"])
def test_invalid_plugin_types(ptype, tmp_path):
    with pytest.raises(CniError) as e:
        find_plugin(ptype, [str(tmp_path)])
    assert e.value.code == 7 and "invalid plugin type" in e.value.msg


def test_find_in_order_and_executable_only(tmp_path):
    a, b, c = (tmp_path / n for n in "abc")
    for d in (a, b, c):
        d.mkdir()
    (a / "p").write_text("not executable")
    (b / "p").mkdir()  # a directory is not a plugin
    script(str(c), "p", "")
    assert find_plugin("p", ["", str(a), str(b), str(c)]) == str(c / "p")
    script(str(a), "q", "")
    script(str(c), "q", "")
    assert find_plugin("q", [str(a), str(c)]) == str(a / "q")


def test_not_found_names_type_and_dirs(tmp_path):
    with pytest.raises(CniError) as e:
        find_plugin("nope", [str(tmp_path), "/nonexistent"])
    assert e.value.code == 7
    assert "'nope'" in e.value.msg and str(tmp_path) in e.value.msg and "/nonexistent" in e.value.msg


# ------------------------------------------------------------------ environment

def test_child_environ_replaces_ours(monkeypatch):
    monkeypatch.setenv("CNI_NETNS", "/ours")
    monkeypatch.setenv("CNI_ARGS", "OURS=1")
    monkeypatch.setenv("KEEP_ME", "yes")
    env = invoke.child_environ("DEL", PluginEnv(container_id="c1", ifname="eth0", path=""))
    assert env["CNI_COMMAND"] == "DEL" and env["CNI_CONTAINERID"] == "c1"
    assert env["CNI_IFNAME"] == "eth0" and env["CNI_PATH"] == ""
    assert "CNI_NETNS" not in env and "CNI_ARGS" not in env  # empty: left out, not inherited
    assert env["KEEP_ME"] == "yes"


def test_child_gets_stdin_and_env(tmp_path):
    p = script(tmp_path, "echo", "conf = json.load(sys.stdin)\n"
               "print(json.dumps({'cniVersion': conf['cniVersion'], 'got': conf,\n"
               "  'env': {k: v for k, v in os.environ.items() if k.startswith('CNI_')}}))")
    out = exec_plugin(p, "ADD", {"cniVersion": "1.0.0", "name": "n", "type": "echo"}, ENV, 10)
    assert out["got"] == {"cniVersion": "1.0.0", "name": "n", "type": "echo"}
    assert out["env"] == {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c1",
                          "CNI_NETNS": "/var/run/netns/x", "CNI_IFNAME": "eth0",
                          "CNI_ARGS": "A=1", "CNI_PATH": "/opt/cni/bin"}


# ------------------------------------------------------------------ outcomes

@pytest.mark.parametrize("stdout", ["", "\n", "null"])
def test_empty_output_is_none(tmp_path, stdout):
    p = script(tmp_path, "quiet", f"sys.stdout.write({stdout!r})")
    assert exec_plugin(p, "DEL", {}, ENV, 10) is None


@pytest.mark.parametrize("stdout", ["not json", "[1, 2]", "42"])
def test_success_with_bad_output_is_decode_failure(tmp_path, stdout):
    p = script(tmp_path, "noisy", f"print({stdout!r})")
    with pytest.raises(ChildError) as e:
        exec_plugin(p, "ADD", {}, ENV, 10)
    assert e.value.code == 6 and "'noisy'" in e.value.msg and e.value.plugin == "noisy"


def test_error_object_passed_through(tmp_path):
    p = script(tmp_path, "failing",
               "sys.stderr.write('some trace\\n')\n"
               "print(json.dumps({'cniVersion': '1.0.0', 'code': 117, 'msg': 'no luck',"
               " 'details': 'really'}))\nsys.exit(1)")
    with pytest.raises(ChildError) as e:
        exec_plugin(p, "ADD", {}, ENV, 10)
    assert (e.value.code, e.value.msg, e.value.details) == (117, "no luck", "really")
    assert e.value.plugin == "failing" and "some trace" in e.value.stderr


def test_unparsable_failure_like_libcni(tmp_path):
    p = script(tmp_path, "crash", "print('panic: oops')\nsys.stderr.write('goroutine 1\\n')\n"
               "sys.exit(2)")
    with pytest.raises(ChildError) as e:
        exec_plugin(p, "ADD", {}, ENV, 10)
    assert e.value.code == 999  # libcni says types.ErrUnknown (0), which the spec does not define
    assert "panic: oops" in e.value.msg and "status 2" in e.value.msg
    assert "goroutine 1" in e.value.details


def test_stderr_only_failure(tmp_path):
    p = script(tmp_path, "grumpy", "sys.stderr.write('x' * 10000 + 'the end')\nsys.exit(3)")
    with pytest.raises(ChildError) as e:
        exec_plugin(p, "DEL", {}, ENV, 10)
    assert e.value.code == 999 and "status 3" in e.value.msg
    assert e.value.details.endswith("the end") and len(e.value.details) <= invoke.STDERR_TAIL + 3


def test_silent_failure(tmp_path):
    p = script(tmp_path, "mute", "sys.exit(1)")
    with pytest.raises(ChildError) as e:
        exec_plugin(p, "DEL", {}, ENV, 10)
    assert e.value.code == 999 and "wrote no error" in e.value.msg


@pytest.mark.parametrize("signame", ["SIGKILL", "SIGSEGV", "SIGABRT"])
def test_killed_by_signal(tmp_path, signame):
    """Defect 3 of issue 9: a child that dies of a signal and writes nothing used to give
    code 0, which is not an error code; now 999, the message naming the signal."""
    p = script(tmp_path, "doomed", f"import signal\nos.kill(os.getpid(), signal.{signame})")
    with pytest.raises(ChildError) as e:
        exec_plugin(p, "ADD", {}, ENV, 10)
    number = int(getattr(__import__("signal"), signame))
    assert e.value.code == 999
    assert e.value.msg == f"plugin 'doomed' was killed by {signame} ({number}) and wrote no error"


def test_cannot_execute(tmp_path):
    p = tmp_path / "broken"
    p.write_text("#!/nonexistent/interpreter\n")
    p.chmod(p.stat().st_mode | stat.S_IEXEC)
    with pytest.raises(CniError) as e:
        exec_plugin(str(p), "ADD", {}, ENV, 10)
    assert e.value.code == 5 and "'broken'" in e.value.msg


def test_child_seconds_counter(tmp_path):
    p = script(tmp_path, "sleepy", "import time\ntime.sleep(0.2)")
    before = invoke.child_seconds()
    exec_plugin(p, "DEL", {}, ENV, 10)
    assert invoke.child_seconds() - before >= 0.2


def test_nothing_written_to_our_stdout(tmp_path, capfd):
    p = script(tmp_path, "chatty", "sys.stderr.write('to stderr\\n')\nprint(json.dumps({'a': 1}))")
    assert exec_plugin(p, "ADD", {}, ENV, 10) == {"a": 1}
    out, err = capfd.readouterr()
    assert out == "" and err == ""


# ------------------------------------------------------------------ in another root (--chroot-dir)

def _root(tmp_path):
    """A root dir laid out as merged-/usr hosts are: /bin -> usr/bin, plugins under
    /usr/lib/cni reached through /opt/cni/bin links."""
    root = tmp_path / "root"
    (root / "usr/bin").mkdir(parents=True)
    (root / "usr/lib/cni").mkdir(parents=True)
    (root / "opt/cni/bin").mkdir(parents=True)
    (root / "bin").symlink_to("usr/bin")
    script(str(root / "usr/lib/cni"), "bridge", "")
    return root


def test_resolve_in_root_follows_links_inside_the_root_only(tmp_path):
    root = _root(tmp_path)
    # an absolute target starts again at the root; `..` stops at it
    (root / "opt/cni/bin/abs").symlink_to("/usr/lib/cni/bridge")
    (root / "opt/cni/bin/up").symlink_to("../../../../../../../usr/lib/cni/bridge")
    (root / "opt/cni/bin/chain").symlink_to("abs")
    for name in ("abs", "up", "chain"):
        assert invoke.resolve_in_root(str(root), f"/opt/cni/bin/{name}") == "/usr/lib/cni/bridge"
    # `..` after a link goes up from where the link led, as the kernel's lookup does
    assert invoke.resolve_in_root(str(root), "bin/../lib/./cni") == "/usr/lib/cni"
    assert invoke.resolve_in_root(str(root), "bin/../opt") is None
    assert invoke.resolve_in_root(str(root), "/") == "/"
    # missing components, a file used as a dir, a loop: no path
    assert invoke.resolve_in_root(str(root), "/opt/nope/bridge") is None
    assert invoke.resolve_in_root(str(root), "/usr/lib/cni/bridge/x") is None
    (root / "opt/cni/bin/loop").symlink_to("loop")
    assert invoke.resolve_in_root(str(root), "/opt/cni/bin/loop") is None


def test_chroot_find_never_leaves_the_root(tmp_path):
    """A plugin is what the root holds at <binDir>/<type>, links followed inside the root;
    one that exists only outside it (here: at the same path on this machine's side of
    an absolute link, or above the root through `..`) is not found, and the error names
    the root."""
    root = _root(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    script(str(outside), "evil", "")
    (root / "opt/cni/bin/bridge").symlink_to("/usr/lib/cni/bridge")
    (root / "opt/cni/bin/evil").symlink_to(str(outside / "evil"))  # absolute: in the root
    (root / "opt/cni/bin/evil2").symlink_to("../../../../" + str(outside / "evil"))
    ex = chroot.ChrootExecutor(str(root))
    assert ex.find("bridge", ["/nope", "/opt/cni/bin"]) == "/opt/cni/bin/bridge"
    # a bin dir is a path inside the root, relative ones from its /
    assert ex.find("bridge", ["usr/lib/cni"]) == "/usr/lib/cni/bridge"
    for ptype in ("evil", "evil2"):
        with pytest.raises(CniError) as e:
            ex.find(ptype, ["/opt/cni/bin", str(outside)])
        assert e.value.code == 7 and f"under the root {root}" in e.value.msg
    with pytest.raises(CniError) as e:
        ex.find("../bridge", ["/opt/cni/bin"])
    assert "invalid plugin type" in e.value.msg


def test_chroot_executor_problem(tmp_path):
    assert chroot.ChrootExecutor(str(tmp_path)).problem() is None
    assert "is not a directory" in chroot.ChrootExecutor(str(tmp_path / "no")).problem()


# ------------------------------------------------------------------ the spawner's threads

def _workers(keep: int):
    """A chroot._Workers whose connections are stand-ins: each an Event it waits on
    (released by the test), recorded with the thread that served it."""
    import threading
    served: list[tuple[object, threading.Thread]] = []

    def serve_one(conn):
        conn.wait(10)
        served.append((conn, threading.current_thread()))
    return chroot._Workers(keep=keep, serve_one=serve_one), served


def _until(predicate) -> None:
    import time
    deadline = time.monotonic() + 10
    while not predicate():
        assert time.monotonic() < deadline, "hang guard"
        time.sleep(0.005)


def test_spawner_workers_serve_one_child_after_another_on_one_thread():
    import threading
    workers, served = _workers(keep=4)
    for i in range(5):
        done = threading.Event()
        done.set()
        workers.submit(done)
        _until(lambda n=i + 1: len(served) == n)
        _until(lambda: workers._idle == 1)
    assert workers.started == 1 and len({t for _, t in served}) == 1
    workers.close()
    served[0][1].join(10)
    assert not served[0][1].is_alive()  # the one waiting ends on close


def test_spawner_workers_serve_children_at_once_and_keep_at_most_keep_waiting():
    import threading
    workers, served = _workers(keep=2)
    conns = [threading.Event() for _ in range(5)]
    for c in conns:
        workers.submit(c)
    assert workers.started == 5  # none was waiting: each child its own thread at once
    for c in conns:
        c.set()
    _until(lambda: len(served) == 5)
    _until(lambda: workers._idle == 2)
    threads = {t for _, t in served}
    assert len(threads) == 5
    _until(lambda: sum(t.is_alive() for t in threads) == 2)  # 3 ended, 2 wait
    workers.close()
    for t in threads:
        t.join(10)
    assert not any(t.is_alive() for t in threads)  # the waiting ones end on close


def test_spawner_workers_closed_end_the_busy_thread_once_its_child_is_done():
    import threading
    workers, served = _workers(keep=4)
    busy = threading.Event()
    workers.submit(busy)
    workers.close()
    busy.set()
    _until(lambda: len(served) == 1)
    thread = served[0][1]
    thread.join(10)
    assert not thread.is_alive() and workers._idle == 0  # done, it does not wait
