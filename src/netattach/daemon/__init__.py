"""`netattach daemon`: thick mode's node daemon (the DaemonSet runs it after
`netattach install --mode thick`).

It keeps watch-backed caches of this node's pods and of every
NetworkAttachmentDefinition (`cache`), serves the shim's CNI calls on a unix socket
with the same orchestrator as thin mode (`server`; the API seam `podapi`), and offers
/healthz, /readyz and Prometheus /metrics on a local port (`metrics`). With `--dra` it is
also the node side of DRA driver cni.dra.networking.x-k8s.io (`dra`: kubelet plugin
registration, NodePrepareResources, the node's ResourceSlice).
The shim (src/netattach_shim) is what the runtime execs; it falls back to thin mode
for DEL, GC and CHECK when the daemon does not answer.

A watch that fails (the API server restarting, refusing, unreachable) is resumed after
a pause that grows with the failures in a row (cache.BACKOFF: 0.5 s doubling to 2 min),
never beyond the time since the first of them, and is drawn with full jitter, uniform
between 0.05 s and that step (cache.reconnect_pause): when the API server comes back,
every node's daemon does not LIST and WATCH again in the same instant but spread over
the step it had reached, and within it: back within about the outage's length, at most
2 min (a Retry-After longer than the pause is honoured, up to 10 min).

Imported only for `netattach daemon` (cli.SUBCOMMANDS), never on the CNI path.
"""
from __future__ import annotations

import argparse
import logging
import os
import platform
import signal
import threading
from collections.abc import Callable
from typing import Any

from ..node.logsetup import LOG_LEVELS, setup_logging
from ..spec.netconf import DEFAULT_CNI_DIR, LOG_FORMAT_NAMES

log = logging.getLogger("netattach.daemon")

DEFAULT_SOCKET_DIR = "/run/netattach"
DEFAULT_METRICS_PORT = 9095


def _number(kind: Callable[[str], Any], zero: bool = False) -> Callable[[str], Any]:
    """An argparse type: `kind(text)`, refused unless > 0 (>= 0 with `zero`)."""
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if value < 0 or (value == 0 and not zero):
            raise argparse.ArgumentTypeError(
                f"must not be negative: {text!r}" if zero else f"must be positive: {text!r}")
        return value
    return parse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of `netattach daemon`; each documents its default."""
    parser.add_argument("--node-name", default=os.environ.get("NODE_NAME"),
                        help="this node's name: the pods cached are those with spec.nodeName "
                             "equal to it (default: $NODE_NAME; required)")
    parser.add_argument("--kubeconfig", default=None,
                        help="kubeconfig for the watches, live reads and writes (default: "
                             "in-cluster ServiceAccount, else $KUBECONFIG, else ~/.kube/config)")
    parser.add_argument("--socket-dir", default=DEFAULT_SOCKET_DIR,
                        help="dir of the socket netattach.sock (made 0700; the conflist's "
                             "daemonSocketDir) (default: %(default)s)")
    parser.add_argument("--cni-dir", default=DEFAULT_CNI_DIR,
                        help="netattach's state dir, the conflist's cniDir: network-status "
                             "writes an earlier daemon left unsent there are sent at start "
                             "(default: %(default)s)")
    parser.add_argument("--chroot-dir", default=None,
                        help="run every child plugin with this dir as its root directory "
                             "(the host's / as mounted in the daemon's container, e.g. "
                             "/hostroot): plugins are looked up under <chroot-dir>/<binDir> "
                             "without a symlink leading out of it, and exec'd as "
                             "<binDir>/<type> by a helper chrooted there once (`netattach "
                             "spawner`), so they see the "
                             "host's files, tools and /proc as a runtime-exec'd plugin does "
                             "(Multus' chrootDir). Needs a privileged container with hostPID "
                             "and the host's /proc under the dir. Default: "
                             "none, children run in the daemon's own root")
    parser.add_argument("--max-parallel", type=_number(int), default=8,
                        help="CNI calls served at once, each running its children; one "
                             "sandbox's calls run one at a time, the others wait without "
                             "taking one (default: %(default)s)")
    parser.add_argument("--max-queued", type=_number(int, zero=True), default=256,
                        help="calls that may wait for a worker in all; one more is refused "
                             "with CNI code 11 (try again), as is a fifth call waiting for "
                             "one sandbox (default: %(default)s)")
    parser.add_argument("--saturation-timeout", type=_number(float), default=30.0,
                        help="seconds every worker may stay busy with calls waiting for "
                             "one before /readyz answers 503; it answers 200 again once "
                             "no call waits for a worker (default: %(default)s)")
    parser.add_argument("--api-timeout", type=_number(float), default=5.0,
                        help="seconds, the budget of each try of a queued network-status "
                             "PATCH or Event (default: %(default)s)")
    parser.add_argument("--max-nad-config-bytes", type=_number(int),
                        default=256 * 1024,
                        help="bytes: a NetworkAttachmentDefinition whose spec.config is "
                             "larger is not kept in the daemon's cache; it gets a Warning "
                             "event ConfigTooLarge, and a pod selecting it fails with CNI "
                             "error 7 naming it and this bound (default: %(default)s)")
    parser.add_argument("--metrics-address", default=os.environ.get("HOST_IP") or "127.0.0.1",
                        help="address /healthz, /readyz and /metrics listen on, IPv4 or IPv6 "
                             "('::1' or '[::1]'; '0.0.0.0' or '::' for every address) "
                             "(default: $HOST_IP, the node's IP deploy/thick passes from "
                             "status.hostIP; else 127.0.0.1)")
    parser.add_argument("--metrics-port", type=int, default=DEFAULT_METRICS_PORT,
                        help="their port; 0 picks a free one (logged) (default: %(default)s)")
    parser.add_argument("--metrics-max-connections", type=_number(int), default=64,
                        help="connections to those endpoints open at once at most; one more "
                             "closes the oldest still waiting for its request (a probe is "
                             "always answered) (default: %(default)s)")
    parser.add_argument("--metrics-idle-timeout", type=_number(float), default=10.0,
                        help="seconds a connection to those endpoints has to send its request, "
                             "and again to take its answer, before it is closed "
                             "(default: %(default)s)")
    parser.add_argument("--log-file", default=None, help="log file (default: stderr only)")
    parser.add_argument("--log-level", choices=tuple(LOG_LEVELS), default="info",
                        help="(default: %(default)s)")
    parser.add_argument("--log-format", choices=LOG_FORMAT_NAMES, default=LOG_FORMAT_NAMES[0],
                        help="text lines, or one JSON object a line with the pod, sandbox "
                             "and network of each call's lines as fields "
                             "(docs/configuration.md, \"Logs\") (default: %(default)s)")
    dra = parser.add_argument_group(
        "DRA driver", "the node side of the DRA driver cni.dra.networking.x-k8s.io "
        "(daemon/dra.py; docs/architecture.md, \"DRA kubelet plugin\")")
    dra.add_argument("--dra", action="store_true",
                     help="register with the kubelet as DRA driver cni.dra.networking.x-k8s.io, "
                          "serve NodePrepareResources/NodeUnprepareResources and publish this "
                          "node's ResourceSlice (needs deploy/thick/rbac.yaml's resource.k8s.io "
                          "rules) (default: off)")
    dra.add_argument("--dra-registry-dir", default=None,
                     help="the kubelet's plugin registration dir, where "
                          "cni.dra.networking.x-k8s.io-reg.sock is made (default: "
                          "/var/lib/kubelet/plugins_registry)")
    dra.add_argument("--dra-plugin-dir", default=None,
                     help="dir of the DRA socket dra.sock, made 0700 (default: "
                          "/var/lib/kubelet/plugins/cni.dra.networking.x-k8s.io)")
    dra.add_argument("--dra-interfaces", default="",
                     help="comma-separated shell patterns of the host interfaces that get "
                          "devices in the ResourceSlice, e.g. 'eth*,ens1f0' (default: every "
                          "interface backed by a device, /sys/class/net/<name>/device)")
    dra.add_argument("--dra-devices-per-interface", type=_number(int), default=8,
                     help="devices per selected host interface, each one attachment using it "
                          "as master (default: %(default)s)")
    dra.add_argument("--dra-generic-devices", type=_number(int, zero=True), default=16,
                     help="devices cni-0, cni-1, ... for attachments that need nothing of "
                          "the node (default: %(default)s; at most 128 devices in all)")
    dra.add_argument("--dra-resync", type=_number(float), default=10.0,
                     help="seconds between looks at the host interfaces; the ResourceSlice "
                          "is updated when its devices change (default: %(default)s)")
    parser.add_argument("--hotplug-interval", type=_number(float), default=2.0,
                        help="seconds: at most one hot-plug change per pod in that time; "
                             "edits in between are applied together (daemon/hotplug.py; "
                             "sandboxes ADDed with `hotplug` in the conflist) "
                             "(default: %(default)s)")
    parser.add_argument("--hotplug-backoff-initial", type=_number(float), default=10.0,
                        help="seconds: a hot-plug step that failed (an element's ADD, an "
                             "attachment's DEL) is not tried again before this, whatever "
                             "edits come in between; each failure in a row doubles the wait "
                             "(the kubelet's CrashLoopBackOff rule) (default: %(default)s)")
    parser.add_argument("--hotplug-backoff-max", type=_number(float), default=300.0,
                        help="seconds, the cap of that wait; a step that has not failed for "
                             "twice this starts again at --hotplug-backoff-initial "
                             "(default: %(default)s)")
    parser.add_argument("--shutdown-timeout", type=_number(float), default=20.0,
                        help="seconds to finish calls and queued writes on SIGTERM "
                             "(default: %(default)s)")


def run(args: argparse.Namespace) -> int:
    """`netattach daemon`: runs until SIGTERM/SIGINT; 0 then, 1 when it cannot start."""
    import faulthandler
    faulthandler.enable()  # a crash in a C extension leaves every thread's stack on stderr
    setup_logging(args.log_file, args.log_level, True, None, args.log_format)
    from ..buildinfo import describe
    log.info("netattach daemon %s, Python %s", describe(), platform.python_version())
    if not args.node_name:
        log.error("no node name: set --node-name or $NODE_NAME (the DaemonSet passes "
                  "spec.nodeName through the downward API)")
        return 1
    from ..cni import chroot as chroot_children
    from ..cni import invoke
    from . import metrics
    from .backoff import Backoff
    from .cache import node_caches
    from .dra import DraError  # grpc is imported by dra.KubeletPlugin.start, with --dra only
    from .server import Daemon, DaemonError
    executor: invoke.Executor = invoke.PROCESS_EXECUTOR
    if args.chroot_dir:
        chroot = chroot_children.ChrootExecutor(args.chroot_dir)
        problem = chroot.problem()
        if problem:
            log.error("cannot run children in --chroot-dir %s: %s", args.chroot_dir, problem)
            return 1
        try:
            chroot.start()
        except OSError as e:
            log.error("cannot start the spawner that runs children in --chroot-dir %s: %s",
                      args.chroot_dir, e)
            return 1
        log.info("children run in the root %s (--chroot-dir), exec'd by the spawner, pid %s",
                 chroot.root, chroot.spawner.pid)
        executor = chroot
    if args.hotplug_backoff_initial > args.hotplug_backoff_max:
        log.error("--hotplug-backoff-initial (%g) is more than --hotplug-backoff-max (%g)",
                  args.hotplug_backoff_initial, args.hotplug_backoff_max)
        return 1
    pods, nads = node_caches(args.kubeconfig, args.node_name, args.max_nad_config_bytes)
    daemon = Daemon(pods, nads, args.kubeconfig, args.socket_dir, args.max_parallel,
                    args.api_timeout, args.cni_dir, args.hotplug_interval, executor,
                    args.max_queued, args.saturation_timeout,
                    Backoff(args.hotplug_backoff_initial, args.hotplug_backoff_max),
                    args.max_nad_config_bytes)
    stop = threading.Event()
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda signum, _frame: stop.set())
    _import_before_threads(args.dra)
    try:
        daemon.start()
        if args.dra:
            daemon.dra = _kubelet_plugin(args, daemon)
            daemon.dra.start()
        http = metrics.serve(daemon, args.metrics_address, args.metrics_port,
                             args.metrics_max_connections, args.metrics_idle_timeout)
    except (DaemonError, DraError, OSError) as e:
        log.error("cannot start: %s", e)
        if daemon.dra is not None:
            daemon.dra.stop()
        return 1
    host = http.sock.getsockname()[0]
    log.info("node %s; /healthz, /readyz, /metrics on %s:%d (at most %d connections, "
             "closed after %g s idle)", args.node_name,
             f"[{host}]" if ":" in host else host, http.server_port,
             args.metrics_max_connections, args.metrics_idle_timeout)
    while not stop.wait(1.0):
        pass
    log.info("stopping: finishing the calls in progress and the queued writes")
    http.shutdown()
    if daemon.dra is not None:
        daemon.dra.stop()
    daemon.stop(args.shutdown_timeout)
    if isinstance(executor, chroot_children.ChrootExecutor):
        executor.close()
    log.info("stopped")
    logging.shutdown()
    return 0


def _import_before_threads(dra: bool) -> None:
    """Import, in the main thread before any other runs, every library module the
    daemon's threads would otherwise be the first to import, several at the same moment:

    * the watch threads (both connect at once), which use lightkube for a kubeconfig
      kube/transport.py does not read: lightkube's adapter and kubeconfig loader,
      httpx2, asyncio (which lightkube's adapter loads), and httpcore2, which httpx2
      imports only when a client makes its first connection, with anyio, h11, h2 and
      truststore behind it, and the "idna" codec (encodings.idna, stringprep) that
      encodes the API server's host name; ijson and its backend, with which a LIST is
      parsed as it streams in (cache.parse_list);
    * with `--dra`: grpc and the DRA plugin's generated modules (grpc loads asyncio
      too), whose server threads answer the kubelet as soon as the sockets exist;
    * the CNI workers: ctypes, through which node/netns.py enters the pod's netns (the
      "netns-mtu" thread) on Python < 3.12.

    When two threads import one module graph that has a cycle at once, CPython hands
    the second a module still being initialized rather than deadlock ("partially
    initialized module 'asyncio.subprocess' has no attribute 'create_subprocess_exec'"):
    seen as a daemon with --dra exiting at start, its two watch threads failing alike.
    netattach's own modules, which threads still import on first use (the CNI
    commands', the API client's), have no import cycle (tests/unit/test_import_check.py).
    Nothing else differs between the features: metrics, hot-plug and --chroot-dir start
    threads that import nothing new. tests/e2e/test_daemon_start.py checks all of it
    under a tracer of first imports, and starts the built daemon 20 times under CPU
    load."""
    import asyncio  # noqa: F401
    import ctypes  # noqa: F401
    import encodings.idna  # noqa: F401

    import httpcore2  # noqa: F401
    import httpx2  # noqa: F401
    import ijson  # noqa: F401 (its backend is chosen at import: the whole graph loads)
    import lightkube.config.client_adapter  # noqa: F401
    import lightkube.config.kubeconfig  # noqa: F401
    if dra:
        from . import dra as dra_module
        dra_module.grpc_modules()


def _kubelet_plugin(args: argparse.Namespace, daemon: Any) -> Any:
    """The DRA kubelet plugin (dra.KubeletPlugin) of `--dra`, on the daemon's API client.
    Imported here only: grpc is loaded by `--dra` alone."""
    from . import dra
    return dra.KubeletPlugin(
        args.node_name, daemon.client.kube, args.api_timeout,
        registry_dir=args.dra_registry_dir or dra.DEFAULT_REGISTRY_DIR,
        plugin_dir=args.dra_plugin_dir or dra.DEFAULT_PLUGIN_DIR,
        interfaces=[p.strip() for p in args.dra_interfaces.split(",") if p.strip()],
        per_interface=args.dra_devices_per_interface, generic=args.dra_generic_devices,
        resync=args.dra_resync)
