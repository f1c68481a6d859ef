"""Thick mode in the test bed: `netattach daemon` (the built artifact) as a process of the
test, and the shim beside the thin plugin in a test's bin dir (install_shim).

    d = NodeDaemon.start(command, env, kubeconfig)   # returns once /readyz answers 200
    ...; d.kill() / d.stop(); d.restart()

The daemon's node is "test-node" (scenario.pod's spec.nodeName); its socket dir is
`<env.root>/run`, its state dir (--cni-dir) the scenario's cniDir, its log the scenario's (`<env.log_dir>/netattach.log`), so the
tests read one log whichever mode ran a call. Nothing here asserts a duration: every
wait polls for its condition, with a generous hang guard.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from .cluster import free_port
from .netns import HostEnv

NODE_NAME = "test-node"
START_TIMEOUT = 120.0  # hang guard: the daemon listed both caches and listens
STOP_TIMEOUT = 60.0


def install_shim(bin_dir: Path, netattach: str) -> Path:
    """`<bin_dir>/netattach-shim` for the artifact `netattach`, as `netattach install`
    puts it in a host's bin dir: the script its installer writes
    (netattach.install.binary.shim_script), naming the artifact's own interpreter
    (dist/netattach/shim/bin/python3 beside a frozen build); for a virtualenv's
    `netattach`, a symlink to the `netattach-shim` console script beside it."""
    from netattach.install.binary import SHIM_PYTHON, shim_script
    shim = bin_dir / "netattach-shim"
    shim.unlink(missing_ok=True)
    python = Path(netattach).resolve().parent / SHIM_PYTHON
    script = Path(netattach).parent / "netattach-shim"
    if python.is_file() and os.access(python, os.X_OK):
        shim.write_bytes(shim_script(str(python)))
        shim.chmod(0o755)
    elif script.is_file() and os.access(script, os.X_OK):
        shim.symlink_to(script)
    else:
        raise RuntimeError(f"no netattach-shim for {netattach}: run `make build` (or `make venv`)")
    return shim


@dataclass
class NodeDaemon:
    """A running `netattach daemon` of one test."""
    command: str
    socket_dir: Path
    log_file: Path
    kubeconfig: Path
    metrics_port: int
    cni_dir: Path
    # the tests' flags: debug logs to read after a failure, a pool smaller than the
    # 20-pod tests so calls queue; the bench passes what deploy/thick runs
    flags: tuple[str, ...] = ("--log-level", "debug", "--max-parallel", "4")
    proc: subprocess.Popen | None = None

    @classmethod
    def start(cls, command: str, env: HostEnv, kubeconfig: Path,
              flags: tuple[str, ...] | None = None) -> NodeDaemon:
        """flags: the daemon's flags after the test bed's paths (default `flags` above)."""
        d = cls(command, env.root / "run", env.log_dir / "netattach.log", kubeconfig,
                free_port(), env.state_dir)
        if flags is not None:
            d.flags = flags
        d.launch()
        return d

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def argv(self) -> list[str]:
        return [self.command, "daemon", "--node-name", NODE_NAME, "--kubeconfig",
                str(self.kubeconfig), "--socket-dir", str(self.socket_dir), "--cni-dir",
                str(self.cni_dir), "--metrics-port",
                str(self.metrics_port), "--log-file", str(self.log_file), *self.flags]

    def launch(self) -> None:
        """Start the process and wait until /readyz says ready (hang guard START_TIMEOUT)."""
        with open(self.stderr_file, "ab") as err:  # never a pipe nobody reads
            self.proc = subprocess.Popen(self.argv(), stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=err)
        deadline = time.monotonic() + START_TIMEOUT
        while self.endpoint("/readyz")[0] != 200:
            if self.proc.poll() is not None:
                raise RuntimeError(f"netattach daemon exited {self.proc.returncode}: "
                                   f"{self.stderr_file.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"netattach daemon not ready after {START_TIMEOUT:.0f} s")
            time.sleep(0.05)

    @property
    def stderr_file(self) -> Path:
        return self.log_file.parent / "daemon.stderr"

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def endpoint(self, path: str) -> tuple[int, str]:
        """(HTTP status, body) of GET <path> on the daemon's local port; (0, why) when it
        does not answer."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}{path}",
                                        timeout=10) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()
        except (urllib.error.URLError, OSError) as e:
            return 0, str(e)

    def metric(self, name: str, **labels: str) -> float:
        """The value of one sample of /metrics (0 when absent)."""
        status, text = self.endpoint("/metrics")
        assert status == 200, text
        want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        pattern = re.escape(name) + (r"\{" + re.escape(want) + r"\}" if want else "") + r" (\S+)"
        m = re.search("^" + pattern + "$", text, re.M)
        return float(m.group(1)) if m else 0.0

    def wait_writes_sent(self, timeout: float = 120.0) -> None:
        """Until no queued network-status PATCH or Event is waiting or being sent
        (`timeout` is a hang guard)."""
        deadline = time.monotonic() + timeout
        while self.metric("netattach_publish_pending") != 0:
            if time.monotonic() > deadline:
                raise AssertionError(f"queued writes still pending after {timeout:.0f} s")
            time.sleep(0.05)

    def wait_cache_event(self, kind: str, namespace: str, name: str, event: str,
                         timeout: float = 120.0, resource_version: str | None = None) -> None:
        """Until the daemon's watch of `kind` ("Pod", "NetworkAttachmentDefinition")
        delivered `event` (ADDED, MODIFIED, DELETED) of namespace/name (its debug line;
        `timeout` is a hang guard); with `resource_version`, that version of it (e.g.
        the one an annotation PATCH returned: scenario.patch_pod_annotations)."""
        line = f"cache {kind} {namespace}/{name} {event} "
        if resource_version is not None:
            line += f"(resourceVersion {resource_version})"
        deadline = time.monotonic() + timeout
        while line not in self.log_text():
            if time.monotonic() > deadline:
                raise AssertionError(f"the daemon's watch did not deliver {kind} "
                                     f"{namespace}/{name} {event} within {timeout:.0f} s")
            time.sleep(0.05)

    def stop(self) -> None:
        """SIGTERM, and wait for the exit (hang guard STOP_TIMEOUT, then SIGKILL)."""
        if not self.running():
            return
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"netattach daemon ignored SIGTERM for {STOP_TIMEOUT:.0f} s") from None

    def kill(self) -> None:
        """SIGKILL (a crash), and reap it."""
        if self.running():
            assert self.proc is not None
            self.proc.kill()
            self.proc.wait(STOP_TIMEOUT)

    def restart(self) -> None:
        self.stop()
        self.launch()

    def log_text(self) -> str:
        return self.log_file.read_text() if self.log_file.exists() else ""
