"""Devices for attachments whose NetworkAttachmentDefinition names a resource.

A NAD annotated `k8s.v1.cni.cncf.io/resourceName: <name>` needs, per attachment,
one of the pod's devices of that name. The kubelet tells which through its
PodResources v1 gRPC API on a unix socket (`pod_devices`), in two kinds, matched
as Multus v4.2.3 matches them (`collect_device_ids`):

* device plugins (`ContainerDevices`): `<name>` is the extended resource (for
  example an SR-IOV VF pool, "intel.com/sriov_netdevice"); the device IDs are
  the plugin's;
* DRA (`DynamicResource`, kubelet 1.34+ by default): `<name>` is the name of a
  ResourceClaim of the pod; the device IDs are the device parts of its devices'
  CDI names ("example.com/net=vf-0" -> "vf-0").

`assign_device_ids` hands them out, one per attachment, in plan order.

Device information (Network Plumbing WG "Device Information Specification"
v1.1.0, referenced by multi-net spec §5.3.8 "device-info") lives in two places
under `/var/run/k8s.cni.cncf.io/devinfo`:

* `dp/<resourceName>-<deviceID>-device.json`, written by the device plugin, with
  every "/" in the resource name (and, defensively, the device ID) turned into "-"
  (device-info spec §4.1);
* `cni/<UniqueFileName>`, one per network attachment, which the delegating
  plugin (us) must fill with a copy of the device plugin's file before calling
  the CNI plugin, hand to plugins that declare the `CNIDeviceInfoFile`
  capability, read back after the chain for network-status' "device-info", and
  delete on DEL (§4.2.1, §5.1.1, §6.1.1). netattach's unique name is
  `<containerID>_<ifname>`: interface names are unique within a pod's netns.

Imported on the exec'd CNI path, so only the stdlib at module level: grpc and
protobuf are imported inside the functions that talk to the kubelet, i.e. only
when some selected NAD has a resourceName.
"""
from __future__ import annotations

import json
import logging
import os
import stat
import time
from collections import Counter
from collections.abc import Iterable

from ..cni.errors import ConfigError, IOFailure, TryAgain
from ..cni.jsonutil import json_type, loads_strict
from ..spec.netconf import DEFAULT_DEVICE_INFO_DIR, DEFAULT_POD_RESOURCES_SOCKET
from . import atomicfile

TYPE_CHECKING = False  # typing is not imported on the exec'd path (cli.py)
if TYPE_CHECKING:
    from typing import Any

log = logging.getLogger("netattach.devices")

RESOURCE_NAME_ANNOTATION = "k8s.v1.cni.cncf.io/resourceName"
KUBELET_SOCKET = DEFAULT_POD_RESOURCES_SOCKET
DEVINFO_DIR = DEFAULT_DEVICE_INFO_DIR
# The CNI capability (device-info spec §5.1) whose runtimeConfig value is the
# attachment's cni_device_info_path().
DEVICE_INFO_CAPABILITY = "CNIDeviceInfoFile"

# List answers for every pod on the node; a busy node exceeds gRPC's 4 MiB default.
_MAX_MESSAGE_BYTES = 16 << 20
# A device-info file is a small JSON object; anything larger is not one.
_MAX_DEVINFO_BYTES = 1 << 20


class DeviceError(TryAgain):
    """The kubelet could not say which devices the pod has, or allocated too few; the
    message says which resource and why (code 11: the kubelet may answer later)."""


class DeviceNotAllocated(ConfigError):
    """A deviceID the pod's annotation chose is not a device the kubelet allocated to the
    pod for the NAD's resource, or is chosen twice (code 7: the selection is at fault).
    `index`: the attachment's position in the list given to `reserve_chosen_devices`."""

    def __init__(self, msg: str, index: int) -> None:
        super().__init__(msg)
        self.index = index


class DeviceInfoError(IOFailure):
    """A device-info file could not be written or removed (code 5)."""


# --- NAD annotation ---------------------------------------------------------------


def nad_resource_name(nad: dict[str, Any]) -> str | None:
    """The NAD's `k8s.v1.cni.cncf.io/resourceName` annotation, or None when it has none.

    An empty (or blank) value counts as none. Surrounding blanks are dropped.
    """
    metadata = nad.get("metadata") if isinstance(nad, dict) else None
    annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
    if not isinstance(annotations, dict):
        return None
    value = annotations.get(RESOURCE_NAME_ANNOTATION)
    if not isinstance(value, str) or not value.strip():
        return None
    return value.strip()


# --- handing out devices -------------------------------------------------------------


def assign_device_ids(requests: list[str | None],
                      allocated: dict[str, list[str]]) -> list[str | None]:
    """One device ID per attachment that needs a resource, in plan order.

    requests: per attachment in plan order, the resource name it needs (its NAD's
    resourceName: a device-plugin resource or a ResourceClaim's name), or None.
    allocated: resource name -> the pod's device IDs of it, in kubelet order
    (`pod_devices`).
    Returns a list as long as `requests`: the n-th attachment needing resource R
    gets R's n-th device; None where no resource was requested.

    Raises DeviceError naming each short resource with how many attachments need
    it and how many devices the pod has; for none, what the name must be.
    """
    needed = Counter(r for r in requests if r is not None)
    short = [(r, n, len(allocated.get(r, ()))) for r, n in needed.items()
             if n > len(allocated.get(r, ()))]
    if short:
        raise DeviceError("; ".join(
            f"resource {r}: {n} attachment{'s need' if n != 1 else ' needs'} a device, "
            f"{have} allocated to the pod"
            + (" (the kubelet reports no device-plugin resource and no ResourceClaim of "
               "that name for the pod's containers)" if have == 0 else "")
            for r, n, have in short))
    used: Counter[str] = Counter()
    out: list[str | None] = []
    for r in requests:
        if r is None:
            out.append(None)
        else:
            out.append(allocated[r][used[r]])
            used[r] += 1
    return out


def reserve_chosen_devices(chosen: list[tuple[str, str] | None],
                           allocated: dict[str, list[str]]) -> dict[str, list[str]]:
    """Check the device IDs the pod chose itself and take them out of its allocation.

    chosen: per attachment in plan order, (resource name of its NAD, the `deviceID` of
    its network selection element) when the element names one, else None.
    allocated: resource name -> the pod's device IDs of it, in kubelet order
    (`pod_devices`).
    Returns `allocated` without the chosen devices (a new dict, order kept): what is
    left for `assign_device_ids` to hand to the attachments that chose none, so no
    device goes to two attachments.

    Raises DeviceNotAllocated (7) for the first chosen ID that is not one of the pod's
    devices of that resource (a pod must not take another pod's device, or one of the
    node's that no one allocated), or that an earlier attachment chose; its message
    says which ID, which resource and what the pod has. Pure.

    Source: Multus (pkg/types/conf.go, LoadDelegateNetConf) passes an element's
    deviceID on unchecked when the resource map gave the attachment no device, and
    ignores it when it did; netattach honours it only when it is allocated to the pod
    (issue 21), which covers both.
    """
    taken: dict[tuple[str, str], int] = {}
    for index, choice in enumerate(chosen):
        if choice is None:
            continue
        resource, device_id = choice
        have = allocated.get(resource, [])
        if device_id not in have:
            raise DeviceNotAllocated(
                f"deviceID {device_id!r} is not a device the kubelet allocated to the pod "
                f"for resource {resource} (the pod has "
                f"{', '.join(repr(d) for d in have) if have else 'none'}); a pod may only "
                "name one of its own devices", index)
        if choice in taken:
            raise DeviceNotAllocated(
                f"deviceID {device_id!r} of resource {resource} is chosen by an earlier "
                "element of the selection too; a device serves one attachment", index)
        taken[choice] = index
    return {r: [d for d in ids if (r, d) not in taken] for r, ids in allocated.items()}


# --- kubelet PodResources API ------------------------------------------------------


# What the kubelet says of one container, as plain tuples (the protobuf messages stay
# inside _pod_containers): (container name, device-plugin devices, claims), where
#   device-plugin devices: [(resource name, [device ID, ...]), ...]
#   claims: [(ResourceClaim name, [(driver, pool, device, [CDI device name, ...]), ...]), ...]
# each in the kubelet's order.
ClaimDevice = tuple[str, str, str, list[str]]
ContainerResources = tuple[str, list[tuple[str, list[str]]], list[tuple[str, list[ClaimDevice]]]]


def cdi_device_id(cdi_name: str) -> str | None:
    """The device ID Multus v4.2.3 takes from a CDI device name: the part after "=" of
    "<vendor>/<class>=<device>" ("example.com/net=vf-0" -> "vf-0"), or None when the
    name does not split on "=" into exactly two parts or the device part is empty.

    Source: multus-cni v4.2.3, pkg/kubeletclient/kubeletclient.go, getDRAResources
    (strings.Split on "=", exactly two parts, else skipped). Where Multus takes an
    empty device part ("example.com/net=", not a valid CDI name) as an empty ID, which
    gives the attachment no device ID, None here makes it no ID at all.
    """
    parts = cdi_name.split("=")
    if len(parts) != 2 or not parts[1]:
        return None
    return parts[1]


def collect_device_ids(containers: Iterable[ContainerResources], wanted: Iterable[str],
                       pod: str = "") -> dict[str, list[str]]:
    """For each name in `wanted` (a NAD's resourceName), the pod's device IDs of that
    name, in order ([] when none). Pure.

    containers: what the kubelet reports, in its order (ContainerResources above).
    pod: "ns/name", only for warnings. Returns name -> device IDs, keys in the order
    of `wanted` (duplicates dropped).

    The rule is Multus v4.2.3's (pkg/kubeletclient/kubeletclient.go,
    GetPodResourceMap: getDevicePluginResources then getDRAResources per container;
    matched in pkg/k8sclient/k8sclient.go, getKubernetesDelegate, against the NAD's
    k8s.v1.cni.cncf.io/resourceName): one map, container by container, device-plugin
    devices of the container first (key: ContainerDevices.resource_name, IDs: its
    device_ids), then its DRA claims (key: DynamicResource.claim_name, the
    ResourceClaim's name; IDs: for each ClaimResource, for each of its CDI devices,
    `cdi_device_id`). claim_namespace is not compared (a pod's claims are in its
    namespace). Extended resource names have a "/" and claim names (DNS subdomains)
    never do, so in practice a name is one kind or the other.

    One difference, by the PodResources API's documented meaning (a ClaimResource
    is one device, the driver/pool/device triplet identifies it): an ID already
    given to a name is not given again. Multus appends it again, so it would hand
    one device to two attachments when (a) several containers reference the claim
    (the kubelet reports the claim under each) or (b) a driver allocated the claim
    several devices: kubelet 1.34 (pkg/kubelet/cm/container_manager_linux.go,
    GetDynamicResources) lists under each device the CDI devices of that driver's
    devices before it too (device k carries k devices' CDI names); first-seen order
    undoes that exactly. Wherever Multus gives distinct IDs, the result is the same.
    """
    out: dict[str, list[str]] = {r: [] for r in wanted}
    seen: set[tuple[str, str]] = set()

    def add(name: str, device_id: str) -> None:
        if (name, device_id) not in seen:
            seen.add((name, device_id))
            out[name].append(device_id)

    for container, plugin_devices, claims in containers:
        for resource, device_ids in plugin_devices:
            if resource in out:
                for device_id in device_ids:
                    add(resource, device_id)
        for claim, claim_devices in claims:
            if claim not in out:
                continue
            for driver, pool, device, cdi_names in claim_devices:
                if not cdi_names:
                    log.warning("pod %s, container %s, ResourceClaim %s: device %s/%s/%s has "
                                "no CDI device, so it gives no device ID", pod, container,
                                claim, driver, pool, device)
                for cdi_name in cdi_names:
                    cdi_id = cdi_device_id(cdi_name)
                    if cdi_id is None:
                        log.warning("pod %s, container %s, ResourceClaim %s: device %s/%s/%s: "
                                    "CDI device name %r is not <vendor>/<class>=<device>; "
                                    "ignored", pod, container, claim, driver, pool, device,
                                    cdi_name)
                    else:
                        add(claim, cdi_id)
    return out


def pod_devices(socket_path: str, namespace: str, pod: str, resource_names: Iterable[str],
                timeout: float) -> dict[str, list[str]]:
    """For each of `resource_names` (NADs' resourceName values), the pod's device IDs
    of that name ([] when none), from one kubelet request.

    A name matches a device-plugin resource or a ResourceClaim of the pod, as
    `collect_device_ids` says (Multus v4.2.3's rule); order: container order, then
    the kubelet's order within a container; an ID seen twice is kept once. A name
    with no device is an empty list, not an error (assign_device_ids reports
    shortages). `timeout` (seconds) bounds the whole exchange, fallback included.
    Raises DeviceError (naming socket, pod and resources) when the kubelet cannot be
    asked or answers badly.
    """
    wanted = list(dict.fromkeys(resource_names))
    label = (f"kubelet pod-resources socket {socket_path}, pod {namespace}/{pod}, "
             f"resource{'s' if len(wanted) != 1 else ''} {', '.join(wanted) or '(none)'}")
    containers = _pod_containers(socket_path, namespace, pod, timeout, label)
    return collect_device_ids(containers, wanted, f"{namespace}/{pod}")


def _pod_containers(socket_path: str, namespace: str, pod: str, timeout: float,
                    label: str) -> list[ContainerResources]:
    """The pod's containers as the kubelet reports them (ContainerResources above).

    Asks `Get` for the one pod; when the kubelet lacks it (UNIMPLEMENTED before
    1.27; UNKNOWN "... Get method disabled" while the KubeletPodResourcesGet gate
    is off, the default through 1.33), asks `List` and picks the pod out.
    """
    try:
        import grpc

        from .podresources import api_pb2, api_pb2_grpc
    except ImportError as e:  # an install without the runtime dependencies
        raise DeviceError(f"{label}: cannot load the gRPC client: {e}") from None

    if timeout <= 0:
        raise DeviceError(f"{label}: timeout must be positive, got {timeout}")
    deadline = time.monotonic() + timeout

    def remaining() -> float:
        left = deadline - time.monotonic()
        if left <= 0:
            raise DeviceError(f"{label}: kubelet did not answer within {timeout:g}s")
        return left

    def failure(e: Any, rpc: str) -> DeviceError:
        # What the stubs raise is both an RpcError and a grpc.Call (code, details).
        code, details = e.code(), e.details()
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return DeviceError(f"{label}: kubelet did not answer {rpc} within {timeout:g}s")
        if code == grpc.StatusCode.UNAVAILABLE:
            return DeviceError(f"{label}: kubelet unreachable: {details}")
        return DeviceError(f"{label}: kubelet {rpc} failed: {code.name}: {details}")

    target = "unix://" + os.path.abspath(socket_path)
    options = [("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
               ("grpc.enable_http_proxy", 0),
               ("grpc.enable_retries", 0)]
    with grpc.insecure_channel(target, options=options) as channel:
        stub = api_pb2_grpc.PodResourcesListerStub(channel)
        found = None
        try:
            reply = stub.Get(api_pb2.GetPodResourcesRequest(pod_name=pod, pod_namespace=namespace),
                             timeout=remaining())
            found = reply.pod_resources
        except grpc.RpcError as e:
            if not _get_unsupported(grpc, e):
                raise failure(e, "Get") from None
            log.debug("%s: kubelet has no usable Get (%s: %s); using List",
                      label, e.code().name, e.details())
        if found is None:
            try:
                reply = stub.List(api_pb2.ListPodResourcesRequest(), timeout=remaining())
            except grpc.RpcError as e:
                raise failure(e, "List") from None
            for p in reply.pod_resources:
                if p.namespace == namespace and p.name == pod:
                    found = p
                    break
            else:
                raise DeviceError(f"{label}: the kubelet lists no such pod")
        return [(c.name,
                 [(d.resource_name, list(d.device_ids)) for d in c.devices],
                 [(r.claim_name,
                   [(cr.driver_name, cr.pool_name, cr.device_name,
                     [cdi.name for cdi in cr.cdi_devices]) for cr in r.claim_resources])
                  for r in c.dynamic_resources])
                for c in found.containers]


def _get_unsupported(grpc: Any, e: Any) -> bool:
    code = e.code()
    if code == grpc.StatusCode.UNIMPLEMENTED:
        return True
    # The kubelet returns a plain Go error (UNKNOWN) when the feature gate is off.
    return code == grpc.StatusCode.UNKNOWN and "method disabled" in (e.details() or "")


# --- device information files -----------------------------------------------------


def _component(value: str, what: str) -> str:
    """`value` made safe as part of one file name: "/" -> "-" (as the spec says for
    resource names); empty or NUL-bearing values refused."""
    if not value or "\0" in value:
        raise ConfigError(f"invalid {what} {value!r} for a device-info file name")
    return value.replace("/", "-")


def dp_device_info_path(resource_name: str, device_id: str, base_dir: str = DEVINFO_DIR) -> str:
    """Where the device plugin leaves the device's information (device-info spec §4.1)."""
    name = (f"{_component(resource_name, 'resource name')}-"
            f"{_component(device_id, 'device ID')}-device.json")
    return os.path.join(base_dir, "dp", name)


def cni_device_info_path(container_id: str, ifname: str, base_dir: str = DEVINFO_DIR) -> str:
    """The attachment's CNI device-info file (device-info spec §4.2): the value of the
    `CNIDeviceInfoFile` capability for its plugins, and what DEL removes."""
    for value, what in ((container_id, "container ID"), (ifname, "interface name")):
        if value in (".", "..") or "/" in value:
            raise ConfigError(f"invalid {what} {value!r} for a device-info file name")
    name = f"{_component(container_id, 'container ID')}_{_component(ifname, 'interface name')}"
    return os.path.join(base_dir, "cni", name)


def _load(path: str) -> dict[str, Any] | None:
    """The device-info object in `path`; None when absent, or (with a warning) invalid."""
    try:
        # O_NONBLOCK: a FIFO planted there must not hang the ADD; checked below.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        log.warning("device-info file %s cannot be opened (%s); ignored", path, e.strerror)
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            log.warning("device-info file %s is not a regular file; ignored", path)
            return None
        if st.st_size > _MAX_DEVINFO_BYTES:
            log.warning("device-info file %s is too large (%d bytes); ignored", path, st.st_size)
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(_MAX_DEVINFO_BYTES + 1)
    except OSError as e:
        log.warning("device-info file %s cannot be read (%s); ignored", path, e.strerror)
        return None
    finally:
        os.close(fd)
    try:
        info = loads_strict(data)
    except ValueError as e:
        log.warning("device-info file %s is not valid JSON (%s); ignored", path, e)
        return None
    problem = _invalid(info)
    if problem or not isinstance(info, dict):
        log.warning("device-info file %s is not device information: %s; ignored", path, problem)
        return None
    return info


def _invalid(info: Any) -> str | None:
    """Why `info` is not a device-info map (device-info spec §3.1), or None.

    Minimal on purpose: an object with string `type` and `version`; the type's own
    keys are the producer's business and are passed on as they are.
    """
    if not isinstance(info, dict):
        return f"expected an object, got {json_type(info)}"
    for key in ("type", "version"):
        if key not in info:
            return f"no {key!r} key"
        if not isinstance(info[key], str) or not info[key]:
            return f"{key!r} must be a non-empty string, got {json_type(info[key])}"
    return None


def read_device_info(resource_name: str | None, device_id: str | None, container_id: str,
                     ifname: str, base_dir: str = DEVINFO_DIR) -> dict[str, Any] | None:
    """The attachment's device information for network-status "device-info" (§6.1.1).

    The attachment's CNI file first (what the plugin chain left, or our copy of
    the device plugin's); then, when a resource and device ID are given, the
    device plugin's file. Missing -> None. A file that is not a JSON object with
    string `type` and `version` is skipped with a warning on `netattach.devices`.
    """
    info = _load(cni_device_info_path(container_id, ifname, base_dir))
    if info is None and resource_name and device_id:
        info = _load(dp_device_info_path(resource_name, device_id, base_dir))
    return info


def save_device_info(container_id: str, ifname: str, info: dict[str, Any],
                     base_dir: str = DEVINFO_DIR) -> str:
    """Write `info` as the attachment's CNI device-info file (creating `cni/`) and
    return its path. Atomic: plugins never see half a file.

    Raises ConfigError when `info` is not device information, DeviceInfoError (5)
    when the file cannot be written.
    """
    problem = _invalid(info)
    if problem:
        raise ConfigError(f"not device information: {problem}")
    path = cni_device_info_path(container_id, ifname, base_dir)
    try:
        os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
        atomicfile.replace(path, json.dumps(info, separators=(",", ":")).encode(), 0o644)
    except OSError as e:
        raise DeviceInfoError(f"cannot write device-info file {path}: {e.strerror or e}") from None
    return path


def copy_device_info(resource_name: str, device_id: str, container_id: str, ifname: str,
                     base_dir: str = DEVINFO_DIR) -> dict[str, Any] | None:
    """Before the attachment's chain runs: copy the device plugin's file for the device
    into the attachment's CNI file (device-info spec §4.2.1). Returns the copied
    information, or None when the device plugin left none (or an invalid one):
    then the CNI plugin may write the file itself.

    Raises DeviceInfoError (5) when the copy cannot be written.
    """
    info = _load(dp_device_info_path(resource_name, device_id, base_dir))
    if info is not None:
        save_device_info(container_id, ifname, info, base_dir)
    return info


def remove_device_info(container_id: str, ifname: str, base_dir: str = DEVINFO_DIR) -> None:
    """On DEL: delete the attachment's CNI device-info file (§4.2.1); absent is fine.

    Raises DeviceInfoError (5) when it exists but cannot be removed.
    """
    path = cni_device_info_path(container_id, ifname, base_dir)
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as e:
        raise DeviceInfoError(f"cannot remove device-info file {path}: {e.strerror}") from None
