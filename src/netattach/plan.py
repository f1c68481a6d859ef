"""Pure: pod selection + resolved delegates + runtime request -> the ordered attachment plan.

Order (multi-net spec §6.2, §4.2): the cluster default network first with the
runtime's CNI_IFNAME, then each `defaultNetworks` entry, then each network
selection element in annotation order. Interface names (§4.1.2.1.5, §4.2.1):
a requested name is used as is and must not repeat an earlier attachment's;
otherwise `net<N>` where N is the attachment's position among the secondary
attachments (1-based, as Multus numbers them), skipping any name requested by
another element so a generated name never collides with a requested one.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Sequence

from .cni.chain import NetworkConfig
from .selection import NetworkSelectionElement

# network selection element attribute -> (runtimeConfig key == capability name, spec section).
# deviceID is not a spec key (Multus/SR-IOV); it carries no capability check.
RUNTIME_KEYS: tuple[tuple[str, str, str | None], ...] = (
    ("ips", "ips", "4.1.2.1.3.2"),
    ("mac", "mac", "4.1.2.1.4.2"),
    ("port_mappings", "portMappings", "4.1.2.1.7.2"),
    ("bandwidth", "bandwidth", "4.1.2.1.8.2"),
    ("infiniband_guid", "infinibandGUID", "4.1.2.1.10.2"),
    ("device_id", "deviceID", None),
)


class PlanError(Exception):
    """The request cannot be planned; the message names the network and the cause."""


@dataclass(frozen=True)
class Attachment:
    """One network attachment: one delegate invocation with its own CNI_IFNAME.

    network: the name in network-status ("ns/nad" for a NAD, the config name or
    "ns/nad" for the cluster default network).
    capability_args: runtimeConfig values by capability name; the chain engine
    passes each only to plugins that declare that capability.
    """
    network: str
    ifname: str
    default: bool
    config: NetworkConfig
    capability_args: dict[str, Any] = field(default_factory=dict)
    element: NetworkSelectionElement | None = None


def declares(config: NetworkConfig, capability: str) -> bool:
    """True when some plugin of the delegate sets `capabilities.<capability>` to true."""
    return any(isinstance(p.get("capabilities"), dict) and p["capabilities"].get(capability) is True
               for p in config.plugins)


def runtime_args_for(element: NetworkSelectionElement, config: NetworkConfig) -> dict[str, Any]:
    """runtimeConfig values a network selection element asks for, checked against capabilities.

    Returns {"ips": [...], "mac": "...", ...}. Raises PlanError when a key is set
    but no plugin of the delegate declares the capability (§4.1.2.1.3.2 and
    siblings: "the entire attachment request must fail").
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
        args = p.get("args") if isinstance(p.get("args"), dict) else {}
        cni = args.get("cni") if isinstance(args.get("cni"), dict) else {}
        p["args"] = {**args, "cni": {**cni, **cni_args}}
    return NetworkConfig.from_dict(raw, config.source)


def plan_attachments(
    default_network: tuple[str, NetworkConfig],
    runtime_ifname: str,
    runtime_config: dict[str, Any],
    secondaries: Sequence[tuple[NetworkSelectionElement, NetworkConfig]],
) -> list[Attachment]:
    """Build the attachment plan.

    default_network: (status name, delegate) of the cluster default network.
    runtime_ifname: CNI_IFNAME from the runtime (usually "eth0").
    runtime_config: the runtimeConfig the runtime passed to netattach; only the
      cluster default network gets it (spec §7.5).
    secondaries: defaultNetworks entries then the pod's selection, in order.
    Raises PlanError for a duplicate interface name or a missing capability.
    """
    name, config = default_network
    plan = [Attachment(name, runtime_ifname, True, config, dict(runtime_config))]
    used = {runtime_ifname}
    requested = {e.interface for e, _ in secondaries if e.interface}
    for position, (element, config) in enumerate(secondaries, start=1):
        if element.interface:
            ifname = element.interface
            if ifname in used:
                raise PlanError(f"network {element.ref}: interface {ifname!r} is already used "
                                f"by an earlier attachment (multi-net spec §4.1.2.1.5)")
        else:
            n = position
            while f"net{n}" in used or f"net{n}" in requested:
                n += 1
            ifname = f"net{n}"
        used.add(ifname)
        if element.cni_args:
            config = with_cni_args(config, element.cni_args)
        plan.append(Attachment(element.ref, ifname, False, config,
                               runtime_args_for(element, config), element))
    return plan
