"""`netattach daemon`: thick mode's node daemon (the DaemonSet runs it after
`netattach install --mode thick`).

It keeps watch-backed caches of this node's pods and of every
NetworkAttachmentDefinition (`cache`), serves the shim's CNI calls on a unix socket
with the same orchestrator as thin mode (`server`; the API seam `podapi`), and offers
/healthz, /readyz and Prometheus /metrics on a local port (`metrics`).
The shim (src/netattach_shim) is what the runtime execs; it falls back to thin mode
for DEL, GC and CHECK when the daemon does not answer.

Imported only for `netattach daemon` (cli.SUBCOMMANDS), never on the CNI path.
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
from collections.abc import Callable
from typing import Any

from ..logsetup import LOG_LEVELS, setup_logging
from ..netconf import DEFAULT_CNI_DIR

log = logging.getLogger("netattach.daemon")

DEFAULT_SOCKET_DIR = "/run/netattach"
DEFAULT_METRICS_PORT = 9095


def _positive(kind: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse type: `kind(text)`, refused unless > 0."""
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
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
    parser.add_argument("--max-parallel", type=_positive(int), default=8,
                        help="CNI calls served at once, each running its children "
                             "(default: %(default)s)")
    parser.add_argument("--api-timeout", type=_positive(float), default=5.0,
                        help="seconds, the budget of each try of a queued network-status "
                             "PATCH or Event (default: %(default)s)")
    parser.add_argument("--metrics-address", default="127.0.0.1",
                        help="address of /healthz, /readyz and /metrics (default: %(default)s)")
    parser.add_argument("--metrics-port", type=int, default=DEFAULT_METRICS_PORT,
                        help="their port; 0 picks a free one (logged) (default: %(default)s)")
    parser.add_argument("--log-file", default=None, help="log file (default: stderr only)")
    parser.add_argument("--log-level", choices=tuple(LOG_LEVELS), default="info",
                        help="(default: %(default)s)")
    parser.add_argument("--shutdown-timeout", type=_positive(float), default=20.0,
                        help="seconds to finish calls and queued writes on SIGTERM "
                             "(default: %(default)s)")


def run(args: argparse.Namespace) -> int:
    """`netattach daemon`: runs until SIGTERM/SIGINT; 0 then, 1 when it cannot start."""
    import faulthandler
    faulthandler.enable()  # a crash in a C extension leaves every thread's stack on stderr
    setup_logging(args.log_file, args.log_level, True, None)
    if not args.node_name:
        log.error("no node name: set --node-name or $NODE_NAME (the DaemonSet passes "
                  "spec.nodeName through the downward API)")
        return 1
    from . import metrics
    from .cache import node_caches
    from .server import Daemon, DaemonError

    pods, nads = node_caches(args.kubeconfig, args.node_name)
    daemon = Daemon(pods, nads, args.kubeconfig, args.socket_dir, args.max_parallel,
                    args.api_timeout, args.cni_dir)
    stop = threading.Event()
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda signum, _frame: stop.set())
    try:
        daemon.start()
        http = metrics.serve(daemon, args.metrics_address, args.metrics_port)
    except (DaemonError, OSError) as e:
        log.error("cannot start: %s", e)
        return 1
    log.info("node %s; /healthz, /readyz, /metrics on %s:%d", args.node_name,
             args.metrics_address, http.server_port)
    while not stop.wait(1.0):
        pass
    log.info("stopping: finishing the calls in progress and the queued writes")
    http.shutdown()
    daemon.stop(args.shutdown_timeout)
    log.info("stopped")
    logging.shutdown()
    return 0
