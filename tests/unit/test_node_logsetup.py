"""logsetup.setup_logging: the append path and logOptions rotation (Multus' keys,
lumberjack's rules), across processes.

Sizes: MEGABYTE is lowered to 1000 bytes and every record is 100 bytes (99 and the
newline) with the formatter "%(message)s", so with maxSize 1 a file holds exactly 10
records and each rotation's outcome is exact. Ages are set through the time in a
backup's name (lumberjack's rule), never by waiting.
"""
from __future__ import annotations

import gzip
import json
import logging
import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from netattach.node import logsetup

LINE = 100
BACKUP = re.compile(r"n-(\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d\.\d{3})\.log(\.gz)?")


@pytest.fixture
def small_mb(monkeypatch):
    monkeypatch.setattr(logsetup, "MEGABYTE", 1000)


def configure(path: Path, options: dict | None, to_stderr: bool = False) -> logging.Logger:
    logsetup.setup_logging(str(path), "info", to_stderr, options)
    logger = logging.getLogger("netattach")
    logger.handlers[0].setFormatter(logging.Formatter("%(message)s"))
    return logging.getLogger("netattach.test")


def record(tag: str) -> str:
    return f"{tag} ".ljust(LINE - 1, ".")


def write(log: logging.Logger, tags) -> list[str]:
    lines = [record(t) for t in tags]
    for line in lines:
        log.info(line)
    return lines


def backups(directory: Path) -> list[Path]:
    """The backups, oldest first (by the time in the name)."""
    return sorted((p for p in directory.iterdir() if BACKUP.fullmatch(p.name)),
                  key=lambda p: p.name)


def lines_of(path: Path) -> list[str]:
    data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    return data.decode().splitlines()


def stamp(days_ago: float) -> str:
    """The backup time of `days_ago` days ago, to the second: call it once per name."""
    t = time.time() - days_ago * 86400
    return time.strftime("%Y-%m-%dT%H-%M-%S", time.gmtime(t)) + ".000"


@pytest.fixture(autouse=True)
def _close_handlers():
    yield
    for handler in logging.getLogger("netattach").handlers:
        handler.close()


# ---------------------------------------------------------------- without logOptions

def test_without_log_options_the_file_only_grows(tmp_path, small_mb):
    log = configure(tmp_path / "n.log", None)
    lines = write(log, range(40))
    assert sorted(os.listdir(tmp_path)) == ["n.log"]  # no backup, no lock file
    assert lines_of(tmp_path / "n.log") == lines
    assert (tmp_path / "n.log").stat().st_mode & 0o777 == 0o600


def test_empty_log_options_rotate_with_multus_defaults(tmp_path, small_mb):
    """`"logOptions": {}` is Multus' defaults (100 MB, 5 backups, 5 days, compress), not
    "no rotation": a migrated config keeps rotating."""
    log = configure(tmp_path / "n.log", {})
    lines = write(log, range(40))
    assert lines_of(tmp_path / "n.log") == lines  # 4000 bytes: under 100 (test) MB
    assert "n.log.lock" in os.listdir(tmp_path)  # the rotating handler took its lock


def test_a_multi_line_record_is_one_write(tmp_path, monkeypatch):
    writes = []
    real = os.write
    monkeypatch.setattr(logsetup.os, "write", lambda fd, b: writes.append(bytes(b)) or real(fd, b))
    log = configure(tmp_path / "n.log", None)
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("failed")
    [data] = writes
    assert data.startswith(b"failed\nTraceback") and data.endswith(b"ValueError: boom\n")


def test_text_that_is_not_utf8_is_escaped(tmp_path):
    configure(tmp_path / "n.log", None).info("ns \udcff")
    assert (tmp_path / "n.log").read_bytes() == b"ns \\udcff\n"


# ---------------------------------------------------------------- size

def test_rotates_before_a_record_would_exceed_max_size(tmp_path, small_mb):
    log = configure(tmp_path / "n.log", {"maxSize": 1, "maxBackups": 0, "compress": False})
    lines = write(log, range(35))
    olds = backups(tmp_path)
    assert [len(lines_of(p)) for p in olds] == [10, 10, 10]
    assert [p.stat().st_size for p in olds] == [1000, 1000, 1000]
    assert lines_of(tmp_path / "n.log") == lines[30:]
    assert [line for p in olds for line in lines_of(p)] == lines[:30]  # order kept
    assert {p.stat().st_mode & 0o777 for p in olds + [tmp_path / "n.log"]} == {0o600}
    assert (tmp_path / "n.log.lock").stat().st_mode & 0o777 == 0o600


def test_an_existing_file_counts_toward_max_size(tmp_path, small_mb):
    (tmp_path / "n.log").write_text("x" * 950 + "\n")
    log = configure(tmp_path / "n.log", {"maxSize": 1, "compress": False})
    lines = write(log, ["a"])
    [old] = backups(tmp_path)
    assert old.read_text() == "x" * 950 + "\n"
    assert lines_of(tmp_path / "n.log") == lines


def test_a_record_larger_than_max_size_is_written_whole_in_a_file_of_its_own(tmp_path, small_mb):
    log = configure(tmp_path / "n.log", {"maxSize": 1, "compress": False})
    first = write(log, ["a"])
    log.info("b" * 2500)
    last = write(log, ["c"])
    assert [lines_of(p) for p in backups(tmp_path)] == [first, ["b" * 2500]]
    assert lines_of(tmp_path / "n.log") == last


def test_backup_names_are_lumberjacks_and_never_reused(tmp_path, small_mb, monkeypatch):
    """name-<UTC 2006-01-02T15-04-05.000>.ext; two rotations within one millisecond
    (a frozen clock) get the next millisecond, not the same name."""
    monkeypatch.setattr(time, "time", lambda: 1700000000.5)
    log = configure(tmp_path / "n.log", {"maxSize": 1, "maxBackups": 0, "compress": False})
    write(log, range(31))
    assert [p.name for p in backups(tmp_path)] == [
        "n-2023-11-14T22-13-20.500.log", "n-2023-11-14T22-13-20.501.log",
        "n-2023-11-14T22-13-20.502.log"]


def test_a_file_without_extension(tmp_path, small_mb):
    log = configure(tmp_path / "netattach", {"maxSize": 1, "compress": False})
    write(log, range(11))
    [old] = [p.name for p in tmp_path.iterdir() if p.name not in ("netattach", "netattach.lock")]
    assert re.fullmatch(r"netattach-\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d\.\d{3}", old)


# ---------------------------------------------------------------- maxBackups, defaults

def test_max_backups_keeps_the_newest(tmp_path, small_mb):
    log = configure(tmp_path / "n.log", {"maxSize": 1, "maxBackups": 2, "compress": False})
    lines = write(log, range(50))
    assert [lines_of(p) for p in backups(tmp_path)] == [lines[20:30], lines[30:40]]
    assert lines_of(tmp_path / "n.log") == lines[40:]


@pytest.mark.parametrize("options, kept", [
    ({"maxSize": 1, "compress": False}, 5),  # absent: Multus' 5
    ({"maxSize": 1, "maxBackups": 0, "compress": False}, 7),  # 0: lumberjack's "all"
])
def test_max_backups_absent_is_multus_5_and_0_keeps_all(tmp_path, small_mb, options, kept):
    write(configure(tmp_path / "n.log", options), range(75))
    assert len(backups(tmp_path)) == kept


@pytest.mark.parametrize("options, megabytes", [({"compress": False}, 100),
                                                 ({"maxSize": 0}, 100), ({"maxSize": 3}, 3)])
def test_max_size_absent_or_0_is_100_mb(tmp_path, small_mb, options, megabytes):
    (tmp_path / "n.log").write_bytes(b"." * (megabytes * 1000 - LINE - 1) + b"\n")
    log = configure(tmp_path / "n.log", options)
    write(log, ["fits"])
    assert backups(tmp_path) == []
    write(log, ["over"])
    assert len(backups(tmp_path)) == 1


def test_existing_backups_count_a_backup_and_its_gz_once(tmp_path, small_mb):
    """Backups another writer left (Multus' lumberjack, same names) are counted and
    pruned with ours; a half-compressed generation (plain and .gz) counts once."""
    three, two, one = stamp(3), stamp(2), stamp(1)  # once: a second may pass meanwhile
    for name in (f"n-{three}.log", f"n-{two}.log", f"n-{two}.log.gz", f"n-{one}.log.gz"):
        (tmp_path / name).write_text("old\n")
    log = configure(tmp_path / "n.log", {"maxSize": 1, "maxBackups": 3, "compress": False})
    write(log, range(11))
    names = [p.name for p in backups(tmp_path)]
    assert names[:3] == [f"n-{two}.log", f"n-{two}.log.gz", f"n-{one}.log.gz"]
    assert len(names) == 4  # those two generations and this rotation's


# ---------------------------------------------------------------- maxAge

def test_max_age_goes_by_the_time_in_the_name_not_the_mtime(tmp_path, small_mb):
    old, recent = tmp_path / f"n-{stamp(10)}.log", tmp_path / f"n-{stamp(2)}.log.gz"
    old.write_text("old\n")
    recent.write_bytes(gzip.compress(b"recent\n"))
    os.utime(old, (time.time(), time.time()))  # touched today: still 10 days old
    os.utime(recent, (0, 0))  # mtime 1970: still 2 days old
    log = configure(tmp_path / "n.log", {"maxSize": 1, "maxAge": 5, "maxBackups": 0,
                                         "compress": False})
    write(log, range(11))
    assert not old.exists() and recent.exists()
    assert len(backups(tmp_path)) == 2


@pytest.mark.parametrize("options, survives", [({"maxSize": 1, "compress": False}, False),
                                                ({"maxSize": 1, "maxAge": 0,
                                                  "compress": False}, True)])
def test_max_age_absent_is_multus_5_days_and_0_is_no_limit(tmp_path, small_mb, options,
                                                           survives):
    old = tmp_path / f"n-{stamp(6)}.log"
    old.write_text("old\n")
    write(configure(tmp_path / "n.log", options), range(11))
    assert old.exists() == survives


# ---------------------------------------------------------------- compress

def test_compress_gzips_backups_with_their_content(tmp_path, small_mb):
    log = configure(tmp_path / "n.log", {"maxSize": 1, "maxBackups": 0, "compress": True})
    lines = write(log, range(25))
    olds = backups(tmp_path)
    assert [p.suffix for p in olds] == [".gz", ".gz"]
    with gzip.open(olds[0]) as fh:  # a valid gzip stream, read to its end
        assert fh.read().decode().splitlines() == lines[:10]
    assert lines_of(olds[1]) == lines[10:20]
    assert {p.stat().st_mode & 0o777 for p in olds} == {0o600}
    assert sorted(os.listdir(tmp_path)) == sorted([p.name for p in olds] + ["n.log",
                                                                           "n.log.lock"])


def test_compress_also_gzips_backups_left_uncompressed(tmp_path, small_mb):
    left = tmp_path / f"n-{stamp(1)}.log"
    gz = tmp_path / f"{left.name}.gz"
    left.write_text("left\n")
    os.utime(left, (1_600_000_000, 1_600_000_000))
    write(configure(tmp_path / "n.log", {"maxSize": 1, "compress": True}), range(11))
    assert not left.exists() and lines_of(gz) == ["left"]
    assert gz.stat().st_mtime == 1_600_000_000  # the backup's time, not the compression's


def test_compressed_generation_replaced_only_if_not_pruned_meanwhile(tmp_path, small_mb):
    """A process compressing a backup that another one pruned meanwhile drops its copy
    instead of bringing the generation back."""
    log = configure(tmp_path / "n.log", {"maxSize": 1, "maxBackups": 0, "compress": False})
    write(log, range(11))
    [old] = backups(tmp_path)
    handler = logging.getLogger("netattach").handlers[0]
    real_gzip = handler._gzip

    def gzip_then_prune(src, st, temp, name):
        real_gzip(src, st, temp, name)
        old.unlink()  # what a pruning rotation under the lock does

    handler._gzip = gzip_then_prune
    handler._compress(old.name)
    assert backups(tmp_path) == [] and sorted(os.listdir(tmp_path)) == ["n.log", "n.log.lock"]


# ---------------------------------------------------------------- links, failures

def test_links_planted_at_backup_names_are_neither_followed_nor_removed(tmp_path, small_mb):
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    links = [tmp_path / f"n-{stamp(30)}.log", tmp_path / f"n-{stamp(31)}.log.gz"]
    for link in links:
        link.symlink_to(victim)
    log = configure(tmp_path / "n.log", {"maxSize": 1, "maxBackups": 1, "maxAge": 1,
                                         "compress": True})
    write(log, range(31))
    assert all(link.is_symlink() for link in links) and victim.read_text() == "keep\n"
    assert len([p for p in backups(tmp_path) if not p.is_symlink()]) == 1


def test_a_rotation_failure_is_said_once_and_every_line_is_written(tmp_path, small_mb,
                                                                   monkeypatch, capsys):
    def refuse(src, dst):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(logsetup.os, "rename", refuse)
    log = configure(tmp_path / "n.log", {"maxSize": 1})
    lines = write(log, range(30))
    err = capsys.readouterr().err
    assert err.count("cannot rotate log file") == 1, err
    assert f"cannot rotate log file {tmp_path}/n.log: Permission denied" in err
    written = lines_of(tmp_path / "n.log")
    assert [line for line in written if "cannot rotate" not in line] == lines
    assert sum("cannot rotate" in line for line in written) == 1


def test_a_symlinked_log_file_is_not_followed(tmp_path, small_mb, capsys):
    """Root never appends through a link planted at logFile: the lines go to stderr."""
    target = tmp_path / "real.log"
    (tmp_path / "n.log").symlink_to(target)
    lines = write(configure(tmp_path / "n.log", {"maxSize": 1}), range(3))
    err = capsys.readouterr().err
    assert f"cannot open log file {tmp_path}/n.log: Too many levels of symbolic links" in err
    assert all(line in err for line in lines)
    assert not target.exists() and backups(tmp_path) == []


def test_a_link_planted_at_the_lock_file_is_not_followed(tmp_path, small_mb, capsys):
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    (tmp_path / "n.log.lock").symlink_to(victim)
    lines = write(configure(tmp_path / "n.log", {"maxSize": 1}), range(15))
    assert "cannot open" in capsys.readouterr().err and victim.read_text() == "keep\n"
    assert [line for line in lines_of(tmp_path / "n.log") if "n.log.lock" not in line] == lines


def test_a_failed_write_is_said_once_and_goes_to_stderr(tmp_path, capsys, monkeypatch):
    log = configure(tmp_path / "n.log", None)

    def full(fd, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(logsetup.os, "write", full)
    log.info("one")
    log.info("two")
    err = capsys.readouterr().err
    assert err.count("cannot write log file") == 1 and "one\n" in err and "two\n" in err


# ---------------------------------------------------------------- processes

def test_a_writer_whose_file_was_rotated_by_another_follows_it(tmp_path, small_mb):
    """Two handlers on one path behave as two processes (each its own descriptors, and
    flock is per open file): the one that opened the file before the other rotated
    it appends to the new file, not to the backup, and does not rotate again."""
    options = {"maxSize": 1, "maxBackups": 0, "compress": False}
    path = str(tmp_path / "n.log")
    first = logsetup._RotatingHandler(path, logsetup._open_append(path), options,
                                      stderr_fallback=False)
    second = logsetup._RotatingHandler(path, logsetup._open_append(path), options,
                                       stderr_fallback=False)
    try:
        for n in range(10):
            first._append((record(f"a{n}") + "\n").encode())
        second._append((record("b") + "\n").encode())  # full: second rotates
        first._append((record("a10") + "\n").encode())
        [old] = backups(tmp_path)
        assert len(lines_of(old)) == 10
        assert lines_of(tmp_path / "n.log") == [record("b"), record("a10")]
    finally:
        first.close()
        second.close()


CHILD = """
import logging, json, sys
from netattach.node import logsetup
logsetup.MEGABYTE = 1000
path, proc, count, options = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
logsetup.setup_logging(path, "info", False, json.loads(options))
logging.getLogger("netattach").handlers[0].setFormatter(logging.Formatter("%(message)s"))
log = logging.getLogger("netattach.test")
sys.stdin.read()  # start together: the parent closes every stdin at once
for n in range(count):
    log.info(f"p{proc:02d} l{n:04d} ".ljust(99, "."))
"""

PROCS, EACH = 8, 100  # 800 records of 100 bytes: 80 files of exactly 10


def run_children(path: Path, options: dict) -> set[str]:
    """Run PROCS processes logging EACH records each to `path`; the records expected."""
    errors = [path.parent.parent / f"stderr{p}" for p in range(PROCS)]
    children = []
    for p, error in enumerate(errors):
        with open(error, "wb") as err:
            children.append(subprocess.Popen(
                [sys.executable, "-c", CHILD, str(path), str(p), str(EACH), json.dumps(options)],
                stdin=subprocess.PIPE, stderr=err))
    for child in children:
        child.stdin.close()
    assert [child.wait() for child in children] == [0] * PROCS
    assert [e.read_text() for e in errors] == [""] * PROCS
    return {f"p{p:02d} l{n:04d} ".ljust(99, ".") for p in range(PROCS) for n in range(EACH)}


@pytest.fixture
def log_dir(tmp_path):
    (tmp_path / "log").mkdir()
    return tmp_path / "log"


@pytest.mark.parametrize("compress", [False, True])
def test_processes_rotating_together_lose_and_repeat_no_line(log_dir, compress):
    """maxBackups 79 holds exactly the 79 backups 800 records make when every file is
    rotated once, at exactly 10 records: a generation rotated twice would make a short
    backup, one more backup and a pruned (lost) one."""
    expected = run_children(log_dir / "n.log", {"maxSize": 1, "maxBackups": 79,
                                                 "maxAge": 0, "compress": compress})
    olds = backups(log_dir)
    assert len(olds) == 79
    assert {p.suffix for p in olds} == ({".gz"} if compress else {".log"})
    files = olds + [log_dir / "n.log"]
    assert [len(lines_of(p)) for p in files] == [10] * 80
    seen = Counter(line for p in files for line in lines_of(p))
    assert set(seen) == expected and set(seen.values()) == {1}
    assert sorted(os.listdir(log_dir)) == sorted([p.name for p in files] + ["n.log.lock"])


@pytest.mark.parametrize("compress", [False, True])
def test_processes_rotating_together_keep_max_backups(log_dir, compress):
    expected = run_children(log_dir / "n.log", {"maxSize": 1, "maxBackups": 4,
                                                 "compress": compress})
    olds = backups(log_dir)
    assert len(olds) == 4
    files = olds + [log_dir / "n.log"]
    assert [len(lines_of(p)) for p in files] == [10] * 5
    seen = Counter(line for p in files for line in lines_of(p))
    assert set(seen) <= expected and set(seen.values()) == {1}
    assert sorted(os.listdir(log_dir)) == sorted([p.name for p in files] + ["n.log.lock"])
