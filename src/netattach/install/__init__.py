"""`netattach install`: the DaemonSet container's entry point.

It runs as root in a pod that mounts the node's CNI bin and conf dirs, and
1. copies the netattach executable into the bin dir, atomically (a running ADD
   never sees half a binary);
2. writes a kubeconfig for the plugin (0600, in `<conf dir>/netattach.d/`, dir
   0700) from the pod's ServiceAccount token and CA, and rewrites it whenever
   kubelet rotates the projected token;
3. waits, bounded, for the cluster default network's config in the conf dir
   (multi-net spec §6.1: do not signal readiness before the default network
   has), then writes `00-netattach.conflist`, which sorts before it, and keeps it
   in step with the primary while the primary changes, moves or disappears;
4. on SIGTERM/SIGINT asks the API server whether netattach is uninstalled (its
   DaemonSet deleted or being deleted, its ServiceAccount or RBAC gone) and exits 0:
   on a restart or an update everything stays, so the node keeps attaching pods with
   netattach; on an uninstall the conflist becomes the retired one (retired.py), and
   netattach's files go at once when no sandbox it attached is left, else with the
   last one's DEL (uninstall.py; docs/install-lifecycle.md).

Modules, each the one owner of its part:
* `files`: the installer's own file rules on top of netattach.node.atomicfile (reading a
  regular file without following a symlink, its directories, stale temps,
  replace-if-changed) and `InstallError`;
* `binary`: the artifact copied into the bin dir, and compared with it;
* `kubeconfig`: the ServiceAccount, the API server URL, the kubeconfig;
* `primary`: which config is the cluster default network (the rule is that
  module's doc) and the conflist written in front of it;
* `loop`: the `Installer` and its watch loop, signals, the presence lock;
* `uninstall`: uninstall or restart (the rule), the retired conflist, the removal;
* here: the command line (`add_arguments`, `run`), which cli.py calls.

Logs go to stderr; stdout is unused.

Imported only for `netattach install` (cli.SUBCOMMANDS), never on the CNI path.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

from ..cni.version import SUPPORTED_VERSIONS
from ..node.logsetup import LOG_LEVELS, formatter
from ..spec.netconf import (
    CLAIM_CONFIG_SOURCES,
    DEFAULT_CLAIM_CONFIG_SOURCES,
    LOG_FORMAT_NAMES,
    MAX_CAP,
    NetConf,
)
from .binary import tree_digest
from .files import InstallError
from .kubeconfig import KUBECONFIG_SUBDIR
from .loop import Installer, Stop
from .primary import CONF_NAME
from .record import apply_record, read_record, settings_of, write_record

log = logging.getLogger(__name__)

def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 < value <= 86400:
        raise argparse.ArgumentTypeError(f"seconds must be in (0, 86400]: {text!r}")
    return value


def _cap(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not 1 <= value <= MAX_CAP:
        raise argparse.ArgumentTypeError(f"must be from 1 to {MAX_CAP}: {text!r}")
    return value


def _file_name(text: str) -> str:
    if not text or "/" in text or text.startswith("."):
        raise argparse.ArgumentTypeError(f"a plain file name is needed, not {text!r}")
    return text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of `netattach install` (cli.SUBCOMMANDS); each documents its default."""
    parser.description = (
        "DaemonSet entry point. Copies the netattach executable into the node's CNI bin dir, "
        "writes a kubeconfig for the plugin from this pod's ServiceAccount (rewritten when "
        "the token rotates), waits for the cluster default network's config in the CNI conf "
        "dir (multi-net spec §6.1), writes " + CONF_NAME + " in front of it, and keeps all "
        "of it current until SIGTERM. Logs go to stderr.")
    g = parser.add_argument_group("paths")
    g.add_argument("--bin-dir", default="/host/opt/cni/bin",
                   help="the host's CNI bin dir as mounted in this container "
                        "(default: %(default)s)")
    g.add_argument("--conf-dir", default="/host/etc/cni/net.d",
                   help="the host's CNI conf dir as mounted in this container; the primary is "
                        "looked for and " + CONF_NAME + " written here (default: %(default)s)")
    g.add_argument("--host-conf-dir", default="/etc/cni/net.d",
                   help="the same conf dir as the host and the runtime see it: the paths "
                        "written into the conflist (clusterNetwork, kubeconfig) "
                        "(default: %(default)s)")
    g.add_argument("--host-bin-dir", default="/opt/cni/bin",
                   help="the bin dir as the host sees it, written as binDir (default: %(default)s)")
    g.add_argument("--cni-dir", default="/var/lib/cni/netattach",
                   help="the plugin's state dir on the host, written as cniDir "
                        "(default: %(default)s)")
    g.add_argument("--source", default=None,
                   help="the artifact to install: an executable file, or a PyInstaller onedir "
                        "directory holding `netattach` and `_internal/`. Default: the running "
                        "frozen build (its directory when onedir); when not frozen, no copy")
    g.add_argument("--run-dir", default="/run/netattach-install",
                   help="a dir of this pod's own (the DaemonSet's emptyDir) where the "
                        "installer records its settings at start, and where --check reads "
                        "them: the probes need no flags (default: %(default)s)")
    g = parser.add_argument_group("kubeconfig")
    g.add_argument("--service-account-dir",
                   default="/var/run/secrets/kubernetes.io/serviceaccount",
                   help="the ServiceAccount volume: token, ca.crt, namespace "
                        "(default: %(default)s)")
    g.add_argument("--api-server", default=None,
                   help="API server URL for the kubeconfig. Default: "
                        "https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT")
    g.add_argument("--kubeconfig-name", type=_file_name, default="netattach.kubeconfig",
                   help="file name of the kubeconfig under <conf-dir>/" + KUBECONFIG_SUBDIR
                        + "/ (default: %(default)s)")
    g = parser.add_argument_group("cluster default network")
    g.add_argument("--primary-config", default=None,
                   help="the cluster default network's config: a file name in --conf-dir or a "
                        "path. Default: the first .conf/.conflist/.json file in --conf-dir in "
                        "lexical order that is neither netattach's nor Multus's")
    g.add_argument("--primary-timeout", type=_seconds, default=600.0,
                   help="seconds to wait for the primary config before exiting 1 "
                        "(default: %(default)s)")
    g.add_argument("--poll-interval", type=_seconds, default=1.0,
                   help="seconds between checks of the primary, the token and our files "
                        "(default: %(default)s)")
    g = parser.add_argument_group("written into the plugin's conf")
    g.add_argument("--netconf-file", default=None,
                   help="a JSON or YAML mapping of more netattach conf keys "
                        "(docs/configuration.md), e.g. a ConfigMap's key mounted as a file; "
                        "merged into netattach's conflist entry over what the flags write, "
                        "re-read at every poll. Keys the installer writes itself (type, "
                        "name, cniVersion, kubeconfig, clusterNetwork, capabilities, "
                        "runtimeConfig, prevResult) and unknown keys are refused, naming "
                        "the key (docs/install.md). Default: none")
    g.add_argument("--log-level", choices=tuple(LOG_LEVELS), default="info",
                   help="the plugin's logLevel (default: %(default)s)")
    g.add_argument("--log-file", default=None,
                   help="the plugin's logFile (host path). Default: none, stderr only")
    g.add_argument("--log-format", choices=LOG_FORMAT_NAMES, default=LOG_FORMAT_NAMES[0],
                   help="the plugin's logFormat: text lines or one JSON object a line "
                        "(docs/configuration.md, \"Logs\"); text is not written, being the "
                        "plugin's default (default: %(default)s)")
    g.add_argument("--namespace-isolation", action="store_true",
                   help="namespaceIsolation: pods select NADs only in their own namespace or "
                        "--global-namespaces")
    g.add_argument("--global-namespaces", default=None,
                   help="globalNamespaces, comma-separated. Default: none")
    g.add_argument("--default-networks", default=None,
                   help="defaultNetworks, comma-separated [namespace/]name[@interface]: "
                        "NADs attached to every pod after the cluster default network. "
                        "Default: none")
    g.add_argument("--plugin-conf-dir", default=None,
                   help="confDir (host path): where the plugin finds on-disk configs of "
                        "NADs without spec.config. Default: not written, so the plugin "
                        "searches /etc/cni/net.d, then Multus' /etc/cni/multus/net.d")
    g.add_argument("--auxiliary-cni-chain-name", default=None,
                   help="auxiliaryCNIChainName (Multus' auxiliary CNI chain). Default: none")
    for flag, key, plugin_default in (("--api-timeout", "apiTimeout", NetConf.api_timeout),
                                      ("--delegate-timeout", "delegateTimeout",
                                       NetConf.delegate_timeout),
                                      ("--readiness-timeout", "readinessTimeout",
                                       NetConf.readiness_timeout)):
        g.add_argument(flag, type=_seconds, default=None,
                       help=f"{key}, seconds. Default: not written (the plugin's "
                            f"{plugin_default:g})")
    g.add_argument("--allowed-plugin-types", default=None,
                   help="allowedPluginTypes, comma-separated: the only plugin and IPAM types "
                        "NetworkAttachmentDefinitions and claims may name "
                        "(docs/security.md). Default: not written, any plugin in the bin "
                        "dir but a delegating meta-plugin")
    for flag, key, plugin_default, what in (
            ("--max-networks-per-pod", "maxNetworksPerPod", NetConf.max_networks_per_pod,
             "the secondary networks one pod may have (its annotation's elements, "
             "defaultNetworks and its ResourceClaim networks together)"),
            ("--max-same-network-per-pod", "maxSameNetworkPerPod",
             NetConf.max_same_network_per_pod,
             "how many of a pod's networks may select the same NetworkAttachmentDefinition")):
        g.add_argument(flag, type=_cap, default=None,
                       help=f"{key}: {what}; a pod over it is refused with code 7 before "
                            f"anything runs (docs/security.md). Default: not written (the "
                            f"plugin's {plugin_default})")
    g.add_argument("--claim-config-sources", choices=CLAIM_CONFIG_SOURCES, default=None,
                   help="claimConfigSources: which CNI configs of a DRA ResourceClaim's "
                        "allocation are run: 'any' (a DeviceClass's or the claim's own) or "
                        "'class' (a DeviceClass's spec.config only: a claim's own config "
                        "fails the ADD) (docs/dra.md). Default: not written, the plugin's "
                        f"{DEFAULT_CLAIM_CONFIG_SOURCES!r}")
    g.add_argument("--multus-namespace", default=None,
                   help="multusNamespace, where clusterNetwork/defaultNetworks NADs are looked "
                        "up. Default: the plugin's, kube-system")
    g.add_argument("--system-namespaces", default=None,
                   help="systemNamespaces, comma-separated. Default: the plugin's, kube-system")
    g.add_argument("--resource-claims", action="store_true",
                   help="resourceClaims: read the pod on every ADD, so that networks from "
                        "its DRA ResourceClaims are seen even where the runtime passes only "
                        "its annotations (containerd); one API request more per thin ADD")
    g.add_argument("--hotplug", action="store_true",
                   help="hotplug (thick mode): the node daemon attaches and detaches networks "
                        "of running pods when their k8s.v1.cni.cncf.io/networks annotation "
                        "changes (docs/hotplug.md)")
    g.add_argument("--readiness-indicator-file", default=None,
                   help="readinessindicatorfile (host path) the plugin waits for on ADD. "
                        "Default: none")
    g = parser.add_argument_group("mode")
    g.add_argument("--mode", choices=("thin", "thick"), default="thin",
                   help="thin: the runtime execs netattach, which does all the work; thick: "
                        "the conflist names netattach-shim (written into --bin-dir: a script "
                        "run by the artifact's interpreter, named by its --host-bin-dir "
                        "path), which forwards each call to `netattach daemon` on this "
                        "node (default: %(default)s)")
    g.add_argument("--daemon-socket-dir", default="/run/netattach",
                   help="thick mode: the daemon's socket dir (host path; `netattach daemon "
                        "--socket-dir`), written as daemonSocketDir (default: %(default)s)")
    g = parser.add_argument_group("behaviour")
    g.add_argument("--cleanup-on-exit", action=argparse.BooleanOptionalAction, default=True,
                   help="on SIGTERM/SIGINT ask the API server whether netattach is "
                        "uninstalled (--daemonset deleted or being deleted, or this pod's "
                        "ServiceAccount token or RBAC rejected); if so, retire " + CONF_NAME
                        + " (the cluster default network alone for new pods) and remove "
                        "netattach's files from the node once no sandbox it attached is "
                        "left; on any other stop (restart, update) leave everything. "
                        "--no-cleanup-on-exit: always leave everything. Default: on")
    g.add_argument("--daemonset", default="netattach",
                   help="this pod's DaemonSet, in its namespace, which a stop asks the API "
                        "server for (--cleanup-on-exit; RBAC: get on it, deploy/base/rbac.yaml) "
                        "(default: %(default)s)")
    g.add_argument("--uninstall-timeout", type=_seconds, default=5.0,
                   help="on a stop, seconds to ask the API server (no answer: keep "
                        "everything) and to wait for a running CNI operation before "
                        "removing netattach's files; keep it below the pod's "
                        "terminationGracePeriodSeconds (default: %(default)s)")
    g.add_argument("--state-dir", default="/host/var/lib/cni/netattach",
                   help="--cni-dir as mounted in this container (mount its parent, so the "
                        "dir can be removed): on an uninstall netattach's files are removed "
                        "at once when it holds no saved state (default: %(default)s)")
    g.add_argument("--installer-log-level", choices=("debug", "info", "warning", "error"),
                   default="info",
                   help="level of the installer's own logs on stderr (default: %(default)s)")
    g.add_argument("--installer-log-format", choices=LOG_FORMAT_NAMES, default=LOG_FORMAT_NAMES[0],
                   help="format of the installer's own logs: text lines or one JSON object "
                        "a line (docs/configuration.md, \"Logs\") (default: %(default)s)")
    mode = g.add_mutually_exclusive_group()
    mode.add_argument("--once", action="store_true",
                      help="one pass (binary, kubeconfig, wait for the primary, conflist), "
                           "then exit 0; for init containers and tests")
    mode.add_argument("--check", action="store_true",
                      help="exit 0 iff the binary, the kubeconfig and the conflist the "
                           "installer of this pod was told to install (its record in "
                           "--run-dir) are present and current, else 1; a flag given here "
                           "with a value other than its default overrides the record's; no "
                           "record is not ready. Writes nothing (the probes)")


def _setup_logging(level: str, log_format: str = "text") -> None:
    """Route the `netattach.install` logger (the submodules' loggers are its children)
    to stderr at `level`, and only there, as `log_format` says (node/logsetup.py's
    formats: the text line's time in UTC)."""
    log.handlers.clear()
    log.propagate = False
    log.setLevel(getattr(logging, level.upper()))
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter(
        log_format, f"netattach-install[{os.getpid()}] %(levelname)s: %(message)s"))
    log.addHandler(handler)


def _defaults() -> dict[str, Any]:
    """Every flag's dest -> its default (a fresh parser's, parsed from nothing)."""
    parser = argparse.ArgumentParser(add_help=False)
    add_arguments(parser)
    return vars(parser.parse_args([]))


def _thin_hotplug(args: argparse.Namespace) -> bool:
    if args.hotplug and args.mode != "thick":
        log.error("--hotplug needs --mode thick: the node daemon changes running pods' "
                  "attachments, and thin mode has no daemon")
        return True
    return False


def _check(args: argparse.Namespace, environ: dict[str, str]) -> int:
    """--check: the record's settings (record.py) with the check's own flags over them."""
    defaults = _defaults()
    try:
        recorded, digest = read_record(args.run_dir)
    except InstallError as e:
        log.error("not ready: %s", e)
        return 1
    kept = apply_record(args, recorded, defaults)
    if kept:
        log.info("checking with this command's %s instead of the recorded",
                 ", ".join("--" + k.replace("_", "-") for k in kept))
    if _thin_hotplug(args):
        return 1
    installer = Installer(args, environ)
    if "source" not in kept:  # the recorded artifact: the same image's, digest known
        installer.artifact_digest = digest
    return installer.check()


def run(args: argparse.Namespace) -> int:
    """`netattach install`: 0 done or stopped by a signal, 1 failed (message on stderr)."""
    _setup_logging(args.installer_log_level, args.installer_log_format)
    try:
        if args.check:
            return _check(args, dict(os.environ))
        # first of all: a SIGTERM before the handler is lost (PID 1 of the container
        # ignores a signal it has no handler for), and the uninstall rule with it
        stop = Stop()
        from ..buildinfo import describe
        log.info("netattach install %s", describe())
        if _thin_hotplug(args):
            return 1
        installer = Installer(args, dict(os.environ))
        source = installer.source
        digest = tree_digest(source) if source and os.path.isdir(source) else None
        try:
            path = write_record(args.run_dir, settings_of(args, _defaults()), digest)
            log.info("settings recorded in %s (for --check)", path)
        except InstallError as e:  # an init container (--once) may have no such dir
            log.warning("%s: `install --check` (the probes) will not be ready", e)
        # refuse bad settings at once, naming the key (a stand-in primary: no key's
        # validity depends on it); the probes, reading the record, say the same
        installer.check_settings(SUPPORTED_VERSIONS[-1], args.host_conf_dir)
        return installer.serve(stop)
    except (InstallError, OSError) as e:
        log.error("%s", e)
        return 1
    except Exception:  # a bug: say so, and let the DaemonSet restart us
        log.exception("internal error")
        return 1
