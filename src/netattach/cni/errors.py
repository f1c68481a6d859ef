"""The error tree: every failure netattach reports, each kind carrying its CNI code.

A plugin reports failure by exiting non-zero and printing
``{"cniVersion", "code", "msg", "details"}`` on stdout (CNI SPEC.md "Error").
`CniError` is the root of every exception netattach raises on the CNI path; each
subclass carries the well-known code of its kind (SPEC.md "Well-known Error
Codes"), so a raise site chooses a kind, never a number. `ChildError` alone
carries the code a child plugin returned, passed through. `as_cni_error` is the one
place that turns any exception into the error the runtime gets.

| kind | code |
|---|---|
| `VersionError` | 1 incompatible CNI version |
| `UnknownContainer` | 3 |
| `InvalidEnv` | 4 invalid environment variables |
| `IOFailure` | 5 (state files, device-info files, any OSError) |
| `DecodeFailure` | 6 |
| `ConfigError` | 7 invalid network config (netattach's, a delegate's, the selection, the plan) |
| `TryAgain` | 11 try again later (the API server, the kubelet, readiness) |
| `NotAvailable` | 50 STATUS: plugin not available |
| `ChildError` | the child's own code; 999 when it gave none |
| `InternalError` | 999 (a bug) |
"""
from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported on the exec'd path (cli.py)
if TYPE_CHECKING:
    from typing import Any

# Well-known error codes, CNI SPEC.md "Well-known Error Codes" (0-99 are reserved
# for the spec; 100+ are plugin specific). libcni's types.ErrUnknown (0) is not a
# code the spec defines; netattach never reports it.
INCOMPATIBLE_VERSION = 1
UNSUPPORTED_FIELD = 2
UNKNOWN_CONTAINER = 3
INVALID_ENV = 4
IO_FAILURE = 5
DECODE_FAILURE = 6
INVALID_CONFIG = 7
TRY_AGAIN = 11
NOT_AVAILABLE = 50  # STATUS: plugin not available (CNI 1.1.0)
LIMITED_CONNECTIVITY = 51  # STATUS: not available, existing containers may be limited
INTERNAL = 999  # libcni types.ErrInternal


class CniError(Exception):
    """Root of the error tree: `msg` (short text), `details` (longer text, may be "") and
    `code`, the CNI code of the kind (the class attribute; only `ChildError` sets its own).

    str() gives "msg" or "msg; details", like libcni's types.Error.
    """

    code: int = INTERNAL

    def __init__(self, msg: str, details: str = "") -> None:
        super().__init__(msg)
        self.msg = str(msg)
        self.details = str(details or "")

    def __str__(self) -> str:
        return f"{self.msg}; {self.details}" if self.details else self.msg

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(code={self.code}, msg={self.msg!r}, "
                f"details={self.details!r})")

    def __reduce__(self) -> tuple[Any, ...]:
        # copy and pickle without calling a subclass's own __init__ signature
        return (_rebuild, (type(self), self.__dict__.copy()))

    def within(self, where: str) -> CniError:
        """A copy of this error (same kind, code and details) whose msg starts with
        `where` ("pod ns/name: network x"), so the message names the context."""
        import copy  # only when an error is reworded: not on VERSION's path
        out = copy.copy(self)
        out.msg = f"{where}: {self.msg}" if where else self.msg
        out.args = (out.msg,)
        return out

    def reworded(self, msg: str, details: str | None = None) -> CniError:
        """A copy of this error (same kind and code) with `msg`, and `details` when given:
        for one error that reports several (the code is this one's)."""
        import copy  # only when an error is reworded: not on VERSION's path
        out = copy.copy(self)
        out.msg = msg
        out.args = (msg,)
        if details is not None:
            out.details = details
        return out

    def to_dict(self, cni_version: str) -> dict[str, Any]:
        """The error as the JSON object a plugin prints (SPEC.md "Error").

        Shape: {"cniVersion": str, "code": int, "msg": str, "details": str};
        "details" is omitted when empty.
        """
        out: dict[str, Any] = {"cniVersion": cni_version, "code": self.code, "msg": self.msg}
        if self.details:
            out["details"] = self.details
        return out


def _rebuild(cls: type[CniError], state: dict[str, Any]) -> CniError:
    obj = cls.__new__(cls)
    Exception.__init__(obj, state.get("msg", ""))
    obj.__dict__.update(state)
    return obj


class VersionError(CniError):
    """An unsupported or malformed CNI version (code 1)."""
    code = INCOMPATIBLE_VERSION


class UnknownContainer(CniError):
    """The container is not known here, or not the one asked for (code 3)."""
    code = UNKNOWN_CONTAINER


class InvalidEnv(CniError):
    """A CNI_* variable is missing or invalid (code 4)."""
    code = INVALID_ENV


class IOFailure(CniError):
    """A file could not be read or written (code 5)."""
    code = IO_FAILURE


class DecodeFailure(CniError):
    """Input that should be JSON is not, or has the wrong shape (code 6)."""
    code = DECODE_FAILURE


class ConfigError(CniError):
    """An invalid network configuration: netattach's own, a delegate's, the pod's
    selection, or a plan that cannot be made from them (code 7)."""
    code = INVALID_CONFIG


class TryAgain(CniError):
    """Something netattach depends on did not answer or is not ready yet (code 11)."""
    code = TRY_AGAIN


class NotAvailable(CniError):
    """STATUS: the cluster default network is not ready for ADD (code 50)."""
    code = NOT_AVAILABLE


class InternalError(CniError):
    """A failure of no known kind: a bug (code 999)."""
    code = INTERNAL


class ChildError(CniError):
    """An error a child plugin returned or caused; `code` is the child's own (a
    positive integer), or 999 when the child failed without one.

    `plugin` is the plugin type (executable name), `stderr` what it wrote on
    stderr (possibly truncated to its tail). When raised by the chain engine,
    `network` (network name), `command` ("ADD", "DEL"...) and `plugin_index`
    (position in the list) say which plugin of which network failed; `cause` is the
    failure's own message, without the engine's "plugin ... failed (add): " prefix;
    `executed` is False when the plugin never ran (it could not be found, or its
    stdin could not be built), True otherwise.
    """

    def __init__(self, code: int, msg: str, details: str = "", *, plugin: str = "",
                 stderr: str = "", network: str = "", command: str = "",
                 plugin_index: int | None = None, cause: str = "",
                 executed: bool = True) -> None:
        super().__init__(msg, details)
        self.code = code if isinstance(code, int) and not isinstance(code, bool) and code > 0 \
            else INTERNAL
        self.plugin = plugin
        self.stderr = stderr
        self.network = network
        self.command = command
        self.plugin_index = plugin_index
        self.cause = cause or self.msg
        self.executed = executed

    def __repr__(self) -> str:
        return (f"ChildError(code={self.code}, msg={self.msg!r}, details={self.details!r}, "
                f"plugin={self.plugin!r})")


def as_cni_error(e: BaseException) -> CniError:
    """The one mapping of any exception to the error the runtime gets.

    A CniError keeps its kind and code; an OSError that escaped its wrapper is an
    IOFailure (5) naming the cause; anything else is an InternalError (999: a
    bug; the caller logs the traceback).
    """
    if isinstance(e, CniError):
        return e
    if isinstance(e, OSError):
        return IOFailure(f"netattach I/O failure: {e}", "see the netattach log for the traceback")
    return InternalError(f"netattach internal error: {type(e).__name__}: {e}",
                         "see the netattach log for the traceback")
