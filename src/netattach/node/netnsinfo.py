"""Read link MTUs inside a pod network namespace, cheaply, for the network-status `mtu`.

Results below CNI 1.1.0 carry no MTU, so the status entry (multi-net spec §5.3.5)
reads it from the pod netns. pyroute2 would do it but costs ~300 ms of import
on every ADD (measured with `python -X importtime`, see docs/architecture.md);
this path costs ~1 ms: a short-lived thread enters the netns (netns.run_inside:
setns(2) changes only the calling thread), opens a socket there and asks the
kernel with the SIOCGIFMTU ioctl (netdevice(7)). The thread then ends, so no
other thread's namespace changes. pyroute2 stays the tool for changing routes
(routes.py).
"""
from __future__ import annotations

import fcntl
import logging
import socket
import struct

from . import netns

log = logging.getLogger("netattach.netnsinfo")

SIOCGIFMTU = 0x8921
_IFREQ = "16si12x"  # struct ifreq: char ifr_name[IFNAMSIZ]; int ifr_mtu; padding to 40 bytes


def _mtus_here(ifnames: list[str]) -> dict[str, int]:
    out = {}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for name in ifnames:
            try:
                raw = fcntl.ioctl(sock.fileno(), SIOCGIFMTU, struct.pack(_IFREQ, name.encode(), 0))
            except OSError:
                continue  # no such link (any more)
            out[name] = struct.unpack(_IFREQ, raw)[1]
    return out


def link_mtus(netns_path: str, ifnames: list[str]) -> dict[str, int]:
    """MTU (bytes) of each named link inside the netns at `netns_path`.

    Returns {ifname: mtu} for the links that exist; {} when the netns cannot be
    entered (logged at WARNING). Never raises: the MTU is informational.
    """
    try:
        return netns.run_inside(netns_path, lambda: _mtus_here(ifnames), "netns-mtu")
    except Exception as e:  # noqa: BLE001 - informational: whatever fails, no MTU
        log.warning("cannot read link MTUs in %s: %s", netns_path, e)
        return {}
