"""CNI errors: the error object of CNI SPEC.md ("Errors") and the well-known codes.

A plugin reports failure by exiting non-zero and printing
``{"cniVersion", "code", "msg", "details"}`` on stdout. `CniError` is that object
as a Python exception; `ChildError` is one that a delegated (child) plugin returned.
"""
from __future__ import annotations

# Well-known error codes, CNI SPEC.md "Well-known Error Codes" (0-99 are reserved
# for the spec; 100+ are plugin specific).
UNKNOWN = 0  # libcni types.ErrUnknown: what libcni reports for an unparsable failure
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
    """A CNI error: `code` (int), `msg` (short text) and `details` (longer text, may be "").

    str() gives "msg" or "msg; details", like libcni's types.Error.
    """

    def __init__(self, code: int, msg: str, details: str = "") -> None:
        super().__init__(code, msg, details)
        self.code = int(code)
        self.msg = str(msg)
        self.details = str(details or "")

    def __str__(self) -> str:
        return f"{self.msg}; {self.details}" if self.details else self.msg

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code}, msg={self.msg!r}, details={self.details!r})"

    def to_dict(self, cni_version: str) -> dict:
        """The error as the JSON object a plugin prints (SPEC.md "Errors").

        Shape: {"cniVersion": str, "code": int, "msg": str, "details": str};
        "details" is omitted when empty.
        """
        out: dict = {"cniVersion": cni_version, "code": self.code, "msg": self.msg}
        if self.details:
            out["details"] = self.details
        return out


class ChildError(CniError):
    """An error returned (or caused) by a child plugin.

    `plugin` is the plugin type (executable name), `stderr` what it wrote on
    stderr (possibly truncated to its tail). When raised by the chain engine,
    `network` (network name), `command` ("ADD", "DEL"...) and `plugin_index`
    (position in the list) say which plugin of which network failed.
    """

    def __init__(self, code: int, msg: str, details: str = "", *, plugin: str = "",
                 stderr: str = "", network: str = "", command: str = "",
                 plugin_index: int | None = None) -> None:
        super().__init__(code, msg, details)
        self.plugin = plugin
        self.stderr = stderr
        self.network = network
        self.command = command
        self.plugin_index = plugin_index

    def __repr__(self) -> str:
        return (f"ChildError(code={self.code}, msg={self.msg!r}, details={self.details!r}, "
                f"plugin={self.plugin!r})")
