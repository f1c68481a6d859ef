"""The Helm client of the test bed (`make testbin-helm`: built from the pinned module in
hack/testbin/helm/go.mod) and charts/netattach/ rendered with it.

The binary is $NETATTACH_HELM (as `make test` sets it), else where mk/testbin.mk puts it
(the cache dir keyed by the pinned version). Helm's own config, cache and data dirs are
the caller's `home` (a test's tmp dir), never the user's: nothing of a test run is left
in ~/.config/helm or ~/.cache/helm.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import yaml

from .cluster import REPO_ROOT, ClusterError, TestbinMissing, gomod_version

CHART_DIR = REPO_ROOT / "charts" / "netattach"
HELM_GOMOD = REPO_ROOT / "hack" / "testbin" / "helm" / "go.mod"
# what the chart must be installed into (its templates refuse any other namespace)
NAMESPACE = "kube-system"


def default_helm() -> Path:
    """Where `make testbin-helm` puts helm (same key as mk/testbin.mk)."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    version = gomod_version(HELM_GOMOD, "helm.sh/helm/v3")
    return cache / "netattach" / "testbin" / f"helm-{version}" / "helm"


def helm_binary() -> Path:
    """$NETATTACH_HELM if set, else the default; TestbinMissing if it is not executable."""
    env = os.environ.get("NETATTACH_HELM")
    path = Path(env) if env else default_helm()
    if not os.access(path, os.X_OK):
        raise TestbinMissing(f"helm not found at {path} (NETATTACH_HELM): run `make "
                             "testbin-helm` (or run the tests through `make test`)")
    return path


def helm_env(home: Path, kubeconfig: Path | None = None) -> dict[str, str]:
    """The environment a helm command runs in: Helm's config, cache and data dirs under
    `home`, KUBECONFIG `kubeconfig` (none: helm template and lint need no cluster), helm's
    dir first on PATH (for README blocks that call `helm`)."""
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    env.update(HELM_CONFIG_HOME=str(home / "config"), HELM_CACHE_HOME=str(home / "cache"),
               HELM_DATA_HOME=str(home / "data"),
               PATH=f"{helm_binary().parent}:{env.get('PATH', '/usr/bin:/bin')}")
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    return env


def run(home: Path, *args: str, kubeconfig: Path | None = None, check: bool = True,
        timeout: float = 600) -> subprocess.CompletedProcess:
    """`helm <args>` (from the repository's root); the finished process. ClusterError
    naming the command and its stderr when `check` and it failed."""
    p = subprocess.run([str(helm_binary()), *args], capture_output=True, text=True,
                       timeout=timeout, env=helm_env(home, kubeconfig), cwd=REPO_ROOT)
    if check and p.returncode != 0:
        raise ClusterError(f"helm {' '.join(args)} failed ({p.returncode}): {p.stderr.strip()}")
    return p


def template(home: Path, *values: str, namespace: str = NAMESPACE,
             include_crds: bool = True) -> list[dict[str, Any]]:
    """The documents `helm template netattach charts/netattach -n <namespace>` renders with
    `--set` `values` ("mode=thick"), crds/ included; ClusterError when the render fails."""
    args = ["template", "netattach", str(CHART_DIR), "--namespace", namespace]
    args += ["--include-crds"] if include_crds else []
    for value in values:
        args += ["--set", value]
    return [d for d in yaml.safe_load_all(run(home, *args).stdout) if d]
