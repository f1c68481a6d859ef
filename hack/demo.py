"""`make demo`: a pod gets three interfaces from three networks, then loses them again.

Starts a real etcd + kube-apiserver on loopback (RBAC on, deploy/ CRD and RBAC
applied), puts a cluster default network (bridge) on disk, creates two
NetworkAttachmentDefinitions and a pod selecting them, and runs `netattach` (the
built artifact, $NETATTACH_EXE, under `make demo`) exactly as a container runtime
does (CNI env + stdin) in a fresh network namespace. Prints what happens; removes
everything at the end.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.testbed import cluster as cl  # noqa: E402
from tests.testbed import netns as tb  # noqa: E402
from tests.testbed import scenario as sc  # noqa: E402
from tests.testbed.statefiles import tombstones  # noqa: E402

NAMESPACE = "demo"


def say(title: str) -> None:
    print(f"\n\033[1m== {title}\033[0m", flush=True)


def show(obj) -> None:
    print(json.dumps(obj, indent=2) if not isinstance(obj, str) else obj, flush=True)


def main() -> int:
    workdir = Path(tempfile.mkdtemp(prefix="netattach-demo-"))
    env = tb.new_host_env()
    try:
        say("starting kube-apiserver + etcd on loopback (TLS, RBAC)")
        with cl.Cluster.start(workdir) as cluster, cluster.admin_api() as api:
            cl.apply_manifests(api, cl.DEPLOY_MANIFESTS)
            kubeconfig = cl.plugin_kubeconfig(cluster)
            print(f"API server {cluster.server}; deploy/ applied (CRD, RBAC, DaemonSet);")
            print("the plugin's kubeconfig holds only the kube-system/netattach "
                  "ServiceAccount token")
            sc.ensure_namespace(api, NAMESPACE)
            s = sc.setup(api, kubeconfig, env, NAMESPACE, pod_name="demo-pod")

            say(f"cluster default network on disk: {s.netconf['clusterNetwork']}")
            show(Path(s.netconf["clusterNetwork"]).read_text())
            say(f"pod {NAMESPACE}/demo-pod, annotation {sc.NETWORKS}")
            show(sc.read_pod_annotations(api, NAMESPACE, "demo-pod")[sc.NETWORKS])

            say("ADD: the runtime execs <binDir>/netattach with CNI env + this stdin")
            show(s.netconf)
            run = s.run("ADD")
            if run.code != 0:
                show(run.stdout)
                show(s.log_text())
                return 1
            say("result on stdout (the cluster default network's, at the configured cniVersion)")
            show(run.doc)
            for ifname in ("eth0", "net1", "data0"):
                say(f"ip -n {s.netns} addr show {ifname}")
                show(tb.run("ip", "-n", s.netns, "addr", "show", ifname).stdout.rstrip())
            say(f"pod annotation {sc.STATUS}, read back from the API server")
            show(json.loads(sc.read_pod_annotations(api, NAMESPACE, "demo-pod")[sc.STATUS]))
            say(f"netattach status demo-pod -n {NAMESPACE}   (an operator, with their kubeconfig)")
            status = subprocess.run([sc.netattach_command(), "status", "demo-pod", "-n", NAMESPACE,
                                     "--kubeconfig", str(cluster.admin_kubeconfig)],
                                    capture_output=True, text=True)
            show((status.stdout + status.stderr).rstrip())
            if status.returncode != 0:
                return 1

            say("DEL")
            run = s.run("DEL")
            if run.code != 0:
                show(run.stdout)
                return 1
            show(tb.run("ip", "-n", s.netns, "-br", "link").stdout.rstrip())
            print(f"IP allocations left: {len(env.ipam_allocations())}; "
                  f"state files left: {len(env.state_files())}; tombstone (the DEL "
                  f"completed, so the runtime's second DEL is a no-op): "
                  f"{'yes' if s.container_id in tombstones(env.state_dir) else 'no'}")
            say("netattach's own log of this run")
            show("\n".join(line for line in s.log_text().splitlines() if " INFO " in line))
    finally:
        env.cleanup()
        shutil.rmtree(workdir, ignore_errors=True)
    left = tb.leaks()
    say("cleanup: " + ("nothing left behind" if not left else f"LEFT BEHIND: {left}"))
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
