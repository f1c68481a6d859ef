"""Per-container state: the typed record that ADD, DEL, CHECK and GC share, and its
format (serialised, read back, salvaged); statestore.py keeps its files.

`SavedState` / `SavedAttachment` are the one contract between ADD (which saves
everything DEL needs before any child runs), DEL (which works from it without the
API server), CHECK and GC, and later the node daemon. They are format-versioned:
`STATE_FORMAT` is what this release writes, and every format an earlier release
wrote stays readable (`_READERS`), so an upgrade never strands a pod.

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
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from ..cni.chain import AddFailure
from ..cni.errors import CniError, IOFailure
from ..cni.request import CniRequest
from ..spec.pod import PodRef

TYPE_CHECKING = False  # typing is not imported on the exec'd path (cli.py)
if TYPE_CHECKING:
    from typing import Any, NamedTuple

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


def decode_state(raw: bytes, container_id: str, path: str) -> SavedState:
    """The state of `container_id` in `raw`, the bytes of its file `path` (named in
    messages): the document read by the reader of its format, a plan with progress
    records (`PROGRESS_APPENDED`) as the records say. Raises CorruptState (carrying
    `raw`, for `salvage`) when it is not a whole state of this container in a known
    format."""
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


def encode_state(state: SavedState, plan: bool = False) -> bytes:
    """The bytes of `state`'s file: compact JSON of `SavedState.to_dict` (`plan`: an
    ADD's plan, followed by progress records; module doc)."""
    return json.dumps(state.to_dict(plan=plan), separators=(",", ":")).encode()


def progress_records(state: SavedState, indexes: list[int]) -> bytes:
    """The progress records (module doc) of the attachments of `indexes` that are
    attempted in `state`, each newline-led: {"i": i}, with "result" when it has one."""
    return b"".join(
        b"\n" + json.dumps({"i": i, "result": state.attachments[i].result}
                           if state.attachments[i].result is not None else {"i": i},
                           separators=(",", ":")).encode()
        for i in indexes if state.attachments[i].attempted)


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


if TYPE_CHECKING:
    class _SalvagedFields(NamedTuple):
        attachments: list[SavedAttachment]
        complete: bool
        header: dict[str, Any]
else:  # the same tuple, without importing typing (cli.py)
    from collections import namedtuple
    _SalvagedFields = namedtuple("_SalvagedFields", ["attachments", "complete", "header"])


class Salvaged(_SalvagedFields):
    """What `salvage` could read: `attachments` as the ADD saved them, `complete` when
    that is all of them, `header` the other top-level members read before the damage
    (containerID, netns, ifname, cniArgs, pod... as saved); a tuple of the three."""
    __slots__ = ()

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
