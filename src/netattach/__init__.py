"""netattach: a CNI delegating meta-plugin for Kubernetes (Network Plumbing WG multi-net
spec v1.3).

The release and the build's commit stamp are read here, in the package every netattach
process has imported, so that the exec'd VERSION call can name them without importing a
module more (tests/e2e/test_import_allowlist.py); buildinfo.py documents the stamp.
"""
__version__ = "0.1.0"

COMMIT_FILE = "build-commit"
"""The commit stamp's file name in the bundle, beside this module (netattach.spec writes
it; the shim's prefix holds a copy beside netattach_shim)."""
UNKNOWN = "unknown"
SOURCE_DIGEST_FILE = "source-digest"
"""The bundle's digest of netattach's Python sources (SHA-256 hex of every module's path
and bytes, netattach.spec writes it beside this module): what code a built executable
runs, read by thin STATUS's memo (node/statusmemo.py), whose answers it keys."""


def valid_commit(text: str) -> bool:
    """True when `text` is one of the stamp's forms: 40 lowercase hex digits, the same
    followed by "-dirty", or "unknown" (buildinfo.py)."""
    sha = text.removesuffix("-dirty")
    return text == UNKNOWN or (len(sha) == 40 and not sha.strip("0123456789abcdef"))


def commit(path: str | None = None) -> str:
    """The git commit this netattach was built from, read from `path` (default:
    COMMIT_FILE beside this module); "unknown" when there is no such file or it holds
    anything but a stamp's form (a virtualenv has none). Never raises."""
    import os  # loaded at every interpreter's start: costs a dict lookup
    path = path or os.path.join(os.path.dirname(os.path.abspath(__file__)), COMMIT_FILE)
    try:
        with open(path, encoding="ascii") as f:
            text = f.read(64).strip()
    except (OSError, ValueError):
        return UNKNOWN
    return text if valid_commit(text) else UNKNOWN
