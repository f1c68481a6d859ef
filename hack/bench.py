"""`make bench`: netattach side by side with Multus and with the child plugins alone, on
the real test bed (kube-apiserver + etcd with an audit log, real plugins, real netns).

Subjects (hack/benchlib/subjects.py): netattach thin (the built artifact,
$NETATTACH_EXE), netattach thick (skipped, with a note, while the build has no
`netattach daemon`), Multus thin, Multus thick (daemon + shim), and the children alone
(each network's config exec'd by cnitool: the floor). Every measurement runs in rounds,
A B C D A B C D ..., so a slow moment of the machine hits all alike:
  * scenario 1 (README) ADD and DEL: wall time as the runtime waits, CPU of the process
    tree (and of the daemon, in thick mode), peak RSS of the exec'd ADD;
  * N = 1, 2, 4, 8 selected NADs: ADD wall per N, and a least-squares line through the
    medians: fixed cost and cost per network;
  * 20 pods ADD in parallel, then DEL in parallel: total wall, CPU per pod;
  * VERSION exec of each executable, and of the Go `bridge` plugin;
  * STATUS exec of each meta-plugin as containerd runs it at every CRI Status call
    (config at cniVersion 1.1.0, the cluster default network below: nothing to
    forward); a Multus mode that refuses it is reported as failing, not measured;
  * API requests per ADD and per DEL, counted in the API server's audit log by the
    subject's user, between its calls;
  * the daemons' RSS: idle, after 20 pods, with 110 pods and 500 NADs in the API server.
Each ADD must give the pod its interfaces with addresses in the right subnets and (a
meta-plugin) the network-status annotation naming them; the DEL comes once the ADD's API
writes are all sent (netattach thick sends its PATCH and Events after answering the
runtime: its daemon's queue is waited for), as on a node, where a pod outlives them. Each
DEL must leave only lo, no IP allocation and no state: a subject that fails stops the bench
with an error, never a number. Prints the table and the ratios netattach / Multus, and
writes bench-results.json and bench-results.md to --out (default build/bench/). Ends
with the import cost of the exec'd path (`python -X importtime`) and proof that nothing
is left behind.

Usage: hack/bench.py [--out DIR] [--only KEY,...] [RUNS]   (RUNS: rounds, default $RUNS or 15)
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "hack"))

from benchlib import measure, multus, profile, report  # noqa: E402
from benchlib.subjects import Attachment, Bed, Floor, Pod, Subject, all_subjects  # noqa: E402
from kubernetes import client as k8s  # noqa: E402

# the test bed (testbed/), installed into .venv by `make venv`
from netattach_testbed import cluster as cl  # noqa: E402
from netattach_testbed import netns as tb  # noqa: E402
from netattach_testbed import scenario as sc  # noqa: E402

NAMESPACE = "bench"
LOAD_NAMESPACE = "bench-load"
SCENARIO_1 = [Attachment("cluster-net", "eth0", sc.SUBNETS["default"]),
              Attachment("net-a", "net1", sc.SUBNETS["net-a"]),
              Attachment("net-b", "data0", sc.SUBNETS["net-b"])]
SCENARIO_1_NETWORKS = "net-a,other/net-b@data0"
SWEEP = (1, 2, 4, 8)
PARALLEL_PODS = 20
PARALLEL_REPEATS = 2  # rounds of one subject measured again after calls failed
LOAD_PODS, LOAD_NADS = 110, 500
PEAK_RSS_ROUNDS = 5
STATUS_ANNOTATION = "k8s.v1.cni.cncf.io/network-status"
STATUS_TIMEOUT = 30.0  # hang guard: seconds for an ADD's network-status to appear
SETTLE = 1.0  # s for a daemon to take in the watch events of pods just created


class Failure(Exception):
    """A subject did not do what the runtime asked: the bench stops, no number is kept."""


class CallsFailed(Failure):
    """Some of a round's parallel CNI calls failed (`Bench.at_once`): the round is
    measured again (at most PARALLEL_REPEATS times per subject in a run), and the
    failure is reported with the results."""


def sweep_attachments(n: int) -> list[Attachment]:
    """The cluster default network, then NADs n1..n<n> (one macvlan each) as net1..net<n>."""
    return SCENARIO_1[:1] + [Attachment(f"n{i}", f"net{i}", f"198.18.{10 + i}.0/24")
                             for i in range(1, n + 1)]


class Bench:
    def __init__(self, bed: Bed, api: k8s.ApiClient, subjects: list[Subject], runs: int,
                 parallel_pods: int = PARALLEL_PODS,
                 load: tuple[int, int] = (LOAD_PODS, LOAD_NADS)):
        self.bed, self.api, self.subjects, self.runs = bed, api, subjects, runs
        self.parallel_pods, (self.load_pods, self.load_nads) = parallel_pods, load
        self.core = k8s.CoreV1Api(api)
        self.names = itertools.count()
        self.results: dict[str, Any] = {}
        # (subject key, command, Exec) of scenario 1, for the audit windows
        self.scenario_calls: list[tuple[str, str, measure.Exec]] = []

    # -- pods

    def pod(self, attachments: list[Attachment], networks: str) -> Pod:
        """A new pod in the API server and its sandbox netns."""
        name = f"p{next(self.names)}"
        uid = sc.create_pod(self.api, sc.pod(NAMESPACE, name, networks))
        return Pod(dataclasses.replace(self.bed.base, pod_name=name,
                                       pod_uid=uid, container_id=uuid.uuid4().hex * 2,
                                       netns=self.bed.env.new_netns()), attachments)

    def drop(self, pod: Pod) -> None:
        """Remove the pod's netns and the pod (once its DEL is checked)."""
        tb.run("ip", "netns", "del", pod.s.netns)
        self.bed.env.netns.remove(pod.s.netns)
        self.core.delete_namespaced_pod(pod.s.pod_name, pod.s.namespace, grace_period_seconds=0)

    # -- one call, checked

    def call(self, subject: Subject, pod: Pod, command: str,
             prefix: list[str] | None = None) -> measure.Exec:
        """ADD or DEL of `pod` by `subject`; its daemon's CPU during the call is added."""
        before = measure.proc_cpu(subject.pid) if subject.pid else 0.0
        e = subject.run(pod, command, prefix or [])
        if subject.pid:
            e.cpu += measure.proc_cpu(subject.pid) - before
        if e.code != 0:
            raise Failure(f"{subject.label}: {command} of {pod.s.pod_name} exited {e.code}:\n"
                          f"{e.stdout[-3000:]}{e.stderr[-3000:]}")
        return e

    def check_added(self, subject: Subject, pod: Pod) -> None:
        addrs = tb.addresses_by_link(pod.s.netns)
        want = {"lo"} | {a.ifname for a in pod.attachments}
        wrong = [a.ifname for a in pod.attachments
                 if not any(sc.in_subnet(c, a.subnet) for c in addrs.get(a.ifname, []))]
        if set(addrs) != want or wrong:
            raise Failure(f"{subject.label}: after ADD of {pod.s.pod_name} the netns has "
                          f"{addrs}; expected {sorted(want)} with addresses in "
                          f"{[(a.ifname, a.subnet) for a in pod.attachments]}")
        self.check_status_written(subject, pod)

    def check_status_written(self, subject: Subject, pod: Pod) -> None:
        """Once the subject's writes of the ADD are sent (netattach thick sends its
        network-status PATCH and Events after answering the runtime, Multus before), the
        pod's network-status annotation names every interface of its ADD. Also what keeps
        a DEL from meeting an ADD's writes still being sent: on a node the DEL comes when
        the pod ends, long after. The children alone write none."""
        if isinstance(subject, Floor):
            return
        subject.wait_writes_sent()
        want = {a.ifname for a in pod.attachments}
        deadline = time.monotonic() + STATUS_TIMEOUT
        while True:
            obj = self.core.read_namespaced_pod(pod.s.pod_name, pod.s.namespace)
            text = (obj.metadata.annotations or {}).get(STATUS_ANNOTATION)
            got = {e.get("interface") for e in json.loads(text)} if text else set()
            if want <= got:
                return
            if time.monotonic() > deadline:
                raise Failure(f"{subject.label}: {STATUS_TIMEOUT:.0f} s after the ADD of "
                              f"{pod.s.pod_name}, its {STATUS_ANNOTATION} names {sorted(got)}, "
                              f"not {sorted(want)}")
            time.sleep(0.02)

    def check_deleted(self, subject: Subject, pods: list[Pod]) -> None:
        left = [f"{p.s.pod_name}: {sorted(tb.addresses_by_link(p.s.netns))}" for p in pods
                if set(tb.addresses_by_link(p.s.netns)) != {"lo"}]
        left += [f"IP allocation {a}" for a in self.bed.env.ipam_allocations()]
        left += [x for p in pods for x in subject.leftovers(p)]
        if left:
            raise Failure(f"{subject.label}: DEL left {left}")

    def cycle(self, subject: Subject, attachments: list[Attachment], networks: str,
              prefix: list[str] | None = None) -> tuple[measure.Exec, measure.Exec]:
        """One pod, ADD (checked; `prefix` before its argv) then DEL (checked); the pod is
        gone afterwards."""
        pod = self.pod(attachments, networks)
        try:
            add = self.call(subject, pod, "ADD", prefix or [])
            self.check_added(subject, pod)
            delete = self.call(subject, pod, "DEL")
            self.check_deleted(subject, [pod])
        finally:
            self.drop(pod)
        return add, delete

    # -- the measurements

    def version(self) -> None:
        exes = [(label, path) for s in self.subjects for label, path in s.executables()]
        walls: dict[str, list[float]] = {label: [] for label, _ in exes}
        for _ in range(self.runs):
            for label, path in exes:
                e = measure.spawn([path], {"CNI_COMMAND": "VERSION", "PATH": os.environ["PATH"]},
                                  b'{"cniVersion": "1.0.0"}')
                if e.code != 0 or "supportedVersions" not in e.stdout:
                    raise Failure(f"VERSION of {path} exited {e.code}: {e.stdout}{e.stderr}")
                walls[label].append(e.wall)
        self.results["version"] = {"executables": {label: path for label, path in exes},
                                   "wall": walls}

    def status(self) -> None:
        """STATUS exec of each meta-plugin, as containerd runs it at every CRI Status call:
        only CNI_COMMAND and CNI_PATH, the subject's config at cniVersion 1.1.0 (libcni
        execs STATUS only from 1.1.0 on), the cluster default network below 1.1.0 (as
        scenario 1's: nothing to forward)."""
        subjects = [s for s in self.subjects if getattr(s, "conf", None)]  # the floor has none
        walls: dict[str, list[float]] = {s.key: [] for s in subjects}
        failed: dict[str, str] = {}  # Multus' refusals are a result, netattach's a failure
        env = {"CNI_COMMAND": "STATUS", "PATH": os.environ["PATH"],
               "CNI_PATH": self.bed.base.cni_env("STATUS")["CNI_PATH"]}
        for _ in range(self.runs):
            for s in subjects:
                if s.key in failed:
                    continue
                e = measure.spawn([str(s.exe)], env,
                                  json.dumps(dict(s.conf, cniVersion="1.1.0")).encode())
                if e.code == 0 and not e.stdout.strip():
                    walls[s.key].append(e.wall)
                elif s.key.startswith("multus"):
                    failed[s.key] = f"exit {e.code}: {e.stdout.strip()[:300]}"
                    print(f"note: STATUS of {s.label} fails: {failed[s.key]}", flush=True)
                    del walls[s.key]
                else:
                    raise Failure(f"STATUS of {s.label} exited {e.code}: {e.stdout}{e.stderr}")
        self.results["status"] = walls
        self.results["status_failed"] = failed

    def profile(self) -> None:
        """netattach thin's scenario-1 ADD and DEL under py-spy (`--idle`: waits
        included), every round's stacks summed (benchlib/profile.py); each call still
        checked. Not timed: py-spy's own start is in the wall time."""
        spy = Path(sys.executable).parent / "py-spy"
        if not os.access(spy, os.X_OK):
            raise Failure(f"no {spy}: `make bench PROFILE=1` installs py-spy")
        out_dir = self.bed.workdir / "profile"
        out_dir.mkdir(exist_ok=True)
        out: dict[str, Any] = {}
        for s in (s for s in self.subjects if s.key == "netattach_thin"):
            files: dict[str, list[Path]] = {"ADD": [], "DEL": []}
            for i in range(self.runs):
                pod = self.pod(SCENARIO_1, SCENARIO_1_NETWORKS)
                try:
                    for command in ("ADD", "DEL"):
                        f = out_dir / f"{s.key}-{command}-{i}.txt"
                        self.call(s, pod, command, [str(spy), "record", "--idle", "--rate",
                                                    "1000", "--format", "raw", "--output",
                                                    str(f), "--"])
                        files[command].append(f)
                        if command == "ADD":
                            self.check_added(s, pod)
                    self.check_deleted(s, [pod])
                finally:
                    self.drop(pod)
            out[s.key] = {c: profile.summary(profile.load(fs)) for c, fs in files.items()}
            for c in ("ADD", "DEL"):
                print(profile.text(f"{s.label} {c}, {self.runs} runs", out[s.key][c]), "\n")
        self.results["profile"] = out

    def scenario_1(self) -> None:
        out: dict[str, Any] = {s.key: {c: {"wall": [], "cpu": []} for c in ("ADD", "DEL")}
                               for s in self.subjects}
        for _ in range(self.runs):
            for s in self.subjects:
                calls = self.cycle(s, SCENARIO_1, SCENARIO_1_NETWORKS)
                for command, e in zip(("ADD", "DEL"), calls):
                    for field in ("wall", "cpu"):
                        out[s.key][command][field].append(getattr(e, field))
                    self.scenario_calls.append((s.key, command, e))
        self.results["scenario_1"] = out
        self.scenario_end = time.time()

    def peak_rss(self) -> None:
        """Peak RSS of scenario 1's exec'd ADD (the largest process of its tree; in thick
        mode the shim's), PEAK_RSS_ROUNDS rounds: a separate pass, since the measuring
        wrapper (GNU time) must not be in the wall times. Without GNU time (`make bench`
        installs it), a note instead."""
        if not os.access(measure.PeakRss.TIME, os.X_OK):
            print(f"note: peak RSS not measured: no {measure.PeakRss.TIME} (Debian's `time`)")
            return
        out: dict[str, list[int]] = {s.key: [] for s in self.subjects}
        for _ in range(min(self.runs, PEAK_RSS_ROUNDS)):
            for s in self.subjects:
                with tempfile.NamedTemporaryFile("r") as f:
                    peak = measure.PeakRss(f.name)
                    self.cycle(s, SCENARIO_1, SCENARIO_1_NETWORKS, peak.prefix)
                    out[s.key].append(peak.kib())
        self.results["peak_rss_kib"] = out

    def sweep(self) -> None:
        for i in range(1, max(SWEEP) + 1):
            sc.apply_nad(self.api, sc.nad(NAMESPACE, f"n{i}", {
                "cniVersion": "1.0.0", "name": f"n{i}", "type": "macvlan",
                "master": self.bed.base.master, "mode": "bridge",
                "ipam": {"type": "host-local", "subnet": sweep_attachments(i)[-1].subnet,
                         "dataDir": str(self.bed.env.ipam_dir)}}))
        write_floor_confs(self.bed, self.api)
        walls: dict[str, dict[int, list[float]]] = {s.key: {n: [] for n in SWEEP}
                                                     for s in self.subjects}
        for _ in range(self.runs):
            for n in SWEEP:
                networks = ",".join(f"n{i}" for i in range(1, n + 1))
                for s in self.subjects:
                    walls[s.key][n].append(self.cycle(s, sweep_attachments(n), networks)[0].wall)
        self.results["sweep"] = walls

    def parallel(self) -> None:
        out: dict[str, Any] = {s.key: {c: {"wall": [], "cpu_per_pod": []} for c in ("ADD", "DEL")}
                               for s in self.subjects}
        self.results["daemon_rss_kib"] = rss = self.results.setdefault("daemon_rss_kib", {})
        repeated = self.results.setdefault("repeated", {})
        for r in range(self.runs):
            for s in self.subjects:
                while True:
                    try:
                        walls = self.parallel_round(s, last=r == self.runs - 1)
                        break
                    except CallsFailed as e:
                        # Under 20 pods at once, a subject's call can fail (Multus thin
                        # once timed out waiting for its pod GET): the round is measured
                        # again, and the failure goes into the results, never silently.
                        repeated.setdefault(s.key, []).append(f"round {r + 1}: {e}"[:600])
                        if len(repeated[s.key]) > PARALLEL_REPEATS:
                            raise
                        print(f"bench: {s.label}: round {r + 1} measured again: "
                              f"{str(e)[:300]}", flush=True)
                for command, (wall, cpu) in walls.items():
                    out[s.key][command]["wall"].append(wall)
                    out[s.key][command]["cpu_per_pod"].append(cpu / self.parallel_pods)
                if s.pid and r == self.runs - 1:
                    rss.setdefault(s.key, {})["after_20_pods"] = self.rss_after_add
        self.results["parallel"] = out

    def parallel_round(self, s: Subject, last: bool) -> dict[str, tuple[float, float]]:
        """ADD then DEL of --parallel-pods new pods at once: command -> (total wall, CPU).
        Raises CallsFailed (after DEL-ing every pod, so nothing is left) when calls
        failed, Failure when what the calls left is wrong."""
        pods = [self.pod(SCENARIO_1, SCENARIO_1_NETWORKS) for _ in range(self.parallel_pods)]
        walls = {}
        try:
            if s.pid:
                time.sleep(SETTLE)
            for command in ("ADD", "DEL"):
                try:
                    walls[command] = self.at_once(s, pods, command)
                except CallsFailed:
                    for p in pods:  # the runtime's cleanup; a DEL must succeed
                        self.call(s, p, "DEL")
                    self.check_deleted(s, pods)
                    raise
                if command == "ADD":
                    for p in pods:
                        self.check_added(s, p)
                    if s.pid and last:
                        self.rss_after_add = measure.proc_rss_kib(s.pid)
            self.check_deleted(s, pods)
        finally:
            for p in pods:
                self.drop(p)
        return walls

    def at_once(self, subject: Subject, pods: list[Pod], command: str) -> tuple[float, float]:
        """`command` of every pod at the same moment, one thread each: (total wall, CPU
        of every process tree plus the daemon's)."""
        gate = threading.Barrier(len(pods) + 1)

        def one(pod: Pod) -> measure.Exec:
            gate.wait()
            return subject.run(pod, command)

        before = measure.proc_cpu(subject.pid) if subject.pid else 0.0
        with ThreadPoolExecutor(len(pods)) as pool:
            futures = [pool.submit(one, p) for p in pods]
            gate.wait()
            t0 = time.monotonic()
            runs = [f.result() for f in futures]
            wall = time.monotonic() - t0
        cpu = sum(e.cpu for e in runs)
        if subject.pid:
            cpu += measure.proc_cpu(subject.pid) - before
        failed = [(p.s.pod_name, e) for p, e in zip(pods, runs) if e.code != 0]
        if failed:
            name, e = failed[0]
            raise CallsFailed(f"{subject.label}: {len(failed)} of {len(pods)} parallel {command}s "
                          f"failed; {name}: {e.stdout[-2000:]}{e.stderr[-2000:]}")
        return wall, cpu

    def daemons_idle(self) -> None:
        self.results["daemon_rss_kib"] = {s.key: {"idle": measure.settled_rss_kib(s.pid)}
                                          for s in self.subjects if s.pid}

    def loaded(self) -> None:
        """--load pods on the node and NADs in the API server (110 and 500); each daemon's
        RSS once it took them in and attached one more pod."""
        daemons = [s for s in self.subjects if s.pid]
        if not daemons:
            return
        sc.ensure_namespace(self.api, LOAD_NAMESPACE)
        objects = k8s.CustomObjectsApi(self.api)
        config = sc.net_a_conflist(self.bed.base.master, self.bed.env.ipam_dir)
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda i: objects.create_namespaced_custom_object(
                cl.NAD_GROUP, cl.NAD_VERSION, LOAD_NAMESPACE, cl.NAD_PLURAL,
                sc.nad(LOAD_NAMESPACE, f"load-{i}", dict(config, name=f"load-{i}"))),
                range(self.load_nads)))
            list(pool.map(lambda i: sc.create_pod(self.api, sc.pod(
                LOAD_NAMESPACE, f"load-{i}", "net-a")), range(self.load_pods)))
        for s in daemons:
            self.cycle(s, SCENARIO_1, SCENARIO_1_NETWORKS)
            self.results["daemon_rss_kib"][s.key]["loaded"] = measure.settled_rss_kib(s.pid)

    def api_requests(self, events: list[dict]) -> None:
        """Requests per scenario-1 ADD and DEL, by the subject's user, from the audit log.

        A call's window runs from its start to the start of the subject's next call (the
        last one's to the end of scenario 1), so requests a daemon or the plugin sends
        after answering the runtime (events) count where they belong. A daemon's list and
        watch (its caches) are counted apart, over the whole run."""
        by_user: dict[str, list[tuple[float, str, str]]] = {}
        denied = []
        for ev in events:
            user = ev.get("user", {}).get("username", "")
            ref = ev.get("objectRef", {})
            what = "/".join(x for x in (ref.get("resource"), ref.get("subresource")) if x)
            at = dt.datetime.fromisoformat(ev["requestReceivedTimestamp"]).timestamp()
            by_user.setdefault(user, []).append((at, ev.get("verb", ""), what))
            if ev.get("responseStatus", {}).get("code") == 403:
                denied.append((user, ev.get("verb"), what))
        out: dict[str, Any] = {}
        for s in self.subjects:
            if s.user is None or s.skipped:
                continue
            denied_here = [d for d in denied if d[0] == s.user]
            if denied_here:
                raise Failure(f"{s.label}: the API server denied {sorted(set(denied_here))}")
            calls = [(c, e.started) for key, c, e in self.scenario_calls if key == s.key]
            ends = [t for _, t in calls[1:]] + [self.scenario_end]
            mine = by_user.get(s.user, [])
            per: dict[str, Any] = {"ADD": [], "DEL": [], "ADD_kinds": Counter(),
                                   "DEL_kinds": Counter()}
            for (command, start), end in zip(calls, ends):
                kinds = [f"{verb} {what}" for at, verb, what in mine
                         if start <= at < end and verb not in ("list", "watch")]
                per[command].append(len(kinds))
                per[f"{command}_kinds"].update(kinds)
            for command in ("ADD", "DEL"):
                n, kinds = len(per[command]) or 1, per[f"{command}_kinds"]
                per[f"{command}_kinds"] = {k: v / n for k, v in sorted(kinds.items())}
            per["cache"] = dict(Counter(f"{verb} {what}" for _, verb, what in mine
                                        if verb in ("list", "watch")))
            out[s.key] = per
        self.results["api_requests"] = out


def write_floor_confs(bed: Bed, api: k8s.ApiClient) -> None:
    """The floor's conf dir: the cluster default network's file, and every NAD's
    spec.config as the API server holds it, named as a meta-plugin names it (§3.4.2)."""
    bed.floor_dir.mkdir(exist_ok=True)
    shutil.copy(bed.base.netconf["clusterNetwork"], bed.floor_dir / "cluster-net.conf")
    objects = k8s.CustomObjectsApi(api)
    for ns in (NAMESPACE, sc.OTHER_NS):
        for item in objects.list_namespaced_custom_object(
                cl.NAD_GROUP, cl.NAD_VERSION, ns, cl.NAD_PLURAL)["items"]:
            name = item["metadata"]["name"]
            config = dict(json.loads(item["spec"]["config"]), name=name)
            ext = ".conflist" if "plugins" in config else ".conf"
            (bed.floor_dir / f"{name}{ext}").write_text(json.dumps(config))


def import_cost(module: str) -> float:
    """Cumulative import time (s) of `module` in a fresh interpreter (-X importtime)."""
    p = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {module}"],
                       capture_output=True, text=True, check=True)
    last = [l for l in p.stderr.splitlines() if l.rstrip().endswith(f"| {module}")][-1]
    return int(last.split("|")[1]) / 1e6


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="?", type=int, default=int(os.environ.get("RUNS") or 15),
                   help="rounds of every measurement (default $RUNS or 15)")
    p.add_argument("--out", type=Path, default=ROOT / "build" / "bench",
                   help="where bench-results.json and bench-results.md go")
    p.add_argument("--only", help="comma-separated subject keys to run "
                   f"({', '.join(s.key for s in all_subjects())})")
    p.add_argument("--phases", help="comma-separated phases to run, by the first word of "
                   "their name (daemons, VERSION, STATUS, scenario, peak, N, 20 (--parallel-pods), "
                   "110 (--load's PODS), profile); default all. The report leaves out what was "
                   "not measured")
    p.add_argument("--parallel-pods", type=int, default=PARALLEL_PODS,
                   help=f"pods ADDed (then DELed) at once (default {PARALLEL_PODS})")
    p.add_argument("--load", default=f"{LOAD_PODS},{LOAD_NADS}",
                   help=f"PODS,NADS in the API server for the daemons' loaded RSS (default "
                   f"{LOAD_PODS},{LOAD_NADS})")
    p.add_argument("--profile", action="store_true",
                   help="also profile netattach thin's scenario-1 ADD and DEL with py-spy "
                   "(phase 'profile'; `make bench PROFILE=1`)")
    args = p.parse_args()
    try:
        args.load = tuple(int(n) for n in args.load.split(","))
    except ValueError:
        args.load = ()
    if len(args.load) != 2 or min(args.load) < 1 or args.parallel_pods < 1:
        p.error("--parallel-pods is at least 1, --load two numbers at least 1: PODS,NADS")
    return args


def main() -> int:
    args = parse_args()
    subjects = all_subjects()
    if args.only:
        subjects = [s for s in subjects if s.key in args.only.split(",")]
    for s in subjects:
        if s.skipped:
            print(f"note: {s.label} skipped: {s.skipped}", flush=True)
    running = [s for s in subjects if not s.skipped]
    results: dict[str, Any] = {"machine": measure.machine(), "runs": args.runs,
                               "sizes": {"parallel_pods": args.parallel_pods,
                                         "load_pods": args.load[0], "load_nads": args.load[1]},
                               "multus_version": multus.version(),
                               "subjects": {s.key: {"label": s.label, "skipped": s.skipped}
                                            for s in subjects}}
    workdir = Path(tempfile.mkdtemp(prefix="netattach-bench-"))
    env = tb.new_host_env()
    failure = None
    try:
        with cl.Cluster.start(workdir / "cluster", audit=True) as cluster, \
                cluster.admin_api() as api:
            cl.apply_documents(api, cl.kustomize(cl.DEPLOY_DIR))
            sc.ensure_namespace(api, NAMESPACE)
            base = sc.setup(api, cl.plugin_kubeconfig(cluster), env, NAMESPACE,
                            SCENARIO_1_NETWORKS)
            tb.run("ip", "netns", "del", base.netns)  # every measured pod gets its own
            env.netns.remove(base.netns)
            bed = Bed(cluster, env, base, workdir, env.root / "floor.d")
            write_floor_confs(bed, api)
            bench = Bench(bed, api, running, args.runs, args.parallel_pods, args.load)
            try:
                for s in running:
                    s.start(bed, api)
                print(f"bench: {', '.join(s.label for s in running)}", flush=True)
                phases = [("daemons idle", bench.daemons_idle, 0),
                          ("VERSION", bench.version, args.runs),
                          ("STATUS", bench.status, args.runs),
                          ("scenario 1", bench.scenario_1, args.runs),
                          ("peak RSS of an ADD", bench.peak_rss, min(args.runs, PEAK_RSS_ROUNDS)),
                          ("N networks", bench.sweep, args.runs),
                          (f"{args.parallel_pods} pods in parallel", bench.parallel, args.runs),
                          (f"{args.load[0]} pods and {args.load[1]} NADs", bench.loaded, 1)]
                if args.profile:
                    phases.append(("profile of netattach thin", bench.profile, args.runs))
                if args.phases:
                    phases = [p for p in phases if p[0].split()[0] in args.phases.split(",")]
                for name, phase, rounds in phases:
                    many = f", {rounds} round{'s' * (rounds > 1)}" if rounds else ""
                    print(f"bench: {name}{many}", flush=True)
                    phase()
                if hasattr(bench, "scenario_end"):  # scenario 1 ran
                    bench.api_requests(cluster.audit_events())
            except Failure as e:
                failure = e
            finally:
                for s in running:
                    s.stop()
            results.update(bench.results)
    finally:
        env.cleanup()
        shutil.rmtree(workdir, ignore_errors=True)
    left = tb.leaks()
    cleanup = "cleanup: " + ("nothing left behind" if not left else f"LEFT BEHIND: {left}")
    if failure is not None:
        print(f"\nbench FAILED: {failure}\n{cleanup}", file=sys.stderr)
        return 1
    # the exec'd path's own modules (VERSION, ADD with its API transport, DEL, the shim)
    results["import_cost_ms"] = {m: import_cost(m) * 1000 for m in (
        "netattach.cli", "netattach.commands.add", "netattach.kube.transport",
        "netattach.commands.delete", "netattach_shim")}
    text = report.table(results)
    print("\n" + text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bench-results.json").write_text(json.dumps(results, indent=1, default=list))
    (args.out / "bench-results.md").write_text(text + "\n")
    print(f"\nresults: {args.out / 'bench-results.json'}, {args.out / 'bench-results.md'}")
    print(cleanup)
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
