"""The plugin's kubeconfig, from the installer pod's ServiceAccount volume and the
API server address kubelet gives every container."""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass

from ..node.nodefiles import KUBECONFIG_DIR_NAME
from .files import MAX_CONFIG_BYTES, InstallError

KUBECONFIG_SUBDIR = KUBECONFIG_DIR_NAME
CA_NAME = "ca.crt"  # in KUBECONFIG_SUBDIR: the API server's CA, named by the kubeconfig


@dataclass(frozen=True)
class ServiceAccount:
    """The pod's ServiceAccount credentials: bearer token (text), CA bundle (PEM bytes),
    namespace (or None)."""
    token: str
    ca: bytes
    namespace: str | None

    def token_id(self) -> str:
        """8 hex digits of the token's sha256: names a token in logs without revealing it."""
        return hashlib.sha256(self.token.encode()).hexdigest()[:8]


def read_service_account(directory: str) -> ServiceAccount:
    """Read `token`, `ca.crt` and `namespace` of a ServiceAccount volume.

    kubelet's projected volume replaces the three at once by swapping the `..data`
    symlink (kubelet AtomicWriter), so reading through the top-level names gives one
    consistent generation (bar a rotation between two reads, seen at the next poll).
    Raises InstallError naming the file when the token or CA is missing or empty.
    """
    def read(name: str) -> bytes:
        path = os.path.join(directory, name)
        try:
            with open(path, "rb") as f:
                data = f.read(MAX_CONFIG_BYTES)
        except OSError as e:
            raise InstallError(f"cannot read the ServiceAccount {name} {path}: {e.strerror}") \
                from None
        if not data.strip():
            raise InstallError(f"the ServiceAccount {name} {path} is empty")
        return data

    token = read("token").decode("ascii", "replace").strip()
    ca = read("ca.crt")
    try:
        namespace = read("namespace").decode().strip() or None
    except InstallError:
        namespace = None
    return ServiceAccount(token, ca, namespace)


def api_server_url(explicit: str | None, environ: dict[str, str]) -> str:
    """The API server URL: `explicit` (https:// added when it has no scheme, an IPv6
    address bracketed), else
    https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT (kubelet sets both in
    every container; an IPv6 host is bracketed, RFC 3986 §3.2.2; port 443 when unset).
    Raises InstallError when neither is available."""
    def bracketed(host: str) -> str:
        return f"[{host}]" if host.count(":") > 1 and not host.startswith("[") else host

    if explicit:
        return explicit if "://" in explicit else f"https://{bracketed(explicit)}"
    host = environ.get("KUBERNETES_SERVICE_HOST", "").strip()
    if not host:
        raise InstallError("no API server: pass --api-server, or run in a pod where "
                           "KUBERNETES_SERVICE_HOST is set")
    port = environ.get("KUBERNETES_SERVICE_PORT", "").strip() or "443"
    return f"https://{bracketed(host)}:{port}"


def render_kubeconfig(server: str, sa: ServiceAccount, ca_path: str) -> bytes:
    """The plugin's kubeconfig (JSON, which YAML loaders read): one cluster whose CA is
    the file `ca_path` (a host path; the installer writes the ServiceAccount's ca.crt
    there), one user with the `token` embedded, one context, `current-context` set.
    Same input, same bytes.

    The CA is a file, not `certificate-authority-data`: lightkube writes embedded CA
    data to a new temp file on every load, i.e. on every ADD, which fails on a node
    whose temp dirs are full or read-only."""
    context: dict[str, str] = {"cluster": "local", "user": "netattach"}
    if sa.namespace:
        context["namespace"] = sa.namespace
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": {
            "server": server, "certificate-authority": ca_path}}],
        "users": [{"name": "netattach", "user": {"token": sa.token}}],
        "contexts": [{"name": "netattach", "context": context}],
        "current-context": "netattach",
    }
    return (json.dumps(doc, indent=2) + "\n").encode()

