"""The error of the API client and the wording of a failed request: what the message of
an API request that failed says (the status, why the retries stopped, what to fix for
401, 403 and a refused claim status write, the server's own message), and the few
rules that keep a kubeconfig's secrets out of a message."""
from __future__ import annotations

import json

from ..cni.errors import TryAgain


class KubeError(TryAgain):
    """The API server could not be asked, or refused (code 11: a later try may succeed).

    `status` is the HTTP status (0 when the server could not be reached or the
    request timed out; 200 when a successful answer's body was not a JSON
    object); the message says what to fix.
    """

    def __init__(self, message: str, status: int = 0):
        super().__init__(message)
        self.status = status

    @property
    def unreachable(self) -> bool:
        return self.status == 0


def explain(status: int, what: str, body: bytes, kubeconfig: str | None,
             permission: str, note: str = "", rbac: str | None = "deploy/base/rbac.yaml") -> str:
    """The message of a failed request: `what`, the HTTP status, `note` (why the
    retries stopped) in parentheses, what to fix for 401 and 403, and the API
    server's own message (the Status' `message`; else a short, sanitized start of
    the body). `permission`: the RBAC verb and resource the request needs ("get pods");
    `rbac`: the manifest whose ClusterRole grants it (the plugin's, or the daemon's);
    None for an operator's own credentials (`netattach status`, `validate --cluster`),
    which no manifest of netattach's grants: the hints then name only what is missing."""
    try:
        detail = str(json.loads(body).get("message", ""))
    except (ValueError, AttributeError, RecursionError):
        detail = excerpt(body, 200)
    hint = f" ({note})" if note else ""
    if status == 401 and rbac is None:
        hint += (f" (the credentials in kubeconfig {kubeconfig or '(default)'} were rejected: "
                 "log in again or refresh them; kubectl would fail the same way)")
    elif status == 403 and rbac is None:
        hint += f" (RBAC forbids it: the kubeconfig's user may not {permission})"
    elif status == 401:
        hint += (f" (the credentials in kubeconfig {kubeconfig or '(default)'} were rejected: "
                 "the ServiceAccount token is expired or revoked; rewrite the kubeconfig with a "
                 "fresh token. `netattach install`, the DaemonSet of deploy/base/daemonset.yaml, "
                 "rewrites it whenever kubelet rotates the token: check that its pod runs on "
                 "this node)")
    elif status == 403:
        hint += (f" (RBAC forbids it: the kubeconfig's user may not {permission}; bind the "
                 f"ClusterRole from {rbac}, which grants it, to the ServiceAccount in the "
                 "kubeconfig)")
    elif status == 422 and "resourceclaims/driver" in detail:
        # Kubernetes >= 1.36 (DRAResourceClaimGranularStatusAuthorization): a write of
        # status.devices is refused as invalid, not 403, when the per-driver check fails
        hint += (" (Kubernetes authorizes each driver's status.devices entries: bind the "
                 f"ClusterRole from {rbac}, whose resourceclaims/driver rule grants "
                 "associated-node:patch of this driver, and use a ServiceAccount token bound "
                 "to a pod on the claim's node, as the DaemonSet's pods have)")
    return f"{what}: HTTP {status}{hint}: {detail}".rstrip(": ")


def excerpt(data: bytes, limit: int) -> str:
    """The start of an answer's body for a message: at most `limit` characters of it
    decoded as UTF-8 (bad bytes replaced), every run of whitespace or control
    characters one space, "..." when cut; quoted. The body itself may be megabytes."""
    text = data[:limit * 4].decode("utf-8", "replace")
    text = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    cut = len(text) > limit or len(data) > limit * 4
    return f'"{text[:limit]}{"..." if cut else ""}"'


def short(e: Exception) -> str:
    """`e`'s text for a message, at most 200 characters, holding nothing of the
    kubeconfig: a YAML error by its line and column, without the line PyYAML quotes
    (it can be the token's or the key's), and h11's "Illegal header value" (http11's
    "Invalid header value") without the value (it is `Bearer <token>` when the token
    has a newline or control byte)."""
    mark = getattr(e, "problem_mark", None)  # yaml.MarkedYAMLError
    if mark is not None:
        text = (f"{getattr(e, 'context', None) or 'invalid YAML'}: "
                f"{getattr(e, 'problem', None) or ''} at line {mark.line + 1}, "
                f"column {mark.column + 1}")
    else:
        text = str(e)
        if text.startswith(("Illegal header value", "Invalid header value")):  # h11, http11
            text = ("Illegal header value (not shown: it may hold the bearer token; has the "
                    "kubeconfig's token a newline, a control character or trailing space?)")
    return text if len(text) < 200 else text[:200] + "..."
