"""Uninstall or restart: what the installer does when it is stopped (SIGTERM, SIGINT).

A stop is an uninstall only when the API server says netattach is no longer installed;
any other stop (a restart of the pod, a rolling update, a crash, an eviction, a node
drain) leaves everything in place, so the node keeps attaching pods with netattach
until the next installer pod takes over. The rule (`judge`) reads the answer to a GET
of the installer's own DaemonSet (`--daemonset`, in the pod's namespace), made with the
pod's ServiceAccount token as it is at the stop:

* 200 without `deletionTimestamp`: keep (the DaemonSet stays, its next pod takes over);
* 200 with `deletionTimestamp`: uninstall (being deleted: foreground deletion, a
  finalizer);
* 404: uninstall (deleted: `kubectl delete -k` deletes it with background propagation,
  which removes it before the garbage collector deletes its pods);
* 401: uninstall (the token is rejected: its ServiceAccount was deleted, which
  `kubectl delete -k` does too);
* 403: uninstall (the RBAC that grants the GET was deleted);
* no answer (unreachable, timed out, 429 or 5xx after the retries, any other status):
  asked again until `--uninstall-timeout`, then keep, the safe default (nothing is
  removed that pods may need).

Before each try: when another installer holds the presence lock (loop.Installer.
hold_presence), keep: it owns the files now. The least privilege for the GET is
`get` on that one DaemonSet (`resourceNames`), a Role in its namespace
(deploy/base/rbac.yaml, `netattach-installer`).

The rule is also asked once an installer has installed (`at_start`): a stop signal the
kubelet sent while the installer process was starting is lost (the container's PID 1
ignores a signal it has no handler for yet), so an installer whose pod the uninstall
deleted as it started never hears its stop. An answer that cannot come from a
misconfiguration (401: the token this pod was just given is rejected; the DaemonSet
being deleted) retires the node once the next try (a poll later) says it again, so a
passing 401 of an API server that could not check the token is not taken for one; 404
and 403 (also a wrong `--daemonset` or a missing Role) are asked again for
`RECHECK_SECONDS`, within which an uninstall that deletes the DaemonSet or the RBAC
first (helm) deletes the ServiceAccount too; so is no answer (the API server busy with
the uninstall's own deletions), since this stop may be the one that never comes.

Known misreadings (docs/install-lifecycle.md): a force-deleted installer pod
(`--force --grace-period=0`) has its pod-bound token rejected at once, which reads as
an uninstall (the node is retired until the DaemonSet's next pod installs again); a
node taken out of the DaemonSet (nodeSelector, affinity, taints) reads as a restart
(the files stay).

On an uninstall (`retire`), the conflist becomes the retired one (retired.py): the
same plugin entry with `type` `netattach` (thin: the node daemon goes away too) and
`retired: {"conflist": <its host path>}`, written under the presence lock held
exclusively; then nodefiles.remove_when_unused removes netattach's files at once if
no sandbox netattach attached is left (waiting, within `--uninstall-timeout`, for a
CNI operation that runs); otherwise the DEL of the last such sandbox removes them.
"""
from __future__ import annotations

import json
import logging
import os
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..kube import transport
from ..kube.client import Kube, KubeError
from ..node import nodefiles
from .kubeconfig import ServiceAccount

log = logging.getLogger(__name__)

PAUSE = 1.0
"""Seconds between two tries when the API server gave no answer (a fifth of the timeout
when that is less)."""


RECHECK_SECONDS = 60.0
"""After an installer's start, how long an uninstall answer a misconfiguration could also
give (404, 403) is asked again for one that settles it (`at_start`)."""

RETIRE, ASK_AGAIN, DONE = "retire", "ask again", "done"


@dataclass(frozen=True)
class Verdict:
    """uninstall: True (uninstalled), False (keep everything), None (no answer: ask
    again); reason: why, for the log; sure: an uninstall no misconfiguration answers
    (401, the DaemonSet being deleted), which settles it at start too (`at_start`)."""
    uninstall: bool | None
    reason: str
    sure: bool = False


def judge(daemonset: dict[str, Any] | None, error: KubeError | None, ref: str) -> Verdict:
    """The verdict of one answer (module doc, the rule): `daemonset` as the API server
    returned it (None for 404) when `error` is None, else the KubeError of the GET.
    `ref`: "namespace/name" of the DaemonSet, for the reason. Pure."""
    if error is None:
        if daemonset is None:
            return Verdict(True, f"DaemonSet {ref} is deleted (404)")
        deleting = (daemonset.get("metadata") or {}).get("deletionTimestamp")
        if deleting:
            return Verdict(True, f"DaemonSet {ref} is being deleted (since {deleting})",
                           sure=True)
        return Verdict(False, f"DaemonSet {ref} is there: its next pod takes over")
    if error.status == 401:
        return Verdict(True, "the API server rejects this pod's ServiceAccount token (401): "
                             "its ServiceAccount is deleted", sure=True)
    if error.status == 403:
        return Verdict(True, f"this pod's ServiceAccount may not read DaemonSet {ref} any "
                             "more (403): its RBAC is deleted")
    return Verdict(None, error.msg)


def ask(server: str, sa: ServiceAccount, namespace: str, name: str, budget: float) -> Verdict:
    """One GET of DaemonSet `namespace/name` at `server` with the ServiceAccount's token,
    TLS verified against its CA, within `budget` seconds (429 and 5xx retried within it,
    kube/session.py); its verdict (`judge`). Never raises."""
    ref = f"{namespace}/{name}"
    try:
        context = None
        if server.startswith("https://"):
            context = ssl.create_default_context(cadata=sa.ca.decode("ascii", "replace"))
    except (ValueError, ssl.SSLError) as e:
        return Verdict(None, f"cannot connect to the API server {server}: the "
                             f"ServiceAccount's CA is not usable ({e})")
    try:
        http = transport.StdlibTransport(server, context, sa.token)
    except ValueError as e:  # http11.split_server: not http(s)://host[:port][/path]
        return Verdict(None, f"cannot connect to the API server {server}: {e}")
    kube = Kube(None, budget, "--uninstall-timeout", shared=(http, transport.ERRORS, namespace))
    try:
        return judge(kube.get_daemonset(namespace, name), None, ref)
    except KubeError as e:
        return judge(None, e, ref)


def decide(ask_once: Callable[[float], Verdict], other_installer: Callable[[], bool],
           timeout: float, clock: Callable[[], float] = time.monotonic,
           sleep: Callable[[float], None] = time.sleep) -> Verdict:
    """Ask (`ask_once(budget seconds)`) until an answer says uninstall or keep, for at most
    `timeout` seconds, PAUSE between tries; no answer by then keeps. Before each try,
    `other_installer()` true keeps at once. Returns the verdict (uninstall True/False)."""
    deadline = clock() + timeout
    pause = min(PAUSE, timeout / 5)
    tries = 0
    while True:
        if other_installer():
            return Verdict(False, "another netattach installer runs on this node and keeps "
                                  "the files")
        verdict = ask_once(max(deadline - clock(), 0.1))
        tries += 1
        if verdict.uninstall is not None:
            return verdict
        if deadline - clock() <= pause:
            return Verdict(False, f"no answer from the API server within {timeout:g} s "
                                  f"({tries} tries; the last: {verdict.reason}): kept, the "
                                  "safe default")
        log.warning("cannot tell an uninstall from a restart yet: %s; asking again in %g s",
                    verdict.reason, pause)
        sleep(pause)


def at_start(verdict: Verdict, elapsed: float, sure_in_a_row: int) -> str:
    """What an installer does with the rule's last `verdict` asked after its start,
    `elapsed` seconds after the first try, `sure_in_a_row` tries in a row having
    answered a sure uninstall (module doc): RETIRE (a sure uninstall said twice in a
    row: its stop may never come), ASK_AGAIN (a sure uninstall said once, an uninstall
    a misconfiguration could also answer, or no answer, within RECHECK_SECONDS) or DONE
    (keep, or the time is up). Pure."""
    if verdict.uninstall and verdict.sure and sure_in_a_row >= 2:
        return RETIRE
    if verdict.uninstall is not False and elapsed < RECHECK_SECONDS:
        return ASK_AGAIN
    return DONE


def retired_conflist(active: bytes, host_conflist: str) -> bytes:
    """The retired conflist (retired.py) of the active conflist `active`: its plugin entry
    with `type` netattach, without the thick-mode keys (`daemonSocketDir`, `hotplug`),
    with `retired: {"conflist": host_conflist}`. Raises ValueError when `active` is not
    a conflist with a plugin entry."""
    doc = json.loads(active)
    plugins = doc.get("plugins") if isinstance(doc, dict) else None
    if not (isinstance(plugins, list) and plugins and isinstance(plugins[0], dict)):
        raise ValueError("not a conflist with a plugin entry")
    entry = {k: v for k, v in plugins[0].items() if k not in ("daemonSocketDir", "hotplug")}
    entry["type"] = nodefiles.BINARY_NAME
    entry[nodefiles.RETIRED_KEY] = {"conflist": host_conflist}
    return (json.dumps({**doc, "plugins": [entry]}, indent=2) + "\n").encode()


def remove_files(conflist: str, bin_dir: str, state_dir: str, presence_fd: int,
                 deadline: float, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> nodefiles.Removal:
    """nodefiles.remove_when_unused with the installer's paths and its exclusive presence
    lock, tried again while a CNI operation runs, until `deadline` (clock seconds).
    Returns the last outcome."""
    while True:
        removal = nodefiles.remove_when_unused(conflist, bin_dir, state_dir, presence_fd)
        if removal.outcome != nodefiles.BUSY or clock() + 0.2 > deadline:
            return removal
        sleep(0.2)


def state_dir_mounted(state_dir: str) -> bool:
    """True when `state_dir`'s parent is a directory here (the state dir itself exists
    only once a pod was attached): the installer can then tell whether sandboxes are
    attached."""
    return os.path.isdir(os.path.dirname(os.path.normpath(state_dir)))
