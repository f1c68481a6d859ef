"""CHECK and STATUS (CNI SPEC.md "CHECK", "STATUS").

CHECK asks every saved attachment's delegate whether it is still as the ADD left it;
STATUS asks the cluster default network whether it is ready for ADD. Neither makes an
API request.
"""
from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from ..cni import chain, version
from ..cni.errors import CniError, NotAvailable, UnknownContainer, VersionError
from ..cni.request import CniRequest
from ..kube.api import pod_ref, where
from ..spec.netconf import NetConf
from .networks import resolve_cluster_network

if TYPE_CHECKING:
    from .orchestrator import Orchestrator

log = logging.getLogger("netattach")


def cmd_check(orch: Orchestrator, req: CniRequest, conf: NetConf) -> None:
    """CHECK every attachment with its saved result as prevResult (CNI SPEC.md "CHECK").

    Delegates whose own cniVersion predates CHECK (< 0.4.0) are skipped.
    Raises VersionError (1) when netattach's cniVersion is below 0.4.0,
    UnknownContainer (3) without saved attachments, StateError (5) when the state
    cannot be read, else the first failing check (the child's code).
    """
    pod = pod_ref(req)
    if not version.at_least(conf.cni_version, "0.4.0"):
        raise VersionError(f"CHECK needs cniVersion 0.4.0 or later, the configuration says "
                           f"{conf.cni_version}")
    store = orch.store(conf)
    try:
        with store.lock(req.container_id):
            state = store.load(req.container_id)
    except CniError as e:
        raise e.within(where(pod)) from None
    if state is None or not state.attempted():
        raise UnknownContainer(f"pod {pod or '?'}: no saved attachments for container "
                               f"{req.container_id}: it was never added on this node")
    for att in state.attachments:
        try:
            config = chain.NetworkConfig.from_dict(att.config, att.source)
            if not version.at_least(config.cni_version, "0.4.0"):
                # CHECK does not exist before 0.4.0 (SPEC.md); such a delegate has nothing to check.
                log.debug("CHECK skipped for %s: cniVersion %s", att.network, config.cni_version)
                continue
            chain.check(config, orch.saved_runtime_conf(req, conf, att), att.result)
        except CniError as e:
            raise e.within(where(pod, f"{att.network} (interface {att.ifname})")) from None


def cmd_status(orch: Orchestrator, req: CniRequest, conf: NetConf) -> None:
    """STATUS: forward to the cluster default network (CNI SPEC.md "STATUS", 1.1.0).

    Readiness of the node's pod networking is the cluster default network's; its
    error code (50 / 51) reaches the runtime unchanged. No API request. Raises
    NotAvailable (50) when the readiness indicator file is missing or the cluster
    default network's config cannot be read, else the child's error.
    """
    if conf.readiness_indicator_file and not os.path.exists(conf.readiness_indicator_file):
        raise NotAvailable(f"cluster default network not ready: readiness indicator file "
                           f"{conf.readiness_indicator_file} does not exist")
    try:
        _, config = resolve_cluster_network(conf, None)
    except CniError as e:
        raise NotAvailable(f"{where(None, f'{conf.cluster_network} (cluster default network)')}: "
                           f"{e.msg}", e.details) from None
    chain.status(config, orch.bare_runtime_conf(req, conf))
