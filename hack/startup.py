"""Start-up time of netattach executables, as a runtime execs them.

Usage: hack/startup.py [--runs N] [--add] EXECUTABLE...

Default: CNI VERSION (a config on stdin, no files, no children): the cost of
starting the executable and importing cli.py. --add: a CNI ADD for a pod whose API
server refuses connections (https://127.0.0.1:1, kubeconfig with inline CA data),
answered with error 11: the whole ADD import path (lightkube, httpx2, ssl) plus
the refused requests, with no netns or children.

Wall time from fork to exit is measured here; the executables take turns (run 1 of
each, then run 2 of each, ...) so a slow moment of the machine hits all alike.
After 3 warm-up runs each, prints median, p90 and min per executable. The numbers
in docs/build.md come from this script.
"""
from __future__ import annotations

import argparse
import base64
import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import certifi

PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
VERSION = ({"CNI_COMMAND": "VERSION", "PATH": PATH}, b'{"cniVersion": "1.0.0"}', 0)


def api_refused_add(workdir: Path, seen_as: Path | None = None,
                    ) -> tuple[dict[str, str], bytes, int]:
    """(environment, stdin, expected exit status) of the --add case; files in workdir, which
    the executable sees as `seen_as` (default: workdir; another path when it runs chrooted)."""
    pem = Path(certifi.where()).read_text().split("-----END CERTIFICATE-----")[0]
    ca = base64.b64encode((pem + "-----END CERTIFICATE-----\n").encode()).decode()
    kubeconfig = workdir / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1",
                                               "certificate-authority-data": ca}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    seen = seen_as or workdir
    conf = {"cniVersion": "1.0.0", "name": "n", "type": "netattach",
            "kubeconfig": str(seen / "kubeconfig"), "clusterNetwork": "/nonexistent/10-x.conf",
            "cniDir": str(seen / "state"), "logFile": str(seen / "log"),
            "logToStderr": False}
    env = {"PATH": PATH, "CNI_COMMAND": "ADD", "CNI_CONTAINERID": "startup",
           "CNI_NETNS": "/var/run/netns/none", "CNI_IFNAME": "eth0", "CNI_PATH": "/opt/cni/bin",
           "CNI_ARGS": "K8S_POD_NAMESPACE=a;K8S_POD_NAME=b;K8S_POD_INFRA_CONTAINER_ID=startup"}
    return env, json.dumps(conf).encode(), 1


def run_once(exe: str, case: tuple[dict[str, str], bytes, int]) -> float:
    """Seconds from exec to exit of one call; raises RuntimeError when the executable
    exits with another status than the case expects."""
    env, stdin, status = case
    start = time.perf_counter()
    p = subprocess.run([exe], input=stdin, env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - start
    if p.returncode != status:
        raise RuntimeError(f"{exe} exited {p.returncode}: {p.stderr.decode()[-2000:]}")
    return elapsed


def summary(seconds: list[float]) -> str:
    ms = sorted(s * 1000 for s in seconds)
    p90 = ms[min(len(ms) - 1, int(round(0.9 * (len(ms) - 1))))]
    return f"median {statistics.median(ms):6.1f} ms   p90 {p90:6.1f} ms   min {ms[0]:6.1f} ms"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--add", action="store_true", help="API-refused ADD instead of VERSION")
    parser.add_argument("executables", nargs="+")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="netattach-startup-") as workdir:
        case = api_refused_add(Path(workdir)) if args.add else VERSION
        times: dict[str, list[float]] = {exe: [] for exe in args.executables}
        for exe in args.executables:
            for _ in range(3):
                run_once(exe, case)
        for _ in range(args.runs):
            for exe in args.executables:
                times[exe].append(run_once(exe, case))
    width = max(len(e) for e in args.executables)
    for exe, seconds in times.items():
        print(f"{exe:<{width}}  {summary(seconds)}   ({args.runs} runs)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
