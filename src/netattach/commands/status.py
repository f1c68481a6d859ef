"""STATUS (CNI SPEC.md "STATUS", 1.1.0): is the cluster default network ready for ADD?

netattach is ready when the cluster default network is: its readiness indicator file
(when configured) exists, and the network answers STATUS. No API request.

containerd execs STATUS for every CRI Status call (the kubelet asks every few seconds),
so this is the exec'd path's most frequent command. libcni asks a network list STATUS
only from cniVersion 1.1.0 on (GetStatusNetworkList returns nil below, without looking
at its plugins); a cluster default network below 1.1.0 has nothing to forward.
`answered_without_forwarding` settles that case from the file alone, importing only
the standard library and the CNI protocol's errors and versions (no conflist engine, no
logging: tests/unit/test_import_check.py); everything else is `cmd_status`. A thin
STATUS settled so is remembered (`answer_quietly`), and the next identical call is
answered from that memo before the configuration is even parsed (node/statusmemo.py).
"""
from __future__ import annotations

import os

from ..cni.errors import NotAvailable, VersionError

TYPE_CHECKING = False  # typing is not imported on the exec'd path (cli.py)
if TYPE_CHECKING:
    from ..cni.request import CniRequest
    from ..spec.netconf import NetConf
    from .orchestrator import Orchestrator


def _check_readiness_file(conf: NetConf) -> None:
    """Raise NotAvailable (50) while the readiness indicator file is missing (Multus'
    readinessindicatorfile: the cluster default network writes it once it is up)."""
    if conf.readiness_indicator_file and not os.path.exists(conf.readiness_indicator_file):
        raise NotAvailable(f"cluster default network not ready: readiness indicator file "
                           f"{conf.readiness_indicator_file} does not exist")


def answered_without_forwarding(conf: NetConf) -> bool:
    """True when STATUS is answered "ready" without asking any plugin: `clusterNetwork` is
    the absolute path of a config file (what `netattach install` writes) holding a JSON
    object whose cniVersion is a version below 1.1.0 (libcni GetStatusNetworkList: nothing
    to ask). False when the answer needs `cmd_status`: a directory, a name or a NAD, a
    file that cannot be read or parsed (cmd_status names the problem), or 1.1.0 and later.

    Raises NotAvailable (50) while the readiness indicator file is missing.
    """
    return settled_identity(conf) is not None


def settled_identity(conf: NetConf) -> list[int] | None:
    """`answered_without_forwarding`, and what settled it: the identity
    (statusmemo.identity) of the cluster default network's file, the same before and
    after it was read, when STATUS is answered "ready" without forwarding; None when
    the answer needs `cmd_status` (or the file changed while it was read).

    Raises NotAvailable (50) while the readiness indicator file is missing."""
    _check_readiness_file(conf)
    path = conf.cluster_network
    if not path.startswith("/") or os.path.isdir(path):
        return None
    from ..cni import version
    from ..cni.jsonutil import loads_strict
    from ..node.statusmemo import identity
    before = identity(path)
    try:
        with open(path, "rb") as fh:
            config = loads_strict(fh.read().decode("utf-8"))
        cni_version = config.get("cniVersion") if isinstance(config, dict) else None
        settled = isinstance(cni_version, str) and not version.at_least(cni_version, "1.1.0")
    except (OSError, ValueError, VersionError):
        return None
    return before if settled and before is not None and identity(path) == before else None


def answer_quietly(environ: dict[str, str], stdin: bytes, conf: NetConf) -> bool:
    """True when this thin STATUS is answered "ready" without forwarding
    (`settled_identity`), its memo then written for the next identical call
    (node/statusmemo.py). Raises NotAvailable as `settled_identity` does."""
    settled = settled_identity(conf)
    if settled is None:
        return False
    from ..node.statusmemo import remember
    remember(environ, stdin, conf.raw, conf.readiness_indicator_file,
             [[conf.cluster_network, settled]])
    return True


def cmd_status(orch: Orchestrator, req: CniRequest, conf: NetConf) -> None:
    """STATUS: forward to the cluster default network (CNI SPEC.md "STATUS", 1.1.0).

    Readiness of the node's pod networking is the cluster default network's; its
    error code (50 / 51) reaches the runtime unchanged. No API request. Raises
    NotAvailable (50) when the readiness indicator file is missing or the cluster
    default network's config cannot be read, else the child's error.
    """
    from ..cni import chain
    from ..cni.errors import CniError
    from ..kube.api import where
    from .networks import resolve_cluster_network
    _check_readiness_file(conf)
    try:
        _, config = resolve_cluster_network(conf, None)
    except CniError as e:
        raise NotAvailable(f"{where(None, f'{conf.cluster_network} (cluster default network)')}: "
                           f"{e.msg}", e.details) from None
    chain.status(config, orch.bare_runtime_conf(req, conf))
