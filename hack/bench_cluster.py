"""`make bench-cluster`: a simulated cluster, N node daemons against one API server
(issue 23, part 2): the control-plane cost of running a daemon on every node.

Two subjects, one after the other, each on a fresh API server (etcd + kube-apiserver of
the test bed, with an audit log): N `netattach daemon` (thick mode) and N Multus
`multus-daemon` (thick mode, run as hack/benchlib/multus.py's Daemon runs it: its own
mount namespace, in-cluster credentials in its own /run). Daemon i is node "node-<i>"'s,
acts as a ServiceAccount of its own (kube-system/netattach-daemon-<i>, bound to
deploy/thick's ClusterRole; kube-system/multus-thick-<i>, bound to the ClusterRole of
exactly what Multus' daemon asks for), so the audit log tells its requests apart, and
has its own socket dir, state dir, config and metrics port. No kubelet: pods are
API objects bound to the nodes (spec.nodeName), they stay Pending; no Node object is
needed by either daemon. Phases, per subject:

  * a fleet's start: until every daemon is ready and holds open WATCHes of its pods and
    of the NADs (audit log), then --quiet s (2) before the next window, as after a stop;
  * baseline: the API server's CPU with no daemon (subtracted from what follows);
  * idle (--idle s): the API server's CPU (utime + stime of kube-apiserver, /proc) and
    the daemons' requests (audit log), per daemon;
  * churn (--churn s): every second (--churn-rate times) a NAD created, one updated,
    one deleted, a pod created on the next node and one deleted (grace 0): the same,
    per daemon; the
    WATCHes each daemon opened (audit log, from its start to the end of the churn);
  * settle (--settle s, before the baseline): a fresh API server's own CPU falls over
    its first minutes (0.035-0.055 CPU s/s in its first two, 0.024 in its third, on
    the project's machine), by more than the daemons' share; the rate of each 30 s is
    recorded;
  * both idle and churn first with the first half of the daemons running, then with
    all of them, then with the first half again (the second half stopped, then started
    again for what follows): the slope, API CPU per added daemon on one API server, is
    the rate with all of them minus the mean of the two half windows' rates, so the
    baseline and a drift of the API server's own CPU that is linear in time cancel
    out;
  * one API server (--shared-rounds R, after the rounds above): both subjects' fleets
    set up on one fresh API server, which settles first; each round runs idle and churn
    with every netattach daemon, with every Multus daemon and with no daemon, in an
    order rotated from round to round, each fleet started for its windows and stopped
    after them. Per round, a subject's API CPU per daemon is its window's CPU minus the
    no-daemon window's of the same round, over N; the table has the mean over the
    rounds (a multiple of 3: a drift linear in time cancels). Fresh API servers'
    baselines, which differ, do not enter it, and the subjects alternate on the same
    one;
  * propagation (--propagation NADs, one at a time): from the create request until every
    daemon's cache holds the NAD. netattach: its /metrics
    netattach_cache_changed_resource_version / _timestamp_seconds (the time it stored
    that resourceVersion, same clock). Multus has no observable of its cache: n/a; the
    audit log shows each daemon's NAD WATCH was open across every create (so the API
    server sent it the NAD);
  * restart: kube-apiserver stopped for --down s and started again; when each daemon's
    first request arrives, and when it is back: it holds open WATCHes of its pods and of
    the NADs again (audit log: answered 200 and not ended within 1 s, since a WATCH from
    a version the new API server no longer has is answered 200, then ended by a 410 event,
    and the daemon lists again), from the new API server's /readyz: the spread (last -
    first) and when the last one is back; the new kube-apiserver's CPU from its exec until
    2 s after the last daemon is back (its own start included: the same for both
    subjects) and the LISTs of the herd;
  * RSS: --pods pods on node-0 and --nads NADs created (every daemon watching), then the
    settled VmRSS of node-0's daemon.

Prints the markdown table (hack/benchlib/clusterstats.py) and writes
bench-cluster.json and bench-cluster.md to --out (default build/bench-cluster).
Usage: hack/bench_cluster.py [--daemons N] [--idle S] [--churn S] [--nads N] ...
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "hack"))

from benchlib import clusterstats as cs  # noqa: E402
from benchlib import measure, multus  # noqa: E402
from kubernetes import client as k8s  # noqa: E402
from kubernetes.client.rest import ApiException  # noqa: E402

from netattach_testbed import cluster as cl  # noqa: E402
from netattach_testbed import scenario as sc  # noqa: E402

NAMESPACE = "bench"
LOAD_NAMESPACE = "bench-load"
SA_NAMESPACE = "kube-system"
READY_TIMEOUT = 300.0     # hang guard: every daemon listed and listening
SEEN_TIMEOUT = 60.0       # hang guard: a NAD reaching every netattach daemon
RECONNECT_TIMEOUT = 400.0  # hang guard: every daemon back after the restart (> 2 x 120 s step)
HERD_SETTLE = 2.0         # s after the last daemon is back, in the herd's CPU window
NAD_CONFIG = ('{"cniVersion": "1.0.0", "name": "%s", "type": "macvlan", "master": "eth0", '
              '"mode": "bridge", "ipam": {"type": "host-local", "subnet": "198.18.%d.0/24"}}')


def log(msg: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} bench-cluster: {msg}", flush=True)


def nad(name: str, k: int = 0) -> dict[str, Any]:
    return {"apiVersion": f"{cl.NAD_GROUP}/{cl.NAD_VERSION}", "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": name}, "spec": {"config": NAD_CONFIG % (name, k % 250)}}


def pod(name: str, node: str) -> dict[str, Any]:
    return {"metadata": {"name": name},
            "spec": {"nodeName": node, "automountServiceAccountToken": False,
                     "containers": [{"name": "c", "image": "registry.invalid/none:1"}]}}


def bind_cluster_role(api: k8s.ApiClient, name: str, role: str, sa: str) -> None:
    try:
        k8s.RbacAuthorizationV1Api(api).create_cluster_role_binding({
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": SA_NAMESPACE}]})
    except ApiException as e:
        if e.status != 409:
            raise


# ---------------------------------------------------------------- the fleets

class Fleet:
    """N daemons of one subject. `users`: their names in the audit log; `pids`."""
    key = ""
    users: list[str]
    procs: list[cl._Process]
    cluster: cl.Cluster

    def __init__(self, n: int, workdir: Path):
        self.n, self.workdir = n, workdir

    def pids(self) -> list[int]:
        return [p.popen.pid for p in self.procs if p.popen is not None]

    def stop(self, part: slice = slice(None)) -> None:
        """Stop the daemons of `part` (all by default); `start(part)` starts them again."""
        for p in getattr(self, "procs", [])[part]:
            try:
                p.stop()
            except cl.ClusterError as e:
                log(f"stopping {p.name}: {e}")

    def wait_watching(self, part: slice, since: float, deadline: float) -> None:
        """Until each daemon of `part` holds open WATCHes of its pods and of the NADs
        begun after `since` (epoch s; the audit log, as the restart phase tells a daemon
        back): a window that follows a start holds none of its start-up requests,
        however slow the machine (RuntimeError at `deadline`, monotonic s)."""
        users = self.users[part]
        while True:
            back = cs.reconnected(self.cluster.audit_events(), users, since, time.time(),
                                  min_age=0.0)
            if all(v is not None for v in back.values()):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.key} daemons not watching pods and NADs: "
                                   f"{sorted(u for u, v in back.items() if v is None)}")
            time.sleep(0.2)

    def nad_seen(self, rv: int) -> list[float | None] | None:
        """Per daemon: when its cache stored resourceVersion >= `rv` (epoch s), None
        while not yet; None for the whole fleet when it has no observable."""
        return None

    def cache_counts(self, i: int) -> tuple[float, float] | None:
        """(pods, NADs) in daemon i's caches, None when it has no observable."""
        return None


class NetattachFleet(Fleet):
    key = "netattach"

    def setup(self, cluster: cl.Cluster, api: k8s.ApiClient) -> None:
        self.cluster = cluster
        cl.apply_manifests(api, [cl.THICK_DIR / "rbac.yaml"])
        command = sc.netattach_command()
        self.ports: list[int] = []
        self.procs, self.users = [], []
        for i in range(self.n):
            sa = f"netattach-daemon-{i}"
            d = self.workdir / f"netattach-{i}"
            d.mkdir(parents=True)
            kubeconfig = cl.plugin_kubeconfig(cluster, SA_NAMESPACE, sa, d / "kubeconfig")
            bind_cluster_role(api, sa, "netattach-daemon", sa)
            port = cl.free_port()
            self.ports.append(port)
            self.users.append(multus.username(sa))
            self.procs.append(cl._Process(f"netattach daemon {i}", [
                command, "daemon", "--node-name", f"node-{i}", "--kubeconfig", str(kubeconfig),
                "--socket-dir", str(d / "run"), "--cni-dir", str(d / "state"),
                "--metrics-port", str(port), "--log-file", str(d / "daemon.log"),
                "--log-level", "info"], d / "daemon.out"))

    def start(self, part: slice = slice(None)) -> None:
        """Start the daemons of `part` (all by default) and wait until each is ready and
        watching (`wait_watching`)."""
        since = time.time()
        for p in self.procs[part]:
            p.start()
        deadline = time.monotonic() + READY_TIMEOUT
        for i, p in list(enumerate(self.procs))[part]:
            while self.get(i, "/readyz")[0] != 200:
                if not p.running or time.monotonic() > deadline:
                    raise RuntimeError(f"netattach daemon {i} not ready (running: {p.running}): "
                                       f"{cl.log_tail(p.log)}")
                time.sleep(0.2)
        self.wait_watching(part, since, deadline)

    def get(self, i: int, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ports[i]}{path}",
                                        timeout=10) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, ""
        except OSError as e:
            return 0, str(e)

    def metric(self, text: str, name: str, kind: str) -> float | None:
        m = re.search(rf'^{name}{{kind="{kind}"}} (\S+)$', text, re.M)
        return float(m.group(1)) if m else None

    def nad_seen(self, rv: int) -> list[float | None] | None:
        out: list[float | None] = []
        for i in range(self.n):
            status, text = self.get(i, "/metrics")
            now = time.time()
            seen = None
            if status == 200:
                got = self.metric(text, "netattach_cache_changed_resource_version", cs.NAD_KIND)
                at = self.metric(text, "netattach_cache_changed_timestamp_seconds", cs.NAD_KIND)
                if got is not None and got == got and got >= rv:  # (NaN != NaN)
                    # stored exactly that version: its own time; a later one: when polled
                    seen = at if got == rv and at else now
            out.append(seen)
        return out

    def cache_counts(self, i: int) -> tuple[float, float] | None:
        status, text = self.get(i, "/metrics")
        if status != 200:
            return None
        return (self.metric(text, "netattach_cache_objects", "Pod") or 0.0,
                self.metric(text, "netattach_cache_objects", cs.NAD_KIND) or 0.0)


class MultusFleet(Fleet):
    key = "multus"

    def setup(self, cluster: cl.Cluster, api: k8s.ApiClient) -> None:
        self.cluster = cluster
        role = multus.service_account(api, "thick")  # the ClusterRole multus-thick
        auto = self.workdir / "multus-autoconf"
        auto.mkdir(parents=True)
        # the cluster default network, which auto mode finds (a bridge, never exec'd here)
        cl._write(auto / "10-default.conf", json.dumps({
            "cniVersion": "0.3.1", "name": "default", "type": "bridge", "bridge": "bcbr0",
            "ipam": {"type": "host-local", "subnet": "198.18.1.0/24"}}))
        Path("/run/netns").mkdir(exist_ok=True)  # the daemon binds it in (ip netns makes it too)
        self.daemons: list[multus.Daemon] = []
        self.users = []
        for i in range(self.n):
            sa = f"multus-thick-{i}"
            d = self.workdir / f"multus-{i}"
            d.mkdir(parents=True)
            self.daemons.append(multus.Daemon(
                d, cluster, sa, auto, auto, Path(sc.DEBIAN_CNI_DIR), d / "multus.log",
                node_name=f"node-{i}"))
            bind_cluster_role(api, sa, role, sa)
            self.users.append(multus.username(sa))
        self.procs = [d.process for d in self.daemons]

    def start(self, part: slice = slice(None)) -> None:
        """Start the daemons of `part` (all by default) and wait until each is ready and
        watching (`wait_watching`)."""
        since = time.time()
        for p in self.procs[part]:
            p.start()
        deadline = time.monotonic() + READY_TIMEOUT
        for i, d in list(enumerate(self.daemons))[part]:
            while not (d.healthy() and (d.host_conf_dir / "00-multus.conf").exists()):
                if not d.process.running or time.monotonic() > deadline:
                    raise RuntimeError(f"multus-daemon {i} not ready (running: "
                                       f"{d.process.running}): {cl.log_tail(d.log_file)}")
                time.sleep(0.2)
        self.wait_watching(part, since, deadline)


FLEETS = {"netattach": NetattachFleet, "multus": MultusFleet}


# ---------------------------------------------------------------- the phases

class Window(NamedTuple):
    """One measured window (Run.measure): start and end (epoch s), the API server's CPU
    s in between, the work's ticks done (0 without work)."""
    t0: float
    t1: float
    cpu: float
    ticks: int

    @property
    def rate(self) -> float:
        """The API server's CPU s per s over the window."""
        return self.cpu / (self.t1 - self.t0)


class Run:
    def __init__(self, args: argparse.Namespace, fleet: Fleet, cluster: cl.Cluster,
                 api: k8s.ApiClient):
        self.args, self.fleet, self.cluster, self.api = args, fleet, cluster, api
        self.core = k8s.CoreV1Api(api)
        self.objects = k8s.CustomObjectsApi(api)
        self.r: dict[str, Any] = {"daemons": fleet.n}

    def apiserver_cpu(self) -> float:
        proc = self.cluster._apiserver
        assert proc is not None and proc.popen is not None
        return measure.proc_cpu(proc.popen.pid)

    def events(self) -> list[dict[str, Any]]:
        return self.cluster.audit_events()

    def create_nad(self, ns: str, name: str, k: int = 0) -> int:
        obj = self.objects.create_namespaced_custom_object(
            cl.NAD_GROUP, cl.NAD_VERSION, ns, cl.NAD_PLURAL, nad(name, k))
        return int(obj["metadata"]["resourceVersion"])

    def settle(self) -> None:
        """Wait --settle s with no daemon, recording the API server's CPU rate (CPU s/s)
        of each 30 s (module doc: a fresh one's falls over its first minutes)."""
        rates: list[float] = []
        end = time.monotonic() + self.args.settle
        while (left := end - time.monotonic()) > 0:
            rates.append(self.measure(min(30.0, left)).rate)
        self.r["settle_cpu_per_s"] = rates
        if rates:
            log("settle: API CPU s/s " + ", ".join(f"{r:.3f}" for r in rates))

    def baseline(self) -> None:
        self.r["baseline_cpu_per_s"] = self.measure(min(self.args.idle, 20.0)).rate

    def measure(self, seconds: float, work=None) -> Window:
        """The API server's CPU over `seconds` of `work(tick)` --churn-rate times a
        second (None: nothing)."""
        c0, t0 = self.apiserver_cpu(), time.time()
        tick, rate = 0, self.args.churn_rate
        while time.time() < t0 + seconds:
            if work is not None:
                work(tick)
            tick += 1
            time.sleep(max(0.0, t0 + tick / rate - time.time()))
        return Window(t0, time.time(), self.apiserver_cpu() - c0,
                      tick if work is not None else 0)

    def window(self, name: str, seconds: float, work=None, daemons: int | None = None) -> None:
        """API CPU and the daemons' requests over `seconds`, `work(tick)` --churn-rate
        times a second;
        `daemons`: how many of the fleet run (the first ones; default all)."""
        t0, t1, cpu, _ = self.measure(seconds, work)
        n, dur = daemons or self.fleet.n, t1 - t0
        reqs = cs.requests_per_user(self.events(), self.fleet.users[:n], t0, t1)
        net = cpu - self.r["baseline_cpu_per_s"] * dur
        self.r[name] = {"seconds": dur, "api_cpu": cpu, "api_cpu_net": net,
                        "api_cpu_per_daemon": max(net, 0.0) / n,
                        "requests": reqs,
                        "requests_per_s_per_daemon": sum(reqs.values()) / n / dur}
        log(f"{name}: API CPU {cpu:.2f} s ({net:.2f} s over the baseline) in {dur:.0f} s, "
            f"{sum(reqs.values())} daemon requests")

    def churner(self, prefix: str) -> Callable[[int], None]:
        """The churn's work of tick k (module doc; --churn-rate ticks a second), its
        objects named `<prefix>-<k>`."""
        def tick(k: int) -> None:
            n = self.fleet.n
            self.create_nad(NAMESPACE, f"{prefix}-{k}", k)
            if k >= 1:
                self.objects.patch_namespaced_custom_object(
                    cl.NAD_GROUP, cl.NAD_VERSION, NAMESPACE, cl.NAD_PLURAL, f"{prefix}-{k - 1}",
                    {"spec": {"config": NAD_CONFIG % (f"{prefix}-{k - 1}", (k + 100) % 250)}})
            if k >= 2:
                self.objects.delete_namespaced_custom_object(
                    cl.NAD_GROUP, cl.NAD_VERSION, NAMESPACE, cl.NAD_PLURAL, f"{prefix}-{k - 2}")
            self.core.create_namespaced_pod(NAMESPACE, pod(f"{prefix}-{k}", f"node-{k % n}"))
            if k >= 5:
                self.core.delete_namespaced_pod(f"{prefix}-{k - 5}", NAMESPACE,
                                                grace_period_seconds=0)
        return tick

    def slope(self, name: str, half: int) -> None:
        """API CPU per daemon of phase `name`: the API server's CPU rate (CPU s/s) in its
        window with every daemon minus the mean of its rates in the windows
        `<name>_half` (before) and `<name>_half2` (after) with the first `half` of them,
        on the same API server, as CPU s per added daemon over the full window's length.
        The baseline, which differs between fresh API servers, cancels out, and so does a
        drift of the API server's own CPU that is linear in time. `<name>_half2` absent:
        the rate of `<name>_half` alone."""
        b = self.r[name]
        halves = [self.r[k] for k in (f"{name}_half", f"{name}_half2") if k in self.r]
        lower = sum(h["api_cpu"] / h["seconds"] for h in halves) / len(halves)
        rate = b["api_cpu"] / b["seconds"] - lower
        b["api_cpu_slope_per_daemon"] = rate * b["seconds"] / (self.fleet.n - half)

    def propagation(self) -> None:
        per_nad: list[float] = []
        samples: list[float] = []
        creates: list[float] = []
        missing = 0
        observable = True
        for j in range(self.args.propagation):
            t0 = time.time()
            rv = self.create_nad(NAMESPACE, f"prop-{j}", j)
            creates.append(t0)
            deadline = time.monotonic() + SEEN_TIMEOUT
            while True:
                seen = self.fleet.nad_seen(rv)
                if seen is None:
                    observable = False
                    break
                if all(s is not None for s in seen) or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            if seen is not None:
                got = [max(0.0, s - t0) for s in seen if s is not None]
                missing += len(seen) - len(got)
                samples += got
                if len(got) == len(seen):
                    per_nad.append(max(got))
            time.sleep(0.2)
        time.sleep(1.0)  # the audit log's ResponseComplete of WATCHes ended meanwhile
        events = self.events()
        open_at = [cs.watch_open_at(events, self.fleet.users, t) for t in creates]
        delivered = {u: sum(o[u] for o in open_at) for u in self.fleet.users}
        out: dict[str, Any] = {"nads": self.args.propagation,
                               "watch_open_at_create": delivered}
        if observable:
            out.update(every_daemon=per_nad, samples=samples, missing=missing,
                       p50=cs.percentile(per_nad, 50) if per_nad else None,
                       p99=cs.percentile(per_nad, 99) if per_nad else None,
                       per_daemon_p50=cs.percentile(samples, 50) if samples else None,
                       per_daemon_p99=cs.percentile(samples, 99) if samples else None)
            out["seen_by"] = len(samples) // max(1, self.args.propagation)
        else:
            why = "no observable of Multus' NAD cache"
            out.update(p50=None, p99=None, p50_na=why, p99_na=why)
        self.r["propagation"] = out
        log(f"propagation: p50 {out['p50']}, p99 {out['p99']}; NAD WATCH open across the "
            f"creates: {sorted(delivered.values())}")

    def restart(self) -> None:
        users = self.fleet.users
        stopping = time.time()
        self.cluster.stop_apiserver()  # SIGTERM: its graceful shutdown
        stopped = time.time()
        time.sleep(self.args.down)
        started = time.time()
        self.cluster.start_apiserver()
        ready = time.time()
        deadline = time.monotonic() + RECONNECT_TIMEOUT
        while True:
            back = cs.reconnected(self.events(), users, started, time.time())
            if all(v is not None for v in back.values()) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        known = [v for v in back.values() if v is not None]
        until = (max(known) if known else time.time()) + HERD_SETTLE
        time.sleep(max(0.0, until - time.time()))
        cpu = self.apiserver_cpu()
        events = self.events()
        first = cs.first_requests(events, users, started)
        lists = sum(1 for e in events if cs.user(e) in set(users) and e.get("verb") == "list"
                    and cs.received(e) >= started)
        back_s = cs.spread(back.values(), ready)
        first_s = cs.spread(first.values(), ready)
        self.r["restart"] = {
            "stop_seconds": stopped - stopping, "down": started - stopped,
            "start_to_ready": ready - started,
            "first": back_s["first"], "last": back_s["last"], "spread": back_s["spread"],
            "missing": back_s["missing"], "first_try": first_s,
            "back": {u: (v - ready if v is not None else None) for u, v in back.items()},
            "api_cpu": cpu, "lists": lists, "lists_per_daemon": lists / self.fleet.n}
        log(f"restart: back {back_s['first']}..{back_s['last']} s after /readyz "
            f"(missing {back_s['missing']}), herd CPU {cpu:.2f} s, {lists} LISTs")

    def rss(self) -> None:
        sc.ensure_namespace(self.api, LOAD_NAMESPACE)
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda k: self.core.create_namespaced_pod(
                LOAD_NAMESPACE, pod(f"load-{k}", "node-0")), range(self.args.pods)))
            list(pool.map(lambda k: self.create_nad(LOAD_NAMESPACE, f"load-{k}", k),
                          range(self.args.nads)))
        log(f"rss: {self.args.pods} pods on node-0 and {self.args.nads} NADs created")
        counts = None
        if self.fleet.cache_counts(0) is not None:
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                counts = self.fleet.cache_counts(0)
                if counts and counts[0] >= self.args.pods and counts[1] >= self.args.nads:
                    break
                time.sleep(0.5)
        pid = self.fleet.pids()[0]
        kib = measure.settled_rss_kib(pid, quiet=3.0, limit=120.0)
        comm = Path(f"/proc/{pid}/comm").read_text().strip()  # the daemon, not a wrapper
        self.r["rss"] = {"kib": kib, "mib": kib / 1024, "process": comm, "pods": self.args.pods,
                         "nads": self.args.nads, "cache_counts": counts}
        log(f"rss of node-0's daemon: {kib / 1024:.1f} MiB (caches: {counts})")


def shared_order(keys: list[str], rnd: int) -> list[str]:
    """The windows' order in round `rnd` of the one-API-server phase: the subjects and
    "none" (no daemon), rotated by one each round, so each takes every place."""
    order = [*keys, "none"]
    k = rnd % len(order)
    return order[k:] + order[:k]


def shared_per_daemon(rounds: list[dict[str, dict[str, float]]], key: str, phase: str,
                      n: int) -> float:
    """API CPU s per daemon of `key` in `phase` over the one-API-server rounds: per
    round, its window's CPU s minus the no-daemon window's, over `n` daemons; the mean
    over the rounds. Over a whole number of rotations (`shared_order`: 3 rounds for two
    subjects) every subject and "none" took each place once, so a drift of the API
    server's own CPU that is linear in the windows' order cancels out of the mean (not
    out of a median, which keeps the round where the subject came first or last). In
    time it nearly does: a fleet's start (1-8 s at N = 50) and stop come between its
    windows and not around the no-daemon ones, against 80-120 s of windows a slot."""
    return sum((r[key][phase] - r["none"][phase]) / n for r in rounds) / len(rounds)


def run_shared(keys: list[str], args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """The one-API-server phase (module doc): {"rounds": [{key or "none": {"idle": CPU
    s, "churn": CPU s, "order": place}}], "settle_cpu_per_s": [...], key: {"idle": CPU s
    per daemon, "churn": ...}}."""
    fleets = {k: FLEETS[k](args.daemons, workdir / k) for k in keys}
    with cl.Cluster.start(workdir / "cluster", audit=True) as cluster, \
            cluster.admin_api() as api:
        cl.apply_documents(api, cl.kustomize(cl.DEPLOY_DIR))
        sc.ensure_namespace(api, NAMESPACE)
        run = Run(args, fleets[keys[0]], cluster, api)
        rounds: list[dict[str, dict[str, float]]] = []
        try:
            for f in fleets.values():
                f.setup(cluster, api)
            places = len(keys) + 1
            if args.shared_rounds % places:
                log(f"one API server: {args.shared_rounds} rounds are not a whole number of "
                    f"rotations ({places} rounds each): a drift of the API server's own CPU "
                    "does not cancel out of the mean")
            log(f"one API server: settle {args.settle:.0f} s")
            run.settle()
            for rnd in range(args.shared_rounds):
                got: dict[str, dict[str, float]] = {}
                for place, key in enumerate(shared_order(keys, rnd)):
                    fleet = fleets.get(key)
                    if fleet is not None:
                        fleet.start()
                        time.sleep(args.quiet)
                    got[key] = {"order": place}
                    for phase, seconds in (("idle", args.idle), ("churn", args.churn)):
                        work = run.churner(f"s{rnd}-{key}") if phase == "churn" else None
                        w = run.measure(seconds, work)
                        got[key][phase] = w.cpu
                        if work is not None:  # a harness that cannot keep up shows here
                            got[key]["churn_ticks"] = w.ticks
                    if fleet is not None:
                        fleet.stop()
                    log(f"one API server, round {rnd + 1}, {key}: API CPU idle "
                        f"{got[key]['idle']:.2f} s, churn {got[key]['churn']:.2f} s")
                rounds.append(got)
        finally:
            for f in fleets.values():
                f.stop()
    out: dict[str, Any] = {"rounds": rounds, "settle_cpu_per_s": run.r["settle_cpu_per_s"]}
    for key in keys:
        out[key] = {phase: shared_per_daemon(rounds, key, phase, args.daemons)
                    for phase in ("idle", "churn")}
    return out


def run_subject(key: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """One round of one subject, in `workdir` (its own: a fresh API server each time)."""
    fleet = FLEETS[key](args.daemons, workdir / "daemons")
    with cl.Cluster.start(workdir / "cluster", audit=True) as cluster, \
            cluster.admin_api() as api:
        cl.apply_documents(api, cl.kustomize(cl.DEPLOY_DIR))
        sc.ensure_namespace(api, NAMESPACE)
        run = Run(args, fleet, cluster, api)
        try:
            log(f"{key}: settle {args.settle:.0f} s, then the baseline (no daemon)")
            run.settle()
            run.baseline()
            fleet.setup(cluster, api)
            half = fleet.n // 2
            t_start = time.time()
            if half:  # the first half alone: the per-daemon slope's lower point
                fleet.start(slice(0, half))
                log(f"{key}: {half} daemons ready")
                time.sleep(args.quiet)
                run.window("idle_half", args.idle, daemons=half)
                run.window("churn_half", args.churn, run.churner("half"), daemons=half)
            t_rest = time.time()
            fleet.start(slice(half, None))
            run.r["start_seconds"] = time.time() - t_rest
            log(f"{key}: {fleet.n} daemons ready ({fleet.n - half} started in "
                f"{run.r['start_seconds']:.1f} s)")
            time.sleep(args.quiet)
            run.window("idle", args.idle)
            run.window("churn", args.churn, run.churner("churn"))
            watches = cs.watches_per_user(run.events(), fleet.users, t_start, time.time())
            run.r["watches"] = watches
            run.r["watches_per_daemon"] = sum(watches.values()) / fleet.n
            if half:  # the first half alone again: a linear drift cancels (module doc)
                fleet.stop(slice(half, None))
                time.sleep(args.quiet)
                run.window("idle_half2", args.idle, daemons=half)
                run.window("churn_half2", args.churn, run.churner("half2"), daemons=half)
                run.slope("idle", half)
                run.slope("churn", half)
                fleet.start(slice(half, None))
                log(f"{key}: {fleet.n} daemons ready again")
                time.sleep(args.quiet)
            run.propagation()
            run.restart()
            run.rss()
            run.r["running_at_end"] = sum(p.running for p in fleet.procs)
        finally:
            fleet.stop()
    return run.r


def env_num(name: str, default: float) -> float:
    return float(os.environ.get(name) or default)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--daemons", type=int, default=int(env_num("DAEMONS", 50)),
                   help="daemons per subject (default $DAEMONS or 50)")
    p.add_argument("--rounds", type=int, default=int(env_num("ROUNDS", 1)),
                   help="interleaved rounds (netattach, Multus, netattach, ...), each subject "
                   "on a fresh API server each time; the table has the medians ($ROUNDS, 1; "
                   "0: the one-API-server phase alone)")
    p.add_argument("--idle", type=float, default=env_num("IDLE", 60),
                   help="seconds of the idle phase (default $IDLE or 60)")
    p.add_argument("--churn", type=float, default=env_num("CHURN", 60),
                   help="seconds of the churn phase (default $CHURN or 60)")
    p.add_argument("--settle", type=float, default=env_num("SETTLE", 180),
                   help="seconds a fresh API server runs with no daemon before the baseline "
                   "(default $SETTLE or 180)")
    p.add_argument("--quiet", type=float, default=2.0,
                   help="seconds between a fleet's start or stop and the next window, so the "
                   "window holds no start-up requests (default 2; tests/integration's one "
                   "round passes 0: it asserts no number)")
    p.add_argument("--shared-rounds", type=int, default=int(env_num("SHARED_ROUNDS", 3)),
                   help="rounds of the one-API-server phase, 0 for none (default "
                   "$SHARED_ROUNDS or 3)")
    p.add_argument("--churn-rate", type=float, default=env_num("CHURN_RATE", 5),
                   help="churn ticks a second: each creates, updates and deletes a NAD and "
                   "creates and deletes a pod (default $CHURN_RATE or 5)")
    p.add_argument("--propagation", type=int, default=int(env_num("PROPAGATION", 20)),
                   help="NADs timed one at a time (default $PROPAGATION or 20)")
    p.add_argument("--down", type=float, default=env_num("DOWN", 10),
                   help="seconds the API server stays down (default $DOWN or 10)")
    p.add_argument("--pods", type=int, default=int(env_num("PODS", 110)),
                   help="pods on node-0 for the RSS (default $PODS or 110)")
    p.add_argument("--nads", type=int, default=int(env_num("NADS", 5000)),
                   help="NADs for the RSS (default $NADS or 5000)")
    p.add_argument("--subjects", default=os.environ.get("SUBJECTS") or "netattach,multus",
                   help="comma-separated, in order (default netattach,multus)")
    p.add_argument("--out", type=Path, default=ROOT / "build" / "bench-cluster",
                   help="where bench-cluster.json and bench-cluster.md go")
    args = p.parse_args(argv)
    if args.quiet < 0:
        p.error("--quiet must be at least 0")
    if args.churn_rate <= 0:
        p.error("--churn-rate must be positive")
    if args.daemons < 1 or args.propagation < 1:
        p.error("--daemons and --propagation must be at least 1")
    if args.rounds < 0 or args.shared_rounds < 0 or not (args.rounds or args.shared_rounds):
        p.error("--rounds and --shared-rounds are at least 0, and one of them more")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    keys = [k for k in args.subjects.split(",") if k]
    unknown = set(keys) - set(FLEETS)
    if unknown:
        print(f"unknown subjects: {sorted(unknown)}", file=sys.stderr)
        return 2
    multus.require_binaries()
    params = {k: getattr(args, k) for k in ("daemons", "rounds", "shared_rounds", "settle",
                                            "idle", "churn", "churn_rate", "quiet",
                                            "propagation", "down", "pods", "nads")}
    results: dict[str, Any] = {"machine": measure.machine(), "params": params,
                               "multus_version": multus.version(), "subjects": {}}
    workdir = Path(tempfile.mkdtemp(prefix="netattach-bench-cluster-"))
    try:
        rounds: dict[str, list[dict[str, Any]]] = {k: [] for k in keys}
        for rnd in range(args.rounds):  # A B A B ...: a slow moment hits both alike
            for key in keys:
                log(f"round {rnd + 1}/{args.rounds}, subject {key}: {args.daemons} daemons")
                rounds[key].append(run_subject(key, args, workdir / f"{key}-{rnd}"))
        for key in keys:  # --rounds 0: the one-API-server phase alone
            results["subjects"][key] = (cs.over_rounds(rounds[key]) if rounds[key]
                                        else {"daemons": args.daemons})
        if args.shared_rounds:
            log(f"one API server: {args.shared_rounds} rounds of {', '.join(keys)} and none")
            shared = run_shared(keys, args, workdir / "shared")
            results["shared"] = shared
            for key in keys:
                results["subjects"][key]["shared"] = shared[key]
    finally:
        if os.environ.get("NETATTACH_KEEP_BENCH") == "1":
            print(f"workdir kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    text = cs.table(results)
    print("\n" + text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bench-cluster.json").write_text(json.dumps(results, indent=1))
    (args.out / "bench-cluster.md").write_text(text + "\n")
    print(f"\nresults: {args.out / 'bench-cluster.json'}, {args.out / 'bench-cluster.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
