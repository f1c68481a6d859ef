"""The orchestrator's seams: what ADD, DEL, CHECK, STATUS and GC are given, not built.

The commands receive what they must not build themselves, as libcni's CNIConfig receives its
invoke.Exec:
* `api`: NetConf -> PodApi, a client for one operation (thin mode: `kube.Kube`, live
  requests within one apiTimeout budget; the node daemon: its watch caches);
* `executor`: finds and runs child plugins (the process executor, or a fake);
* `clock`: epoch seconds (tombstones, the time DEL's retry window started);
* `monotonic`: CLOCK_MONOTONIC seconds (how long DEL's retry window has run);
* `libcni_cache_dir`: the runtime's libcni cache dir (cni.libcni_cache), read by a DEL
  without saved state;
* `drop_writes`: container ID -> None, called as every DEL of a container begins (the
  runtime's, and GC's of a stale container), before its lock is taken: the API seam's
  writes still queued for it are dropped (the node daemon: `Publisher.cancel`, which
  also waits for a status write being sent, not for an Event). Thin mode queues none
  (a no-op);
* `abandoned`: () -> True once whoever asked for the operation stopped waiting for
  its answer (the node daemon: the shim's connection closed, server.peer_gone). An
  ADD asks it between its steps, never while a child runs, and once it is true stops
  and rolls back as a failed ADD does (add.py, "Abandoned"). Thin mode: never (the
  runtime's kill ends the process itself).
Thin mode (`thin()`) hands it the live client and the process executor; unit tests
hand it fakes and table-test ADD rollback and DEL recovery without root.

The commands live in `add`, `delete`, `check`, `garbage` and `retired`; each takes the
orchestrator as its first argument, and `call.run_command` chooses one. Hot-plug's
change of a running sandbox (`hotplug`, run by the node daemon, not by a runtime) takes
a function making the orchestrator of that sandbox's operation from the CNI variables
of its ADD. This module imports none of them (they import it, for annotations only),
so the commands and their seams form no import cycle.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..cni import chain, invoke
from ..cni.request import CniRequest
from ..kube.api import PodApi
from ..node.libcni_cache import CACHE_DIR
from ..node.state import SavedAttachment
from ..node.statestore import StateStore
from ..spec.netconf import NetConf

TYPE_CHECKING = False  # typing is not imported on the exec'd path (cli.py)
if TYPE_CHECKING:
    from typing import Any


def _thin_api(conf: NetConf) -> PodApi:
    from ..kube.client import Kube
    return Kube(conf.kubeconfig, conf.api_timeout, "apiTimeout")


def _nothing_queued(container_id: str) -> None:
    """Thin mode's drop_writes: it sends every write before answering."""


def _never() -> bool:
    """Thin mode's abandoned: the runtime that gives up kills the process itself."""
    return False


@dataclass(frozen=True)
class Orchestrator:
    """The seams of one netattach (see the module doc)."""
    api: Callable[[NetConf], PodApi] = _thin_api
    executor: invoke.Executor = field(default=invoke.PROCESS_EXECUTOR)
    clock: Callable[[], float] = time.time
    monotonic: Callable[[], float] = time.monotonic
    libcni_cache_dir: str = CACHE_DIR
    drop_writes: Callable[[str], None] = _nothing_queued
    abandoned: Callable[[], bool] = _never

    def store(self, conf: NetConf) -> StateStore:
        """The state files of `conf.cni_dir`."""
        return StateStore(conf.cni_dir, self.clock)

    def runtime_conf(self, req: CniRequest, conf: NetConf, ifname: str,
                     capability_args: dict[str, Any], netns: str | None = None
                     ) -> chain.RuntimeConf:
        """The RuntimeConf of one attachment: the request's container and netns (or
        `netns`), the attachment's CNI_IFNAME and runtimeConfig, CNI_ARGS for children
        (`child_args`), plugins looked up in binDir then CNI_PATH, delegateTimeout."""
        return chain.RuntimeConf(
            container_id=req.container_id, netns=req.netns if netns is None else netns,
            ifname=ifname, args=child_args(req), capability_args=capability_args,
            cni_path=req.path, bin_dirs=(conf.bin_dir,), timeout=conf.delegate_timeout,
            executor=self.executor)

    def saved_runtime_conf(self, req: CniRequest, conf: NetConf, att: SavedAttachment,
                           netns: str | None = None) -> chain.RuntimeConf:
        """runtime_conf for a saved attachment."""
        return self.runtime_conf(req, conf, att.ifname, att.capability_args, netns)

    def bare_runtime_conf(self, req: CniRequest, conf: NetConf) -> chain.RuntimeConf:
        """The RuntimeConf of STATUS and GC: no container, only the plugin lookup."""
        return chain.RuntimeConf(container_id="", netns="", ifname="", cni_path=req.path,
                                 bin_dirs=(conf.bin_dir,), timeout=conf.delegate_timeout,
                                 executor=self.executor)


def thin() -> Orchestrator:
    """Thin mode: the live API client and the process executor."""
    return Orchestrator()


def child_args(req: CniRequest) -> tuple[tuple[str, str], ...]:
    """CNI_ARGS for every child: IgnoreUnknown=1 first, then the runtime's own pairs.

    CONVENTIONS.md "CNI_ARGS": plugins reject unknown keys unless IgnoreUnknown is set;
    the K8S_* keys the runtime passed reach the children unchanged.
    """
    return (("IgnoreUnknown", "1"),) + tuple((k, v) for k, v in req.args if k != "IgnoreUnknown")
