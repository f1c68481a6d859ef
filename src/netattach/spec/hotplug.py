"""Hot-plug (issue 13): what changes when a running pod's selection changes.

Pure logic, no I/O: the node daemon (thick mode) compares the attachments a sandbox
has (its saved state) with the network selection elements the pod's
`k8s.v1.cni.cncf.io/networks` annotation (and `defaultNetworks`) select now, and gets
the attachments to DEL and the elements to ADD (`diff`).

An attachment's identity is its NetworkAttachmentDefinition reference (`ns/name`,
multi-net spec §4.1.1) and its interface name:
* an element that names its interface (`interface`, `net@ifname`, §4.1.2.1.5) is the
  attachment with that reference and that interface, whether the ADD got the name
  from the element or generated it;
* an element that names none is an attachment of the same reference whose interface
  was generated, taken in the order of both lists (the first unnamed `ns/a` element
  is the first such `ns/a` attachment, and so on). So an unnamed attachment keeps its
  interface when an element before it is removed, where a fresh ADD would number it
  anew (`net<position>`, §4.1.2.1.5). Failing that, it is an attachment of the same
  reference whose name was requested and that no element asks for now: dropping
  `@data0` from an element keeps data0, rather than tearing the interface down to
  make it again under another name;
* an element left unmatched is ADDed; its generated name is `net<position>` counted
  up past every interface the sandbox keeps or an element requests
  (`plan.interface_names`' rule, with the kept names taken);
* an attachment left unmatched is DELed.
Ordering alone is not a change: the interfaces stay as they are.

An element whose attachment is kept but whose parameters differ (`ips`, `mac`,
`default-route`, `portMappings`, `bandwidth`, `cni-args`, `infiniband-guid`,
`ipam-claim-reference`) is refused: the interface keeps working as attached, and the
reason is reported (a Warning event), as the issue asks for an in-place change that
has no safe CNI equivalent (a DEL then an ADD would change the interface under the
pod's feet). So is an added element whose requested interface a kept attachment has.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .plan import generated_name
from .selection import NetworkSelectionElement

# Element fields that configure an attachment (multi-net spec §4.1.2.1); the identity
# fields (name, namespace, interface) and the bookkeeping ones (index, device_id:
# given by the kubelet, not the user) are not parameters.
PARAMETERS = ("ips", "mac", "default_route", "port_mappings", "bandwidth", "cni_args",
              "infiniband_guid", "ipam_claim_reference")


def parameters(element: NetworkSelectionElement) -> dict[str, Any]:
    """The element's parameters (PARAMETERS) that are set, by field name: what must
    stay equal for an attachment to be kept as it is."""
    out = {}
    for name in PARAMETERS:
        value = getattr(element, name)
        if value is not None:
            out[name] = list(value) if isinstance(value, tuple) else value
    return out


@dataclass(frozen=True)
class Attached:
    """One secondary attachment a sandbox has (from its saved state).

    network: the NAD reference `ns/name`; ifname: its interface; requested: the
    element that made it named the interface; params: `parameters()` of that element.
    """
    network: str
    ifname: str
    requested: bool
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class Change:
    """What `diff` found.

    keep: (index into `attached`, the element now selecting it), in element order.
    remove: indexes into `attached` to DEL, in reverse attachment order (spec §7.2's
      order for undoing).
    add: (element, interface name) to ADD, in element order.
    refused: one message per element that cannot be applied (the attachment, if any,
      stays as it is).
    """
    keep: list[tuple[int, NetworkSelectionElement]] = field(default_factory=list)
    remove: list[int] = field(default_factory=list)
    add: list[tuple[NetworkSelectionElement, str]] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        """Nothing to DEL or ADD (refusals alone change nothing)."""
        return not self.remove and not self.add


def diff(attached: Sequence[Attached], desired: Sequence[NetworkSelectionElement],
         taken: Sequence[str] = ()) -> Change:
    """The change from `attached` (the sandbox's secondary attachments, in attachment
    order) to `desired` (the elements selected now, `defaultNetworks` first, §4.1.2).

    taken: interface names no element may get (the cluster default network's
    CNI_IFNAME, attachments that are not selected by elements such as the auxiliary
    chain's). Never raises: what cannot be applied is in `Change.refused` (module doc).
    """
    change = Change()
    matched: dict[int, NetworkSelectionElement] = {}
    pending: list[NetworkSelectionElement] = []
    for element in desired:  # named interfaces first: they are exact
        if element.interface is None:
            continue
        index = next((i for i, a in enumerate(attached) if i not in matched
                      and a.network == element.ref and a.ifname == element.interface), None)
        if index is not None:
            matched[index] = element
    for element in desired:
        if element.interface is not None:
            if not any(e is element for e in matched.values()):
                pending.append(element)
            continue
        index = next((i for i, a in enumerate(attached) if i not in matched
                      and a.network == element.ref and not a.requested), None)
        if index is None:
            pending.append(element)
        else:
            matched[index] = element
    wanted = {e.interface for e in pending if e.interface is not None}
    for element in list(pending):  # unnamed ones left: a requested name no element wants
        if element.interface is not None:
            continue
        index = next((i for i, a in enumerate(attached) if i not in matched
                      and a.network == element.ref and a.ifname not in wanted), None)
        if index is not None:
            matched[index] = element
            pending.remove(element)
    for index, element in sorted(matched.items(), key=lambda m: m[1].index):
        now = parameters(element)
        if now != attached[index].params:
            change.refused.append(
                f"network {element.ref} (interface {attached[index].ifname}): its parameters "
                f"changed ({_changed(attached[index].params, now)}); an attachment is not "
                "changed in place: remove the element, then add it back in a later edit")
        change.keep.append((index, element))
    change.remove = sorted((i for i in range(len(attached)) if i not in matched), reverse=True)
    used = set(taken) | {attached[i].ifname for i in matched}
    requested = {e.interface for e in pending if e.interface}
    for position, element in enumerate(desired, start=1):
        if not any(e is element for e in pending):
            continue
        if element.interface is not None:
            if element.interface in used:
                change.refused.append(f"network {element.ref}: interface {element.interface} "
                                      "is already used by another attachment of the pod")
                continue
            ifname = element.interface
        else:
            ifname = generated_name(position, used, requested)
        used.add(ifname)
        change.add.append((element, ifname))
    return change


def _changed(before: dict[str, Any], now: dict[str, Any]) -> str:
    keys = sorted(k for k in set(before) | set(now) if before.get(k) != now.get(k))
    return ", ".join(k.replace("_", "-") for k in keys)
