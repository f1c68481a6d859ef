"""`make demo`: a pod gets three interfaces from three networks, then loses them again.

`make demo NODE=real` (--node real) shows it as an admin sees it on a cluster: a real
single-node Kubernetes (kubelet, scheduler, controller-manager, containerd) on this
machine, netattach's image (`make image`) installed with `kubectl apply -k deploy/`,
the pod created and deleted with kubectl (testbed/netattach_testbed/node.py).

`make demo RUNTIME=containerd` (--runtime containerd) shows the same pod under a real
container runtime: netattach installed on a node by its own installer, containerd
2.x started on it, and the kubelet's CRI calls (Status, RunPodSandbox,
PodSandboxStatus, StopPodSandbox, RemovePodSandbox) made by the test bed's CRI client.

Starts a real etcd + kube-apiserver on loopback (RBAC on, deploy/ CRD and RBAC
applied), puts a cluster default network (bridge) on disk, creates two
NetworkAttachmentDefinitions and a pod selecting them, and runs `netattach` (the
built artifact, $NETATTACH_EXE, under `make demo`) exactly as a container runtime
does (CNI env + stdin) in a fresh network namespace. Prints what happens; removes
everything at the end.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# the test bed (testbed/), installed into .venv by `make venv`
from netattach_testbed import cluster as cl
from netattach_testbed import netns as tb
from netattach_testbed import runtime as rt
from netattach_testbed import scenario as sc
from netattach_testbed.statefiles import tombstones

NAMESPACE = "demo"


def say(title: str) -> None:
    print(f"\n\033[1m== {title}\033[0m", flush=True)


def show(obj) -> None:
    print(json.dumps(obj, indent=2) if not isinstance(obj, str) else obj, flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runtime", choices=("none", "containerd"), default="none",
                        help="exec netattach as a runtime does (none), or through containerd")
    parser.add_argument("--node", choices=("none", "real"), default="none",
                        help="real: on a real single-node cluster, installed with kubectl")
    args = parser.parse_args()
    if args.node == "real":
        return main_real_node()
    if args.runtime == "containerd":
        return main_containerd()
    return main_direct()


def main_real_node() -> int:
    from netattach_testbed import node as nd
    workdir = Path(tempfile.mkdtemp(prefix="netattach-demo-node-"))
    env = tb.new_host_env()
    try:
        say("starting a real single-node cluster: etcd, kube-apiserver, controller-manager, "
            "scheduler, containerd, kubelet")
        with nd.RealNode.start(workdir) as node:
            show(node.kubectl("get", "nodes", "-o", "wide").stdout)
            node.import_image(nd.image_archive())
            print(f"netattach's image (make image) imported into the node's containerd: "
                  f"{nd.image_ref()}")

            def kubectl(*args: str, stdin: str | None = None) -> None:
                print(f"$ kubectl {' '.join(args)}", flush=True)
                show(node.kubectl(*args, stdin=stdin).stdout.rstrip())

            say("install netattach as the README says")
            kubectl("apply", "-k", "deploy/")
            kubectl("-n", "kube-system", "rollout", "status", "daemonset/netattach")
            kubectl("-n", "kube-system", "get", "pods", "-o", "wide")

            say("scenario 1: two NetworkAttachmentDefinitions and a pod selecting them")
            master, bridge = env.master_link(), env.bridge_name()
            objects = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}}
                       for n in (NAMESPACE, "other")] + nd.scenario_nads(NAMESPACE, master, bridge)
            objects.append(nd.pod_manifest(NAMESPACE, "demo-pod",
                                           {sc.NETWORKS: "net-a,other/net-b@data0"}))
            show(yaml_dump(objects))
            kubectl("apply", "-f", "-", stdin=json.dumps(
                {"apiVersion": "v1", "kind": "List", "items": objects}))
            nd.wait_running(node, NAMESPACE, "demo-pod")
            kubectl("-n", NAMESPACE, "get", "pod", "demo-pod", "-o", "wide")

            say("the pod's interfaces (ip addr in its network namespace)")
            for link, addrs in node.pod_addresses(NAMESPACE, "demo-pod").items():
                print(f"  {link:6} {' '.join(addrs)}")
            say(f"its {sc.STATUS} annotation")
            show(nd.network_status(node, NAMESPACE, "demo-pod"))

            say("delete the pod: the kubelet's runtime calls DEL, every address is freed")
            kubectl("-n", NAMESPACE, "delete", "pod", "demo-pod", "--wait=true")
            print(f"host-local allocations left on the node: {node.ipam_allocations() or 'none'}")
            print(f"netattach state left on the node: {nd.state_files(node) or 'none'}")

            say("uninstall: netattach's pods go, and with them its files on the node")
            print("$ kubectl delete -k deploy/", flush=True)
            nd.uninstall(node, "thin")
            print(f"netattach's files left on the node: {nd.netattach_files(node) or 'none'}")
        return 0
    finally:
        env.cleanup()
        shutil.rmtree(workdir, ignore_errors=True)


def yaml_dump(objects: list) -> str:
    import yaml
    return yaml.safe_dump_all(objects, sort_keys=False)


def main_direct() -> int:
    workdir = Path(tempfile.mkdtemp(prefix="netattach-demo-"))
    env = tb.new_host_env()
    try:
        say("starting kube-apiserver + etcd on loopback (TLS, RBAC)")
        with cl.Cluster.start(workdir) as cluster, cluster.admin_api() as api:
            cl.apply_documents(api, cl.kustomize(cl.DEPLOY_DIR))
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


def main_containerd() -> int:
    workdir = Path(tempfile.mkdtemp(prefix="netattach-demo-"))
    env = tb.new_host_env()
    node = None
    try:
        say("starting kube-apiserver + etcd on loopback (TLS, RBAC)")
        with cl.Cluster.start(workdir) as cluster, cluster.admin_api() as api:
            cl.apply_documents(api, cl.kustomize(cl.DEPLOY_DIR))
            sc.ensure_namespace(api, NAMESPACE)
            say("netattach install --once: what the DaemonSet's installer does on a node")
            cni_bin = Path(os.environ.get("NETATTACH_CNI_BIN") or "/usr/lib/cni")
            node = rt.node_setup(cluster, env, sc.netattach_command(), [cni_bin],
                                 env.bridge_name(), sc.SUBNETS["default"])
            print(f"cluster default network: {node.primary}")
            show(node.primary.read_text())
            say(f"{node.conflist}, the only file in containerd's CNI conf dir")
            show(node.conflist.read_text())
            ctrd = rt.start_containerd(node, workdir / "containerd")
            say(f"containerd {rt.containerd_version()} started (socket {ctrd.socket}); "
                "CRI Status, as the kubelet asks every few seconds (netattach STATUS)")
            show(node.cri.condition("NetworkReady"))

            name, config = rt.scenario_sandbox(api, env, NAMESPACE, name="demo-pod")
            say(f"pod {NAMESPACE}/{name}: annotations (the PodSandboxConfig carries the same)")
            show(config["annotations"])
            say("RunPodSandbox")
            try:
                sid = node.cri.run_sandbox(config)
            except rt.CriError as e:
                show(str(e))
                return 1
            status = node.cri.sandbox_status(sid)
            say(f"PodSandboxStatus {sid[:12]}: state and the cluster default network's IP")
            show({"state": status["status"]["state"], "network": status["status"]["network"]})
            netns = rt.sandbox_netns(status)
            say(f"interfaces in the sandbox's network namespace ({netns})")
            show(tb.run("nsenter", f"--net={netns}", "ip", "-br", "addr").stdout.rstrip())
            say(f"pod annotation {sc.STATUS}, read back from the API server")
            show(json.loads(sc.read_pod_annotations(api, NAMESPACE, name)[sc.STATUS]))

            say("StopPodSandbox, then RemovePodSandbox (containerd calls DEL at each)")
            node.cri.stop_sandbox(sid)
            node.cri.remove_sandbox(sid)
            print(f"sandboxes listed: {len(node.cri.sandboxes())}; IP allocations left: "
                  f"{len(env.ipam_allocations())}; state files left: {len(env.state_files())}; "
                  f"libcni cache entries left: {len(rt.libcni_cache_entries(sid))}")
            say("netattach's log: what containerd sent (CNI_ARGS and runtimeConfig keys), "
                "and what netattach did")
            log = (env.log_dir / "netattach.log").read_text()
            show("\n".join(line for line in log.splitlines()
                           if " INFO " in line or " container=" in line))
    finally:
        if node is not None and node.containerd is not None:
            node.containerd.stop()
        env.cleanup()
        shutil.rmtree(workdir, ignore_errors=True)
    left = tb.leaks() + rt.leaks()
    say("cleanup: " + ("nothing left behind" if not left else f"LEFT BEHIND: {left}"))
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
