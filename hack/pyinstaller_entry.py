"""PyInstaller entry script of the `netattach` executable (built by netattach.spec).

Runs netattach.cli:main, the same entry point as the `netattach` console script,
after one frozen-only step: the environment the runtime gave us is restored for
every process netattach starts (delegate plugins, kubeconfig exec credential
helpers), see `restore_runtime_environ`.
"""
import os
import sys


def restore_runtime_environ(environ=os.environ) -> None:
    """Undo the PyInstaller bootloader's changes to the environment, in place.

    The bootloader prepends the bundle's `_internal/` to LD_LIBRARY_PATH (saving
    a previous value in LD_LIBRARY_PATH_ORIG) and sets `_PYI_*` variables for
    its own worker processes. Inherited by a child, the first makes a system
    program load our bundled libssl/libz/libstdc++/libpython instead of its own
    (PyInstaller docs, "Common Issues and Pitfalls": launching external
    programs from the frozen application), the second would make a child that
    is another PyInstaller program take itself for a netattach worker.

    The running process keeps its libraries: the dynamic loader reads
    LD_LIBRARY_PATH once, when the bootloader exec'd itself with it.
    """
    original = environ.pop("LD_LIBRARY_PATH_ORIG", None)
    if original is None:
        environ.pop("LD_LIBRARY_PATH", None)
    else:
        environ["LD_LIBRARY_PATH"] = original
    for key in [k for k in environ if k.startswith("_PYI_")]:
        del environ[key]


if __name__ == "__main__":
    if "CNI_COMMAND" in os.environ:  # one short CNI call: no cyclic GC (netattach.cli.main)
        import gc
        gc.disable()
    if getattr(sys, "frozen", False):
        restore_runtime_environ()
    from netattach.cli import main
    main()
