"""Fault 5: the saved state is missing, truncated or corrupt when DEL comes.

Real plugins in a real netns, the real kube-apiserver, the built executable. DEL
rebuilds from the API when it can; else it releases what it can read (the
attachments still whole in a damaged file, else the cluster default network from
the current config) and the log says what was not released. A damaged file is
kept aside as `<id>.json.corrupt`. While the API server cannot be asked, DEL
fails with code 11 so the runtime retries, until `delete.DEL_RETRY_WINDOW`.

The tests that rebuild from the API run in both modes (the `mode` fixture,
tests/e2e/conftest.py): in thick mode the daemon rebuilds from its watch caches, so
with the API server down it still releases everything at once (what the thick variant
asserts); with the pod deleted, once its watch delivered the deletion, it does what
thin mode does.
"""
from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from kubernetes import client as k8s

from netattach.commands.delete import DEL_RETRY_WINDOW
from netattach_testbed import cluster as cl
from netattach_testbed import faults
from netattach_testbed import scenario as sc


def state_path(s: sc.Scenario) -> Path:
    return s.env.state_dir / f"{s.container_id}.json"


def allocated(s: sc.Scenario) -> list[str]:
    """The host-local networks ("cluster-net", "net-a", "net-b") holding an address, one
    entry per address, sorted."""
    return sorted(p.parent.name for p in s.env.ipam_allocations())


def kubeconfig_to_a_closed_port(s: sc.Scenario) -> dict:
    """The scenario's netattach conf with a kubeconfig whose server refuses connections."""
    path = s.env.root / "down.kubeconfig"
    cl.write_kubeconfig(path, f"https://127.0.0.1:{cl.free_port()}", user={"token": "x"})
    return {**s.netconf, "kubeconfig": str(path)}


def add(s: sc.Scenario) -> bytes:
    """ADD the scenario's pod (eth0, net1, data0); returns the saved state file's bytes."""
    run = s.run("ADD")
    assert run.code == 0, run.stdout + s.log_text()
    assert sc.pod_links(s) == ["data0", "eth0", "lo", "net1"]
    assert allocated(s) == ["cluster-net", "net-a", "net-b"]
    s.settle()  # thick: the daemon rewrites the state once its PATCH is sent
    return state_path(s).read_bytes()


def cut_before(raw: bytes, ifname: str) -> bytes:
    """The state cut inside the attachment of `ifname`: the ones before it stay whole."""
    return raw[:raw.index(f'"ifname":"{ifname}"'.encode())]


DAMAGE = {
    "truncated": lambda raw: cut_before(raw, "net1"),    # eth0's attachment still whole
    "zero-filled": lambda raw: b"\0" * len(raw),         # what a crash can leave on ext4
    "foreign": lambda raw: b'{"format": 1, "note": "written by someone else"}',
}


def assert_clean_with_damaged_kept(s: sc.Scenario, damaged: bytes) -> None:
    """Nothing of the pod is left but its damaged state, kept aside (0600) as it was."""
    assert sc.pod_links(s) == ["lo"] and allocated(s) == []
    assert s.env.state_files() == [f"{s.container_id}.json.corrupt"]
    aside = s.env.state_dir / f"{s.container_id}.json.corrupt"
    assert aside.read_bytes() == damaged
    assert stat.S_IMODE(aside.stat().st_mode) == 0o600


@pytest.mark.parametrize("damage", DAMAGE)
def test_damaged_state_with_the_api_up_is_rebuilt_and_kept_aside(make_scenario, damage):
    s = make_scenario()
    damaged = DAMAGE[damage](add(s))
    state_path(s).write_bytes(damaged)
    run = s.run("DEL")
    assert run.code == 0 and run.stdout == "", run.stdout + s.log_text()
    assert_clean_with_damaged_kept(s, damaged)
    log = s.log_text()
    assert f"ERROR netattach: container {s.container_id} (pod {s.namespace}/{s.pod_name}): " \
           f"state file {state_path(s)}" in log
    assert f"moved to {state_path(s)}.corrupt" in log
    read = ", 1 of them as read from the saved state" if damage == "truncated" else ""
    assert f"saved state damaged; DEL rebuilt from the API (3 attachments{read})" in log


# Thin-only: the daemon does not use the conf's kubeconfig, and reading the cut file is the
# orchestrator's code in both modes (the daemon's DEL of a damaged file: the test above).
def test_state_cut_after_its_attachments_is_used_without_the_api(scenario):
    """Only the end of the file is lost: every attachment is whole in it, so DEL releases
    all of them as the ADD ran them, with the API server unreachable and not asked."""
    s = scenario
    raw = add(s)
    damaged = raw[:raw.rindex(b',"format"')]
    state_path(s).write_bytes(damaged)
    run = s.run("DEL", kubeconfig_to_a_closed_port(s))
    assert run.code == 0, run.stdout + s.log_text()
    assert_clean_with_damaged_kept(s, damaged)
    log = s.log_text()
    assert "3 attachment(s) readable in it (all of them: DEL uses them)" in log
    assert "timing: DEL took" in log and log.rstrip().endswith("api_requests 0")


@pytest.mark.parametrize("damage", ["missing", "zero-filled"])
def test_lost_state_and_api_down_releases_the_primary_then_the_rest_when_the_api_answers(
        make_scenario, cluster, mode, damage):
    """Nothing readable and no API: DEL releases the cluster default network from the
    current config (eth0), logs that the rest is not released, and fails with 11 so the
    runtime retries; the retry once the API answers releases everything.

    Thick mode: the API server is stopped (SIGSTOP), but the daemon's caches still hold
    the pod and its NADs: the DEL rebuilds from them and releases everything at once,
    with no live read."""
    s = make_scenario()
    raw = add(s)
    if damage == "missing":
        state_path(s).unlink()
    else:
        state_path(s).write_bytes(DAMAGE[damage](raw))
    if mode == "thick":
        sc.writes_sent(s)  # the ADD's PATCH and events: not in flight when the API stops
        live = s.daemon.metric("netattach_api_requests_total", source="operation")
        with faults.apiserver_frozen(cluster):
            run = s.run("DEL")
        assert run.code == 0 and run.stdout == "", run.stdout + s.log_text()
        assert sc.pod_links(s) == ["lo"] and allocated(s) == []
        left = [] if damage == "missing" else [f"{s.container_id}.json.corrupt"]
        assert s.env.state_files() == left
        assert "DEL rebuilt from the API (3 attachments" in s.log_text()
        assert s.daemon.metric("netattach_api_requests_total", source="operation") == live
        return
    run = s.run("DEL", kubeconfig_to_a_closed_port(s))
    assert run.code == 1 and run.doc["code"] == 11, run.stdout + s.log_text()
    pod = f"{s.namespace}/{s.pod_name}"
    assert run.doc["msg"].startswith(f"pod {pod} (container {s.container_id}): DEL incomplete: "
                                     "released cluster-net (eth0)")
    assert "unreachable" in run.doc["msg"]
    assert sc.pod_links(s) == ["data0", "lo", "net1"]
    assert allocated(s) == ["net-a", "net-b"]
    why = ("saved state damaged" if damage != "missing" else
           "no saved state (its ADD failed or never ran, or the state was lost)")
    assert (f"ERROR netattach: container {s.container_id} (pod {pod}): {why} and the plan "
            "cannot be rebuilt") in s.log_text()
    assert ("DEL releases only what it knows: cluster-net (eth0); any other attachment of the "
            "pod is unknown and NOT released") in s.log_text()
    assert state_path(s).exists()  # what is known, for the retry

    run = s.run("DEL")
    assert run.code == 0, run.stdout + s.log_text()
    assert sc.pod_links(s) == ["lo"] and allocated(s) == []
    left = [] if damage == "missing" else [f"{s.container_id}.json.corrupt"]
    assert s.env.state_files() == left
    assert "DEL rebuilt from the API (3 attachments" in s.log_text()


# Thin-only: in thick mode the daemon's cache answers while the API server is down (the
# test above), so the retry window is not reached.
def test_truncated_state_and_api_down_gives_up_after_the_retry_window(scenario):
    """eth0 and net1 are whole in the file: both are released at once, exactly as added;
    data0 is unknown. After DEL_RETRY_WINDOW without the API, DEL succeeds and the log
    says what stays allocated."""
    s = scenario
    state_path(s).write_bytes(cut_before(add(s), "data0"))
    down = kubeconfig_to_a_closed_port(s)
    run = s.run("DEL", down)
    assert run.code == 1 and run.doc["code"] == 11, run.stdout + s.log_text()
    assert f"released cluster-net (eth0), {s.namespace}/net-a (net1), but" in run.doc["msg"]
    assert sc.pod_links(s) == ["data0", "lo"] and allocated(s) == ["net-b"]

    pending = json.loads(state_path(s).read_bytes())
    assert [a["ifname"] for a in pending["attachments"]] == ["eth0", "net1"]
    # the window has passed: it is measured on CLOCK_MONOTONIC (this boot's), the wall
    # clock only names its start
    assert pending["delPending"]["boot"] == Path("/proc/sys/kernel/random/boot_id") \
        .read_text().strip()
    pending["delPending"]["monotonic"] -= DEL_RETRY_WINDOW
    state_path(s).write_text(json.dumps(pending))
    run = s.run("DEL", down)
    assert run.code == 0 and run.stdout == "", run.stdout + s.log_text()
    assert s.env.state_files() == [f"{s.container_id}.json.corrupt"]
    assert (f"container {s.container_id} (pod {s.namespace}/{s.pod_name}): the API server could "
            "not be asked for") in s.log_text()
    assert (f"DEL gives up: released cluster-net (eth0), {s.namespace}/net-a (net1); any other "
            "attachment of the pod is NOT released and its addresses stay allocated") \
        in s.log_text()
    assert allocated(s) == ["net-b"]  # the leak the log names


def test_no_state_and_the_pod_gone_releases_the_primary_and_succeeds(make_scenario, admin_api):
    """The API answers that the pod is gone: waiting cannot help, so DEL releases the
    cluster default network and succeeds at once, with a warning naming what is left.
    (Thick mode: once the daemon's watch delivered the deletion, its cache has no pod
    and the live read says 404.)"""
    s = make_scenario()
    add(s)
    state_path(s).unlink()
    k8s.CoreV1Api(admin_api).delete_namespaced_pod(s.pod_name, s.namespace,
                                                   grace_period_seconds=0)
    if s.daemon is not None:
        s.daemon.wait_cache_event("Pod", s.namespace, s.pod_name, "DELETED")
    run = s.run("DEL")
    assert run.code == 0 and run.stdout == "", run.stdout + s.log_text()
    assert sc.pod_links(s) == ["data0", "lo", "net1"]
    assert allocated(s) == ["net-a", "net-b"]
    assert s.env.state_files() == []
    assert (f"WARNING netattach: container {s.container_id} (pod {s.namespace}/{s.pod_name}): "
            "no saved state (its ADD failed or never ran, or the state was lost) and the plan "
            "cannot be rebuilt") in s.log_text()
    assert "not found in the API server" in s.log_text()
    assert "DEL releases only what it knows: cluster-net (eth0)" in s.log_text()
