"""`make bench`: scenario 1 (three networks) ADD + DEL, repeated, on the real test bed.

For each run a new pod and sandbox netns; `<binDir>/netattach` is exec'd as a
runtime does. It is a symlink to the executable under test: the built artifact
($NETATTACH_EXE, `make build`; `make bench` sets it) and the virtualenv's console
script take turns run by run, so a slow moment of the machine hits both alike
(the console script alone without NETATTACH_EXE). Reports, per executable, over the runs:
  ADD / DEL wall time (measured outside the process: what the runtime waits),
  time inside children (netattach's own timing log line),
  netattach's overhead (wall - children),
  API requests per ADD / DEL,
and the import cost of the exec'd path (`python -X importtime`).

Usage: hack/bench.py [RUNS]   (default 20)
"""
from __future__ import annotations

import dataclasses
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.testbed import cluster as cl  # noqa: E402
from tests.testbed import netns as tb  # noqa: E402
from tests.testbed import scenario as sc  # noqa: E402

TIMING = re.compile(r"timing: (\w+) took ([\d.]+) s, children ([\d.]+) s, api_requests (\d+)")


def timings(log: str, command: str) -> list[tuple[float, float, int]]:
    return [(float(m[2]), float(m[3]), int(m[4])) for m in TIMING.finditer(log) if m[1] == command]


def stats(values: list[float]) -> str:
    ms = sorted(v * 1000 for v in values)
    p90 = ms[min(len(ms) - 1, int(round(0.9 * (len(ms) - 1))))]
    return f"median {statistics.median(ms):7.1f} ms   p90 {p90:7.1f} ms   min {ms[0]:7.1f} ms"


def import_cost(module: str) -> float:
    """Cumulative import time (s) of `module` in a fresh interpreter (-X importtime)."""
    p = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {module}"],
                       capture_output=True, text=True, check=True)
    last = [l for l in p.stderr.splitlines() if l.rstrip().endswith(f"| {module}")][-1]
    return int(last.split("|")[1]) / 1e6


def subjects() -> list[tuple[str, str]]:
    """(label, executable) of each netattach under test: the artifact first when
    NETATTACH_EXE is set, then the virtualenv's console script."""
    venv = ("venv console script", sc.venv_command())
    if not os.environ.get("NETATTACH_EXE"):
        return [venv]
    return [(f"artifact {sc.netattach_command()}", sc.netattach_command()), venv]


def point(link: Path, target: str) -> None:
    """Make `link` a symlink to `target` (replaced atomically, as an installer does)."""
    tmp = link.with_name(link.name + ".new")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(target)
    os.replace(tmp, link)


def main() -> int:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    under_test = subjects()
    workdir = Path(tempfile.mkdtemp(prefix="netattach-bench-"))
    env = tb.new_host_env()
    wall = {(label, command): [] for label, _ in under_test for command in ("ADD", "DEL")}
    try:
        with cl.Cluster.start(workdir) as cluster, cluster.admin_api() as api:
            cl.apply_manifests(api, cl.DEPLOY_MANIFESTS)
            kubeconfig = cl.plugin_kubeconfig(cluster)
            sc.ensure_namespace(api, "bench")
            base = sc.setup(api, kubeconfig, env, "bench", pod_name="bench-0-0")
            for i in range(runs):
                for j, (label, exe) in enumerate(under_test):
                    point(base.bin_dir / "netattach", exe)
                    name = f"bench-{i}-{j}"
                    s = base if name == base.pod_name else dataclasses.replace(
                        base, pod_name=name, container_id=uuid.uuid4().hex * 2,
                        netns=env.new_netns(),
                        pod_uid=sc.create_pod(api, sc.pod("bench", name, base_networks())))
                    for command in ("ADD", "DEL"):
                        start = time.monotonic()
                        run = s.run(command)
                        wall[label, command].append(time.monotonic() - start)
                        if run.code != 0:
                            print(f"{label}: {command} failed: {run.stdout}\n{s.log_text()}",
                                  file=sys.stderr)
                            return 1
            log = base.log_text()
    finally:
        env.cleanup()
        shutil.rmtree(workdir, ignore_errors=True)

    print(f"\nnetattach bench: scenario 1 (bridge default network + macvlan/tuning conflist "
          f"+ bridge), {runs} runs per executable, taking turns")
    print(f"machine: {platform.node()} {platform.machine()}, {platform.system()} "
          f"{platform.release()}, Python {platform.python_version()}, "
          f"{subprocess.run(['nproc'], capture_output=True, text=True).stdout.strip()} CPUs")
    for j, (label, _) in enumerate(under_test):
        print(f"\n{label}\n")
        for command in ("ADD", "DEL"):
            # the log holds the calls in the order made: executable j made every
            # len(under_test)-th call of each command, starting at the j-th
            inner = timings(log, command)[j::len(under_test)]
            children = [c for _, c, _ in inner]
            overhead = [w - c for w, c in zip(wall[label, command], children)]
            print(f"{command} wall        {stats(wall[label, command])}")
            print(f"{command} children    {stats(children)}")
            print(f"{command} overhead    {stats(overhead)}   (wall - children)")
            print(f"{command} API requests per call: "
                  f"{statistics.median(a for _, _, a in inner):.0f}\n")
    print("virtualenv console script:")
    start = time.monotonic()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    print(f"interpreter start: {(time.monotonic() - start) * 1000:.0f} ms")
    for module in ("netattach.cli", "netattach.add", "jsonschema",
                   "lightkube.config.client_adapter"):
        cost = import_cost(module) * 1000
        print(f"import {module:<31} {cost:6.0f} ms (cumulative, -X importtime)")
    return 0


def base_networks() -> str:
    return "net-a,other/net-b@data0"


if __name__ == "__main__":
    sys.exit(main())
