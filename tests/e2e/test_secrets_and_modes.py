"""No credential in any output, and the modes of what netattach writes: the built
executable, real plugins in a real netns, the real kube-apiserver.

Secrets: ADD, CHECK and DEL at logLevel debug, logged both to logFile and to stderr,
with the ServiceAccount token kubeconfig and with a client certificate + key, then
the failure paths that quote a kubeconfig: a malformed one (its token line or key
line broken), a token with a trailing newline, a key that does not load. stdout,
stderr and the log file never hold the token, a line of the key's PEM body or the
key's base64 (client-key-data). Elsewhere: a revoked token's 401 in
test_faults_api.py, the installer's log (a sha256 prefix only) in
tests/integration/test_install.py.

Modes: cniDir 0700 (its missing parents 0755) and state files 0600 even under umask
0, the lock file 0600 and gone after each operation, the log file 0600; the
installer's kubeconfig 0600 is in tests/integration/test_install.py. Symlinks planted
in cniDir are never written through; a cniDir that is itself a symlink is refused.
"""
from __future__ import annotations

import base64
import json
import os
import re
import stat
import subprocess
import uuid
from pathlib import Path

import pytest
import yaml

from netattach.node.statestore import StateStore
from netattach_testbed import cluster as cl
from netattach_testbed import scenario as sc


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def token_of(kubeconfig: Path) -> str:
    return yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]["token"]


def token_secrets(kubeconfig: Path) -> list[str]:
    return [token_of(kubeconfig)]


def key_secrets(key_pem: bytes) -> list[str]:
    """What of a private key must never be shown: its PEM body, and the whole PEM in
    base64 (client-key-data)."""
    body = "".join(line for line in key_pem.decode().splitlines() if not line.startswith("-----"))
    return [body, base64.b64encode(key_pem).decode()]


def outputs(s: sc.Scenario, runs: list[sc.PluginRun]) -> dict[str, str]:
    texts = {f"stdout of run {i}": r.stdout for i, r in enumerate(runs)}
    texts |= {f"stderr of run {i}": r.stderr for i, r in enumerate(runs)}
    return texts | {"log file": s.log_text()}


PIECE = 20
"""Characters in a row of a secret that count as showing it: messages cut long values
short (PyYAML quotes 75 characters around an error, netattach 200 of a message), and
a PEM body is shown line by line."""


def assert_not_shown(texts: dict[str, str], secrets: list[str]) -> None:
    """No PIECE characters in a row of any secret in any text; a failure names where
    and how much, never the secret."""
    pieces = {secret[i:i + PIECE] for secret in secrets for i in range(len(secret) - PIECE + 1)}
    assert pieces
    for where, text in texts.items():
        shown = sum(text[j:j + PIECE] in pieces for j in range(len(text) - PIECE + 1))
        assert not shown, f"{shown} {PIECE}-character pieces of a secret are in the {where}"


def debug_everywhere(s: sc.Scenario, kubeconfig: Path) -> dict:
    return {**s.netconf, "kubeconfig": str(kubeconfig), "logLevel": "debug", "logToStderr": True}


def test_token_never_shown_on_add_check_del(scenario, plugin_kubeconfig):
    s = scenario
    conf = debug_everywhere(s, plugin_kubeconfig)
    runs = [s.run(command, conf) for command in ("ADD", "CHECK", "DEL")]
    assert [r.code for r in runs] == [0, 0, 0], [r.stdout for r in runs]
    log = s.log_text()
    assert f"GET /api/v1/namespaces/{s.namespace}/pods/{s.pod_name} -> 200" in log  # debug on
    assert "DEBUG" in runs[0].stderr  # and on stderr too
    assert_not_shown(outputs(s, runs), token_secrets(plugin_kubeconfig))
    assert mode(Path(s.netconf["logFile"])) == 0o600


JSON_DAEMON_FLAGS = ("--log-level", "debug", "--log-format", "json", "--max-parallel", "4")


def test_json_logs_carry_pod_sandbox_network_and_never_the_token(make_scenario, mode,
                                                                  plugin_kubeconfig):
    """logFormat json (thin: the conf's key; thick: the daemon's --log-format;
    docs/configuration.md, "Logs"): every line of the log file and of stderr is one JSON
    object with its UTC time; the call's lines name its pod and sandbox (in thick mode,
    from the daemon's worker threads), and each attachment's lines (the child plugins'
    debug lines included) its network; the token is in none of them."""
    s = make_scenario(daemon_flags=JSON_DAEMON_FLAGS)
    conf = {**debug_everywhere(s, plugin_kubeconfig), "logFormat": "json"}
    runs = [s.run(command, conf) for command in ("ADD", "CHECK", "DEL")]
    assert [r.code for r in runs] == [0, 0, 0], [r.stdout for r in runs]
    texts = [s.log_text()] + [r.stderr for r in runs]
    if mode == "thick":
        texts.append(s.daemon.stderr_file.read_text())
    records = [json.loads(line) for text in texts for line in text.splitlines()]
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", r["time"])
               and r["level"] in ("debug", "info", "warning") and r["msg"] for r in records)
    calls = [r for r in records if "sandbox" in r]
    assert len(calls) > 20
    assert {(r["pod"], r["sandbox"]) for r in calls} == {(f"{s.namespace}/{s.pod_name}",
                                                          s.container_id)}
    if mode == "thin":  # only the calls log; the daemon logs its caches too
        assert calls == records
    attached = {}
    for record in calls:
        found = re.search(r": attached network (\S+) as (\S+)$", record["msg"])
        if found:
            attached[found[1]] = record["network"]
    assert len(attached) == 3 and all(k == v for k, v in attached.items()), attached
    # the children's own lines (cni/invoke.py's debug) carry the network they run for
    children = [r for r in records if re.match(r"(ADD|DEL|CHECK) \S+ ifname=\S+ rc=", r["msg"])]
    assert len(children) >= 9 and [(r["msg"], r.get("network"), r.get("sandbox"))
                                   for r in children if r.get("network") not in attached
                                   or "sandbox" not in r] == []
    assert_not_shown(outputs(s, runs), token_secrets(plugin_kubeconfig))


def cert_kubeconfig(cluster, path: Path, key_pem: bytes) -> Path:
    """The test cluster's admin client certificate and `key_pem`, embedded."""
    return cl.write_kubeconfig(path, cluster.server, ca_data=cluster.ca_file.read_bytes(), user={
        "client-certificate-data": base64.b64encode(cluster.pki["admin.crt"].read_bytes()).decode(),
        "client-key-data": base64.b64encode(key_pem).decode()}, name="admin-cert")


def test_client_key_never_shown_nor_left_on_disk(scenario, cluster, tmp_path):
    """lightkube writes client-key-data to a temp file for the TLS context: it must be
    gone when netattach exits (TMPDIR is watched), and never reach an output."""
    s = scenario
    key = cluster.pki["admin.key"].read_bytes()
    conf = debug_everywhere(s, cert_kubeconfig(cluster, tmp_path / "kc", key))
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    runs = [s.run(command, conf, env_overrides={"TMPDIR": str(tmpdir)}) for command in ("ADD", "DEL")]
    assert [r.code for r in runs] == [0, 0], [r.stdout for r in runs]
    assert "pods/" in s.log_text() and "-> 200" in s.log_text()
    assert list(tmpdir.iterdir()) == []
    assert_not_shown(outputs(s, runs), key_secrets(key))


def _broken(kubeconfig: Path, old: str, new: str) -> str:
    """The kubeconfig as YAML (a hand-written one: the test bed writes JSON, as the
    installer does) with `old` replaced by `new`, once."""
    text = yaml.safe_dump(yaml.safe_load(kubeconfig.read_text()), sort_keys=False)
    assert text.count(old) == 1
    return text.replace(old, new)


@pytest.mark.parametrize("fault", ["token line unterminated", "tab before the token",
                                   "colon after the token", "token with a trailing newline",
                                   "key line broken", "key that does not load"])
def test_failure_paths_quote_no_credential(scenario, cluster, plugin_kubeconfig, tmp_path, fault):
    """Each fails the ADD with code 11 naming the kubeconfig's path, and the DEL after it
    (no state: rebuilt from the API, which cannot be asked) with its own error; none
    shows a credential. Before the fix, PyYAML's message quoted the broken line and
    h11's quoted 'Bearer <token>'."""
    s = scenario
    token = token_of(plugin_kubeconfig)
    key = cluster.pki["admin.key"].read_bytes()
    key_data = base64.b64encode(key).decode()
    cert = cert_kubeconfig(cluster, tmp_path / "cert.kubeconfig", key)
    path = tmp_path / "broken.kubeconfig"
    secrets = token_secrets(plugin_kubeconfig)
    if fault == "token line unterminated":
        text = _broken(plugin_kubeconfig, f"token: {token}", f'token: "{token}')
    elif fault == "tab before the token":
        text = _broken(plugin_kubeconfig, f"token: {token}", f"\ttoken: {token}")
    elif fault == "colon after the token":
        text = _broken(plugin_kubeconfig, f"token: {token}", f"token: {token}: x")
    elif fault == "token with a trailing newline":  # a YAML block scalar keeps it
        text = _broken(plugin_kubeconfig, f"token: {token}", f"token: |\n      {token}")
    elif fault == "key line broken":
        text = _broken(cert, f"client-key-data: {key_data}", f"client-key-data: {key_data}: x")
        secrets = key_secrets(key)
    else:  # the PEM's body cut short: the TLS context cannot load it
        broken = key.replace(key.splitlines()[2], b"")
        text = _broken(cert, key_data, base64.b64encode(broken).decode())
        secrets = key_secrets(broken)
    path.write_text(text)
    path.chmod(0o600)
    conf = debug_everywhere(s, path)
    runs = [s.run("ADD", conf), s.run("DEL", conf)]
    assert runs[0].code == 1 and runs[0].doc["code"] == 11, runs[0].stdout
    assert (str(path) if "newline" not in fault else "Illegal header value") in runs[0].doc["msg"]
    assert all(r.code in (0, 1) and "Traceback" not in r.stderr for r in runs)
    assert_not_shown(outputs(s, runs), secrets)
    assert sc.pod_links(s) == ["lo"]  # nothing attached


# ---------------------------------------------------------------- modes


def run_with_umask_0(s: sc.Scenario, command: str, conf: dict) -> sc.PluginRun:
    p = subprocess.run(["sh", "-c", 'umask 0 && exec "$0"', str(s.bin_dir / "netattach")],
                       input=json.dumps(conf), env=s.cni_env(command), capture_output=True,
                       text=True, timeout=120)
    return sc.PluginRun(p.returncode, p.stdout, p.stderr)


def test_modes_under_umask_0(scenario, tmp_path):
    """A runtime may exec plugins with any umask: what netattach creates has its own
    modes, and no lock file outlives an operation."""
    s = scenario
    fresh = tmp_path / "fresh"
    cni_dir = fresh / "var" / "lib" / "cni" / "netattach"
    log = fresh / "netattach.log"
    fresh.mkdir()
    conf = {**s.netconf, "cniDir": str(cni_dir), "logFile": str(log)}
    run = run_with_umask_0(s, "ADD", conf)
    assert run.code == 0, run.stdout + run.stderr
    assert [mode(p) for p in (fresh / "var", fresh / "var" / "lib", cni_dir.parent)] == [0o755] * 3
    assert mode(cni_dir) == 0o700 and mode(log) == 0o600
    assert [(p.name, mode(p)) for p in cni_dir.iterdir()] == [(f"{s.container_id}.json", 0o600)]
    run = run_with_umask_0(s, "DEL", conf)
    assert run.code == 0, run.stdout + run.stderr
    assert sorted((p.name, mode(p)) for p in cni_dir.iterdir()) == [  # the tombstone
        (".tombstones-pruned", 0o600), (f"{s.container_id}.deleted", 0o600)]
    assert mode(cni_dir) == 0o700


def test_lock_file_is_0600_while_held(tmp_path):
    """The lock file exists only during an operation; the test above cannot see it."""
    old = os.umask(0)
    try:
        store = StateStore(str(tmp_path / "cni"))
        with store.lock("c1"):
            assert mode(tmp_path / "cni" / "c1.lock") == 0o600
    finally:
        os.umask(old)
    assert list((tmp_path / "cni").iterdir()) == []


# ---------------------------------------------------------------- symlinks


@pytest.fixture
def victim(tmp_path) -> Path:
    """A file outside cniDir that a planted link points at (a stand-in for /etc/...)."""
    path = tmp_path / "victim"
    path.write_text("keep")
    path.chmod(0o644)
    return path


def assert_untouched(victim: Path) -> None:
    assert victim.read_text() == "keep" and mode(victim) == 0o644


def test_link_planted_at_the_state_file_is_replaced_not_followed(scenario, victim):
    s = scenario
    state = s.env.state_dir / f"{s.container_id}.json"
    state.symlink_to(victim)
    run = s.run("ADD")
    assert run.code == 0, run.stdout + s.log_text()
    assert_untouched(victim)
    assert not state.is_symlink() and mode(state) == 0o600
    assert json.loads(state.read_text())["containerID"] == s.container_id
    assert s.run("DEL").code == 0
    assert s.env.state_files() == [] and s.env.ipam_allocations() == []


def test_link_planted_at_the_lock_file_refuses_add_and_del(scenario, victim):
    s = scenario
    lock = s.env.state_dir / f"{s.container_id}.lock"
    lock.symlink_to(victim)
    for command in ("ADD", "DEL"):
        run = s.run(command)
        assert run.code == 1 and run.doc["code"] == 5, run.stdout
        assert f"cannot open lock file {lock}" in run.doc["msg"]
    assert_untouched(victim)
    assert sc.pod_links(s) == ["lo"] and s.env.ipam_allocations() == []
    lock.unlink()


def test_link_swapped_in_for_the_state_file_before_del(scenario, victim):
    """DEL does not read through it (O_NOFOLLOW): the state is rebuilt from the API, every
    attachment is released, and the link itself is removed."""
    s = scenario
    assert s.run("ADD").code == 0, s.log_text()
    state = s.env.state_dir / f"{s.container_id}.json"
    victim.write_text(state.read_text())  # a whole state: followed, it would be used
    victim.chmod(0o644)
    saved = victim.read_text()
    state.unlink()
    state.symlink_to(victim)
    run = s.run("DEL")
    assert run.code == 0, run.stdout + s.log_text()
    assert f"cannot open state file {state}" in s.log_text()
    assert victim.read_text() == saved and mode(victim) == 0o644
    assert not os.path.lexists(state)
    assert sc.pod_links(s) == ["lo"] and s.env.ipam_allocations() == []


def test_cni_dir_that_is_a_symlink_is_refused(scenario, tmp_path):
    """Decision: cniDir itself must be a real directory (its parents may be links), so a
    link swapped in for it cannot send state elsewhere. Code 5 names it; point cniDir at
    the real path."""
    s = scenario
    real = tmp_path / f"elsewhere-{uuid.uuid4().hex[:6]}"
    real.mkdir(mode=0o700)
    link = tmp_path / "cni-link"
    link.symlink_to(real)
    conf = {**s.netconf, "cniDir": str(link)}
    for command in ("ADD", "DEL"):
        run = s.run(command, conf)
        assert run.code == 1 and run.doc["code"] == 5, run.stdout
        assert f"state dir {link} is not a directory (symlink or file)" in run.doc["msg"]
    assert list(real.iterdir()) == []
    assert sc.pod_links(s) == ["lo"] and s.env.ipam_allocations() == []
