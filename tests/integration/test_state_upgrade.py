"""An upgrade never strands a pod: the DEL of this release frees everything from state
files the release before issue 9 wrote (tests/data/state_v1: a whole ADD, an ADD
SIGKILLed while its second child ran, an ADD whose attachments got devices).

The fixtures are those files with the values that differ per run (paths, container ID,
bridge and master names, the pod) templated. Each test renders one for a fresh host
environment, makes the host hold what that old ADD left (the same delegate configs run
through real plugins in a real netns for every attachment the file says was attempted,
the device-info files the old ADD copied), puts the file in place, and execs the built
`netattach` for the runtime's DEL, with a kubeconfig that points nowhere: DEL needs
no API server for a whole state. Then nothing may be left (needs root).
"""
from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest

from netattach.cni import chain
from netattach_testbed import netns as tb
from netattach_testbed.scenario import DEBIAN_CNI_DIR, PluginRun, install_bin_dir, netattach_conf

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).parent.parent / "data" / "state_v1"
RECORDER = """#!/usr/bin/env python3
import json, os, sys
conf = json.load(sys.stdin)
if os.environ["CNI_COMMAND"] == "ADD":
    print(json.dumps(conf.get("prevResult") or {"cniVersion": conf["cniVersion"]}))
"""


def render(name: str, env: tb.HostEnv, values: dict[str, str]) -> dict:
    text = (FIXTURES / name).read_text()
    for key, value in {"ROOT": str(env.root), **values}.items():
        text = text.replace("{{" + key + "}}", value)
    assert "{{" not in text, text
    return json.loads(text)


@pytest.mark.parametrize("name", ["whole.json", "mid-add.json", "with-devices.json"])
def test_del_frees_everything_a_previous_release_saved(host_env, name):
    env = host_env
    netns = env.new_netns()
    cid = uuid.uuid4().hex + uuid.uuid4().hex
    bin_dir = install_bin_dir(env)
    (bin_dir / "recorder").write_text(RECORDER)
    (bin_dir / "recorder").chmod(0o755)
    devinfo = env.root / "devinfo"
    state = render(name, env, {
        "NETNS": tb.netns_path(netns), "CID": cid, "BR0": env.bridge_name(),
        "BR1": env.bridge_name(), "MASTER": env.master_link(), "NS": "ns-upgrade",
        "POD": "pod-upgrade", "UID": str(uuid.uuid4())})

    # what the old ADD left on the host: every attempted attachment, really attached
    attempted = [a for a in state["attachments"] if a["attempted"]]
    for att in attempted:
        rt = chain.RuntimeConf(container_id=cid, netns=tb.netns_path(netns),
                               ifname=att["ifname"], args=(("IgnoreUnknown", "1"),),
                               capability_args=att["capabilityArgs"],
                               cni_path=(str(bin_dir), DEBIAN_CNI_DIR))
        chain.add(chain.NetworkConfig.from_dict(att["config"], att["source"]), rt)
        if "device" in att:
            path = devinfo / "cni" / f"{cid}_{att['ifname']}"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"type": "pci", "version": "1.1.0", "pci": {}}))
    assert pod_links_of(netns) == sorted(["lo"] + [a["ifname"] for a in attempted])
    assert len(env.ipam_allocations()) == len(attempted)
    env.state_dir.mkdir(mode=0o700, exist_ok=True)
    (env.state_dir / f"{cid}.json").write_text(json.dumps(state, separators=(",", ":")))

    conf = netattach_conf(env, env.root / "nowhere.kubeconfig",
                          str(env.conf_dir / "10-cluster.conf"), bin_dir,
                          deviceInfoDir=str(devinfo))
    run = del_as_the_runtime(bin_dir, conf, cid, netns, state)
    log = Path(conf["logFile"]).read_text()
    assert run.code == 0 and run.stdout == "", run.stdout + log
    assert pod_links_of(netns) == ["lo"]
    assert env.ipam_allocations() == []
    assert env.state_files() == [] and (env.state_dir / f"{cid}.deleted").exists()
    assert not (devinfo / "cni").exists() or list((devinfo / "cni").iterdir()) == []
    assert "WARNING" not in log and "ERROR" not in log and "api_requests 0" in log


def pod_links_of(netns: str) -> list[str]:
    return sorted(link["ifname"] for link in tb.links(netns))


def del_as_the_runtime(bin_dir: Path, conf: dict, cid: str, netns: str, state: dict) -> PluginRun:
    args = ";".join(f"{k}={v}" for k, v in state["cniArgs"])
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "CNI_COMMAND": "DEL", "CNI_CONTAINERID": cid,
           "CNI_NETNS": tb.netns_path(netns), "CNI_IFNAME": "eth0",
           "CNI_PATH": f"{bin_dir}:{DEBIAN_CNI_DIR}", "CNI_ARGS": args}
    p = subprocess.run([str(bin_dir / "netattach")], input=json.dumps(conf), capture_output=True,
                       text=True, env=env, timeout=120)
    return PluginRun(p.returncode, p.stdout, p.stderr)

