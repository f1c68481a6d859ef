"""One CNI call, thin mode's and the node daemon's alike: env + stdin -> (the document
for stdout or None, the exit status). `cli.main` runs it for the exec'd plugin,
daemon/server.py for each call the shim forwards, with the daemon's orchestrator;
`run_command` chooses the command and runs it over the orchestrator's seams.

Imported on every exec'd call, VERSION's included: only the standard library's
`time` and the CNI protocol's errors and versions at import; the rest when used.
"""
from __future__ import annotations

import time

from ..cni.errors import InternalError, as_cni_error
from ..cni.version import LATEST, SUPPORTED_VERSIONS

TYPE_CHECKING = False  # typing is not imported on the exec'd path (cli.py)

if TYPE_CHECKING:
    import logging
    from typing import Any

    from ..cni.request import CniRequest
    from ..spec.netconf import NetConf
    from .orchestrator import Orchestrator

# `logging` (~10 ms) is imported by the commands that log, not by VERSION (_log).
quiet = False  # cli.main(): no last-resort handler printing to stderr before setup


def _log() -> logging.Logger:
    """The `netattach` logger, importing logging on first use."""
    import logging
    logger = logging.getLogger("netattach")
    if quiet and not logger.handlers:
        logger.addHandler(logging.NullHandler())
    return logger


def cni_main(environ: dict[str, str], stdin: bytes, orchestrator: Orchestrator | None = None
             ) -> tuple[dict[str, Any] | None, int]:
    """Run one CNI command. Returns (document for stdout or None, exit status).

    Never raises: every failure becomes one CNI error document (cni.errors.as_cni_error,
    the one mapping of exceptions to codes) and status 1. The error's cniVersion is
    the configuration's when netattach supports it, else the latest it supports.
    orchestrator: None in thin mode (this process: logging set up from the
    configuration, `thin()`, a timing line); the node daemon's (daemon/server.py),
    which set up its own logging and records timing in its metrics.
    """
    started = time.monotonic()
    cni_version = LATEST
    conf: NetConf | None = None  # thin mode: set up logging from it once parsed
    logging_ready = orchestrator is not None  # the node daemon set up its own
    context = None  # the call's log_context, entered once logging is set up
    try:
        if environ.get("CNI_COMMAND") == "VERSION":  # reads nothing but stdin
            from ..cni.stdin import decode_json_object
            config = decode_json_object(stdin) if stdin.strip() else None
            if isinstance(config, dict) and config.get("cniVersion") in SUPPORTED_VERSIONS:
                cni_version = config["cniVersion"]
            return {"cniVersion": cni_version, "supportedVersions": list(SUPPORTED_VERSIONS)}, 0
        from ..cni.request import parse_request
        req = parse_request(environ, stdin)
        if isinstance(req.config, dict) and req.config.get("cniVersion") in SUPPORTED_VERSIONS:
            cni_version = req.config["cniVersion"]
        from ..spec.netconf import parse_netconf
        conf = parse_netconf(req.config or {})
        if orchestrator is None:
            if _quiet_status(req, conf):
                from .status import answer_quietly
                if answer_quietly(environ, stdin, conf):
                    return None, 0
            _setup_logging(conf)
            logging_ready = True
        context = _enter_context(req)
        log = _log()
        if conf.unhonoured:
            log.warning("configuration keys read but not honoured: %s", "; ".join(
                f"{key} ({why})" for key, why in conf.unhonoured.items()))
        # What the runtime sent, by name only (values may be large or private): the
        # CNI_ARGS keys in its order and the runtimeConfig keys libcni injected.
        log.debug("%s container=%s ifname=%s netns=%s args=%s runtimeConfig=%s", req.command,
                  req.container_id, req.ifname, req.netns,
                  ",".join(k for k, _ in req.args) or "-",
                  ",".join(sorted(conf.runtime_config)) or "-")
        if orchestrator is not None:
            if conf.retired_conflist is not None:  # its files are the host's (retired.py)
                from ..cni.errors import ConfigError
                raise ConfigError("the retired configuration (netattach being uninstalled) "
                                  "is run by the thin netattach, not the node daemon")
            return run_command(orchestrator, req, conf), 0
        from .orchestrator import thin
        try:
            return run_command(thin(), req, conf), 0
        finally:
            _log_timing(req.command, started)
    except Exception as e:  # every failure: the runtime gets one CNI error
        if conf is not None and not logging_ready:  # thin STATUS refused before setup
            try:
                _setup_logging(conf)
            except Exception:  # noqa: BLE001 - the answer matters more than its log line
                pass
        error = as_cni_error(e)
        if isinstance(error, InternalError):
            _log().exception("internal error")
        else:
            _log().error("%s", error.msg)
        return error.to_dict(cni_version), 1
    finally:
        if context is not None:  # the node daemon's thread runs other calls next
            context.__exit__()


def _enter_context(req: CniRequest) -> Any:
    """Enter the log_context of a call (node/logsetup.py): its pod (CNI_ARGS'
    "namespace/name", when both are given) and sandbox (its container ID), for the
    JSON lines' fields. Returns the entered context, for its __exit__."""
    from ..node.logsetup import log_context
    ns, name = req.arg("K8S_POD_NAMESPACE"), req.arg("K8S_POD_NAME")
    context = log_context(pod=f"{ns}/{name}" if ns and name else None,
                          sandbox=req.container_id or None)
    context.__enter__()
    return context


def run_command(orch: Orchestrator, req: CniRequest, conf: NetConf) -> dict[str, Any] | None:
    """Run `req.command` (ADD, DEL, CHECK, STATUS, GC; parse_request allows no other)
    over the seams `orch`; returns the document for stdout (ADD's result) or None.
    Raises CniError. The retired configuration (netattach being uninstalled) runs them
    as retired.py says. Each command's module is imported only when chosen."""
    if conf.retired_conflist is not None:
        from . import retired
        return retired.run(orch, req, conf)
    if req.command == "ADD":
        from . import add
        return add.cmd_add(orch, req, conf)
    if req.command == "DEL":
        from . import delete
        delete.cmd_del(orch, req, conf)
    elif req.command == "CHECK":
        from . import check
        check.cmd_check(orch, req, conf)
    elif req.command == "STATUS":
        from . import status
        status.cmd_status(orch, req, conf)
    else:
        from . import garbage
        garbage.cmd_gc(orch, req, conf)
    return None


def _setup_logging(conf: NetConf) -> None:
    """Thin mode's logging, as the configuration says (logFile, logLevel, logToStderr,
    logOptions, logFormat)."""
    from ..node.logsetup import setup_logging
    setup_logging(conf.log_file, conf.log_level, conf.log_to_stderr, conf.log_options,
                  conf.log_format)


def status_recalled(environ: dict[str, str], stdin: bytes) -> bool:
    """True when thin STATUS's memo answers this call "ready" (node/statusmemo.recall):
    cli.main asks before anything else of a STATUS is imported. stdin that is no JSON
    object is the full way's (cni_main's) to refuse. Never raises."""
    from ..cni.errors import CniError
    from ..cni.stdin import decode_json_object
    from ..node.statusmemo import recall
    try:
        config = decode_json_object(stdin)
    except CniError:
        return False
    return recall(environ, stdin, config)


def _quiet_status(req: CniRequest, conf: NetConf) -> bool:
    """A thin STATUS that may be answered before logging is set up: nothing to log
    unless it fails (not at debug level, no unhonoured keys to warn about, not the
    retired configuration). STATUS runs at every CRI Status call: a line per call
    would be noise in the log."""
    return (req.command == "STATUS" and conf.retired_conflist is None
            and conf.log_level != "debug" and not conf.unhonoured)


def _log_timing(command: str, started: float) -> None:
    """One line per invocation: wall time, time inside children, API requests (read by
    `make bench`). INFO, but DEBUG for STATUS, which the runtime runs every few seconds."""
    import logging

    from ..cni.invoke import child_seconds
    from ..kube.session import requests_made
    _log().log(logging.DEBUG if command == "STATUS" else logging.INFO,
               "timing: %s took %.4f s, children %.4f s, api_requests %d", command,
               time.monotonic() - started, child_seconds(), requests_made())
