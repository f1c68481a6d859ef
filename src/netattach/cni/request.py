"""One CNI invocation as the runtime made it: CNI_* environment plus stdin.

`parse_request` validates everything a plugin receives before any of it is used
(CNI SPEC.md, Section 2 "Execution Protocol": parameters and errors).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

from .errors import CniError, DECODE_FAILURE, INVALID_CONFIG, INVALID_ENV
from ..jsonutil import loads_strict

COMMANDS = ("ADD", "DEL", "CHECK", "VERSION", "STATUS", "GC")

# Environment each command requires (SPEC.md "Parameters" and the per-operation
# sections). CNI_COMMAND itself is always required. CNI_NETNS is optional for DEL.
REQUIRED_ENV: dict[str, tuple[str, ...]] = {
    "ADD": ("CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_PATH"),
    "CHECK": ("CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_PATH"),
    "DEL": ("CNI_CONTAINERID", "CNI_IFNAME", "CNI_PATH"),
    "STATUS": ("CNI_PATH",),
    "GC": ("CNI_PATH",),
    "VERSION": (),
}

MAX_STDIN = 1 << 20  # 1 MiB: far above any real network configuration

# libcni pkg/utils ValidateContainerID / ValidateNetworkName (and SPEC.md "Container ID").
_ID_RE = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.\-]*")
IFNAMSIZ = 16  # Linux, including the terminating NUL


def validate_container_id(container_id: str) -> None:
    """Raise CniError INVALID_ENV (4) unless `container_id` is a valid CNI container ID.

    Rule (SPEC.md "Container ID", libcni utils.ValidateContainerID): not empty,
    starts with an ASCII alphanumeric, then only alphanumerics, '_', '.', '-'.
    """
    if not container_id:
        raise CniError(INVALID_ENV, "missing container ID")
    if not _ID_RE.fullmatch(container_id):
        raise CniError(INVALID_ENV, f"invalid characters in container ID {container_id!r}",
                       "must match ^[a-zA-Z0-9][a-zA-Z0-9_.\\-]*$")


def validate_network_name(name: str) -> None:
    """Raise CniError INVALID_CONFIG (7) unless `name` is a valid network name.

    Same character rule as a container ID (libcni utils.ValidateNetworkName).
    """
    if not name:
        raise CniError(INVALID_CONFIG, "missing network name")
    if not _ID_RE.fullmatch(name):
        raise CniError(INVALID_CONFIG, f"invalid characters in network name {name!r}",
                       "must match ^[a-zA-Z0-9][a-zA-Z0-9_.\\-]*$")


def validate_ifname(ifname: str) -> None:
    """Raise CniError INVALID_ENV (4) unless `ifname` is a valid interface name.

    Rule (SPEC.md "Attachment Parameters", libcni utils.ValidateInterfaceName):
    1..15 bytes, not "." or "..", no '/', ':', NUL or whitespace.
    """
    if not ifname:
        raise CniError(INVALID_ENV, "interface name is empty")
    if len(ifname.encode("utf-8", "surrogatepass")) > IFNAMSIZ - 1:
        raise CniError(INVALID_ENV, f"interface name {ifname!r} is too long",
                       f"must be at most {IFNAMSIZ - 1} bytes")
    if ifname in (".", ".."):
        raise CniError(INVALID_ENV, f"interface name {ifname!r} is invalid")
    for c in ifname:
        if c in "/:\0" or c.isspace():
            raise CniError(INVALID_ENV, f"interface name {ifname!r} contains an invalid "
                           f"character {c!r}")


def parse_cni_args(text: str) -> tuple[tuple[str, str], ...]:
    """CNI_ARGS "K=V;K=V" as ((K, V), ...) in order (SPEC.md "Parameters": CNI_ARGS).

    The value is everything after the first '='. Empty pairs (";;", a trailing ';')
    are skipped. A pair without '=' or with an empty key raises CniError INVALID_ENV (4).
    """
    out: list[tuple[str, str]] = []
    for pair in text.split(";"):
        if not pair:
            continue
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise CniError(INVALID_ENV, f"invalid CNI_ARGS pair {pair!r}",
                           "CNI_ARGS must be KEY=VALUE pairs separated by ';'")
        out.append((key, value))
    return tuple(out)


def decode_json_object(data: bytes, what: str = "stdin") -> dict:
    """Decode `data` as one JSON object; anything else raises CniError DECODE_FAILURE (6).

    Guards: more than MAX_STDIN bytes, invalid UTF-8, NaN/Infinity, nesting that
    exhausts the recursion limit.
    """
    if len(data) > MAX_STDIN:
        raise CniError(DECODE_FAILURE, f"{what} is too large: {len(data)} bytes",
                       f"the limit is {MAX_STDIN} bytes")
    try:
        obj = loads_strict(data)
    except ValueError as e:  # JSONDecodeError and UnicodeDecodeError
        raise CniError(DECODE_FAILURE, f"{what} is not valid JSON: {e}") from None
    if not isinstance(obj, dict):
        raise CniError(DECODE_FAILURE, f"{what} is not a JSON object",
                       f"got a JSON {type(obj).__name__}")
    return obj


@dataclass(frozen=True)
class CniRequest:
    """A validated CNI invocation.

    `args` are the CNI_ARGS pairs in order, `path` the CNI_PATH directories (empty
    parts dropped), `stdin` the raw bytes, `config` the decoded stdin object (None
    for VERSION with empty stdin).
    """
    command: str
    container_id: str
    netns: str
    ifname: str
    args: tuple[tuple[str, str], ...]
    path: tuple[str, ...]
    stdin: bytes
    config: dict | None

    def arg(self, key: str) -> str | None:
        """Value of CNI_ARGS `key` (the last one if repeated, as libcni's LoadArgs), or None."""
        value = None
        for k, v in self.args:
            if k == key:
                value = v
        return value


def parse_request(environ: Mapping[str, str], stdin: bytes) -> CniRequest:
    """Parse and validate one invocation; raise CniError on anything invalid.

    Order of checks (the first failure is raised):
    1. CNI_COMMAND is one of COMMANDS, else INVALID_ENV (4) naming the value.
    2. All variables REQUIRED_ENV[command] present and non-empty, else one
       INVALID_ENV (4) naming every missing one.
    3. CNI_CONTAINERID and CNI_IFNAME (when given) are valid, else INVALID_ENV (4).
    4. CNI_NETNS and CNI_PATH hold no NUL, else INVALID_ENV (4) (real environment
       variables cannot; an in-process caller's can).
    5. CNI_ARGS pairs, else INVALID_ENV (4).
    6. stdin: a JSON object for every command but VERSION, else DECODE_FAILURE (6);
       VERSION accepts empty stdin or a JSON object (its cniVersion).
    For VERSION nothing but stdin is read.
    """
    command = environ.get("CNI_COMMAND", "")
    if command not in COMMANDS:
        if not command:
            raise CniError(INVALID_ENV, "CNI_COMMAND is not set",
                           f"expected one of {', '.join(COMMANDS)}")
        raise CniError(INVALID_ENV, f"unknown CNI_COMMAND {command!r}",
                       f"expected one of {', '.join(COMMANDS)}")

    if command == "VERSION":
        config = None
        if stdin.strip():
            config = decode_json_object(stdin)
        return CniRequest(command, "", "", "", (), (), stdin, config)

    missing = [name for name in REQUIRED_ENV[command] if not environ.get(name)]
    if missing:
        raise CniError(INVALID_ENV, f"required environment variables missing for {command}: "
                       f"{', '.join(missing)}")

    container_id = environ.get("CNI_CONTAINERID", "")
    ifname = environ.get("CNI_IFNAME", "")
    if container_id or command in ("ADD", "CHECK", "DEL"):
        validate_container_id(container_id)
    if ifname or command in ("ADD", "CHECK", "DEL"):
        validate_ifname(ifname)

    for name in ("CNI_NETNS", "CNI_PATH"):  # paths: a NUL would fail at the first use
        if "\0" in environ.get(name, ""):
            raise CniError(INVALID_ENV, f"{name} contains a NUL character",
                           f"{name} must be a path")
    args = parse_cni_args(environ.get("CNI_ARGS", ""))
    path = tuple(p for p in environ.get("CNI_PATH", "").split(":") if p)
    config = decode_json_object(stdin)
    return CniRequest(command, container_id, environ.get("CNI_NETNS", ""), ifname, args, path,
                      stdin, config)
