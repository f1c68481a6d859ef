"""The node daemon: CNI calls from the shim on a unix socket, run by the same
orchestrator as thin mode (orchestrator.Orchestrator) with the watch caches as its API
seam (podapi.CachedPodApi), the process executor (in the host's root with
--chroot-dir: chroot.ChrootExecutor) and the real clock.

Socket: `<socketDir>/netattach.sock`; the dir is 0700 and ours, the socket 0600, and
each connection's peer (SO_PEERCRED) must be root, the container runtime. One call per
connection, the wire protocol of netattach_shim (its module doc).

Each connection's request is read by one of READERS threads, then queued
(admission.CallQueue) for a pool of `max_parallel` workers: the ADDs of many pods (a
node reboot) run their children at the same time, never more than that many
operations at once. Pod owners are tenants (issue 21, "Bounded work per pod"): one
sandbox's calls run one at a time and wait in the queue without a worker; a call past
the queue's bounds is refused at once with code 11; /readyz turns false while the pool
has been saturated longer than `saturation_timeout` (admission's module doc). The calls
of one container are still serialized by its lock in the state dir too (spec §7.3,
statestore.StateStore.lock: an flock on a file opened per operation, which excludes threads
of one process as it excludes processes, and the thin-mode fallback's processes).
An ADD whose shim closed its connection (the runtime gave up or was killed, or the
shim's answer timeout passed: peer_gone) is abandoned at its next step and rolled back
(add.py, "Abandoned").
"""
from __future__ import annotations

import collections
import contextlib
import json
import logging
import os
import select
import socket
import struct
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from netattach_shim import wire

from ..cni import invoke
from ..cni.errors import CniError, TryAgain
from ..cni.request import parse_cni_args
from ..cni.version import LATEST, SUPPORTED_VERSIONS
from ..commands.call import cni_main
from ..commands.orchestrator import Orchestrator
from ..kube.client import Kube
from ..kube.events import InvolvedObject
from ..kube.reads import NAD_GROUP, NAD_VERSION
from ..node.state import StateError
from ..node.statestore import StateStore
from ..spec.netconf import DEFAULT_CNI_DIR, NetConf
from .admission import CallQueue, Refused
from .backoff import Backoff
from .cache import DEFAULT_MAX_NAD_CONFIG, NADS, REFUSED, WatchCache
from .delegates import TimedExecutor
from .events import EventRecorder
from .hotplug import Hotplugger
from .podapi import WARNINGS, CachedPodApi, Publisher, republish
from .unixsock import SocketError, clear_stale, socket_dir

log = logging.getLogger("netattach.daemon")

READ_TIMEOUT = 30.0
"""Seconds a client may take to send its request (the shim sends it at once)."""
READERS = 4
"""Threads that read requests and queue them: reading takes no time for the shim, which
sends its request at once; a peer that sends nothing holds one for READ_TIMEOUT."""
DEFAULT_MAX_QUEUED = 256
"""Calls that may wait for a worker in all (`--max-queued`): a node runs about 110
pods, each with a call or two outstanding at once; past that, calls are refused with
code 11 rather than piling up shim processes (admission's module doc)."""
DEFAULT_SATURATION_TIMEOUT = 30.0
"""Seconds the pool may stay saturated before /readyz answers 503
(`--saturation-timeout`): a node reboot's ADDs (well under a second each) drain in
seconds; a pool saturated for longer is held by slow or hung children."""
SANDBOX_COMMANDS = ("ADD", "DEL", "CHECK")
"""The commands of one sandbox (CNI_CONTAINERID), run one at a time (admission)."""


DAEMON_RBAC = "deploy/thick/rbac.yaml"
"""The manifest granting the daemon's ServiceAccount its requests (named on a 403)."""

CLIENT_REUSE_SECONDS = 60.0
"""How long the daemon's calls share one loaded API client (SharedClient) before the
kubeconfig, its token and CA files are read again: a rotated ServiceAccount token is
in use within a minute, while the token it replaces stays valid far longer."""


class SharedClient:
    """One API client (kubeconfig loaded, a keep-alive connection) shared by the
    daemon's live reads and queued writes, loaded again every CLIENT_REUSE_SECONDS.
    Each use still gets its own Kube, so its own budget: `kube(timeout, setting)`.
    Loading one per write cost a kubeconfig read, an SSL context and a TLS handshake
    each (three per ADD); the shared one costs them once a minute."""

    def __init__(self, kubeconfig: str | None, clock: Any = time.monotonic):
        self.kubeconfig = kubeconfig
        self._clock = clock
        self._lock = threading.Lock()
        self._client: tuple[Any, Any, str] | None = None
        self._loaded_at = 0.0

    def kube(self, timeout: float, setting: str) -> Kube:
        """A Kube with its own budget of `timeout` s on the shared client. Raises
        KubeError when the kubeconfig cannot be loaded."""
        with self._lock:  # lightkube loads one kubeconfig at a time anyway
            now = self._clock()
            if self._client is None or now - self._loaded_at >= CLIENT_REUSE_SECONDS:
                self._client = Kube(self.kubeconfig, timeout, setting).loaded_client()
                self._loaded_at = now
            shared = self._client
        return Kube(self.kubeconfig, timeout, setting, shared=shared, rbac=DAEMON_RBAC)


def read_request(conn: socket.socket) -> tuple[dict[str, str], bytes]:
    """One request of the shim's wire protocol (netattach_shim's module doc), read to
    the end of its stream: (CNI variables, stdin bytes). Raises ValueError for a
    malformed or oversized request (a name outside CNI_ENV, an entry without `=`, no
    end of the variables), OSError when the connection fails or READ_TIMEOUT passes."""
    conn.settimeout(READ_TIMEOUT)
    chunks, size = [], 0
    while chunk := conn.recv(1 << 16):
        chunks.append(chunk)
        size += len(chunk)
        if size > wire.MAX_REQUEST:
            raise ValueError(f"request larger than {wire.MAX_REQUEST} bytes")
    return wire.decode_request(b"".join(chunks))


def answer(code: int, doc: dict[str, Any] | None) -> bytes:
    """The answer of the wire protocol: exit status, newline, the stdout document."""
    return wire.encode_answer(code, json.dumps(doc).encode() if doc is not None else b"")


def peer_gone(conn: socket.socket) -> bool:
    """True once the shim's end of `conn` is closed: it exited, was killed (with the
    runtime's call) or gave up waiting. A unix stream socket polls POLLHUP once its
    peer's socket is released, not when the peer only shut down its sending side (as
    the shim does after its request: that is POLLIN, end of stream). Linux's
    af_unix unix_poll. Never blocks; never raises (a closed `conn` counts as gone)."""
    try:
        poller = select.poll()
        poller.register(conn.fileno(), 0)  # POLLHUP, POLLERR and POLLNVAL are always polled
        return bool(poller.poll(0))
    except (OSError, ValueError):
        return True


def describe(environ: dict[str, str]) -> str:
    """"pod ns/name", else "container <id>", else "request", for messages (from the
    request's CNI_ARGS and CNI_CONTAINERID, as the shim names it)."""
    try:
        args = dict(parse_cni_args(environ.get("CNI_ARGS", "")))
    except CniError:
        args = {}
    ns, name = args.get("K8S_POD_NAMESPACE"), args.get("K8S_POD_NAME")
    if ns and name:
        return f"pod {ns}/{name}"
    cid = environ.get("CNI_CONTAINERID")
    return f"container {cid}" if cid else "request"


def cni_version_of(stdin: bytes) -> str:
    """The cniVersion of the request's config when netattach supports it, else the
    newest it supports: the version of an error the daemon writes itself."""
    try:
        version = json.loads(stdin).get("cniVersion")
    except (ValueError, AttributeError, RecursionError):
        return LATEST
    return version if version in SUPPORTED_VERSIONS else LATEST


@dataclass
class Call:
    """One shim's call, read and waiting to run: its connection (`pid`: the peer's),
    CNI variables, stdin, and when it arrived (time.monotonic)."""
    conn: socket.socket
    pid: int
    environ: dict[str, str]
    stdin: bytes
    arrived: float


class DaemonError(Exception):
    """The daemon cannot start (socket dir unusable, another daemon on the socket)."""


@dataclass
class Stats:
    """What the metrics read (metrics.py), updated under `lock`.

    requests: (command, result code: "0" or the CNI error code) -> count;
    durations: command -> list of seconds not yet observed by the histogram;
    attachments: attachments made by successful ADDs; misses: kind -> live reads;
    refused: the queue's bound ("sandbox", "queue") -> calls refused by it;
    abandoned: ADDs abandoned because their shim's connection closed.
    """
    lock: threading.Lock = field(default_factory=threading.Lock)
    requests: collections.Counter[tuple[str, str]] = field(default_factory=collections.Counter)
    attachments: int = 0
    refused: collections.Counter[str] = field(default_factory=collections.Counter)
    abandoned: int = 0
    misses: collections.Counter[str] = field(default_factory=collections.Counter)
    observers: list[Any] = field(default_factory=list)

    def record(self, command: str, code: str, seconds: float) -> None:
        with self.lock:
            self.requests[(command, code)] += 1
        for observe in self.observers:
            observe(command, code, seconds)


class Daemon:
    """One node's daemon.

    pods, nads: the caches (cache.node_caches), started by `start`; kubeconfig: for
    live reads and the publisher's writes (None: in-cluster); socket_dir: where the
    socket is made; max_parallel: operations at once; api_timeout: seconds, the budget
    of each queued write's try; cni_dir: the state dir (the conflist's cniDir) whose
    network-status writes left pending by an earlier daemon are sent at start
    (podapi.republish), and whose sandboxes ADDed with `hotplug` are changed when their
    pod's selection changes (hotplug.Hotplugger, at most one change per pod every
    `hotplug_interval` seconds; a failed step waits for its `hotplug_backoff`,
    backoff.Backoff); executor: finds and runs the children of every call and hot-plug
    change (chroot.ChrootExecutor under --chroot-dir, else the process executor);
    max_queued: calls that may wait for a worker in all, past which one is refused with
    code 11; saturation_timeout: seconds the pool may stay saturated before `readiness`
    says not ready (admission's module doc); max_nad_config: bytes, the bound of a
    NAD's spec.config (the NAD cache's, made with the same by cache.node_caches; a live
    read's, podapi.CachedPodApi): a NAD over it gets a Warning `ConfigTooLarge` Event
    when the cache first sees it.
    """

    def __init__(self, pods: WatchCache, nads: WatchCache, kubeconfig: str | None,
                 socket_dir: str, max_parallel: int, api_timeout: float,
                 cni_dir: str = DEFAULT_CNI_DIR, hotplug_interval: float = 2.0,
                 executor: invoke.Executor = invoke.PROCESS_EXECUTOR,
                 max_queued: int = DEFAULT_MAX_QUEUED,
                 saturation_timeout: float = DEFAULT_SATURATION_TIMEOUT,
                 hotplug_backoff: Backoff | None = None,
                 max_nad_config: int = DEFAULT_MAX_NAD_CONFIG):
        self.pods, self.nads = pods, nads
        self.max_nad_config = max_nad_config
        self.executor = TimedExecutor(executor)
        """`executor`, every execution timed for /metrics (delegates.py)."""
        self.kubeconfig = kubeconfig
        self.cni_dir = cni_dir
        self._other_dirs: set[str] = set()
        self.socket_dir = socket_dir
        self.socket_path = wire.socket_path(socket_dir)
        self.max_parallel = max_parallel
        self.stats = Stats()
        self.client = SharedClient(kubeconfig)
        self.publisher = Publisher(lambda: self.client.kube(api_timeout, "--api-timeout"))
        self.saturation_timeout = saturation_timeout
        self.calls: CallQueue[Call] = CallQueue(max_parallel, max_queued)
        self.readers = ThreadPoolExecutor(READERS, thread_name_prefix="read")
        self._workers = [threading.Thread(target=self._work, name=f"cni-{i}", daemon=True)
                         for i in range(max_parallel)]
        self.events = EventRecorder()
        self.hotplug = Hotplugger(pods, cni_dir, lambda environ, conf: self._api(environ, conf, []),
                                  self.publisher.cancel, hotplug_interval, executor=self.executor,
                                  backoff=hotplug_backoff)
        pods.listeners.append(self.hotplug.pod_changed)
        nads.listeners.append(self._nad_changed)
        self.listening = False
        self.in_flight = 0
        self._listener: socket.socket | None = None
        self._accept_thread: threading.Thread | None = None
        self.dra: Any = None
        """The DRA kubelet plugin (dra.KubeletPlugin) when run with --dra, for /metrics."""

    # -- lifecycle

    def start(self) -> None:
        """Start the caches, bind the socket, accept calls. Raises DaemonError."""
        self.pods.start()
        self.nads.start()
        try:  # before the socket: every state listed is an earlier daemon's
            saved = StateStore(self.cni_dir).container_ids()
        except StateError as e:
            log.error("network-status writes an earlier daemon left unsent are not re-sent: %s",
                      e)
            saved = []
        self._listener = self._bind()
        for worker in self._workers:
            worker.start()
        self.listening = True
        self._accept_thread = threading.Thread(target=self._accept, name="accept", daemon=True)
        self._accept_thread.start()
        threading.Thread(target=self._republish, args=(saved,), name="republish",
                         daemon=True).start()
        self.hotplug.start()
        log.info("serving CNI calls on %s (%d at once)", self.socket_path, self.max_parallel)

    def _republish(self, saved: list[str]) -> None:
        """Once the pod cache is listed: queue the network-status writes an earlier
        daemon left pending in `cni_dir` for the containers `saved` (podapi.republish)."""
        self.pods.synced.wait()
        if not self.listening:
            return
        try:
            queued = republish(StateStore(self.cni_dir), saved, self.pods,
                               self.publisher.submit)
        except Exception:  # a bug: logged; the calls are served all the same
            log.exception("re-sending pending network-status writes failed")
            return
        log.info("state dir %s: %d network-status write(s) left by an earlier daemon re-sent",
                 self.cni_dir, queued)

    def alive(self) -> bool:
        """The accept loop runs (healthz)."""
        return self._accept_thread is not None and self._accept_thread.is_alive()

    def ready(self) -> bool:
        """`readiness`'s verdict (readyz)."""
        return self.readiness()[0]

    def readiness(self) -> tuple[bool, str]:
        """(ready, why not): listening, both caches listed, and the pool not saturated
        (every worker busy and a call waiting for one) for more than
        `saturation_timeout` seconds; ready again as soon as no call waits for a worker.
        /readyz answers 200 or 503 with it (metrics.py)."""
        if not self.listening:
            return False, "socket not listening"
        if not (self.pods.synced.is_set() and self.nads.synced.is_set()):
            return False, "caches not listed yet"
        saturated = self.calls.saturated_for()
        if saturated > self.saturation_timeout:
            return False, (f"every worker (--max-parallel {self.max_parallel}) has been busy "
                           f"with calls waiting for one for {saturated:.0f} s (more than "
                           f"--saturation-timeout {self.saturation_timeout:g} s); "
                           f"{self.calls.waiting()} call(s) waiting")
        return True, "ok"

    def stop(self, timeout: float) -> None:
        """Stop accepting, finish the calls in progress and the queued writes (each for
        up to `timeout` s), remove the socket."""
        self.listening = False
        if self._listener is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.socket_path)
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)
            self._listener.close()
        self.readers.shutdown(wait=True, cancel_futures=False)  # each queues its call
        self.calls.close()
        for worker in self._workers:  # they run what waits, then end
            if worker.is_alive():
                worker.join()
        self.hotplug.stop()
        if not self.publisher.drain(timeout):
            log.warning("stopping with %d network-status/event write(s) not sent",
                        self.publisher.pending())
        self.pods.stop()
        self.nads.stop()

    def _bind(self) -> socket.socket:
        """The listening socket in a 0700 dir of ours, 0600 from the start."""
        try:
            socket_dir(self.socket_dir)
            clear_stale(self.socket_path)
        except SocketError as e:
            raise DaemonError(f"cannot listen on {self.socket_path}: {e}") from None
        umask = os.umask(0o077)
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
            s.bind(self.socket_path)
            os.chmod(self.socket_path, 0o600)
            s.listen(128)
            return s
        except OSError as e:
            raise DaemonError(f"cannot listen on {self.socket_path}: {e.strerror or e}") from None
        finally:
            os.umask(umask)

    def _accept(self) -> None:
        assert self._listener is not None
        while self.listening:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                if self.listening:
                    log.exception("accept on %s failed", self.socket_path)
                    time.sleep(0.1)
                continue
            try:
                self.readers.submit(self._admit, conn)
            except RuntimeError:  # the readers are shut down: stopping
                conn.close()

    # -- one call

    def _admit(self, conn: socket.socket) -> None:
        """Check the peer, read its request and queue it (or refuse it, code 11)."""
        try:
            pid, uid, _ = struct.unpack("3i", conn.getsockopt(
                socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
            if uid != 0:
                log.warning("refused a connection on %s from pid %d, uid %d: only root (the "
                            "container runtime) may call", self.socket_path, pid, uid)
                conn.close()
                return
            environ, stdin = read_request(conn)
        except (OSError, ValueError) as e:
            log.warning("bad request on %s: %s", self.socket_path, e)
            conn.close()
            return
        call = Call(conn, pid, environ, stdin, time.monotonic())
        command = environ.get("CNI_COMMAND", "")
        sandbox = environ.get("CNI_CONTAINERID") if command in SANDBOX_COMMANDS else None
        try:
            self.calls.put(sandbox, call)
        except Refused as e:
            self._refuse(call, e)
        except ValueError:  # the queue is closed: stopping
            conn.close()

    def _refuse(self, call: Call, why: Refused) -> None:
        """Answer a call the queue refused: code 11 naming the pod, the call and the
        bound; counted in requests_total and requests_refused_total."""
        command = call.environ.get("CNI_COMMAND", "") or "?"
        cid = call.environ.get("CNI_CONTAINERID", "")
        sandbox = f" of sandbox {cid[:12]}" if cid else ""
        if why.bound == "sandbox":
            details = ("the node daemon runs one call of a sandbox at a time, and bounds "
                       "those that wait (docs/modes.md, \"Bounded work per pod\"); the "
                       "runtime's retry is served once that sandbox's calls have ended")
        else:
            details = (f"every worker (--max-parallel {self.max_parallel}) is busy and the "
                       "queue is full (--max-queued): try again later")
        error = TryAgain(f"{describe(call.environ)}: {command}{sandbox} not run by the "
                         f"node daemon: {why}", details)
        log.warning("%s", error.msg)
        with self.stats.lock:
            self.stats.refused[why.bound] += 1
        with call.conn as conn:
            try:
                conn.sendall(answer(1, error.to_dict(cni_version_of(call.stdin))))
            except OSError as e:
                log.info("%s: the refusal could not be sent (the shim is gone: %s)",
                         describe(call.environ), e)
        self.stats.record(command, str(error.code), time.monotonic() - call.arrived)

    def _work(self) -> None:
        """A worker: run the queue's calls until it is closed and empty."""
        while (taken := self.calls.get()) is not None:
            slot, call = taken
            try:
                self._run(call)
            except Exception:  # a bug: logged; the worker goes on
                log.exception("serving a call from pid %d failed", call.pid)
            finally:
                self.calls.done(slot)

    def _run(self, call: Call) -> None:
        """Serve one queued call and send its answer."""
        with call.conn as conn:
            doc, code = self.serve(call.environ, call.stdin, lambda: peer_gone(conn),
                                   call.arrived)
            try:
                conn.sendall(answer(code, doc))
            except OSError as e:
                log.warning("%s: %s %s: the answer could not be sent (the shim is gone: %s)",
                            describe(call.environ), call.environ.get("CNI_COMMAND"),
                            call.environ.get("CNI_CONTAINERID"), e)

    def serve(self, environ: dict[str, str], stdin: bytes,
              gone: Callable[[], bool] | None = None,
              arrived: float | None = None) -> tuple[dict[str, Any] | None, int]:
        """Run one CNI call (commands.call.cni_main with this daemon's orchestrator): (document
        for stdout or None, exit status). gone: () -> True once the caller stopped
        waiting (peer_gone; an ADD is then abandoned at its next step, add.py);
        arrived: time.monotonic() of its arrival, the start of its duration (default:
        now). Never raises."""
        started = time.monotonic() if arrived is None else arrived
        command = environ.get("CNI_COMMAND", "")
        cid = environ.get("CNI_CONTAINERID", "")
        saw_gone: list[bool] = []

        def abandoned() -> bool:
            if gone is None or not gone():
                return False
            saw_gone.append(True)
            return True

        with self.stats.lock:
            self.in_flight += 1
        try:
            seen: list[NetConf] = []
            # GC tells the delegates which attachments are valid from the states it read:
            # no hot-plug ADD may come in between (hotplug.Hotplugger.exclusive)
            with self.hotplug.exclusive if command == "GC" else contextlib.nullcontext():
                doc, code = cni_main(environ, stdin, Orchestrator(
                    api=lambda conf: self._api(environ, conf, seen),
                    executor=self.executor, clock=time.time,
                    drop_writes=self.publisher.cancel, abandoned=abandoned))
            if saw_gone and code != 0:
                with self.stats.lock:
                    self.stats.abandoned += 1
            if command == "ADD" and code == 0 and seen:
                self._count_attachments(seen[0], cid)
                if seen[0].hotplug:
                    self._track(environ, seen[0], cid)
            elif command == "DEL" and code == 0:
                self.hotplug.untrack(cid)
        finally:
            with self.stats.lock:
                self.in_flight -= 1
        result = "0" if code == 0 else str((doc or {}).get("code", "?"))
        elapsed = time.monotonic() - started
        self.stats.record(command or "?", result, elapsed)
        log.info("timing: %s took %.4f s (daemon), result %s", command, elapsed, result)
        return doc, code

    def _api(self, environ: dict[str, str], conf: NetConf, seen: list[NetConf]) -> CachedPodApi:
        """The API seam of one operation (Orchestrator.api)."""
        seen.append(conf)
        try:
            uid = dict(parse_cni_args(environ.get("CNI_ARGS", ""))).get("K8S_POD_UID", "")
        except CniError:  # cni_main refused bad CNI_ARGS before asking for the API
            uid = ""
        cid = environ.get("CNI_CONTAINERID", "")
        if os.path.normpath(conf.cni_dir) != os.path.normpath(self.cni_dir):
            with self.stats.lock:
                first = conf.cni_dir not in self._other_dirs
                self._other_dirs.add(conf.cni_dir)
            if first:
                log.warning("a call's cniDir %s is not the daemon's --cni-dir %s: a "
                            "network-status of it not sent when the daemon stops is not "
                            "re-sent when it starts", conf.cni_dir, self.cni_dir)
        return CachedPodApi(
            self.pods, self.nads,
            lambda: self.client.kube(conf.api_timeout, "apiTimeout"), uid,
            lambda what, send, queue: self.publisher.submit(cid, what, send, queue),
            StateStore(conf.cni_dir), cid, self.stats.misses, self.stats.lock, self.events,
            self.max_nad_config)

    def _nad_changed(self, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        """The NAD cache's listener: a NAD whose config the cache refused (over
        max_nad_config, cache.REFUSED) gets a Warning `ConfigTooLarge` Event, queued,
        once per version of it (a relist of the same one sends nothing; the recorder
        raises the count of the same message)."""
        if new is None or REFUSED not in new:
            return
        meta = new.get("metadata") or {}
        if old is not None and REFUSED in old and \
                (old.get("metadata") or {}).get("resourceVersion") == meta.get("resourceVersion"):
            return
        namespace, name = meta.get("namespace", ""), meta.get("name", "")
        involved: InvolvedObject = {"apiVersion": f"{NAD_GROUP}/{NAD_VERSION}", "kind": NADS,
                                    "namespace": namespace, "name": name,
                                    "uid": meta.get("uid", "")}
        refused = new[REFUSED]
        message = (f"spec.config is {refused['bytes']} bytes, more than the bound of "
                   f"{refused['limit']} bytes of netattach's node daemon "
                   "(--max-nad-config-bytes): it is not kept, and a pod selecting this "
                   "NetworkAttachmentDefinition fails with CNI error 7")
        log.warning("NetworkAttachmentDefinition %s/%s: %s", namespace, name, message)
        self.publisher.submit(
            f"nad:{namespace}/{name}", f"event ConfigTooLarge on NetworkAttachmentDefinition "
            f"{namespace}/{name}",
            lambda kube: self.events.send(kube, involved, "Warning", "ConfigTooLarge", message),
            WARNINGS)

    def _track(self, environ: dict[str, str], conf: NetConf, cid: str) -> None:
        """Hand a sandbox ADDed with `hotplug` to the hot-plug worker."""
        try:
            args = dict(parse_cni_args(environ.get("CNI_ARGS", "")))
        except CniError:
            return
        namespace, name = args.get("K8S_POD_NAMESPACE"), args.get("K8S_POD_NAME")
        if namespace and name:
            self.hotplug.track(conf.cni_dir, cid, (namespace, name))

    def _count_attachments(self, conf: NetConf, cid: str) -> None:
        try:
            state = StateStore(conf.cni_dir).load(cid)
        except Exception:  # the metric only; the ADD succeeded
            return
        if state is not None:
            with self.stats.lock:
                self.stats.attachments += len(state.attempted())
