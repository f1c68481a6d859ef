"""CHECK (CNI SPEC.md "CHECK"): every saved attachment's delegate is asked whether it is
still as the ADD left it. No API request. (STATUS is status.py.)
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ..cni import chain, version
from ..cni.errors import CniError, UnknownContainer, VersionError
from ..cni.request import CniRequest
from ..kube.api import pod_ref, where
from ..node.logsetup import log_context
from ..spec.netconf import NetConf

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
        with log_context(network=att.network):
            try:
                config = chain.NetworkConfig.from_dict(att.config, att.source)
                if not version.at_least(config.cni_version, "0.4.0"):
                    # CHECK does not exist before 0.4.0 (SPEC.md): nothing to check.
                    log.debug("CHECK skipped for %s: cniVersion %s", att.network,
                              config.cni_version)
                    continue
                chain.check(config, orch.saved_runtime_conf(req, conf, att), att.result)
            except CniError as e:
                raise e.within(where(pod, f"{att.network} (interface {att.ifname})")) from None
