"""The rules for names that become paths, API request paths or kernel link names: one
owner each. Pure, standard library only (imported on the exec'd CNI path).

Each `*_problem` function returns None for a valid value, else the reason, so that
each caller raises the error kind of its own context (CNI_IFNAME is code 4, an
interface in the selection annotation code 7).
"""
from __future__ import annotations

import re

IFNAMSIZ = 16
"""Linux's buffer for a link name, the terminating NUL included: names are 1..15 bytes."""

# Bytes the kernel's isspace() treats as white space (lib/ctype.c): HT, LF, VT, FF, CR,
# space, and 0xA0 (Latin-1 no-break space; it is also the second byte of some UTF-8
# characters, which the kernel therefore refuses too).
_KERNEL_SPACE_BYTES = frozenset(b"\t\n\v\f\r \xa0")

_CONTAINER_ID = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.\-]*")
MAX_CONTAINER_ID = 255 - len("..json.tmp-") - 7
"""Longest container ID accepted (237): every file named after it stays within the
255-byte limit of a file name, the longest being the state's temp file
`.<id>.json.tmp-<pid>` (pids have up to 7 digits)."""

_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS1123_LABEL_MAX = 63
DNS1123_SUBDOMAIN_MAX = 253


def ifname_problem(value: object) -> str | None:
    """None when `value` is a valid interface name, else why not.

    The union of what the kernel (net/core/dev.c dev_valid_name) and libcni
    (pkg/utils ValidateInterfaceName, CNI SPEC.md "Parameters": CNI_IFNAME) accept:
    1..15 bytes of UTF-8, not "." or "..", no '/' or ':', no white space (the
    kernel's bytes and Unicode's characters), and no control character (it could
    not travel in CNI_IFNAME or a log line safely).
    """
    if not isinstance(value, str) or not value:
        return "an interface name must be a non-empty string"
    try:
        raw = value.encode("utf-8")
    except UnicodeEncodeError:
        return "an interface name must be valid UTF-8"
    if len(raw) > IFNAMSIZ - 1:
        return f"an interface name is at most {IFNAMSIZ - 1} bytes, not {len(raw)}"
    if value in (".", ".."):
        return "an interface name cannot be '.' or '..'"
    for byte in raw:
        if byte in b"/:":
            return "an interface name cannot contain '/' or ':'"
        if byte < 0x20 or byte == 0x7F:
            return "an interface name cannot contain a control character"
        if byte in _KERNEL_SPACE_BYTES:
            return "an interface name cannot contain white space"
    for char in value:
        if char.isspace():  # Unicode white space, as Go's unicode.IsSpace
            return "an interface name cannot contain white space"
        if 0x80 <= ord(char) <= 0x9F:  # the C1 control characters
            return "an interface name cannot contain a control character"
    return None


def is_valid_ifname(value: object) -> bool:
    """True when `value` is a valid interface name (`ifname_problem`)."""
    return ifname_problem(value) is None


def container_id_problem(value: object) -> str | None:
    """None when `value` is a valid CNI container ID, else why not.

    SPEC.md "Parameters" (CNI_CONTAINERID) and libcni utils.ValidateContainerID: not
    empty, an ASCII alphanumeric then alphanumerics, '_', '.', '-'. netattach also
    bounds the length (MAX_CONTAINER_ID), as the ID names its state files.
    """
    if not isinstance(value, str) or not value:
        return "a container ID must be a non-empty string"
    if not _CONTAINER_ID.fullmatch(value):
        return "a container ID must match ^[a-zA-Z0-9][a-zA-Z0-9_.\\-]*$"
    if len(value) > MAX_CONTAINER_ID:
        return f"a container ID is at most {MAX_CONTAINER_ID} characters, not {len(value)}"
    return None


def network_name_problem(value: object) -> str | None:
    """None when `value` is a valid CNI network name (libcni utils.ValidateNetworkName:
    the container ID's characters, no length bound), else why not."""
    if not isinstance(value, str) or not value:
        return "a network name must be a non-empty string"
    if not _CONTAINER_ID.fullmatch(value):
        return "a network name must match ^[a-zA-Z0-9][a-zA-Z0-9_.\\-]*$"
    return None


def is_dns1123_label(value: object) -> bool:
    """True if `value` is a DNS-1123 label (RFC 1123, Kubernetes' IsDNS1123Label): at
    most 63 lower-case alphanumerics or '-', starting and ending alphanumeric. Namespaces
    and NetworkAttachmentDefinition names (multi-net spec §3.3)."""
    return (isinstance(value, str) and len(value) <= DNS1123_LABEL_MAX
            and _DNS1123_LABEL.fullmatch(value) is not None)


def is_dns1123_subdomain(value: object) -> bool:
    """True if `value` is a DNS-1123 subdomain (Kubernetes' IsDNS1123Subdomain, the rule of
    pod names): at most 253 characters, dot-separated parts each of lower-case
    alphanumerics or '-', starting and ending alphanumeric. Unlike a label, a part is
    not limited to 63 characters (Kubernetes' regular expression does not bound it)."""
    return (isinstance(value, str) and 0 < len(value) <= DNS1123_SUBDOMAIN_MAX
            and all(_DNS1123_LABEL.fullmatch(part) is not None for part in value.split(".")))
