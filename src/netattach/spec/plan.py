"""Pure: pod selection + resolved delegates + runtime request -> the ordered attachment plan.

Order (multi-net spec §6.2, §4.2): the cluster default network first with the
runtime's CNI_IFNAME, then each `defaultNetworks` entry, then each network
selection element in annotation order, then the pod's networks from DRA
ResourceClaims (claims.py: `spec.resourceClaims` order, then allocation result
order), then the auxiliary chain. Interface names (§4.1.2.1.5, §4.2.1):
a requested name is used as is and must not repeat an earlier attachment's;
otherwise `net<N>` where N is the attachment's position among the secondary
attachments (1-based, as Multus numbers them), skipping any name requested by
another element so a generated name never collides with a requested one.

runtimeConfig (§4.1.2.1.3 .. §4.1.2.1.11): each selection key becomes its
runtimeConfig value (RUNTIME_KEYS), checked against the delegate's declared
capabilities; a bandwidth rate without its burst gets default_burst(); an
ipam-claim-reference goes to args.cni of every plugin and to runtimeConfig
"ipamClaimReference" of the plugins that declare it, and never fails the plan.
"""
from __future__ import annotations

import copy
from collections.abc import Container, Sequence
from dataclasses import dataclass, field

from ..cni.chain import NetworkConfig
from ..cni.errors import ConfigError
from .selection import NetworkSelectionElement

TYPE_CHECKING = False  # typing is not imported on the exec'd path (cli.py)
if TYPE_CHECKING:
    from typing import Any, Protocol

    from .claims import ClaimNetwork, ClaimRef
else:
    Protocol = object  # a protocol: read by the type checker only

# network selection element attribute -> (runtimeConfig key == capability name, spec section).
# A key with a section must be declared by some plugin of the delegate or the plan fails;
# a key without one (None) is passed to the plugins that declare it and otherwise dropped:
# deviceID is not a spec key (Multus/SR-IOV), and ipamClaimReference is one the spec lets
# delegates ignore (§4.1.2.1.11: "Delegate CNIs that do not implement this feature will
# simply ignore this request").
RUNTIME_KEYS: tuple[tuple[str, str, str | None], ...] = (
    ("ips", "ips", "4.1.2.1.3.2"),
    ("mac", "mac", "4.1.2.1.4.2"),
    ("port_mappings", "portMappings", "4.1.2.1.7.2"),
    ("bandwidth", "bandwidth", "4.1.2.1.8.2"),
    ("infiniband_guid", "infinibandGUID", "4.1.2.1.10.2"),
    ("device_id", "deviceID", None),
    ("ipam_claim_reference", "ipamClaimReference", None),
)

# ipam-claim-reference (§4.1.2.1.11) leaves the channel to the delegate open. It goes both
# ways a plugin may look for it:
# * args.cni["ipam-claim-reference"] of every plugin (CONVENTIONS.md: "args" is optional
#   metadata that plugins which do not understand it ignore), under the annotation's own
#   key name, the name the IPAMClaim consumers that read it from the network selection
#   element use (OVN-Kubernetes' controller reads the element's `ipam-claim-reference`
#   from the pod annotation; Multus' NetworkSelectionElement type has the same JSON tag);
# * runtimeConfig["ipamClaimReference"], to plugins that declare that capability. Neither
#   Multus (its RuntimeConfig has no such field) nor OVN-Kubernetes (which does not take
#   it from CNI input at all) defines a runtimeConfig key, so there is no de-facto name to
#   follow; this one is the annotation key in the camelCase of the other runtimeConfig
#   keys (portMappings, infinibandGUID, deviceID).
IPAM_CLAIM_ARGS_KEY = "ipam-claim-reference"

# The reference bandwidth plugin's limits (containernetworking/plugins v1.9.1,
# plugins/meta/bandwidth), used by default_burst().
BANDWIDTH_MAX_BURST = (2**32 - 2) * 8          # it refuses burst/8 >= 2**32-1 ("more than 4GB")
BURST_FLOOR = 64 * 1024 * 8                     # bits: 64 KiB, the largest IP packet
BURST_RATE_WINDOW_DIVISOR = 10                  # rate / 10 = 100 ms of traffic at the rate
BURST_MAX_SECONDS = 200                         # stay clear of the 2**32 x 64 ns = 274.9 s overflow


class PlanError(ConfigError):
    """The request cannot be planned; the message names the network and the cause."""


@dataclass(frozen=True)
class Attachment:
    """One network attachment: one delegate invocation with its own CNI_IFNAME.

    network: the name in network-status ("ns/nad" for a NAD, the config name or
    "ns/nad" for the cluster default network).
    capability_args: runtimeConfig values by capability name; the chain engine
    passes each only to plugins that declare that capability.
    auxiliary: Multus' auxiliary CNI chain (`auxiliaryCNIChainName`): plugins that
    work on the pod's existing interfaces; its chain starts from an empty prevResult
    and it has no network-status entry.
    claim: the ResourceClaim device of a claim attachment (claims.py), else None.
    """
    network: str
    ifname: str
    default: bool
    config: NetworkConfig
    capability_args: dict[str, Any] = field(default_factory=dict)
    element: NetworkSelectionElement | None = None
    auxiliary: bool = False
    claim: ClaimRef | None = None

    @property
    def default_route(self) -> tuple[str, ...] | None:
        """The gateways its selection element asks for (spec §4.1.2.1.9), if any."""
        return self.element.default_route if self.element else None


def declares(config: NetworkConfig, capability: str) -> bool:
    """True when some plugin of the delegate sets `capabilities.<capability>` to true."""
    return any(isinstance(p.get("capabilities"), dict) and p["capabilities"].get(capability) is True
               for p in config.plugins)


def default_burst(rate: int) -> int:
    """A burst in bits for a bandwidth rate in bits/s the selection gave without its burst.

    Spec §4.1.2.1.8.2 lets the delegating plugin choose one, "as some bandwidth
    management plugins (like the CNI reference "bandwidth" plugin) require these
    values". The rule, from what the reference bandwidth plugin (v1.9.1,
    plugins/meta/bandwidth) does with the value and what the kernel's tbf qdisc it
    installs does with that:

    * the plugin refuses a rate without a burst ("if rate is set, burst must also
      be set"), and a burst whose byte count (burst / 8) is 2**32-1 or more;
    * tbf drops every packet longer than the burst (sch_tbf.c tbf_enqueue: a packet
      over max_size is dropped unless it is a GSO packet whose segments fit), so a
      burst under one full frame blackholes the interface; a burst under 8 bits is 0
      bytes and the kernel refuses the qdisc (measured: ADD fails with "create
      qdisc: invalid argument");
    * the plugin hands tbf the bucket as the time the burst takes at the rate, in a
      u32 count of 64 ns scheduler ticks (ifb_creator.go buffer(); /proc/net/psched),
      so a burst that takes longer than 2**32 x 64 ns = 274.9 s at the rate wraps
      around to an arbitrary bucket (measured on this project's test bed: 2**31-1
      bits at 1 Mbit/s gave a tbf burst of 27.9 MB instead of 268 MB, with a
      latency of 1924 s);
    * tc-tbf(8): the bucket must at least hold what arrives between two timer runs
      (rate / HZ; HZ can be as low as 100, i.e. 10 ms), or the rate is not reached.

    So: burst = max(rate x 100 ms, 64 KiB), then at most rate x 200 s (the
    overflow, with margin) and at most (2**32-2) x 8 bits (the plugin's 4 GB limit).
    64 KiB is the largest IP packet and a veth's default GSO size, well above any
    jumbo frame, so whole packets always fit; 100 ms of traffic is ten timer
    runs at HZ=100 and lets TCP reach the rate. The floor decides below 5.24 Mbit/s,
    the 100 ms above; the 200 s cap only matters below 2622 bit/s, where no burst
    can be both a full frame and free of the overflow, and the overflow is the worse.
    (The burst kubelet's CNI code used to pass, math.MaxInt32 bits, "the equivalent of
    setting no limit", overflows the bucket at any rate under about 7.8 Mbit/s; the
    rule above never does.)
    """
    burst = max(rate // BURST_RATE_WINDOW_DIVISOR, BURST_FLOOR)
    return min(burst, rate * BURST_MAX_SECONDS, BANDWIDTH_MAX_BURST)


def with_default_bursts(bandwidth: dict[str, int]) -> dict[str, int]:
    """The bandwidth request with default_burst() filled in where a rate has no burst.

    A burst the selection gave is kept as is, however small or large.
    """
    out = dict(bandwidth)
    for rate_key, burst_key in (("ingressRate", "ingressBurst"), ("egressRate", "egressBurst")):
        if rate_key in out and burst_key not in out:
            out[burst_key] = default_burst(out[rate_key])
    return out


def port_mappings_for_runtime(mappings: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The selection's port mappings in the shape of CONVENTIONS.md's portMappings.

    The protocol is lower case, as in CONVENTIONS.md's example ("tcp") and as kubelet
    sends it: the reference portmap plugin writes it verbatim into its rules, and its
    nftables backend (v1.9.1) fails the ADD on "TCP" (nft only knows `tcp dport`).
    The selection parser normalizes protocols to upper case; this undoes that.
    """
    return [{**m, "protocol": m["protocol"].lower()} if isinstance(m.get("protocol"), str)
            else dict(m) for m in mappings]


def runtime_args_for(element: NetworkSelectionElement, config: NetworkConfig) -> dict[str, Any]:
    """runtimeConfig values a network selection element asks for, checked against capabilities.

    Returns {"ips": [...], "mac": "...", ...}; a bandwidth rate without its burst
    gets default_burst(), port mapping protocols are lower case. Raises PlanError when a
    spec key is set but no plugin of the delegate declares the capability (§4.1.2.1.3.2
    and siblings: "the entire attachment request must fail"); deviceID and
    ipamClaimReference never fail.
    """
    out: dict[str, Any] = {}
    for attr, key, section in RUNTIME_KEYS:
        value = getattr(element, attr)
        if value is None:
            continue
        if section and not declares(config, key):
            raise PlanError(
                f"network {element.ref}: the selection asks for {key!r} but no plugin of "
                f"{config.source} declares the capability; add \"capabilities\": "
                f"{{\"{key}\": true}} to the plugin that handles it (multi-net spec §{section})")
        if key == "bandwidth":
            value = with_default_bursts(value)
        elif key == "portMappings":
            value = port_mappings_for_runtime(value)
        out[key] = list(value) if isinstance(value, tuple) else value
    return out


def with_cni_args(config: NetworkConfig, cni_args: dict[str, Any]) -> NetworkConfig:
    """The delegate with `args.cni` of every plugin merged with `cni_args` (selection wins).

    Spec §4.1.2.1.6.2: the selection element's "cni-args" take priority over the
    NAD config's own "args". The input config is not modified.
    """
    raw = copy.deepcopy(config.raw)
    plugins = raw["plugins"] if config.is_list else [raw]
    for p in plugins:
        args: dict[str, Any] = p["args"] if isinstance(p.get("args"), dict) else {}
        cni: dict[str, Any] = args["cni"] if isinstance(args.get("cni"), dict) else {}
        p["args"] = {**args, "cni": {**cni, **cni_args}}
    return NetworkConfig.from_dict(raw, config.source)


class _Named(Protocol):
    """What interface_names reads of a secondary: a selection element or a claim network."""
    @property
    def interface(self) -> str | None: ...
    @property
    def ref(self) -> Any: ...


def interface_names(runtime_ifname: str, elements: Sequence[_Named]) -> list[str]:
    """CNI_IFNAME of each secondary attachment, in order (§4.1.2.1.5, §4.2.1).

    runtime_ifname: the cluster default network's (the runtime's CNI_IFNAME).
    elements: defaultNetworks entries, the pod's selection, then its claim networks
    (claims.ClaimNetwork: `interface` its CNIConfig's ifName), in attachment order.
    Returns one name per element: the requested `interface`, else `net<N>` with N the
    element's 1-based position, counted up past names used or requested elsewhere.
    Raises PlanError when a requested name is already used by an earlier attachment
    (the runtime's included).
    """
    used = {runtime_ifname}
    requested = {e.interface for e in elements if e.interface}
    out = []
    for position, element in enumerate(elements, start=1):
        if element.interface:
            ifname = element.interface
            if ifname in used:
                raise PlanError(f"network {element.ref}: interface {ifname!r} is already used "
                                f"by an earlier attachment (multi-net spec §4.1.2.1.5; seed "
                                f"004 Validation: a valid ifName)")
        else:
            ifname = generated_name(position, used, requested)
        used.add(ifname)
        out.append(ifname)
    return out


def generated_name(position: int, *taken: Container[str | None]) -> str:
    """The interface name of an element that names none (§4.1.2.1.5, Multus' rule):
    `net<position>` (1-based among the secondary attachments), counted up past the
    names in any of `taken`."""
    n = position
    while any(f"net{n}" in names for names in taken):
        n += 1
    return f"net{n}"


def element_attachment(element: NetworkSelectionElement, config: NetworkConfig,
                       ifname: str) -> Attachment:
    """The attachment of one network selection element as `ifname`: its `cni-args` and
    `ipam-claim-reference` injected into the delegate's config, its runtimeConfig
    values (`runtime_args_for`; spec §4.1.2.1). Raises PlanError for a capability the
    delegate does not declare."""
    cni_args = dict(element.cni_args or {})
    if element.ipam_claim_reference:
        # the dedicated key beats a same-named entry in the element's cni-args
        cni_args[IPAM_CLAIM_ARGS_KEY] = element.ipam_claim_reference
    if cni_args:
        config = with_cni_args(config, cni_args)
    return Attachment(element.ref, ifname, False, config, runtime_args_for(element, config),
                      element)


def plan_attachments(
    default_network: tuple[str, NetworkConfig],
    runtime_ifname: str,
    runtime_config: dict[str, Any],
    secondaries: Sequence[tuple[NetworkSelectionElement, NetworkConfig]],
    auxiliary: NetworkConfig | None = None,
    claims: Sequence[ClaimNetwork] = (),
) -> list[Attachment]:
    """Build the attachment plan.

    default_network: (status name, delegate) of the cluster default network.
    runtime_ifname: CNI_IFNAME from the runtime (usually "eth0").
    runtime_config: the runtimeConfig the runtime passed to netattach; only the
      cluster default network gets it (spec §7.5).
    secondaries: defaultNetworks entries then the pod's selection, in order.
    auxiliary: Multus' auxiliary CNI chain, run last; its CNI_IFNAME is the name an
      unnamed element after the secondaries would get (`net<N+1>`), as Multus names it.
    claims: the pod's claim networks (claims.resolve), after the selection and before
      the auxiliary chain; each named by its ifName, else as an unnamed element.
    Raises PlanError for a duplicate interface name or a missing capability.
    """
    name, config = default_network
    plan = [Attachment(name, runtime_ifname, True, config, dict(runtime_config))]
    elements: list[_Named] = [e for e, _ in secondaries]
    elements += list(claims)
    if auxiliary is not None:
        placeholder = NetworkSelectionElement(name=auxiliary.name, namespace="",
                                              index=len(elements))
        aux_ifname = interface_names(runtime_ifname, elements + [placeholder])[-1]
    ifnames = interface_names(runtime_ifname, elements)
    for (element, config), ifname in zip(secondaries, ifnames):
        plan.append(element_attachment(element, config, ifname))
    for claim, ifname in zip(claims, ifnames[len(secondaries):]):
        plan.append(Attachment(claim.ref.network, ifname, False, claim.config,
                               claim=claim.ref))
    if auxiliary is not None:
        plan.append(Attachment(auxiliary.name, aux_ifname, False, auxiliary, auxiliary=True))
    return plan
