"""Entry point: CNI mode when CNI_COMMAND is set, operator subcommands otherwise.

CNI mode writes exactly one JSON document to stdout (the result, the VERSION
answer, or a CNI error) and exits 0 on success, 1 on error (CNI SPEC.md
"Result" / "Error"). Logs go to `logFile` and/or stderr, never to stdout.
"""
from __future__ import annotations

import os
import sys

from . import __version__, commit
from .cni.version import SUPPORTED_VERSIONS
from .commands import call
from .commands.call import cni_main  # the one CNI call, thin and thick alike

TYPE_CHECKING = False  # typing is not imported on the exec'd path (cli.py)

if TYPE_CHECKING:
    from typing import Any, NoReturn

def _emit(doc: dict[str, Any] | None, code: int) -> NoReturn:
    """Write the one document, then end the process at once with `code`.

    Everything that must reach the world is done by then: children were waited
    for, state files fsync'ed and renamed, and here stdout, stderr and the log
    handlers are flushed and closed (logging.shutdown). What `sys.exit` would add
    is the interpreter's teardown (module and thread cleanup, garbage collection),
    about 95 ms of every exec'd command (issue 11); os._exit skips it. An
    abandoned API request thread (kube/session.py: a request past its deadline) dies
    with the process instead of being waited for.
    """
    try:
        if doc is not None:
            from .cni.jsonutil import dumps  # json itself only when a command imported it
            sys.stdout.write(dumps(doc) + "\n")
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        logging = sys.modules.get("logging")
        if logging is not None:  # VERSION never imported it
            logging.shutdown()
        os._exit(code)


# Operator subcommands: name -> one-line help. Each module exposes add_arguments(parser)
# and run(args) -> exit status, and is imported (by name, in `_subcommand`) only when
# chosen, so the CNI path never pays for them.
SUBCOMMANDS = {
    "install": "DaemonSet entry point: install the binary, kubeconfig and conflist on the "
               "node and keep them current",
    "validate": "lint NetworkAttachmentDefinition and pod YAML before applying it; "
                "--cluster: the pre-flight of a switch from Multus",
    "status": "show a pod's attachments from its network-status annotation",
    "daemon": "thick mode's node daemon: watch this node's pods and the "
              "NetworkAttachmentDefinitions, serve the shim's CNI calls on a unix socket",
    "spawner": "started by `daemon --chroot-dir` only: the helper, chrooted once, that "
               "execs the daemon's children",
}


def _subcommand(name: str) -> Any:
    """The module of subcommand `name`, imported explicitly (tools and PyInstaller see
    each import)."""
    if name == "install":
        from . import install
        return install
    if name == "validate":
        from .tools import validate
        return validate
    if name == "daemon":
        from . import daemon
        return daemon
    if name == "spawner":
        from .cni import chroot
        return chroot
    from .tools import podstatus
    return podstatus


DEFERRED_MODULES = ("inspect", "traceback")
"""Standard-library modules a CNI call imports on first use instead of on import
(`_defer_imports`): `dataclasses` imports `inspect` (with ast, dis, tokenize: about 10
ms on a slow machine, issue 11) only to word the docstring of a dataclass that has
none, and every dataclass on the exec'd path has one; `logging` imports `traceback`
(with linecache, tokenize and textwrap: about 4 ms of a thin ADD, issue 23) only to
format an exception or a stack, which a call that succeeds never logs."""


def _defer_imports() -> None:
    """Make each of DEFERRED_MODULES load on first use instead of on import.

    Until first used, sys.modules holds a stand-in whose module `__getattr__` (PEP 562)
    imports the real module, puts it in sys.modules and copies its names into the
    stand-in, so whoever imported the stand-in sees the whole module from then on.
    (importlib.util.LazyLoader does not do here: the `import` statement reads the
    module's `__spec__`, which loads a LazyLoader module at once.) Two threads using a
    stand-in for the first time at once load it once (a lock of `_thread`, which
    imports nothing).
    """
    import _thread
    import types
    lock = _thread.allocate_lock()
    for name in DEFERRED_MODULES:
        if name in sys.modules:
            continue
        stand_in = types.ModuleType(name, f"{name}, imported on first use (netattach.cli)")
        stand_in.__spec__ = None  # read by `import`: must not load it

        def load(attribute: str, name: str = name, stand_in: Any = stand_in) -> Any:
            with lock:
                if sys.modules.get(name) is stand_in:
                    del sys.modules[name]
                real = __import__(name)
                stand_in.__dict__.update(real.__dict__)
            return getattr(real, attribute)

        stand_in.__getattr__ = load  # type: ignore[method-assign]
        sys.modules[name] = stand_in


KUBECTL_PLUGIN = "kubectl-netattach"
"""The name kubectl finds a plugin by (`kubectl netattach ...` execs `kubectl-netattach`
from PATH with the arguments after `netattach`, as given, and its own environment):
a symlink to the executable, or the console script of that name (docs/tools.md)."""
KUBECTL_SUBCOMMANDS = ("status", "validate")
"""The subcommands `kubectl netattach` offers: the operators' (not install, daemon,
spawner, which only the DaemonSet runs)."""


def version_line() -> str:
    """What `netattach --version` prints, and the exec'd VERSION call writes to stderr:
    "netattach <release> (commit <commit>; CNI <versions>)", the commit as the build
    stamped it (buildinfo.py: 40 hex digits, "-dirty" after it, or "unknown")."""
    return (f"netattach {__version__} (commit {commit()}; "
            f"CNI {', '.join(SUPPORTED_VERSIONS)})")


def _version_action(argparse: Any) -> Any:
    """--version's action: version_line on one line (argparse's own "version" action
    wraps its text at the terminal's width)."""
    class Version(argparse.Action):
        def __call__(self, parser: Any, *_: Any) -> None:
            sys.stdout.write(version_line() + "\n")
            parser.exit()
    return Version


def main(argv: list[str] | None = None) -> None:
    """Console script `netattach`: CNI mode when CNI_COMMAND is set, else a subcommand.
    Run as `kubectl-netattach` (its argv[0]'s file name: kubectl's plugin, KUBECTL_PLUGIN),
    the operator subcommands only, named `kubectl netattach` in usage and help."""
    if "CNI_COMMAND" in os.environ:
        call.quiet = True  # no last-resort handler printing to stderr before setup
        # One CNI call lives for a fraction of a second and ends with os._exit (_emit):
        # the cyclic garbage collector's runs while it imports (about 25 of them, 3-6 ms
        # of an ADD on a slow machine, issue 11) would free almost nothing before the
        # process goes. Reference counting still frees everything else at once.
        import gc
        gc.disable()
        environ, stdin = dict(os.environ), sys.stdin.buffer.read()
        if environ["CNI_COMMAND"] == "STATUS" and call.status_recalled(environ, stdin):
            _emit(None, 0)  # this same call's "ready", remembered (node/statusmemo.py)
        if environ["CNI_COMMAND"] != "VERSION":  # VERSION imports no dataclass
            _defer_imports()
            from . import _dataclass_code
            _dataclass_code.install()
        doc, code = cni_main(environ, stdin)
        if os.environ["CNI_COMMAND"] == "VERSION":
            # The one line a VERSION call logs (issue 24): it carries no configuration,
            # so no logFile; libcni copies a plugin's stderr into the runtime's log.
            try:
                sys.stderr.write(version_line() + "\n")
            except (OSError, AttributeError):  # stderr closed: the answer still goes out
                pass
        _emit(doc, code)
    import argparse
    kubectl = os.path.basename(sys.argv[0]) == KUBECTL_PLUGIN
    parser = argparse.ArgumentParser(prog="kubectl netattach" if kubectl else "netattach",
                                     description=(
        "netattach's operator commands, as a kubectl plugin." if kubectl else
        "CNI delegating meta-plugin for Kubernetes. Invoked by the container runtime with "
        "CNI_COMMAND set; the subcommands below are for people."))
    parser.add_argument("--version", action=_version_action(argparse), nargs=0,
                        help="print the release, the git commit it was built from and the "
                             "CNI versions it speaks, then exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    argv = sys.argv[1:] if argv is None else argv
    chosen = next((a for a in argv if not a.startswith("-")), None)
    for name, help_text in SUBCOMMANDS.items():
        if kubectl and name not in KUBECTL_SUBCOMMANDS:
            continue
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == chosen:  # only the chosen module is imported
            module = _subcommand(name)
            module.add_arguments(p)
            p.set_defaults(run=module.run)
    args = parser.parse_args(argv)
    if getattr(args, "run", None) is None:
        parser.print_help()
        sys.exit(0 if args.command is None else 2)
    sys.exit(args.run(args))
