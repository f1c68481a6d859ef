"""A build-time cache of the code `dataclasses` compiles for netattach's classes.

Why (issue 11): `@dataclass` writes the source of each class's `__init__`,
`__repr__`, `__eq__`, `__hash__` and, when frozen, `__setattr__` and `__delattr__`,
and compiles it with `exec` on every start: 16 classes on an ADD's path, about 80
compiles, 15-20 ms of every exec'd ADD on a slow machine. The build
(hack/gen-dataclass-code.py, run by netattach.spec) imports the exec'd path's
modules once, records each source text dataclasses compiles and stores
{source: code object} with `marshal` as `dataclass-code.marshal` beside this
module, compiled as `exec` compiles it there (file name "<string>", no inherited
`__future__` flags). `install` makes dataclasses look the text up first: the same
text gives the same code, so nothing changes but the time; a text that is not
there (a class changed since the build, or no cache: the virtualenv) is compiled
as before. The cache is as trusted as the .pyc files next to it (same bundle,
same owner).

This module must not use `from __future__ import annotations`: `exec` of a string
inherits the calling frame's future flags, and dataclasses' own module has none.
"""
import marshal
import os

CACHE_FILE = "dataclass-code.marshal"


def install(path: "str | None" = None) -> int:
    """Have `dataclasses` take the compiled code of a source it has already seen at
    build time from the cache at `path` (default: CACHE_FILE beside this module).
    Returns the number of cached texts (0: no usable cache, nothing changed)."""
    path = path or os.path.join(os.path.dirname(os.path.abspath(__file__)), CACHE_FILE)
    try:
        with open(path, "rb") as f:
            cache = marshal.loads(f.read())  # one read: marshal.load(f) reads piece by piece
    except (OSError, EOFError, ValueError, TypeError):
        return 0
    if not isinstance(cache, dict) or not cache:
        return 0
    import dataclasses
    real_exec = exec

    def cached_exec(source: object, globals: object = None, locals: object = None, /) -> None:
        code = cache.get(source) if isinstance(source, str) else None
        real_exec(source if code is None else code, globals, locals)  # type: ignore[arg-type]

    dataclasses.exec = cached_exec  # type: ignore[attr-defined]  # found before the builtin
    return len(cache)
