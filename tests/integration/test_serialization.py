"""Spec §7.3: operations for the same container never overlap; different containers
proceed in parallel. Proven with a slow child that records when each call runs."""
from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path

from tests.testbed.statefiles import live
from tests.testbed.scenario import netattach_command

SLOW_PLUGIN = """#!/bin/sh
cat > /dev/null
echo "$CNI_COMMAND $CNI_CONTAINERID start $(date +%s.%N)" >> {log}
sleep 2
echo "$CNI_COMMAND $CNI_CONTAINERID end $(date +%s.%N)" >> {log}
if [ "$CNI_COMMAND" = ADD ]; then echo '{{"cniVersion": "1.0.0"}}'; fi
"""


def setup(tmp_path: Path) -> tuple[dict, Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"
    plugin = bin_dir / "slowrec"
    plugin.write_text(SLOW_PLUGIN.format(log=log))
    plugin.chmod(0o755)
    (tmp_path / "slow.conf").write_text(json.dumps(
        {"cniVersion": "1.0.0", "name": "slow", "type": "slowrec"}))
    conf = {"cniVersion": "1.0.0", "name": "na", "type": "netattach",
            "clusterNetwork": str(tmp_path / "slow.conf"), "binDir": str(bin_dir),
            "cniDir": str(tmp_path / "state"), "logToStderr": False}
    return conf, log


def invoke(conf: dict, command: str, container_id: str, netns: str) -> int:
    env = {"CNI_COMMAND": command, "CNI_CONTAINERID": container_id, "CNI_NETNS": netns,
           "CNI_IFNAME": "eth0", "CNI_PATH": "/usr/lib/cni", "PATH": "/usr/bin:/bin"}
    return subprocess.run([netattach_command()], input=json.dumps(conf).encode(), env=env,
                          capture_output=True, timeout=60).returncode


def intervals(log: Path) -> dict[tuple[str, str], tuple[float, float]]:
    marks: dict[tuple[str, str], dict[str, float]] = {}
    for line in log.read_text().splitlines():
        command, cid, what, when = line.split()
        marks.setdefault((command, cid), {})[what] = float(when)
    return {k: (v["start"], v["end"]) for k, v in marks.items()}


def run_concurrently(*calls) -> list[int]:
    codes = [None] * len(calls)

    def go(i, args):
        codes[i] = invoke(*args)

    threads = [threading.Thread(target=go, args=(i, c)) for i, c in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return codes


def test_same_container_is_serialized(tmp_path, host_env):
    conf, log = setup(tmp_path)
    ns = f"/var/run/netns/{host_env.new_netns()}"
    assert run_concurrently((conf, "ADD", "c1", ns), (conf, "DEL", "c1", ns)) == [0, 0]
    (a_start, a_end), (d_start, d_end) = intervals(log)[("ADD", "c1")], intervals(log)[("DEL", "c1")]
    assert a_end <= d_start or d_end <= a_start, "ADD and DEL of one container overlapped"
    assert live(tmp_path / "state") in ([], ["c1.json"])


def test_different_containers_run_in_parallel(tmp_path, host_env):
    conf, log = setup(tmp_path)
    ns1, ns2 = (f"/var/run/netns/{host_env.new_netns()}" for _ in range(2))
    assert run_concurrently((conf, "ADD", "c1", ns1), (conf, "ADD", "c2", ns2)) == [0, 0]
    (s1, e1), (s2, e2) = intervals(log)[("ADD", "c1")], intervals(log)[("ADD", "c2")]
    assert s1 < e2 and s2 < e1, "ADDs of different containers did not overlap"
    assert run_concurrently((conf, "DEL", "c1", ns1), (conf, "DEL", "c2", ns2)) == [0, 0]
    assert live(tmp_path / "state") == []
