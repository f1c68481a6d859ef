"""Write the cache of the code `dataclasses` compiles for netattach's exec'd path
(src/netattach/_dataclass_code.py says why and how it is used).

Usage: gen-dataclass-code.py OUTPUT   (run by netattach.spec with the build's
interpreter: marshal's format is the interpreter's own)

Imports the modules a CNI call imports, with dataclasses' `exec` recording every
source text it compiles, and writes {text: code} with marshal. Each text is
compiled as dataclasses' `exec` compiles it (file name "<string>", no inherited
__future__ flags), so a cached code object is the one the interpreter would make.
"""
import dataclasses
import importlib
import marshal
import sys

# every module an exec'd CNI command may import (cli.py, the commands commands/call.py chooses)
MODULES = ("netattach.cli", "netattach.commands.call", "netattach.commands.orchestrator",
           "netattach.commands.add", "netattach.commands.delete", "netattach.commands.check",
           "netattach.commands.garbage", "netattach.kube.transport",
           "netattach.commands.networks", "netattach.spec.routes", "netattach.node.routes",
           "netattach.node.devices")


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    seen = []
    real_exec = exec

    def recording_exec(source, globals=None, locals=None, /):
        if isinstance(source, str):
            seen.append(source)
        return real_exec(source, globals, locals)

    dataclasses.exec = recording_exec
    for name in MODULES:
        importlib.import_module(name)
    del dataclasses.exec
    cache = {text: compile(text, "<string>", "exec", dont_inherit=True) for text in seen}
    with open(sys.argv[1], "wb") as f:
        marshal.dump(cache, f)
    print(f"{sys.argv[1]}: {len(cache)} dataclass function sources")
    return 0


if __name__ == "__main__":
    sys.exit(main())
