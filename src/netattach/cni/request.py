"""One CNI invocation as the runtime made it: CNI_* environment plus stdin.

`parse_request` validates everything a plugin receives before any of it is used
(CNI SPEC.md, Section 2 "Execution Protocol": parameters and errors).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .errors import ConfigError, InvalidEnv
from .names import container_id_problem, ifname_problem, network_name_problem
from .stdin import MAX_STDIN, decode_json_object  # noqa: F401 (re-exported)

TYPE_CHECKING = False  # typing is not imported on the exec'd path (cli.py)
if TYPE_CHECKING:
    from typing import Any

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


def validate_container_id(container_id: str) -> None:
    """Raise InvalidEnv (4) unless `container_id` is a valid CNI container ID
    (names.container_id_problem: SPEC.md "Parameters", libcni utils.ValidateContainerID)."""
    problem = container_id_problem(container_id)
    if problem:
        raise InvalidEnv(f"invalid container ID {container_id!r}" if container_id
                         else "missing container ID", problem)


def validate_network_name(name: str) -> None:
    """Raise ConfigError (7) unless `name` is a valid network name
    (names.network_name_problem: libcni utils.ValidateNetworkName)."""
    problem = network_name_problem(name)
    if problem:
        raise ConfigError(f"invalid network name {name!r}" if name else "missing network name",
                          problem)


def validate_ifname(ifname: str) -> None:
    """Raise InvalidEnv (4) unless `ifname` is a valid interface name (names.ifname_problem:
    the kernel's and libcni's rules together, SPEC.md "Parameters" CNI_IFNAME)."""
    problem = ifname_problem(ifname)
    if problem:
        raise InvalidEnv(f"invalid interface name {ifname!r}" if ifname
                         else "interface name is empty", problem)


def parse_cni_args(text: str) -> tuple[tuple[str, str], ...]:
    """CNI_ARGS "K=V;K=V" as ((K, V), ...) in order (SPEC.md "Parameters": CNI_ARGS).

    The value is everything after the first '='. Empty pairs (";;", a trailing ';')
    are skipped. A pair without '=' or with an empty key raises InvalidEnv (4).
    """
    out: list[tuple[str, str]] = []
    for pair in text.split(";"):
        if not pair:
            continue
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InvalidEnv(f"invalid CNI_ARGS pair {pair!r}",
                           "CNI_ARGS must be KEY=VALUE pairs separated by ';'")
        out.append((key, value))
    return tuple(out)


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
    config: dict[str, Any] | None

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
            raise InvalidEnv("CNI_COMMAND is not set",
                           f"expected one of {', '.join(COMMANDS)}")
        raise InvalidEnv(f"unknown CNI_COMMAND {command!r}",
                       f"expected one of {', '.join(COMMANDS)}")

    if command == "VERSION":
        config = None
        if stdin.strip():
            config = decode_json_object(stdin)
        return CniRequest(command, "", "", "", (), (), stdin, config)

    missing = [name for name in REQUIRED_ENV[command] if not environ.get(name)]
    if missing:
        raise InvalidEnv(f"required environment variables missing for {command}: "
                       f"{', '.join(missing)}")

    container_id = environ.get("CNI_CONTAINERID", "")
    ifname = environ.get("CNI_IFNAME", "")
    if container_id or command in ("ADD", "CHECK", "DEL"):
        validate_container_id(container_id)
    if ifname or command in ("ADD", "CHECK", "DEL"):
        validate_ifname(ifname)

    for name in ("CNI_NETNS", "CNI_PATH"):  # paths: a NUL would fail at the first use
        if "\0" in environ.get(name, ""):
            raise InvalidEnv(f"{name} contains a NUL character",
                           f"{name} must be a path")
    args = parse_cni_args(environ.get("CNI_ARGS", ""))
    path = tuple(p for p in environ.get("CNI_PATH", "").split(":") if p)
    config = decode_json_object(stdin)
    return CniRequest(command, container_id, environ.get("CNI_NETNS", ""), ifname, args, path,
                      stdin, config)
