"""Per-container state: the typed record that ADD, DEL, CHECK and GC share, and its files.

`SavedState` / `SavedAttachment` are the one contract between ADD (which saves
everything DEL needs before any child runs), DEL (which works from it without the
API server), CHECK and GC, and later the node daemon. They are format-versioned:
`STATE_FORMAT` is what this release writes, and every format an earlier release
wrote stays readable (`_READERS`), so an upgrade never strands a pod.

Layout in `cniDir` (0700):
* `<containerID>.json` (0600): the state. Compact JSON, the attachments (each with its
  delegate's raw config) before the final `format` key, so that a file cut short
  still holds the attachments before the cut (`salvage`). While an ADD runs its
  children, the document is its plan and the progress of each attachment is
  appended after it, one line per step (see "Progress" below).
* `<containerID>.lock` (0600): exists only while an operation on the container runs.
* `<containerID>.json.corrupt` (0600): a damaged state file DEL set aside for the admin.
* `<containerID>.deleted` (empty, 0600): a tombstone: the last DEL of this container
  completed (`StateStore.mark_deleted`).

Writes are atomic (atomicfile: temp file + fsync + rename + fsync of the directory),
and no path here follows a symlink planted in the state dir (O_NOFOLLOW, and the
directory is checked to be a real directory owned by us).

Progress (issue 21: what an ADD writes grows linearly with its attachments): rewriting
the whole state after each child, as earlier releases did, made an ADD of n attachments
write O(n^2) bytes (about 758 MB for 1000). Instead the ADD saves its plan once
(`StateStore.save_plan`: the document with `"progress": "appended"` in its header),
then, before each child runs, appends one newline-led JSON record per step to the same
file (`StateStore.record_progress`): `{"i": <index>}` marks attachment i attempted,
`{"i": <index>, "result": {...}}` records its result too; then saves the whole state
once more at the end (`save`, which drops the records). Each append is one write(2)
with O_APPEND and survives the process as the saves did. A reader (`load`) of such a
file takes an attachment as attempted only when a record says so: a record cut short
by a kill does not parse and is skipped (each record starts on its own line, so a cut
one never spoils the next). In the document itself every attachment of a plan is
written attempted, so a reader that does not know the records (an earlier release,
which takes the file for damaged and salvages it, or `salvage` itself) DELs every one
of them, never fewer than ran.

The lock serializes operations on one container (multi-net spec §7.3; CNI
SPEC.md "the runtime must not invoke parallel operations for the same
container", which a defensive plugin still enforces): flock on the lock file,
re-checked against the path after acquisition so that a lock file unlinked by the
previous holder is never shared.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from ..cni.chain import AddFailure
from ..cni.errors import CniError, IOFailure
from ..cni.names import container_id_problem
from ..cni.request import CniRequest
from ..spec.pod import PodRef
from . import atomicfile

STATE_FORMAT = 1
"""The format this release writes. Format 1: the keys of `SavedState.to_dict`.

A key that a reader of an earlier release may ignore without harm is added within a
format, optional (`statusPending`: an earlier release's DEL, CHECK and GC do not need
it); a new format number is for a change an earlier reader must not ignore, and makes
every earlier release take the file for damaged (a rollback of the DaemonSet would then
set aside every state of the node). The progress records of an ADD under way (module
doc) are within format 1 too: only a file of an ADD interrupted between its children
has them, an earlier release takes it for damaged and salvages every attachment of it,
all written attempted, so its DEL releases everything the ADD may have attached."""

PROGRESS_APPENDED = "appended"
"""The value of the `progress` key of a state saved by `StateStore.save_plan`: the
attachments' progress is in the records appended after the document (module doc)."""

TOMBSTONE_SECONDS = 7 * 24 * 3600.0
"""How long a tombstone is kept after the DEL that wrote it (see `Tombstones`)."""

_TOMBSTONE = ".deleted"
_PRUNE_STAMP = ".tombstones-pruned"
_PRUNE_EVERY = 3600.0
_OLD_TMP = ".json.tmp"  # temp files of releases before atomicfile: <id>.json.tmp<pid>


class StateError(IOFailure):
    """State could not be read or written; the message names the file and the cause
    (code 5)."""


class CorruptState(StateError):
    """The state file was read but is not a whole state of this container: truncated,
    overwritten, or of an unknown format. `raw` is what was read, for `salvage`."""

    def __init__(self, message: str, raw: bytes):
        super().__init__(message)
        self.raw = raw


@dataclass
class SavedAttachment:
    """One attachment as the ADD planned and ran it.

    network: its network-status name; ifname: its CNI_IFNAME; default: the cluster
    default network; source: where its config came from (for messages); config: the
    delegate's raw conf or conflist, exactly as run; capability_args: its
    runtimeConfig values by capability. attempted: its ADD was started (so DEL must
    undo it); result: what its ADD returned (None until then); add_failed: its ADD
    returned an error; add_failure: where that ADD stopped (chain.AddFailure: which
    plugin failed and how, so DEL knows which plugins may hold something; added within
    format 1: an earlier release's DEL ignores it, and an add_failed without it, an
    earlier release's, is taken as that release took it); from_config: a best-effort DEL
    took it from the configuration as it is now, not from what the ADD ran;
    device: (resourceName, deviceID) when it got a device from the kubelet.
    claim: the ResourceClaim device of a claim attachment (claims.ClaimRef as its dict:
    namespace, name, uid, request, driver, pool, device), so DEL and GC clear its status
    entry without asking the API which claim it was (added within format 1: an earlier
    release's DEL releases the attachment without it).
    selection: for an attachment of a network selection element, in a sandbox ADDed
    with `hotplug` (HotplugContext): {"requested": the element named the interface,
    "params": hotplug.parameters() of the element}, what hot-plug identifies it by.
    change: "add" or "remove" while a hot-plug change of it runs (recorded before the
    child runs, daemon/hotplug.py); None otherwise. Both added within format 1: an
    earlier release's DEL undoes every attempted attachment, these included.
    """
    network: str
    ifname: str
    config: dict[str, Any]
    source: str = ""
    default: bool = False
    capability_args: dict[str, Any] = field(default_factory=dict)
    attempted: bool = False
    result: dict[str, Any] | None = None
    add_failed: bool = False
    add_failure: AddFailure | None = None
    from_config: bool = False
    device: tuple[str, str] | None = None
    claim: dict[str, str] | None = None
    selection: dict[str, Any] | None = None
    change: str | None = None

    def mark_add_failed(self, error: CniError) -> None:
        """Record that its ADD raised `error`, and where that ADD stopped
        (chain.AddFailure.of)."""
        self.add_failed = True
        self.add_failure = AddFailure.of(error)

    def failed_add(self) -> AddFailure | None:
        """What its DEL gets as chain.delete's `failed_add`: where its ADD stopped when
        it failed; AddFailure(None) for an ADD an earlier release recorded as failed
        without saying where; None when its ADD did not fail."""
        if not self.add_failed:
            return None
        return self.add_failure or AddFailure(None)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "network": self.network, "ifname": self.ifname, "default": self.default,
            "source": self.source or self.network, "config": self.config,
            "capabilityArgs": self.capability_args, "attempted": self.attempted,
            "result": self.result,
        }
        if self.add_failed:
            out["addFailed"] = True
            if self.add_failure is not None and self.add_failure.plugin is not None:
                out["addFailure"] = self.add_failure.to_dict()
        if self.from_config:
            out["fromConfig"] = True
        if self.device:
            out["device"] = {"resourceName": self.device[0], "deviceID": self.device[1]}
        if self.claim:
            out["claim"] = self.claim
        if self.selection is not None:
            out["selection"] = self.selection
        if self.change:
            out["change"] = self.change
        return out

    @classmethod
    def from_dict(cls, data: object) -> SavedAttachment | None:
        """The attachment of a saved dict (format 1), or None when it lacks what DEL
        needs (network, ifname, config) or has a key of the wrong type."""
        if not (isinstance(data, dict) and isinstance(data.get("network"), str)
                and isinstance(data.get("ifname"), str) and isinstance(data.get("config"), dict)):
            return None
        caps = data.get("capabilityArgs", {})
        result = data.get("result")
        device = data.get("device")
        if (not isinstance(caps, dict) or not (result is None or isinstance(result, dict))
                or not (device is None or isinstance(device, dict))):
            return None
        dev = None
        if isinstance(device, dict):
            rn, did = device.get("resourceName"), device.get("deviceID")
            if not (isinstance(rn, str) and isinstance(did, str)):
                return None
            dev = (rn, did)
        claim = data.get("claim")
        if claim is not None and not (isinstance(claim, dict) and all(
                isinstance(k, str) and isinstance(v, str) for k, v in claim.items())):
            return None
        # hot-plug's keys: a malformed one (or a change of a later release) reads as none,
        # never as a damaged state: DEL does not need them
        selection = data.get("selection")
        if not (isinstance(selection, dict) and isinstance(selection.get("requested"), bool)
                and isinstance(selection.get("params"), dict)):
            selection = None
        change = data.get("change")
        if change not in ("add", "remove"):
            change = None
        source = data.get("source")
        return cls(network=data["network"], ifname=data["ifname"], config=data["config"],
                   source=source if isinstance(source, str) else data["network"],
                   default=data.get("default") is True, capability_args=caps,
                   attempted=data.get("attempted", True) is not False, result=result,
                   add_failed=data.get("addFailed") is True,
                   add_failure=AddFailure.from_dict(data.get("addFailure")),
                   from_config=data.get("fromConfig") is True, device=dev,
                   claim=dict(claim) if claim else None, selection=selection, change=change)


@dataclass
class DelPending:
    """A best-effort DEL ran while the API server could not be asked: `since` (epoch
    seconds) the first such DEL, `reason` why the API could not be asked; `monotonic`
    (CLOCK_MONOTONIC seconds, the same in every process until the node reboots) at that
    DEL and `boot` the kernel's boot_id then (boot_id()), so that how long the DEL has
    been pending is measured on the monotonic clock, which a wall-clock step (NTP, an
    admin's `date`) does not move; a state of an earlier release or of another boot
    measures it on the wall clock."""
    since: float
    reason: str
    monotonic: float | None = None
    boot: str = ""

    def waited(self, wall_now: float, monotonic_now: float) -> float:
        """Seconds since the first DEL: on the monotonic clock when it was read on this
        boot, else on the wall clock."""
        if self.monotonic is not None and self.boot and self.boot == boot_id():
            return monotonic_now - self.monotonic
        return wall_now - self.since


_BOOT_ID: list[str] = []


def boot_id() -> str:
    """The kernel's boot_id (/proc/sys/kernel/random/boot_id), "" when it cannot be
    read; read once per process."""
    if not _BOOT_ID:
        try:
            with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
                _BOOT_ID.append(f.read().strip())
        except OSError:
            _BOOT_ID.append("")
    return _BOOT_ID[0]


@dataclass
class PendingStatus:
    """The network-status an ADD answered for but whose PATCH is not sent yet (thick
    mode: the daemon sends it after the runtime's answer, daemon/podapi.py).

    uid: the pod's metadata.uid the PATCH carries (the pod as the ADD read it; a mirror
    pod's own); annotations: the merge patch of metadata.annotations, exactly as sent.
    Saved before the answer and cleared once the PATCH is sent (or the pod is gone or
    re-created), so a daemon killed in between sends it when it starts again; a DEL
    clears it before anything else, so it is never sent for a sandbox being deleted.
    """
    uid: str
    annotations: dict[str, str]

    def to_dict(self) -> dict[str, Any]:
        return {"uid": self.uid, "annotations": self.annotations}

    @classmethod
    def from_dict(cls, data: object) -> PendingStatus | None:
        """None unless `data` is {"uid": str, "annotations": {str: str}}."""
        if not isinstance(data, dict):
            return None
        uid, annotations = data.get("uid"), data.get("annotations")
        if not (isinstance(uid, str) and isinstance(annotations, dict) and all(
                isinstance(k, str) and isinstance(v, str) for k, v in annotations.items())):
            return None
        return cls(uid, dict(annotations))


@dataclass
class HotplugContext:
    """What the node daemon needs to change a sandbox's attachments later, without a call
    of the runtime (hot-plug, daemon/hotplug.py): saved by an ADD whose configuration
    has `hotplug` true, served by the daemon.

    netconf: netattach's own configuration as the runtime passed it (stdin, parsed);
    cni_path: the runtime's CNI_PATH; default_network: the pod's
    `v1.multus-cni.io/default-network` annotation as the ADD read it ("" for none): a
    change of it is refused; network_status: the pod's network-status (the annotation's
    JSON text) as last recorded by the ADD or a hot-plug change, which a change edits.
    """
    netconf: dict[str, Any]
    cni_path: str
    default_network: str = ""
    network_status: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"netconf": self.netconf, "cniPath": self.cni_path,
                "defaultNetwork": self.default_network, "networkStatus": self.network_status}

    @classmethod
    def from_dict(cls, data: object) -> HotplugContext | None:
        """None unless `data` has the keys to_dict writes, of their types."""
        if not isinstance(data, dict):
            return None
        netconf, path = data.get("netconf"), data.get("cniPath")
        default, status_text = data.get("defaultNetwork", ""), data.get("networkStatus", "")
        if not (isinstance(netconf, dict) and isinstance(path, str)
                and isinstance(default, str) and isinstance(status_text, str)):
            return None
        return cls(netconf, path, default, status_text)


@dataclass
class SavedState:
    """Everything DEL, CHECK and GC need of one container, saved by ADD.

    The runtime's view: container_id, netns (CNI_NETNS of the ADD), ifname (the
    runtime's CNI_IFNAME), cni_args (its CNI_ARGS pairs, in order), pod; cni_version:
    netattach's own config version. attachments: in ADD order, the cluster default
    network first; [] for the marker an ADD saves before its first API request (it
    has attached nothing yet). del_pending: see DelPending. status_pending: see
    PendingStatus (only the node daemon saves one). hotplug: see HotplugContext (a
    sandbox the node daemon may change later; added within format 1).
    """
    container_id: str
    netns: str
    ifname: str
    cni_args: tuple[tuple[str, str], ...] = ()
    pod: PodRef | None = None
    cni_version: str = ""
    attachments: list[SavedAttachment] = field(default_factory=list)
    del_pending: DelPending | None = None
    status_pending: PendingStatus | None = None
    hotplug: HotplugContext | None = None

    @classmethod
    def for_request(cls, req: CniRequest, pod: PodRef | None, cni_version: str) -> SavedState:
        """The container as the runtime named it in `req`, nothing attached: the marker an
        ADD saves before its first API request, and what DEL knows by itself."""
        return cls(container_id=req.container_id, netns=req.netns, ifname=req.ifname,
                   cni_args=req.args, pod=pod, cni_version=cni_version)

    def attempted(self) -> list[SavedAttachment]:
        """The attachments whose ADD was started: what DEL must undo."""
        return [a for a in self.attachments if a.attempted]

    def with_attachments(self, attachments: list[SavedAttachment]) -> SavedState:
        return replace(self, attachments=attachments)

    def to_dict(self, plan: bool = False) -> dict[str, Any]:
        """Format STATE_FORMAT, keys in the order of the file (attachments last but
        `format`, see the module doc). plan: the document `StateStore.save_plan` writes
        (`progress` set, every attachment attempted)."""
        out: dict[str, Any] = {
            "containerID": self.container_id, "netns": self.netns, "ifname": self.ifname,
            "cniArgs": [list(kv) for kv in self.cni_args],
            "pod": ({"namespace": self.pod.namespace, "name": self.pod.name,
                     "uid": self.pod.uid} if self.pod else None),
            "cniVersion": self.cni_version,
        }
        if self.del_pending:
            out["delPending"] = {"since": self.del_pending.since,
                                 "reason": self.del_pending.reason}
            if self.del_pending.monotonic is not None:
                out["delPending"].update(monotonic=self.del_pending.monotonic,
                                         boot=self.del_pending.boot)
        if self.status_pending:
            out["statusPending"] = self.status_pending.to_dict()
        if self.hotplug:
            out["hotplug"] = self.hotplug.to_dict()
        out["attachments"] = [a.to_dict() for a in self.attachments]
        if plan:
            out["progress"] = PROGRESS_APPENDED
            for a in out["attachments"]:
                a["attempted"] = True  # for readers without the records (module doc)
            out["attachments"] = out.pop("attachments")  # still last but `format`
        out["format"] = STATE_FORMAT
        return out


def _read_v1(data: dict[str, Any], container_id: str) -> SavedState | None:
    """Format 1 (every release up to this one): None when it is not a whole state of
    `container_id`. `statusPending` and `hotplug` (added within format 1, see
    STATE_FORMAT) are optional; a malformed one is read as none."""
    atts = data.get("attachments")
    if (data.get("containerID") != container_id or not isinstance(data.get("ifname"), str)
            or not isinstance(atts, list)):
        return None
    attachments = [SavedAttachment.from_dict(a) for a in atts]
    if any(a is None for a in attachments):
        return None
    pod = data.get("pod")
    pod_ref = None
    if isinstance(pod, dict) and isinstance(pod.get("namespace"), str) \
            and isinstance(pod.get("name"), str):
        pod_ref = PodRef(pod["namespace"], pod["name"],
                         pod["uid"] if isinstance(pod.get("uid"), str) else "")
    args = data.get("cniArgs", [])
    cni_args = tuple((str(kv[0]), str(kv[1])) for kv in args
                     if isinstance(kv, list) and len(kv) == 2) if isinstance(args, list) else ()
    pending = data.get("delPending")
    del_pending = None
    if isinstance(pending, dict):
        since = pending.get("since")
        mono, boot = pending.get("monotonic"), pending.get("boot")
        del_pending = DelPending(float(since) if isinstance(since, (int, float))
                                 and not isinstance(since, bool) else time.time(),
                                 str(pending.get("reason", "")),
                                 float(mono) if isinstance(mono, (int, float))
                                 and not isinstance(mono, bool) else None,
                                 boot if isinstance(boot, str) else "")
    netns = data.get("netns")
    version = data.get("cniVersion")
    return SavedState(container_id=container_id, netns=netns if isinstance(netns, str) else "",
                      ifname=data["ifname"], cni_args=cni_args, pod=pod_ref,
                      cni_version=version if isinstance(version, str) else "",
                      attachments=[a for a in attachments if a is not None],
                      del_pending=del_pending,
                      status_pending=PendingStatus.from_dict(data.get("statusPending")),
                      hotplug=HotplugContext.from_dict(data.get("hotplug")))


_READERS: dict[int, Callable[[dict[str, Any], str], SavedState | None]] = {1: _read_v1}
"""format -> reader. A new format adds a reader; none is ever removed."""


def _decode(raw: bytes) -> tuple[Any, list[Any]]:
    """(the JSON document at the start of `raw`, the progress records after it: each
    newline-led line that parses, in order). Raises ValueError when `raw` is not UTF-8
    or does not start with a JSON document, or has anything but whitespace after a
    document without `progress` (module doc), as json.loads would."""
    text = raw.decode("utf-8")
    decoder = json.JSONDecoder()
    start = len(text) - len(text.lstrip())
    data, end = decoder.raw_decode(text, start)
    rest = text[end:]
    if not rest.strip():
        return data, []
    if not (isinstance(data, dict) and data.get("progress") == PROGRESS_APPENDED
            and rest.startswith("\n")):
        raise ValueError(f"extra data after the document at byte {end}")
    records = []
    for line in rest.split("\n"):
        if line.strip():
            try:
                records.append(decoder.decode(line))
            except (ValueError, RecursionError):
                continue  # a record cut short by a kill (module doc)
    return data, records


def _apply_progress(state: SavedState, records: list[Any]) -> None:
    """The attachments of a saved plan as its progress records say (module doc): each
    attempted only when a record names it, with the result a record gives. A record
    that is not {"i": index of an attachment, "result"?: object} is skipped."""
    for a in state.attachments:
        a.attempted, a.result = False, None
    for r in records:
        i = r.get("i") if isinstance(r, dict) else None
        if not (isinstance(i, int) and not isinstance(i, bool) and 0 <= i < len(
                state.attachments)):
            continue
        result = r.get("result")
        state.attachments[i].attempted = True
        if isinstance(result, dict):
            state.attachments[i].result = result


class Salvaged(NamedTuple):
    """What `salvage` could read: `attachments` as the ADD saved them, `complete` when
    that is all of them, `header` the other top-level members read before the damage
    (containerID, netns, ifname, cniArgs, pod... as saved)."""
    attachments: list[SavedAttachment]
    complete: bool
    header: dict[str, Any]

    def runtime_view(self, container_id: str) -> SavedState:
        """The container as the runtime named it, from what was read of the header, read
        as a whole state's is (no netns, eth0, no CNI_ARGS where it was lost); no
        attachment. For the DEL a runtime would send for the damaged file."""
        ifname = self.header.get("ifname")
        state = _read_v1({**self.header, "containerID": container_id, "attachments": [],
                          "ifname": ifname if isinstance(ifname, str) and ifname else "eth0"},
                         container_id)
        assert state is not None  # the keys _read_v1 needs are set above
        return state


def salvage(raw: bytes, container_id: str) -> Salvaged:
    """What DEL (and GC, the same way) can still use of a damaged state file.

    The document is read from its start, member by member and, inside
    `attachments`, element by element, up to the first damage (a truncation, a
    foreign write, a bad byte). Every attachment complete before that point and
    holding what DEL needs (network, ifname, config) is returned, as the ADD saved
    it. `complete` is True when the whole list was read and every element was
    usable: DEL then knows every attachment. A file naming another container
    gives nothing.
    """
    text = raw.decode("utf-8", "replace")
    decoder = json.JSONDecoder()
    found: list[Any] = []
    header: dict[str, Any] = {}
    complete = False

    def skip(i: int) -> int:
        while i < len(text) and text[i] in " \t\r\n":
            i += 1
        return i

    try:
        i = skip(0)
        if text[i] != "{":
            return Salvaged([], False, {})
        i += 1
        while text[skip(i)] != "}":
            key, i = decoder.raw_decode(text, skip(i))
            i = skip(i)
            if text[i] != ":":
                break
            i = skip(i + 1)
            if key == "attachments" and text[i] == "[":
                i = skip(i + 1)
                while text[i] != "]":
                    value, i = decoder.raw_decode(text, i)
                    found.append(value)
                    i = skip(i)
                    if text[i] == ",":
                        i = skip(i + 1)
                    elif text[i] != "]":
                        raise ValueError("damaged list")
                complete = True
                i += 1
            else:
                value, i = decoder.raw_decode(text, i)
                if key == "containerID" and value != container_id:
                    return Salvaged([], False, {})
                header[key] = value
            i = skip(i)
            if text[i] != ",":
                break
            i += 1
    except (ValueError, IndexError, RecursionError):
        pass  # the damage: keep what came before it
    usable = [a for a in (SavedAttachment.from_dict(x) for x in found) if a is not None]
    return Salvaged(usable, complete and len(usable) == len(found), header)


def _check_id(container_id: str) -> None:
    # The request layer validated the ID already; checked again where it becomes a path.
    problem = container_id_problem(container_id)
    if problem:
        raise StateError(f"invalid container ID {container_id!r}: {problem}")


class StateStore:
    """State files of one `cniDir`.

    cni_dir: directory path; created 0700 on first write. clock: epoch seconds
    (time.time), for tombstones.
    """

    def __init__(self, cni_dir: str, clock: Callable[[], float] = time.time):
        self.dir = cni_dir
        self.clock = clock

    def _path(self, container_id: str, suffix: str) -> str:
        _check_id(container_id)
        return os.path.join(self.dir, container_id + suffix)

    def ensure_dir(self) -> None:
        """Create `cniDir` (0700, parents 0755) or check the existing one is a real dir.

        Raises StateError when it is a symlink, not a directory, or not owned by the
        user netattach runs as (someone else could plant links and files in it).
        """
        try:
            st = os.lstat(self.dir)
        except FileNotFoundError:
            pass
        else:  # the dir of every save but the first
            self._check_dir(st)
            return
        # Each missing dir is made, then given its mode: mkdir's mode is masked by the
        # umask (a runtime with umask 0 would leave parents world-writable), and the
        # umask is the process's, not to be changed under the node daemon's threads.
        missing = []
        d = self.dir.rstrip("/")
        while d and not os.path.lexists(d):
            missing.append(d)
            d = os.path.dirname(d)
        try:
            for d in reversed(missing):
                try:
                    os.mkdir(d, 0o700)
                except FileExistsError:
                    continue  # made meanwhile by another call
                os.chmod(d, 0o700 if d == missing[0] else 0o755)
        except OSError as e:
            raise StateError(f"cannot create state dir {self.dir}: {e.strerror}") from None
        self._check_dir(os.lstat(self.dir))

    def _check_dir(self, st: os.stat_result) -> None:
        if not stat.S_ISDIR(st.st_mode):
            raise StateError(f"state dir {self.dir} is not a directory (symlink or file)")
        if st.st_uid != os.geteuid():
            raise StateError(f"state dir {self.dir} belongs to uid {st.st_uid}, not to "
                             f"netattach's {os.geteuid()}")
        if st.st_mode & 0o077:
            os.chmod(self.dir, 0o700)

    def load(self, container_id: str) -> SavedState | None:
        """The saved state, or None when there is none; a plan with progress records
        (`save_plan`) as the records say.

        Raises StateError when the file exists but cannot be opened or read (a
        directory in its place included), CorruptState when what it holds is not a
        whole state of this container in a known format.
        """
        path = self._path(container_id, ".json")
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise StateError(f"cannot open state file {path}: {e.strerror}") from None
        try:
            with os.fdopen(fd, "rb") as f:
                raw = f.read()
        except OSError as e:
            raise StateError(f"cannot read state file {path}: {e.strerror}") from None
        try:
            data, records = _decode(raw)
        except (ValueError, RecursionError) as e:
            raise CorruptState(f"state file {path} is corrupt: {e}", raw) from None
        fmt = data.get("format") if isinstance(data, dict) else None
        reader = _READERS.get(fmt) if isinstance(fmt, int) and not isinstance(fmt, bool) \
            else None
        if reader is None:
            raise CorruptState(f"state file {path} has an unknown format", raw)
        state = reader(data, container_id)
        if state is None:
            raise CorruptState(f"state file {path} is corrupt: containerID, ifname or "
                               "attachments are missing or malformed", raw)
        if data.get("progress") == PROGRESS_APPENDED:
            _apply_progress(state, records)
        return state

    def set_aside(self, container_id: str) -> str:
        """Move a damaged state file to `<id>.json.corrupt` (0600), for the admin to read;
        returns that path. No operation reads it again, and GC does not list it.
        Raises StateError when it cannot be moved."""
        path = self._path(container_id, ".json")
        aside = path + ".corrupt"
        try:
            os.rename(path, aside)
            fd = os.open(aside, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                os.fchmod(fd, 0o600)  # a foreign writer may have made it readable
            finally:
                os.close(fd)
            atomicfile.fsync_dir(self.dir)
        except OSError as e:
            raise StateError(f"cannot move damaged state file {path} aside: {e.strerror}") from None
        return aside

    def save(self, state: SavedState, durable: bool = True) -> None:
        """Write `state` atomically (0600) as `<containerID>.json`. Raises StateError
        (disk full, read-only, ...).

        durable=False skips the fsyncs (atomicfile.replace): for the saves whose only
        job is to survive the process (killed by the runtime's timeout, OOM, a daemon
        restart), not a power loss, after which the sandbox's netns and interfaces are
        gone anyway and DEL works from an older state or rebuilds from the API
        (delete.py, the recovery matrix)."""
        self._write(state.container_id, state.to_dict(), durable)

    def _write(self, container_id: str, doc: dict[str, Any], durable: bool) -> None:
        self.ensure_dir()
        path = self._path(container_id, ".json")
        data = json.dumps(doc, separators=(",", ":")).encode()
        try:
            atomicfile.replace(path, data, 0o600, durable=durable)
        except OSError as e:
            raise StateError(f"cannot write state file {path}: {e.strerror}") from None

    def save_plan(self, state: SavedState) -> None:
        """Save an ADD's plan before its first child runs: `state` with no attachment
        attempted yet, written atomically as `save(durable=False)` does, with
        `progress` set (module doc), so that `record_progress` can append to it. Bytes
        written: the size of the state. Raises StateError as `save`."""
        assert not state.attempted(), "a plan is saved before any child runs"
        self._write(state.container_id, state.to_dict(plan=True), durable=False)

    def record_progress(self, state: SavedState, indexes: list[int]) -> None:
        """Append to the plan `save_plan` saved one progress record per index of
        `indexes` that is attempted in `state`: attachment i attempted, with its result
        when it has one (module doc). Bytes written: the records only (the results'
        size plus a few bytes each), so an ADD writes O(n) in all, not O(n^2). One
        write(2) with O_APPEND, not fsync'ed (survives the process, as `save` with
        durable=False). Raises StateError naming the file (gone, disk full...)."""
        path = self._path(state.container_id, ".json")
        data = b"".join(
            b"\n" + json.dumps({"i": i, "result": state.attachments[i].result}
                               if state.attachments[i].result is not None else {"i": i},
                               separators=(",", ":")).encode()
            for i in indexes if state.attachments[i].attempted)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)
        except OSError as e:
            raise StateError(f"cannot write state file {path}: {e.strerror}") from None

    def _names(self) -> list[str]:
        """The entries of `cniDir`; [] when it is absent. Raises StateError when it
        cannot be listed."""
        try:
            return os.listdir(self.dir)
        except FileNotFoundError:
            return []
        except OSError as e:
            raise StateError(f"cannot list state dir {self.dir}: {e.strerror}") from None

    def container_ids(self) -> list[str]:
        """IDs of every container with a saved state file, sorted; [] when `cniDir` is absent.

        Only `<id>.json` entries whose <id> is a valid container ID count: lock files,
        tombstones, temp files of an interrupted save and anything else in the dir are
        skipped. Raises StateError when the dir exists but cannot be listed.
        """
        ids = (n[:-len(".json")] for n in self._names() if n.endswith(".json"))
        return sorted(i for i in ids if container_id_problem(i) is None)

    def file_identity(self, container_id: str) -> tuple[int, int, int] | None:
        """(inode, size, mtime ns) of the container's state file, None when there is
        none: a save (a new file renamed over it) or an appended record changes it."""
        try:
            st = os.stat(self._path(container_id, ".json"))
        except OSError:
            return None
        return st.st_ino, st.st_size, st.st_mtime_ns

    def operations_running(self) -> list[str]:
        """IDs of the containers whose lock an operation holds now (ADD, DEL, CHECK, GC's
        DEL, a hot-plug change), sorted. A `<id>.lock` left by a process that was killed
        is not held and does not count. Raises StateError when the dir exists but
        cannot be listed; [] when it is absent."""
        held = []
        for name in sorted(self._names()):
            cid = name[:-len(".lock")]
            if not name.endswith(".lock") or container_id_problem(cid) is not None:
                continue
            try:
                fd = os.open(os.path.join(self.dir, name),
                             os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
            except OSError:
                continue  # released (and unlinked) meanwhile, or not a lock file
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                held.append(cid)
            finally:
                os.close(fd)  # releases the flock, if it was taken
        return held

    def _ours(self, name: str) -> bool:
        """True when `name` is an entry netattach writes in cniDir (module doc): a state,
        a damaged one set aside, a lock, a tombstone, a save's temp file of this or an
        earlier release, the tombstone pruning stamp."""
        if name == _PRUNE_STAMP:
            return True
        for suffix in (".json", ".json.corrupt", ".lock", _TOMBSTONE):
            if name.endswith(suffix) and container_id_problem(name[:-len(suffix)]) is None:
                return True
        for prefix, sep in ((".", ".json.tmp-"), ("", _OLD_TMP)):
            cid, found, pid = name[len(prefix):].rpartition(sep)
            if (name.startswith(prefix) and found and pid.isdigit()
                    and container_id_problem(cid) is None):
                return True
        return False

    def remove_dir(self) -> list[str]:
        """netattach is uninstalled (nodefiles.remove_when_unused): remove every entry
        netattach writes in cniDir, then the dir itself when nothing else is in it.
        Returns the paths not removed with the reason; entries that are not
        netattach's are left, and so is the dir then. Raises StateError when the dir
        cannot be listed (absent is fine)."""
        left = []
        for name in self._names():
            path = os.path.join(self.dir, name)
            if not self._ours(name):
                left.append(f"{path} (not netattach's: left, and so is {self.dir})")
                continue
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            except OSError as e:
                left.append(f"{path} ({e.strerror})")
        if not left:
            try:
                os.rmdir(self.dir)
            except FileNotFoundError:
                pass
            except OSError as e:
                left.append(f"{self.dir} ({e.strerror})")
        return left

    def remove(self, container_id: str) -> None:
        """Delete the state file if present, and the temp files of saves that a killed
        netattach left for this container (this release's `.<id>.json.tmp-<pid>` and
        earlier releases' `<id>.json.tmp<pid>`). The caller holds the container's lock,
        so no live save of this container can own one."""
        path = self._path(container_id, ".json")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        name = os.path.basename(path)
        prefixes = (f".{name}.tmp-", name + ".tmp")
        try:
            names = os.listdir(self.dir)
        except OSError:
            return
        for entry in names:
            for prefix in prefixes:
                if entry.startswith(prefix) and entry[len(prefix):].isdigit():
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(os.path.join(self.dir, entry))

    def release(self, container_id: str) -> None:
        """Nothing of the container is attached any more (a DEL or a rollback whose child
        DELs all succeeded, or an ADD that attached nothing): remove its state and write
        its tombstone."""
        self.remove(container_id)
        self.mark_deleted(container_id)

    # -- tombstones

    def mark_deleted(self, container_id: str) -> None:
        """Record that a DEL of the container completed: `<id>.deleted`, an empty 0600
        file whose mtime is the time of that DEL. Best effort: a tombstone that cannot
        be written only costs the next DEL of this container the slower path (it is
        logged at debug level). Then prunes expired tombstones (at most once an hour)."""
        path = self._path(container_id, _TOMBSTONE)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                now = self.clock()
                os.utime(fd, (now, now))
            finally:
                os.close(fd)
        except OSError as e:
            logging.getLogger("netattach.state").debug("cannot write tombstone %s: %s", path, e)
            return
        self.prune_tombstones()

    def deleted_since(self, container_id: str) -> float | None:
        """When the last DEL of the container completed (epoch seconds), from its
        tombstone; None when there is none or it is older than TOMBSTONE_SECONDS."""
        try:
            st = os.lstat(self._path(container_id, _TOMBSTONE))
        except OSError:
            return None
        if not stat.S_ISREG(st.st_mode) or self.clock() - st.st_mtime > TOMBSTONE_SECONDS:
            return None
        return st.st_mtime

    def forget_deleted(self, container_id: str) -> None:
        """Remove the container's tombstone (an ADD of the same ID starts anew)."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._path(container_id, _TOMBSTONE))

    def prune_tombstones(self, force: bool = False) -> int:
        """Remove tombstones older than TOMBSTONE_SECONDS; returns how many. Unless
        `force`, runs at most once per hour (the time of the last run is the mtime of
        `<cniDir>/.tombstones-pruned`). Never raises."""
        stamp = os.path.join(self.dir, _PRUNE_STAMP)
        now = self.clock()
        try:
            if not force and now - os.lstat(stamp).st_mtime < _PRUNE_EVERY:
                return 0
        except OSError:
            pass
        removed = 0
        try:
            fd = os.open(stamp, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                os.utime(fd, (now, now))
            finally:
                os.close(fd)
            with os.scandir(self.dir) as entries:
                for entry in entries:
                    if not entry.name.endswith(_TOMBSTONE):
                        continue
                    with contextlib.suppress(OSError):
                        if now - entry.stat(follow_symlinks=False).st_mtime > TOMBSTONE_SECONDS:
                            os.unlink(entry.path)
                            removed += 1
        except OSError:
            pass
        return removed

    @contextlib.contextmanager
    def lock(self, container_id: str) -> Iterator[None]:
        """Hold the container's lock for the block (blocking; spec §7.3).

        The lock file exists only while held: the holder unlinks it before
        releasing, and a waiter that then gets the flock on the unlinked inode
        sees the path no longer matches and retries on a fresh file. So no lock
        file is left after any operation. Raises StateError if it cannot be made.
        """
        self.ensure_dir()
        path = self._path(container_id, ".lock")
        while True:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            except OSError as e:
                raise StateError(f"cannot open lock file {path}: {e.strerror}") from None
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                same = os.fstat(fd).st_ino == os.lstat(path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)  # the previous holder unlinked it; take the new one
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                os.unlink(path)
            os.close(fd)


def is_missing_netns(netns: str) -> bool:
    """True when the netns path is empty or no longer exists (DEL after the sandbox is gone)."""
    if not netns:
        return True
    try:
        os.stat(netns)
    except OSError as e:
        return e.errno in (errno.ENOENT, errno.ENOTDIR)
    return False
