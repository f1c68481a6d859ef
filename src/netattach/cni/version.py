"""CNI versions: the one owner of parsing, the supported list, negotiation and the
legacy (pre-0.3.0) result shape. Used by result, chain, status, routes, netconf and the
installer, so that the version the installer writes is the one the plugin serves.

Sources: CNI SPEC.md "Configuration format" (`cniVersion`, and `cniVersions` since
1.1.0: "the runtime [...] should pick the highest version it supports"), libcni
pkg/version (ParseVersion, GreaterThanOrEqualTo) and libcni conf.go (a config without
cniVersion is 0.1.0).
"""
from __future__ import annotations

from .errors import VersionError

TYPE_CHECKING = False  # typing is not imported on the exec'd path (cli.py)
if TYPE_CHECKING:
    from typing import Any

SUPPORTED_VERSIONS = ("0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")
"""Every CNI version netattach reads, runs and answers, oldest first."""

LATEST = SUPPORTED_VERSIONS[-1]
DEFAULT_VERSION = "0.1.0"
"""The version of a config or result that declares none (libcni create.DecodeVersion)."""

_DIGITS = frozenset("0123456789")


def _well_formed(version: str) -> bool:
    """True when `version` is one to three dot-separated runs of ASCII digits (the
    regular expression [0-9]+(\\.[0-9]+){0,2}, without importing `re` on VERSION's
    path)."""
    parts = version.split(".")
    return len(parts) <= 3 and all(p and _DIGITS.issuperset(p) for p in parts)


def parse(version: object) -> tuple[int, int, int]:
    """(major, minor, patch) of a CNI version string.

    libcni version.ParseVersion rules: "" means "0.1.0" (no declared version);
    one to three dot-separated decimal numbers, missing parts are 0 ("1.1" is
    (1, 1, 0)). Anything else raises VersionError (1).
    """
    if not isinstance(version, str):
        raise VersionError(f"invalid CNI version {version!r}",
                           "a version is a string like \"1.0.0\"")
    if version == "":
        return (0, 1, 0)
    if not _well_formed(version):
        raise VersionError(f"invalid CNI version {version!r}", "expected MAJOR.MINOR.PATCH")
    parts = [int(p) for p in version.split(".")] + [0, 0]
    return (parts[0], parts[1], parts[2])


def at_least(version: str, minimum: str) -> bool:
    """True when `version` >= `minimum` (libcni version.GreaterThanOrEqualTo).

    Raises VersionError (1) if either does not parse.
    """
    return parse(version) >= parse(minimum)


def check_supported(version: object, what: str = "CNI version") -> str:
    """Return `version` if it is one of SUPPORTED_VERSIONS (exactly as written: a child
    built with libcni compares version strings, so "1.0" is not "1.0.0"), else raise
    VersionError (1) naming `what` and the supported list."""
    if version not in SUPPORTED_VERSIONS:
        raise VersionError(f"unsupported {what} {version!r}",
                           f"supported: {', '.join(SUPPORTED_VERSIONS)}")
    assert isinstance(version, str)
    return version


def config_version(config: dict[str, Any], what: str = "cniVersion") -> str:
    """The version netattach runs a network configuration (conf or conflist) with.

    The highest supported version among `cniVersions` (CNI 1.1.0) and `cniVersion`
    when `cniVersions` is given; else `cniVersion`; a config declaring neither is
    "0.1.0". Raises VersionError (1) when that version is malformed or not in
    SUPPORTED_VERSIONS, naming `what`; the shapes of the two keys are the caller's
    to check (a non-string cniVersion, a cniVersions that is not a list of strings
    are left to the config parser's own messages, which call this only after).
    """
    version = config.get("cniVersion", "")
    versions = config.get("cniVersions")
    if isinstance(versions, list):
        usable = [v for v in versions if v in SUPPORTED_VERSIONS]
        if version in SUPPORTED_VERSIONS:
            usable.append(version)
        if usable:
            version = max(usable, key=parse)
    version = version or DEFAULT_VERSION
    parse(version)
    return check_supported(version, what)


def is_legacy_result(result: dict[str, Any]) -> bool:
    """True for a result in the shape of CNI 0.1.0/0.2.0 (`ip4`/`ip6` objects instead of
    `ips`): by its `cniVersion` when that parses, else by its keys."""
    version = result.get("cniVersion")
    if isinstance(version, str) and version:
        try:
            return parse(version) < (0, 3, 0)
        except VersionError:
            pass
    return "ips" not in result and ("ip4" in result or "ip6" in result)
