"""`netattach status POD`: a pod's attachments, from its network-status annotation.

Reads the pod through kube.Kube (the only module that talks to the API server) and
renders `k8s.v1.cni.cncf.io/network-status` (multi-net spec §5) as a table or JSON.

The kubeconfig is looked up as kubectl does: `--kubeconfig`, else `$KUBECONFIG` (the
first of its paths that exists: lightkube reads one file, kubectl would merge them),
else `~/.kube/config`, else the in-cluster ServiceAccount (what Kube(None) falls back
to). The namespace: `-n`, else the current context's (Kube.namespace()).

Exit status: 0 printed; 1 for a pod that does not exist, has no or a malformed
annotation, or an API/kubeconfig failure (the message says which); 2 usage errors.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from typing import Any

from ..cni.jsonutil import json_type, loads_strict
from ..kube.client import Kube, KubeError
from ..spec.status import NETWORK_STATUS_ANNOTATION

__all__ = ["StatusError", "parse_network_status", "table_rows", "format_table",
           "kubeconfig_path", "add_arguments", "run"]

COLUMNS = ("NETWORK", "INTERFACE", "IPS", "MAC", "DEFAULT", "MTU", "DEVICE")
NONE = "-"


class StatusError(Exception):
    """What keeps the status of a pod from being shown; the message says what to do."""


def parse_network_status(value: Any) -> list[dict]:
    """The entries of a network-status annotation value (spec §5: a JSON list of maps).

    Returns the list of entry dicts as written (no field is required: §5.3 makes all
    but "name" and "default" optional, and the spec's own §5.4 examples leave out
    "default"). Raises StatusError when the value is not a string holding a JSON list
    of objects.
    """
    if not isinstance(value, str):
        raise StatusError(f"the annotation is {json_type(value)}, not a string")
    try:
        entries = loads_strict(value)
    except ValueError as e:
        raise StatusError(f"not valid JSON: {e}") from None
    if not isinstance(entries, list):
        raise StatusError(f"must be a JSON list of objects (§5), not {json_type(entries)}")
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise StatusError(f"entry {i} must be an object (§5.3), not {json_type(entry)}")
    return entries


def _text(value: Any) -> str:
    if value is None or value == "" or value == []:
        return NONE
    if isinstance(value, list):
        return ",".join(_text(v) for v in value)
    return str(value).strip() or NONE


def _device(entry: Mapping[str, Any]) -> str:
    """`type id` of a §5.3.8 device-info map: the PCI address, else the path/device of
    its type's map; "-" without device-info."""
    info = entry.get("device-info")
    if not isinstance(info, dict):
        return NONE
    kind = info.get("type")
    detail = info.get(kind) if isinstance(kind, str) else None
    ident = next((detail[k] for k in ("pci-address", "path", "device")
                  if isinstance(detail, dict) and isinstance(detail.get(k), str)), None)
    return " ".join(_text(p) for p in (kind, ident) if p is not None) or NONE


def table_rows(entries: list[dict]) -> list[tuple[str, ...]]:
    """One row of COLUMNS per entry: name, interface, ips comma-joined, mac, default
    ("yes" only for JSON true, §5.3.6), mtu, device-info marker; "-" where absent."""
    return [(_text(e.get("name")), _text(e.get("interface")), _text(e.get("ips")),
             _text(e.get("mac")), "yes" if e.get("default") is True else "no",
             _text(e.get("mtu")), _device(e)) for e in entries]


def format_table(entries: list[dict]) -> str:
    """The entries as a kubectl-style table: a header of COLUMNS, columns separated by
    at least two spaces, each line newline-terminated, no trailing blanks."""
    rows = [COLUMNS] + table_rows(entries)
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    return "".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() + "\n"
                   for r in rows)


def kubeconfig_path(flag: str | None, environ: Mapping[str, str]) -> str | None:
    """The kubeconfig file to use: `flag`, else the first existing path of $KUBECONFIG
    (its first path when none exists, so the error names it), else ~/.kube/config when
    it exists, else None (Kube's own lookup: the in-cluster ServiceAccount)."""
    if flag:
        return flag
    paths = [p for p in environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    if paths:
        return next((p for p in paths if os.path.isfile(p)), paths[0])
    home = os.path.join(environ.get("HOME") or os.path.expanduser("~"), ".kube", "config")
    return home if os.path.isfile(home) else None


def pod_network_status(kube: Kube, namespace: str, name: str) -> list[dict]:
    """The network-status entries of pod `namespace`/`name`.

    Raises StatusError when the pod does not exist or its annotation is missing or
    malformed; KubeError for API and kubeconfig failures.
    """
    pod = kube.get_pod(namespace, name)
    if pod is None:
        raise StatusError(f"pod {namespace}/{name} not found")
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    if NETWORK_STATUS_ANNOTATION not in annotations:
        raise StatusError(
            f"pod {namespace}/{name} has no {NETWORK_STATUS_ANNOTATION} annotation yet: "
            "netattach writes it once it has attached the pod's networks, so the pod may "
            "not have been attached yet (not scheduled, sandbox not created); if it is "
            "running, the plugin may lack RBAC to patch pods/status (deploy/base/rbac.yaml): "
            "see the netattach log on its node")
    try:
        return parse_network_status(annotations[NETWORK_STATUS_ANNOTATION])
    except StatusError as e:
        raise StatusError(f"pod {namespace}/{name}: malformed {NETWORK_STATUS_ANNOTATION} "
                          f"annotation: {e}") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `netattach status` options."""
    parser.description = (
        "Show a pod's network attachments from its k8s.v1.cni.cncf.io/network-status "
        "annotation. Exit status: 0 shown, 1 pod missing, not attached yet, malformed "
        "annotation or API failure, 2 usage error.")
    parser.add_argument("pod", metavar="POD", help="the pod's name")
    parser.add_argument("-n", "--namespace",
                        help="the pod's namespace (default: the kubeconfig context's, else "
                             "\"default\")")
    parser.add_argument("--kubeconfig",
                        help="kubeconfig file (default: $KUBECONFIG, else ~/.kube/config, "
                             "else the in-cluster ServiceAccount)")
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table",
                        help="table, or json: {\"namespace\", \"pod\", \"networks\": "
                             "[entries as annotated]} (default: %(default)s)")


def run(args: argparse.Namespace) -> int:
    """`netattach status`: the table or JSON on stdout, or one error line on stderr
    and status 1."""
    kube = Kube(kubeconfig_path(args.kubeconfig, os.environ), rbac=None)
    namespace = args.namespace
    try:
        namespace = namespace or kube.namespace()
        entries = pod_network_status(kube, namespace, args.pod)
    except (StatusError, KubeError) as e:
        hint = ""
        if isinstance(e, KubeError) and e.status == 403:
            hint = (f"\nnetattach status: the kubeconfig's user needs `get` on pods in "
                    f"namespace {namespace}")
        print(f"netattach status: {e}{hint}", file=sys.stderr)
        return 1
    if args.output == "json":
        json.dump({"namespace": namespace, "pod": args.pod, "networks": entries}, sys.stdout,
                  indent=2, ensure_ascii=False)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(format_table(entries))
    return 0
