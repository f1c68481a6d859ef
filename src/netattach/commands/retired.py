"""The retired configuration: what netattach does while it is uninstalled from a node.

When the API server says netattach is uninstalled (install/uninstall.py), `netattach
install` rewrites `00-netattach.conflist` as a retired one: the plugin entry it writes,
with `type` `netattach` (thin, in thick mode too: the node daemon goes away with the
DaemonSet, and the shim fails an ADD without it) and `retired: {"conflist": <the
conflist's host path>}` (netconf.NetConf.retired_conflist). Only the installer writes
it: it is netattach's own configuration, which the runtime reads from the conf dir;
no delegate can carry it (a delegate that is netattach itself is refused,
networks._is_own). The ServiceAccount token in the kubeconfig is dead by then, so
nothing here asks the API server. With it:
* ADD attaches the cluster default network only, as the runtime would without
  netattach, and saves no state: the sandbox is one netattach did not attach, and its
  DEL, through netattach or (once the files are gone) the runtime's alone, is the
  cluster default network's.
* DEL of a sandbox with saved state works from it as always; a state DEL cannot use
  as it is (damaged, or a DEL pending since an API outage) is released as far as it is
  known, at once (delete.py: no API retry window, the API will not come back for
  netattach). DEL of a sandbox without state (ADDed with the retired configuration, or
  before netattach was installed) is the cluster default network's DEL alone, quiet,
  with no tombstone: as the runtime's libcni cache has it when it has (delete.py, case
  3a), else as configured now; one with a tombstone was released already.
* CHECK: from saved state; without one, the cluster default network's CHECK.
* GC: as always, except that a valid attachment without saved state is the cluster
  default network's own (garbage.py).
* STATUS: as always.
Every command holds a shared flock on the retired conflist while it runs, then tries
nodefiles.remove_when_unused: once no saved state is left (and no installer runs, no
other command with the retired configuration runs, the conflist is still the retired
one), netattach's files go: the conflist first, so the runtime's next call is the
cluster default network's alone; with them, the runtime's libcni cache entries of the
conflist's network name, which the runtime's later DELs (through the cluster default
network's name) would never remove. A command that cannot take the flock because the
conflist is gone (removed meanwhile) never creates the state dir again.
"""
from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

from ..cni import chain, version
from ..cni.errors import CniError, VersionError
from ..cni.request import CniRequest
from ..cni.result import convert_result
from ..kube.api import pod_ref, where
from ..node import nodefiles
from ..node.statestore import StateStore, is_missing_netns
from ..spec.netconf import NetConf

if TYPE_CHECKING:
    from ..spec.plan import Attachment
    from .orchestrator import Orchestrator

log = logging.getLogger("netattach")


def run(orch: Orchestrator, req: CniRequest, conf: NetConf) -> dict[str, Any] | None:
    """Run `req.command` with the retired configuration (module doc); returns the
    document for stdout (ADD's result) or None. Raises CniError as the command does;
    the removal of netattach's files that follows a command never raises."""
    conflist = conf.retired_conflist
    assert conflist is not None
    # What runs after the files may be gone (cli: the timing line, the answer) is
    # imported now: a module of the removed artifact could not be loaded any more.
    from ..cni import jsonutil  # noqa: F401
    from ..kube import client as kube  # noqa: F401
    try:
        fd = nodefiles.lock_conflist(conflist, exclusive=False)
    except OSError as e:  # not a file netattach wrote (a symlink...): no removal after
        log.warning("cannot lock %s (%s): netattach's files are not removed by this call",
                    conflist, e.strerror)
        fd = None
    try:
        out = _command(orch, req, conf)
    finally:
        if fd is not None:
            os.close(fd)
    if fd is not None:
        _remove_when_unused(conf, orch.libcni_cache_dir)
    return out


def _command(orch: Orchestrator, req: CniRequest, conf: NetConf) -> dict[str, Any] | None:
    store = orch.store(conf)
    if req.command == "ADD":
        return _add(orch, req, conf)
    if req.command == "DEL":
        from . import delete
        if _saved(store, req.container_id):
            delete.cmd_del(orch, req, conf)
        elif store.deleted_since(req.container_id) is not None:
            log.debug("container %s: already released; nothing to do", req.container_id)
        elif not delete.release_added_without_netattach(orch, req, conf):
            _primary_only(orch, req, conf, "DEL")
    elif req.command == "CHECK":
        from . import check
        if _saved(store, req.container_id):
            check.cmd_check(orch, req, conf)
        else:
            _primary_only(orch, req, conf, "CHECK")
    elif req.command == "STATUS":
        from . import status
        status.cmd_status(orch, req, conf)
    else:
        from . import garbage
        garbage.cmd_gc(orch, req, conf)
    return None


def _saved(store: StateStore, container_id: str) -> bool:
    """True when the container has a state file (whole or damaged). Looked at without
    the container's lock, which would make the state dir: DEL and CHECK take it then."""
    try:
        return os.path.lexists(os.path.join(store.dir, container_id + ".json"))
    except ValueError:  # a NUL in the path: parse_request refuses such an ID first
        return False


def _primary(req: CniRequest, conf: NetConf) -> Attachment:
    """The cluster default network's attachment on CNI_IFNAME, from the configuration
    on disk (no API request), with the runtimeConfig the runtime sent (spec §7.5).
    Raises CniError (ConfigError: the config cannot be read or names netattach)."""
    from ..spec import plan as planning
    from ..spec.policy import check_delegate
    from .networks import resolve_cluster_network
    default = resolve_cluster_network(conf, None)
    [att] = planning.plan_attachments(default, req.ifname, conf.runtime_config, [])
    check_delegate(att.config, conf, tenant=False)
    return att


def _add(orch: Orchestrator, req: CniRequest, conf: NetConf) -> dict[str, Any]:
    """ADD of the cluster default network alone; nothing saved, no API request."""
    from .add import wait_ready
    pod = pod_ref(req)
    wait_ready(conf)
    att = _primary(req, conf)
    try:
        result = chain.add(att.config, orch.runtime_conf(req, conf, att.ifname,
                                                         att.capability_args))
        assert result is not None  # chain.add raises when a plugin prints no result
        out = convert_result(result, conf.cni_version)
    except CniError as e:
        raise e.within(where(pod, f"{att.network} (interface {att.ifname})")) from None
    log.info("%s: netattach is being uninstalled from this node: attached the cluster "
             "default network %s (%s) only, as the runtime would without netattach; "
             "nothing saved", where(pod), att.network, att.ifname)
    return out


def _primary_only(orch: Orchestrator, req: CniRequest, conf: NetConf, command: str) -> None:
    """DEL or CHECK of a sandbox netattach did not attach: the cluster default network's
    own, with the runtime's prevResult (the result netattach answered the ADD with, the
    cluster default network's) in that network's version when it converts."""
    pod = pod_ref(req)
    if command == "CHECK" and not version.at_least(conf.cni_version, "0.4.0"):
        raise VersionError(f"CHECK needs cniVersion 0.4.0 or later, the configuration says "
                           f"{conf.cni_version}")  # as check.cmd_check
    att = _primary(req, conf)
    if command == "CHECK" and not version.at_least(att.config.cni_version, "0.4.0"):
        log.debug("CHECK skipped for %s: cniVersion %s", att.network, att.config.cni_version)
        return
    prev = conf.raw.get("prevResult")
    if isinstance(prev, dict):
        try:
            prev = convert_result(prev, att.config.cni_version, conf.cni_version)
        except CniError:
            prev = None
    else:
        prev = None
    netns = req.netns
    if command == "DEL" and is_missing_netns(req.netns):
        netns = ""  # as delete_attachments: IPAM is released, the namespace skipped
    rt = orch.runtime_conf(req, conf, att.ifname, att.capability_args, netns)
    try:
        if command == "DEL":
            chain.delete(att.config, rt, prev)
        else:
            chain.check(att.config, rt, prev)
    except CniError as e:
        raise e.within(where(pod, f"{att.network} (interface {att.ifname})")) from None
    log.info("%s: container %s has no netattach state (ADDed while netattach was being "
             "uninstalled, or before it was installed): %s of the cluster default network "
             "%s only", where(pod), req.container_id, command, att.network)


def _remove_when_unused(conf: NetConf, cache_dir: str) -> None:
    """nodefiles.remove_when_unused for the configuration's paths and the runtime's libcni
    cache dir `cache_dir`; logs the outcome."""
    assert conf.retired_conflist is not None
    removal = nodefiles.remove_when_unused(conf.retired_conflist, conf.bin_dir, conf.cni_dir,
                                           network=conf.name, cache_dir=cache_dir)
    if removal.outcome == nodefiles.REMOVED:
        log.info("netattach is uninstalled from this node and no sandbox needs it any more: "
                 "%s", removal.detail)
        for path in removal.left:
            log.error("netattach's file %s could not be removed; remove it by hand", path)
    else:
        log.debug("netattach's files stay: %s", removal.detail)
