"""Entry point: CNI mode when CNI_COMMAND is set, operator subcommands otherwise.

CNI mode writes exactly one JSON document to stdout (the result, the VERSION
answer, or a CNI error) and exits 0 on success, 1 on error (CNI SPEC.md
"Result" / "Error"). Logs go to `logFile` and/or stderr, never to stdout.
"""
from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import Any, NoReturn

from . import __version__
from .cni.errors import INTERNAL as INTERNAL_ERROR, INVALID_ENV, CniError
from .cni.result import SUPPORTED_VERSIONS

log = logging.getLogger("netattach")

_LEVELS = {"panic": logging.CRITICAL, "error": logging.ERROR, "warning": logging.WARNING,
           "info": logging.INFO, "debug": logging.DEBUG, "verbose": logging.DEBUG}


def setup_logging(log_file: str | None, level: str, to_stderr: bool) -> None:
    """Route the `netattach` logger to a file (0600, appended) and/or stderr."""
    root = logging.getLogger("netattach")
    root.handlers.clear()
    root.setLevel(_LEVELS.get(level, logging.INFO))
    root.propagate = False
    fmt = logging.Formatter(f"%(asctime)s netattach[{os.getpid()}] %(levelname)s %(name)s: %(message)s")
    if log_file:
        try:
            fd = os.open(log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            # backslashreplace, as on stderr: a value from the environment that is not
            # UTF-8 (a lone surrogate in Python) is logged escaped, not lost with a traceback.
            handler: logging.Handler = logging.StreamHandler(
                os.fdopen(fd, "a", buffering=1, encoding="utf-8", errors="backslashreplace"))
            handler.setFormatter(fmt)
            root.addHandler(handler)
        except OSError as e:
            print(f"netattach: cannot open log file {log_file}: {e.strerror}", file=sys.stderr)
    if to_stderr or not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(fmt)
        root.addHandler(handler)


def _emit(doc: dict[str, Any] | None, code: int) -> NoReturn:
    if doc is not None:
        sys.stdout.write(json.dumps(doc) + "\n")
    sys.stdout.flush()
    sys.exit(code)


def cni_main(environ: dict[str, str], stdin: bytes) -> tuple[dict[str, Any] | None, int]:
    """Run one CNI command. Returns (document for stdout or None, exit status).

    Never raises: every failure becomes one CNI error document and status 1.
    """
    from .cni.request import parse_request

    started = time.monotonic()
    cni_version = "1.1.0"
    try:
        req = parse_request(environ, stdin)
        if isinstance(req.config, dict) and isinstance(req.config.get("cniVersion"), str):
            cni_version = req.config["cniVersion"]
        if req.command == "VERSION":
            return {"cniVersion": cni_version if cni_version in SUPPORTED_VERSIONS else "1.1.0",
                    "supportedVersions": list(SUPPORTED_VERSIONS)}, 0
        from .netconf import parse_netconf
        conf = parse_netconf(req.config or {})
        setup_logging(conf.log_file, conf.log_level, conf.log_to_stderr)
        log.debug("%s container=%s ifname=%s netns=%s", req.command, req.container_id,
                  req.ifname, req.netns)
        from . import attach
        commands = {"ADD": attach.cmd_add, "DEL": attach.cmd_del, "CHECK": attach.cmd_check,
                    "STATUS": attach.cmd_status}
        if req.command == "GC":  # only GC needs garbage.py
            from .garbage import cmd_gc
            commands["GC"] = cmd_gc
        if req.command not in commands:
            raise CniError(INVALID_ENV, f"command {req.command} is not supported yet by netattach")
        try:
            return commands[req.command](req, conf), 0
        finally:
            _log_timing(req.command, started)
    except CniError as e:
        log.error("%s", e.msg)
        return e.to_dict(cni_version), 1
    except Exception as e:  # last resort: the runtime must still get one CNI error
        log.exception("internal error")
        return _unwrapped(e).to_dict(cni_version), 1


def _unwrapped(e: Exception) -> CniError:
    """The CNI error for an exception no command turned into a CniError.

    Failures of a known kind keep the code their kind has everywhere else (see
    docs/architecture.md "Errors"): state and any OS-level I/O error 5, the API
    server 11, a delegate's config or the plan 7. Anything else is a bug: 999.
    The traceback is in the log either way.
    """
    from .attach import error_code
    from .cni.errors import INVALID_CONFIG, IO_FAILURE
    from .delegates import DelegateError
    from .plan import PlanError
    details = "see the netattach log for the traceback"
    code = error_code(e, INVALID_CONFIG if isinstance(e, (DelegateError, PlanError))
                      else INTERNAL_ERROR)
    if code == IO_FAILURE:
        return CniError(code, f"netattach I/O failure: {e}", details)
    if code == INTERNAL_ERROR:
        return CniError(code, f"netattach internal error: {type(e).__name__}: {e}", details)
    return CniError(code, f"netattach: {e}", details)


def _log_timing(command: str, started: float) -> None:
    """One INFO line per invocation: wall time, time inside children, API requests (read
    by `make bench`)."""
    from .cni.invoke import child_seconds
    from .kube import requests_made
    log.info("timing: %s took %.4f s, children %.4f s, api_requests %d", command,
             time.monotonic() - started, child_seconds(), requests_made())


# Operator subcommands: name -> (module, one-line help). Each module exposes
# add_arguments(parser) and run(args) -> exit status, and is imported only when chosen,
# so the CNI path never pays for them.
SUBCOMMANDS = {
    "install": ("install", "DaemonSet entry point: install the binary, kubeconfig and conflist "
                           "on the node and keep them current"),
    "validate": ("validate", "lint NetworkAttachmentDefinition and pod YAML before applying it"),
    "status": ("podstatus", "show a pod's attachments from its network-status annotation"),
}


def main(argv: list[str] | None = None) -> None:
    """Console script `netattach`: CNI mode when CNI_COMMAND is set, else a subcommand."""
    if "CNI_COMMAND" in os.environ:
        logging.getLogger("netattach").addHandler(logging.NullHandler())
        doc, code = cni_main(dict(os.environ), sys.stdin.buffer.read())
        _emit(doc, code)
    import argparse
    import importlib
    parser = argparse.ArgumentParser(prog="netattach", description=(
        "CNI delegating meta-plugin for Kubernetes. Invoked by the container runtime with "
        "CNI_COMMAND set; the subcommands below are for people."))
    parser.add_argument("--version", action="version",
                        version=f"netattach {__version__} (CNI {', '.join(SUPPORTED_VERSIONS)})")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    argv = sys.argv[1:] if argv is None else argv
    chosen = next((a for a in argv if not a.startswith("-")), None)
    for name, (_module, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == chosen:  # only the chosen module is imported
            module = importlib.import_module(f".{SUBCOMMANDS[name][0]}", __package__)
            module.add_arguments(p)
            p.set_defaults(run=module.run)
    args = parser.parse_args(argv)
    if getattr(args, "run", None) is None:
        parser.print_help()
        sys.exit(0 if args.command is None else 2)
    sys.exit(args.run(args))
