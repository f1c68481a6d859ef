"""The node side of the DRA driver `cni.dra.networking.x-k8s.io` (issue 12), run by
`netattach daemon --dra`: the kubelet plugin and the node's ResourceSlice.

What the kubelet needs of a DRA driver's node component (KEP-4381 structured parameters;
kubelet 1.34, pkg/kubelet/cm/dra/plugin and pkg/kubelet/pluginmanager):

* **Registration** (`RegistrationServer`): a gRPC server on
  `<plugins_registry>/cni.dra.networking.x-k8s.io-reg.sock` (the kubelet's plugin watcher
  watches that dir) serving `pluginregistration.Registration` (k8s.io/kubelet
  pkg/apis/pluginregistration/v1): GetInfo answers type "DRAPlugin", the driver name,
  the DRA socket as endpoint and the DRA services served, newest first (SERVICES:
  "v1.DRAPlugin", "v1beta1.DRAPlugin"; the kubelet takes the first of the list it knows:
  kubelet 1.34 knows both, 1.32-1.33 only v1beta1). NotifyRegistrationStatus is the
  kubelet's verdict: logged (an error at ERROR level) and kept for /metrics.
* **The DRA service** (`DraService`) on the endpoint, by default
  `/var/lib/kubelet/plugins/cni.dra.networking.x-k8s.io/dra.sock`: the kubelet's
  `DRAPlugin` service of k8s.io/kubelet pkg/apis/dra/v1 and v1beta1 (the same messages),
  NodePrepareResources and NodeUnprepareResources. netattach needs nothing prepared on
  the node before the pod's sandbox exists: the interfaces are made by the runtime's CNI
  ADD (netattach reads the claim then) and released by its CNI DEL. So preparing checks
  the claim and answers its devices; unpreparing has nothing to undo.
* **The ResourceSlice** (`SlicePublisher`): one slice, pool = the node's name, listing
  the devices the scheduler allocates to CNI requests on this node (`slice_devices`).

grpc and the generated modules (netattach.daemon.draplugin) are imported here only, and this
module only by `netattach daemon --dra`: never on the exec'd CNI path.
"""
from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import logging
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..cni.names import is_dns1123_label, is_dns1123_subdomain
from ..kube.client import Kube, KubeError
from ..kube.reads import RESOURCE_GROUP, RESOURCE_VERSION
from ..spec.claims import DRIVER as DRIVER_NAME
from .unixsock import SocketError, clear_stale, socket_dir

log = logging.getLogger("netattach.daemon.dra")

DEFAULT_REGISTRY_DIR = "/var/lib/kubelet/plugins_registry"
"""The kubelet's plugin registration dir (its --root-dir + plugins_registry)."""
DEFAULT_PLUGIN_DIR = f"/var/lib/kubelet/plugins/{DRIVER_NAME}"
"""Where the DRA socket is made (the kubelet's convention: plugins/<driver>/)."""
REGISTRATION_SOCKET = f"{DRIVER_NAME}-reg.sock"
DRA_SOCKET = "dra.sock"
SERVICES = ("v1.DRAPlugin", "v1beta1.DRAPlugin")
"""The DRA gRPC services served, newest first: the registration's supported_versions
(k8s.io/kubelet pkg/apis/dra/<version>/types.go DRAPluginService)."""
PLUGIN_TYPE = "DRAPlugin"
"""PluginInfo.type of a DRA driver (k8s.io/kubelet pkg/apis/pluginregistration/v1
constants DRAPlugin)."""
MAX_SOCKET_PATH = 107
"""Bytes of a unix socket's path at most (sockaddr_un.sun_path, 108 with its NUL)."""
MAX_DEVICES = 128
"""Devices in one ResourceSlice at most (resource.k8s.io/v1 ResourceSliceMaxDevices)."""
GENERIC_PREFIX = "cni"
"""Generic devices are named cni-0, cni-1, ..."""
VERIFY_EVERY = 60.0
"""Seconds between reads of the published slice when nothing changed on the node. The
kubelet deletes every ResourceSlice of its node when it starts, and a driver's slices
when the driver has been unregistered or disconnected for a while (kubelet 1.34
DRAPluginManager.wipeResourceSlices); the slice is put back at the kubelet's next
registration (`SlicePublisher.poke`) and within this time otherwise."""


# -- the ResourceSlice's devices (pure)

@dataclass(frozen=True)
class HostInterface:
    """A network interface of the node: its kernel name, MAC ("" when it has none) and
    whether it is backed by a device (/sys/class/net/<name>/device exists: a NIC, an
    SR-IOV VF, not a bridge, veth or dummy)."""
    name: str
    mac: str = ""
    physical: bool = False


def host_interfaces() -> list[HostInterface]:
    """The interfaces of this process' network namespace (if_nameindex), sorted by name,
    with their MAC and kind read from /sys/class/net (missing files: "" and False)."""
    out = []
    for _, name in socket.if_nameindex():
        base = os.path.join("/sys/class/net", name)
        try:
            with open(os.path.join(base, "address")) as f:
                mac = f.read().strip()
        except OSError:
            mac = ""
        out.append(HostInterface(name, mac, os.path.exists(os.path.join(base, "device"))))
    return sorted(out, key=lambda i: i.name)


def select_interfaces(interfaces: Iterable[HostInterface],
                      patterns: Sequence[str]) -> list[HostInterface]:
    """The interfaces whose devices are published: those matching one of the shell
    patterns `patterns` (fnmatch, case-sensitive: "eth*", "ens1f0"); none given: every
    interface backed by a device (`HostInterface.physical`). The loopback never."""
    chosen = []
    for i in interfaces:
        if i.name == "lo":
            continue
        if patterns:
            if any(fnmatch.fnmatchcase(i.name, p) for p in patterns):
                chosen.append(i)
        elif i.physical:
            chosen.append(i)
    return chosen


def device_label(ifname: str) -> str:
    """A DNS label (names.is_dns1123_label) standing for the interface `ifname` in device
    names: the name itself when it is one ("eth0", "ens1f0"), else its lowercase with
    every other character "-" and a hash of the name appended, so two names never give
    one label ("Eth_0" -> "eth-0-<6 hex>"). "cni" is hashed too: it would collide with
    the generic devices' names."""
    if is_dns1123_label(ifname) and ifname != GENERIC_PREFIX:
        return ifname
    label = re.sub(r"[^a-z0-9-]", "-", ifname.lower()).strip("-")[:40] or "if"
    return f"{label}-{hashlib.sha256(ifname.encode()).hexdigest()[:6]}"


def slice_devices(interfaces: Sequence[HostInterface], per_interface: int,
                  generic: int) -> list[dict[str, Any]]:
    """The devices of the node's ResourceSlice (resource.k8s.io/v1 `Device`s), in order:

    * `generic` devices `cni-0` .. `cni-<generic-1>`, attribute `kind` "generic": one per
      attachment whose CNI config needs nothing of the node (a bridge, a VLAN on a fixed
      master, ...);
    * for each interface of `interfaces`, `per_interface` devices `<label>-0` ..
      (`device_label`), attributes `kind` "interface", `name` and `interfaceName` (the
      kernel's name of the host interface: seed 004's example reads `attributeRef: name`,
      the upstream CNI DRA driver publishes `interfaceName`), `macAddress` when it has
      one: one per attachment on that interface (macvlan, ipvlan, host-device with
      `master` from the attribute).

    Devices are allocated exclusively (one claim each; resource.k8s.io/v1 without the
    alpha DRAConsumableCapacity), so the counts are how many such attachments the node
    takes at once. At most MAX_DEVICES are returned: the generic ones first, then the
    interfaces' in order; what does not fit is left out (the caller logs it).
    Attribute names are unqualified: they are in the driver's domain, so a CEL selector
    reads `device.attributes["cni.dra.networking.x-k8s.io"].name`.
    """
    devices: list[dict[str, Any]] = [
        {"name": f"{GENERIC_PREFIX}-{n}", "attributes": {"kind": {"string": "generic"}}}
        for n in range(generic)]
    for iface in interfaces:
        label = device_label(iface.name)
        attributes: dict[str, Any] = {"kind": {"string": "interface"},
                                      "name": {"string": iface.name},
                                      "interfaceName": {"string": iface.name}}
        if iface.mac:
            attributes["macAddress"] = {"string": iface.mac}
        devices += [{"name": f"{label}-{n}", "attributes": attributes}
                    for n in range(per_interface)]
    return devices[:MAX_DEVICES]


def slice_name(node: str) -> str:
    """The name of the node's ResourceSlice: "<node>-cni.dra.networking.x-k8s.io" (a DNS
    subdomain, as the API requires), the node part cut and hashed when the whole would
    pass 253 characters."""
    name = f"{node}-{DRIVER_NAME}"
    if len(name) <= 253:
        return name
    digest = hashlib.sha256(node.encode()).hexdigest()[:8]
    return f"{node[:253 - len(DRIVER_NAME) - 10].rstrip('.-')}-{digest}-{DRIVER_NAME}"


def slice_spec(node: str, devices: list[dict[str, Any]], generation: int) -> dict[str, Any]:
    """The `spec` of the node's ResourceSlice (resource.k8s.io/v1): driver, pool (name =
    the node's name, `generation`, resourceSliceCount 1), nodeName, devices."""
    return {"driver": DRIVER_NAME, "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": devices}


# -- NodePrepareResources (pure, given the claim as read)

@dataclass(frozen=True)
class Prepared:
    """The answer for one claim: its devices (request name, pool, device) or an error."""
    devices: tuple[tuple[str, str, str], ...] = ()
    error: str = ""


def _selects_node(node_selector: Any, node: str) -> bool:
    """False when the allocation's nodeSelector names nodes by metadata.name (what the
    scheduler writes for node-local devices) and none of its terms takes `node`; True
    otherwise (no selector; label terms, which cannot be judged without the Node)."""
    if not isinstance(node_selector, dict):
        return True
    terms = node_selector.get("nodeSelectorTerms") or []
    named = []
    for term in terms:
        for f in (term or {}).get("matchFields") or []:
            if f.get("key") == "metadata.name" and f.get("operator") == "In":
                named.append(node in (f.get("values") or []))
    return not named or any(named)


def prepare_claim(claim: dict[str, Any] | None, namespace: str, name: str, uid: str,
                  node: str) -> Prepared:
    """What NodePrepareResources answers for the claim namespace/name whose UID the
    kubelet gave as `uid`, `claim` being the ResourceClaim as read (None: not found).

    Devices: every allocation result (status.allocation.devices.results) of our driver,
    as (request, pool, device); no CDI device IDs (the runtime injects nothing: the
    interface is made by CNI ADD). Errors, each naming the claim and what to check:
    not found; another UID (the claim was deleted and re-created); not allocated; its
    nodeSelector or a result's pool (our pools are named after their node) is another
    node's; no result of our driver. A claim with results of other drivers too is
    answered with ours only (each driver prepares its own).
    """
    ref = f"ResourceClaim {namespace}/{name} (UID {uid})"
    if claim is None:
        return Prepared(error=f"{ref} not found in the API server")
    meta = claim.get("metadata") or {}
    if meta.get("uid") != uid:
        return Prepared(error=f"{ref}: the API server has UID {meta.get('uid')}: the claim "
                              "was deleted and re-created since the kubelet read it")
    allocation = (claim.get("status") or {}).get("allocation")
    if not isinstance(allocation, dict):
        return Prepared(error=f"{ref} is not allocated (no status.allocation): the "
                              "scheduler has not allocated it yet")
    if not _selects_node(allocation.get("nodeSelector"), node):
        return Prepared(error=f"{ref} is allocated to another node than {node} "
                              "(status.allocation.nodeSelector)")
    results = ((allocation.get("devices") or {}).get("results")) or []
    ours = [r for r in results if isinstance(r, dict) and r.get("driver") == DRIVER_NAME]
    if not ours:
        return Prepared(error=f"{ref} has no allocation result of driver {DRIVER_NAME}")
    for r in ours:
        if r.get("pool") != node:
            return Prepared(error=f"{ref}: request {r.get('request')} is allocated device "
                                  f"{r.get('device')} of pool {r.get('pool')}, not of this "
                                  f"node's pool {node}")
    return Prepared(devices=tuple((str(r.get("request", "")), node, str(r.get("device", "")))
                                  for r in ours))


# -- the gRPC servers

class DraError(Exception):
    """The kubelet plugin cannot start (a socket dir unusable, another plugin on a
    socket)."""


def _serve(path: str, add: Callable[[Any], None], workers: int) -> Any:
    """A started grpc.Server on unix socket `path` (made 0600) with the servicers `add`
    registers. Raises DraError."""
    from concurrent.futures import ThreadPoolExecutor

    import grpc
    if len(os.fsencode(path)) > MAX_SOCKET_PATH:
        raise DraError(f"socket path {path} is longer than {MAX_SOCKET_PATH} bytes, the "
                       "most a unix socket's address holds: choose a shorter dir")
    try:
        clear_stale(path)
    except SocketError as e:
        raise DraError(str(e)) from None
    server = grpc.server(ThreadPoolExecutor(workers, thread_name_prefix="dra-grpc"))
    add(server)
    umask = os.umask(0o077)  # the socket is made 0600 (as server._bind does)
    try:
        if server.add_insecure_port(f"unix:{path}") == 0:
            raise DraError(f"cannot listen on {path}")
    finally:
        os.umask(umask)
    os.chmod(path, 0o600)
    server.start()
    return server


@dataclass
class RegistrationState:
    """The kubelet's last verdict (NotifyRegistrationStatus): registered is None until
    it called; `calls`: GetInfo calls (the kubelet calls it once per socket it sees)."""
    registered: bool | None = None
    error: str = ""
    info_calls: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass
class PrepareStats:
    """Claims answered by NodePrepareResources: ok, failed (per-claim error)."""
    ok: int = 0
    failed: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def grpc_modules() -> tuple[Any, ...]:
    """The generated modules of the kubelet's DRA v1 and v1beta1 services and of plugin
    registration v1 (draplugin/), importing grpc and protobuf on the first call:
    (dra_v1_pb2, dra_v1_pb2_grpc, dra_v1beta1_pb2, dra_v1beta1_pb2_grpc,
    pluginregistration_v1_pb2, pluginregistration_v1_pb2_grpc)."""
    from .draplugin import (
        dra_v1_pb2,
        dra_v1_pb2_grpc,
        dra_v1beta1_pb2,
        dra_v1beta1_pb2_grpc,
        pluginregistration_v1_pb2,
        pluginregistration_v1_pb2_grpc,
    )
    return (dra_v1_pb2, dra_v1_pb2_grpc, dra_v1beta1_pb2, dra_v1beta1_pb2_grpc,
            pluginregistration_v1_pb2, pluginregistration_v1_pb2_grpc)


class KubeletPlugin:
    """The kubelet plugin of the driver, and the node's slice publisher.

    node: this node's name; kube: `(timeout, setting) -> Kube` (the daemon's
    SharedClient.kube); api_timeout: seconds, the budget of each claim's GET and of each
    slice reconcile; registry_dir: the kubelet's plugins_registry; plugin_dir: where
    dra.sock is made; interfaces: shell patterns of the host interfaces with devices
    (`select_interfaces`); per_interface, generic: device counts (`slice_devices`);
    resync: seconds between looks at the node's interfaces.
    """

    def __init__(self, node: str, kube: Callable[[float, str], Kube], api_timeout: float,
                 registry_dir: str = DEFAULT_REGISTRY_DIR, plugin_dir: str = DEFAULT_PLUGIN_DIR,
                 interfaces: Sequence[str] = (), per_interface: int = 8, generic: int = 16,
                 resync: float = 10.0,
                 list_interfaces: Callable[[], list[HostInterface]] = host_interfaces):
        if not is_dns1123_subdomain(node):
            raise DraError(f"node name {node!r} is not a DNS subdomain: it cannot name a pool")
        self.node = node
        self.kube = kube
        self.api_timeout = api_timeout
        self.registry_dir = registry_dir
        self.plugin_dir = plugin_dir
        self.registration_socket = os.path.join(registry_dir, REGISTRATION_SOCKET)
        self.dra_socket = os.path.join(plugin_dir, DRA_SOCKET)
        self.registration = RegistrationState()
        self.prepares = PrepareStats()
        self.publisher = SlicePublisher(node, kube, api_timeout, interfaces, per_interface,
                                        generic, resync, list_interfaces)
        self._servers: list[tuple[str, Any]] = []
        """(socket path, grpc.Server) of each server started, the registration's last."""

    def start(self) -> None:
        """Serve the DRA service, then the registration socket (the kubelet calls the
        endpoint GetInfo names as soon as it sees it), then publish the slice in a thread.
        Raises DraError."""
        (dra_v1_pb2, dra_v1_pb2_grpc, dra_v1beta1_pb2, dra_v1beta1_pb2_grpc,
         pluginregistration_v1_pb2, pluginregistration_v1_pb2_grpc) = grpc_modules()
        try:
            socket_dir(self.plugin_dir, own=True)
            socket_dir(self.registry_dir, own=False)
        except SocketError as e:
            raise DraError(str(e)) from None

        def add_dra(server: Any) -> None:
            dra_v1_pb2_grpc.add_DRAPluginServicer_to_server(
                _dra_servicer(self, dra_v1_pb2, dra_v1_pb2_grpc), server)
            dra_v1beta1_pb2_grpc.add_DRAPluginServicer_to_server(
                _dra_servicer(self, dra_v1beta1_pb2, dra_v1beta1_pb2_grpc), server)

        def add_registration(server: Any) -> None:
            pluginregistration_v1_pb2_grpc.add_RegistrationServicer_to_server(
                _registration_servicer(self, pluginregistration_v1_pb2,
                                       pluginregistration_v1_pb2_grpc), server)

        try:
            self._servers.append((self.dra_socket, _serve(self.dra_socket, add_dra, 4)))
            self._servers.append((self.registration_socket, _serve(
                self.registration_socket, add_registration, 2)))
        except (DraError, OSError, RuntimeError) as e:
            self.stop()
            if isinstance(e, DraError):
                raise
            raise DraError(f"cannot serve the kubelet plugin: {e}") from None
        log.info("DRA driver %s: registration on %s, services %s on %s", DRIVER_NAME,
                 self.registration_socket, ", ".join(SERVICES), self.dra_socket)
        self.publisher.start()

    def stop(self) -> None:
        """Remove the registration socket first (the kubelet unregisters the plugin when
        it goes), stop both servers, remove the DRA socket. The ResourceSlice is left:
        a restarted daemon republishes it, and the kubelet deletes the slices of a driver
        that stays unregistered (docs/architecture.md, "DRA kubelet plugin"). Only the
        sockets this plugin made are removed, never another daemon's."""
        self.publisher.stop()
        for path, server in reversed(self._servers):
            with contextlib.suppress(OSError):
                os.unlink(path)
            server.stop(grace=2.0).wait(5.0)
        self._servers.clear()

    # -- the services' logic

    def info(self) -> tuple[str, str, str, list[str]]:
        """GetInfo: (type, name, endpoint, supported_versions)."""
        with self.registration.lock:
            self.registration.info_calls += 1
        return PLUGIN_TYPE, DRIVER_NAME, self.dra_socket, list(SERVICES)

    def notify(self, registered: bool, error: str) -> None:
        """NotifyRegistrationStatus: the kubelet's verdict, logged and kept."""
        with self.registration.lock:
            self.registration.registered = registered
            self.registration.error = error
        if registered:  # a kubelet that just started has deleted the node's slices
            self.publisher.poke()
            log.info("the kubelet registered DRA driver %s (endpoint %s)", DRIVER_NAME,
                     self.dra_socket)
        else:
            log.error("the kubelet refused to register DRA driver %s: %s", DRIVER_NAME,
                      error or "(no reason given)")

    def prepare(self, namespace: str, name: str, uid: str) -> Prepared:
        """NodePrepareResources for one claim: GET it (one api_timeout budget, retries as
        kube.Kube's), then `prepare_claim`. Idempotent: it reads and answers, nothing is
        kept, so the kubelet's retries get the same answer."""
        ref = f"ResourceClaim {namespace}/{name} (UID {uid})"
        if not (namespace and name and uid):
            result = Prepared(error=f"{ref}: the kubelet's request lacks the namespace, name "
                                    "or UID")
        elif not (is_dns1123_label(namespace) and is_dns1123_subdomain(name)):
            result = Prepared(error=f"{ref}: not a valid namespace and claim name")
        else:
            try:
                claim = self.kube(self.api_timeout, "--api-timeout").get_resource_claim(
                    namespace, name)
            except KubeError as e:
                result = Prepared(error=f"{ref}: cannot read it: {e}")
            else:
                result = prepare_claim(claim, namespace, name, uid, self.node)
        with self.prepares.lock:
            if result.error:
                self.prepares.failed += 1
            else:
                self.prepares.ok += 1
        if result.error:
            log.warning("NodePrepareResources: %s", result.error)
        else:
            log.info("NodePrepareResources: %s: devices %s", ref,
                     ", ".join(f"{r}={p}/{d}" for r, p, d in result.devices))
        return result


def _dra_servicer(plugin: KubeletPlugin, pb2: Any, pb2_grpc: Any) -> Any:
    """A DRAPlugin servicer of one API version (pb2: its messages)."""

    class Servicer(pb2_grpc.DRAPluginServicer):
        def NodePrepareResources(self, request: Any, context: Any) -> Any:  # noqa: N802
            response = pb2.NodePrepareResourcesResponse()
            for claim in request.claims:
                result = plugin.prepare(claim.namespace, claim.name, claim.uid)
                entry = response.claims[claim.uid]
                entry.SetInParent()
                if result.error:
                    entry.error = result.error
                for request_name, pool, device in result.devices:
                    entry.devices.add(request_names=[request_name], pool_name=pool,
                                      device_name=device)
            return response

        def NodeUnprepareResources(self, request: Any, context: Any) -> Any:  # noqa: N802
            """Success for every claim: nothing was prepared on the node (the runtime's
            CNI DEL releases the interfaces, from netattach's saved state, needing
            nothing from here); idempotent."""
            response = pb2.NodeUnprepareResourcesResponse()
            for claim in request.claims:
                response.claims[claim.uid].SetInParent()
                log.info("NodeUnprepareResources: ResourceClaim %s/%s (UID %s): nothing to "
                         "undo", claim.namespace, claim.name, claim.uid)
            return response

    return Servicer()


def _registration_servicer(plugin: KubeletPlugin, pb2: Any, pb2_grpc: Any) -> Any:
    class Servicer(pb2_grpc.RegistrationServicer):
        def GetInfo(self, request: Any, context: Any) -> Any:  # noqa: N802
            type_, name, endpoint, versions = plugin.info()
            return pb2.PluginInfo(type=type_, name=name, endpoint=endpoint,
                                  supported_versions=versions)

        def NotifyRegistrationStatus(self, request: Any, context: Any) -> Any:  # noqa: N802
            plugin.notify(request.plugin_registered, request.error)
            return pb2.RegistrationStatusResponse()

    return Servicer()


# -- the ResourceSlice

class SlicePublisher:
    """Keeps the node's ResourceSlice (`slice_name`) equal to what the node has: at
    start, whenever the devices change (host interfaces looked at every `resync` s),
    after a failure (next look), when the kubelet registers the driver (`poke`) and
    every VERIFY_EVERY s (put back if deleted, by the kubelet or anyone, or changed).
    Each reconcile: GET; absent: create with pool generation 1; different: update with
    generation + 1 (the scheduler uses only the newest generation of a pool); equal:
    nothing. Never deletes (the decision is in
    docs/architecture.md, "DRA kubelet plugin"), and touches no other slice.
    """

    def __init__(self, node: str, kube: Callable[[float, str], Kube], api_timeout: float,
                 patterns: Sequence[str], per_interface: int, generic: int, resync: float,
                 list_interfaces: Callable[[], list[HostInterface]]):
        self.node = node
        self.name = slice_name(node)
        self.kube = kube
        self.api_timeout = api_timeout
        self.patterns = tuple(patterns)
        self.per_interface = per_interface
        self.generic = generic
        self.resync = resync
        self.list_interfaces = list_interfaces
        self.generation = 0
        """The pool generation last published (0: none yet); for /metrics."""
        self.failures = 0
        self._published: list[dict[str, Any]] | None = None
        self._verified = 0.0
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._cut_logged = False

    def desired(self) -> list[dict[str, Any]]:
        """The devices the node offers now (`slice_devices` of `select_interfaces`)."""
        chosen = select_interfaces(self.list_interfaces(), self.patterns)
        devices = slice_devices(chosen, self.per_interface, self.generic)
        wanted = self.generic + self.per_interface * len(chosen)
        if wanted > len(devices) and not self._cut_logged:
            self._cut_logged = True
            log.warning("ResourceSlice %s: %d devices wanted (%d generic, %d per interface on "
                        "%s), only the first %d published: the API allows %d per slice; "
                        "lower --dra-generic-devices or --dra-devices-per-interface", self.name,
                        wanted, self.generic, self.per_interface,
                        ", ".join(i.name for i in chosen), len(devices), MAX_DEVICES)
        return devices

    def reconcile(self) -> bool:
        """One look: publish what the node has if the API server holds anything else.
        Returns True when the slice now matches; False after a failure (logged)."""
        devices = self.desired()
        now = time.monotonic()
        if devices == self._published and now - self._verified < VERIFY_EVERY:
            return True
        kube = self.kube(self.api_timeout, "--api-timeout")
        try:
            current = kube.get_resource_slice(self.name)
            if current is None:
                stored = kube.create_resource_slice({
                    "apiVersion": f"{RESOURCE_GROUP}/{RESOURCE_VERSION}",
                    "kind": "ResourceSlice", "metadata": {"name": self.name},
                    "spec": slice_spec(self.node, devices, 1)})
                action = "created"
            else:
                spec = current.get("spec") or {}
                generation = int((spec.get("pool") or {}).get("generation") or 0)
                if spec == slice_spec(self.node, devices, generation):
                    stored, action = current, ""
                else:
                    current["spec"] = slice_spec(self.node, devices, generation + 1)
                    stored = kube.update_resource_slice(current)
                    action = "updated"
        except KubeError as e:
            self.failures += 1
            log.error("ResourceSlice %s of driver %s not published (tried again in %g s): %s",
                      self.name, DRIVER_NAME, self.resync, e)
            return False
        self.generation = int(stored["spec"]["pool"]["generation"])
        self._published = devices
        self._verified = now
        if action:
            log.info("ResourceSlice %s %s: pool %s generation %d, %d devices", self.name,
                     action, self.node, self.generation, len(devices))
        return True

    def poke(self) -> None:
        """Read the slice back at once, changed or not (the kubelet registered us: when it
        has just started, it deleted the node's slices)."""
        self._verified = float("-inf")
        self._wake.set()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="dra-slice", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(self.api_timeout + 5.0)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.reconcile()
            except Exception:  # a bug: logged, the next look tries again
                log.exception("ResourceSlice %s: publishing failed", self.name)
            self._wake.wait(self.resync)
            self._wake.clear()
