"""The installer's watch loop: one `Installer` per node keeps the binary, the
kubeconfig and our conflist current every --poll-interval, holds the presence lock
that lets installers overlap during a rolling update, and stops between steps on
SIGTERM/SIGINT.

Signals only set a flag; the loop acts on it between steps, so a removal never
interleaves with a write.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
import json
import logging
import os
import re
import select
import signal
import time
from collections.abc import Callable
from typing import Any

from ..node import atomicfile, nodefiles
from .binary import (
    BIN_TEMP,
    BINARY_NAME,
    SHIM_NAME,
    SHIM_PYTHON,
    binary_problem,
    default_source,
    install_binary,
    install_shim,
    shim_problem,
    shim_script,
)
from .conf_keys import check_entry, load_document
from .files import InstallError, ensure_dir, read_regular, remove_stale_temps, replace_if_changed
from .kubeconfig import (
    CA_NAME,
    KUBECONFIG_SUBDIR,
    ServiceAccount,
    api_server_url,
    read_service_account,
    render_kubeconfig,
)
from .primary import (
    CONF_NAME,
    Lookup,
    PluginSettings,
    Primary,
    find_primary,
    plugin_settings,
    render_conflist,
)
from .uninstall import (
    ASK_AGAIN,
    DONE,
    Verdict,
    ask,
    at_start,
    decide,
    remove_files,
    retired_conflist,
    state_dir_mounted,
)

log = logging.getLogger(__name__)

LOCK_NAME = nodefiles.PRESENCE_LOCK_NAME  # in KUBECONFIG_SUBDIR: a shared flock per installer
WAIT_LOG_SECONDS = 10.0


class Stop:
    """SIGTERM/SIGINT set `signum`; `sleep` wakes early on them (self-pipe via
    signal.set_wakeup_fd). The handler does nothing else, so no step is interrupted
    halfway: the loop checks `signum` between steps."""

    def __init__(self) -> None:
        self.signum = 0
        self._r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(w)
        for s in (signal.SIGTERM, signal.SIGINT):
            signal.signal(s, self._handle)

    def _handle(self, signum: int, _frame: Any) -> None:
        self.signum = signum

    def sleep(self, seconds: float) -> None:
        if not self.signum:
            select.select([self._r], [], [], seconds)
        with contextlib.suppress(BlockingIOError):
            os.read(self._r, 512)


@dataclasses.dataclass
class _StartRule:
    """The rule asked after the start (Installer.start_rule): when first asked, the last
    answer, how many tries in a row answered a sure uninstall, and whether it needs
    asking no more."""
    first_at: float | None = None
    verdict: Verdict | None = None
    sure_in_a_row: int = 0
    done: bool = False


class _Every:
    """Rate limit for repeated messages: `due(key)` is true when `key` differs from the
    last one or `seconds` have passed since it was last true."""

    def __init__(self, seconds: float) -> None:
        self.seconds, self._key, self._at = seconds, None, 0.0

    def due(self, key: Any) -> bool:
        now = time.monotonic()
        if key != self._key or now - self._at >= self.seconds:
            self._key, self._at = key, now
            return True
        return False


# ---------------------------------------------------------------- the installer

class Installer:
    """One node's installation, from the parsed arguments (netattach.install.add_arguments)."""

    def __init__(self, args: argparse.Namespace, environ: dict[str, str]):
        for attr in ("bin_dir", "conf_dir"):  # absolute, so that every log line says where
            setattr(args, attr, os.path.abspath(getattr(args, attr)))
        self.args = args
        self.environ = environ
        self.source = args.source or default_source()
        self.conf_path = os.path.join(args.conf_dir, CONF_NAME)
        self.kube_dir = os.path.join(args.conf_dir, KUBECONFIG_SUBDIR)
        self.kube_path = os.path.join(self.kube_dir, args.kubeconfig_name)
        self.ca_path = os.path.join(self.kube_dir, CA_NAME)
        self.settings = plugin_settings(
            args, os.path.join(args.host_conf_dir, KUBECONFIG_SUBDIR, args.kubeconfig_name),
            SHIM_NAME if args.mode == "thick" else BINARY_NAME)
        self.artifact_digest: str | None = None
        """binary.tree_digest of the source when known (the record's: --check)."""
        self._document: dict[str, Any] | None = None
        self._token_id: str | None = None
        self._conf_primary: str | None = None
        self._conf_written: bytes | None = None
        self._warned_before: set[str] = set()
        self._wait_log = _Every(WAIT_LOG_SECONDS)
        self._error_log = _Every(WAIT_LOG_SECONDS)

    # -- paths

    def explicit_primary(self) -> str | None:
        """--primary-config as a path here: a bare name is in --conf-dir."""
        p = self.args.primary_config
        if not p:
            return None
        return os.path.abspath(p) if "/" in p else os.path.join(self.args.conf_dir, p)

    def host_path(self, path: str) -> str:
        """`path` (here) as the host sees it: under --conf-dir -> under --host-conf-dir;
        anything else is assumed mounted at the same path."""
        conf_dir = os.path.normpath(self.args.conf_dir)
        path = os.path.normpath(path)
        if path.startswith(conf_dir + os.sep):
            return os.path.join(self.args.host_conf_dir, os.path.relpath(path, conf_dir))
        return path

    # -- desired state

    def desired_kubeconfig(self) -> tuple[bytes, ServiceAccount]:
        """Raises InstallError (no API server, token or CA)."""
        sa = read_service_account(self.args.service_account_dir)
        return render_kubeconfig(api_server_url(self.args.api_server, self.environ), sa,
                                 self.host_path(self.ca_path)), sa

    def conf_settings(self) -> PluginSettings:
        """The settings with the keys of --netconf-file, read now (kubelet updates a
        mounted ConfigMap in place). Raises InstallError (conf_keys.load_document)."""
        path = self.args.netconf_file
        if not path:
            return self.settings
        document = load_document(path, self.args.mode == "thick")
        if self._document is not None and document != self._document:
            log.info("the keys of --netconf-file %s changed: %s", path,
                     ", ".join(sorted(document)) or "none")
        self._document = document
        return dataclasses.replace(self.settings, extra=document)

    def check_settings(self, cni_version: str, primary_host_path: str) -> PluginSettings:
        """conf_settings(), checked with the plugin's own rules for a conflist of
        `cni_version` whose clusterNetwork is `primary_host_path` (conf_keys.check_entry).
        Raises InstallError naming the key; in thick mode also when --host-bin-dir cannot
        go into the shim's `#!` line (binary.shim_script)."""
        if self.args.mode == "thick":
            shim_script(os.path.join(self.args.host_bin_dir, ".netattach-" + "0" * 12,
                                     SHIM_PYTHON))
        settings = self.conf_settings()
        check_entry(self.settings.plugin_entry(primary_host_path),
                    settings.plugin_entry(primary_host_path), cni_version,
                    self.args.netconf_file or None)
        return settings

    def desired_conf(self) -> tuple[bytes | None, Lookup]:
        """(our conflist's bytes, lookup) or (None, lookup saying why there is no primary).
        Raises InstallError when the settings are refused (check_settings)."""
        found = find_primary(self.args.conf_dir, self.explicit_primary())
        early = [n for n in found.skipped if n < CONF_NAME]
        if found.primary and os.path.dirname(found.primary.path) == os.path.normpath(
                self.args.conf_dir) and os.path.basename(found.primary.path) < CONF_NAME:
            early.append(os.path.basename(found.primary.path))
        for name in early:
            if name not in self._warned_before:
                self._warned_before.add(name)
                log.warning("%s sorts before %s in %s: the runtime loads it, not netattach; "
                            "rename it, or give the runtime a conf dir of its own (multi-net "
                            "spec §6.1.1)", name, CONF_NAME, self.args.conf_dir)
        if found.primary is None:
            return None, found
        host_path = self.host_path(found.primary.path)
        settings = self.check_settings(found.primary.cni_version, host_path)
        return render_conflist(host_path, found.primary, settings), found

    # -- one pass of each step

    def sync_binary(self) -> None:
        """Install the artifact, or warn that there is none to install."""
        if self.source is None:
            log.warning("not a frozen build and no --source: %s/%s is not installed or updated",
                        self.args.bin_dir, BINARY_NAME)
            return
        ensure_dir(self.args.bin_dir, 0o755)
        for path in remove_stale_temps(self.args.bin_dir, BIN_TEMP):
            log.info("removed stale temp %s", path)
        try:
            install_binary(os.path.abspath(self.source), self.args.bin_dir)
            if self.args.mode == "thick":
                install_shim(self.args.bin_dir, self.args.host_bin_dir)
        except OSError as e:
            raise InstallError(f"cannot install {self.source} into {self.args.bin_dir}: "
                               f"{e.strerror or e}") from None

    def sync_kubeconfig(self) -> None:
        """Write the kubeconfig when it differs from what the ServiceAccount gives now
        (token rotated, CA changed, file deleted or edited). Raises InstallError."""
        data, sa = self.desired_kubeconfig()
        ensure_dir(self.kube_dir, 0o700, own=True)
        if replace_if_changed(self.ca_path, sa.ca, 0o644, "CA")[0]:  # before the kubeconfig
            log.info("wrote the API server's CA to %s", self.ca_path)
        if replace_if_changed(self.kube_path, data, 0o600, "kubeconfig")[0]:
            if self._token_id is None:
                log.info("wrote kubeconfig %s (token sha256 %s…)", self.kube_path, sa.token_id())
            elif self._token_id != sa.token_id():
                log.info("ServiceAccount token rotated (sha256 %s… -> %s…): rewrote %s",
                         self._token_id, sa.token_id(), self.kube_path)
            else:
                log.info("kubeconfig %s was deleted or edited: rewrote it", self.kube_path)
        self._token_id = sa.token_id()

    def sync_conf(self) -> bool:
        """Make our conflist match the primary; True when it is in place. With no primary
        config at all, ours is removed; with a primary not usable yet, ours is left as it
        is. Raises InstallError on write failures."""
        data, found = self.desired_conf()
        if found.primary is None or data is None:
            if self._wait_log.due(found.why):
                log.info("waiting: %s", found.why)
            if found.absent:
                self.remove_conf("there is no cluster default network config any more")
            return False
        primary = found.primary.path
        written, current = replace_if_changed(self.conf_path, data, 0o644, "conflist")
        if written:
            if self._conf_primary not in (None, primary):
                log.info("the cluster default network is now %s (was %s): rewrote %s",
                         primary, self._conf_primary, self.conf_path)
            elif self._conf_primary is None:
                log.info("wrote %s for the cluster default network %s", self.conf_path, primary)
            elif current is None:
                log.info("%s was deleted: rewrote it", self.conf_path)
            elif current == self._conf_written:
                log.info("%s or the settings changed: rewrote %s", primary, self.conf_path)
            else:
                log.warning("%s was edited by someone else: rewrote it. The installer owns "
                            "this file: set netattach's conf keys with its flags or "
                            "--netconf-file (a ConfigMap; docs/install.md, \"Conf keys\")",
                            self.conf_path)
        self._conf_primary, self._conf_written = primary, data
        return True

    def remove_conf(self, why: str) -> None:
        """Remove our conflist (only ours), fsync the dir; log `why`."""
        try:
            os.unlink(self.conf_path)
        except FileNotFoundError:
            return
        except OSError as e:
            log.error("cannot remove %s: %s", self.conf_path, e.strerror)
            return
        with contextlib.suppress(OSError):
            atomicfile.fsync_dir(self.args.conf_dir)
        self._conf_primary = None
        log.info("removed %s: %s", self.conf_path, why)

    # -- installers side by side (DaemonSet rolling update with maxSurge)

    def hold_presence(self) -> int:
        """Take a shared flock on <conf-dir>/netattach.d/installer.lock for this
        installer's lifetime and return its fd. A new installer starting while the old
        one still runs (maxSurge) holds one too, so the old one's stop can tell it is
        not the last and leave everything to its successor; and netattach's files are
        never removed while an installer holds it (nodefiles.remove_when_unused takes it
        exclusively, without waiting). The flock waits while an old installer stops or
        a removal runs; a lock file removed meanwhile (with netattach's files) is made
        afresh. Raises InstallError when the lock file cannot be opened."""
        path = os.path.join(self.kube_dir, LOCK_NAME)
        while True:
            ensure_dir(self.kube_dir, 0o700, own=True)
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
            except OSError as e:
                raise InstallError(f"cannot open {path}: {e.strerror}") from None
            fcntl.flock(fd, fcntl.LOCK_SH)
            if nodefiles.still_there(fd, path):
                break
            os.close(fd)
            log.info("netattach's files were removed from this node while this installer "
                     "started; installing afresh")
        log.info("running; presence held on %s", path)
        return fd

    def last_one_out(self, fd: int) -> bool:
        """True when no other installer holds the presence lock (ours turns exclusive)."""
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    # -- modes

    def check(self) -> int:
        """--check: 0 iff the binary, the kubeconfig and our conflist are present and
        current; each problem is logged. No writes."""
        problems = []
        problem = binary_problem(self.source, self.args.bin_dir, self.artifact_digest)
        if problem:
            problems.append(problem)
        elif self.args.mode == "thick":
            problem = shim_problem(self.args.bin_dir, self.args.host_bin_dir)
            if problem:
                problems.append(problem)
        try:
            data, sa = self.desired_kubeconfig()
            if read_regular(self.kube_path) != data:
                problems.append(f"kubeconfig {self.kube_path} is missing or not current")
            if read_regular(self.ca_path) != sa.ca:
                problems.append(f"CA {self.ca_path} is missing or not current")
        except (InstallError, OSError) as e:
            problems.append(str(e))
        try:
            conf, found = self.desired_conf()
            if conf is None:
                problems.append(found.why)
            elif read_regular(self.conf_path) != conf:
                problems.append(f"{self.conf_path} is missing or not current")
        except InstallError as e:
            problems.append(str(e))
        except OSError as e:
            problems.append(f"cannot read {self.conf_path}: {e.strerror}")
        for p in problems:
            log.error("not ready: %s", p)
        return 1 if problems else 0

    def _retrying(self, step: Callable[[], Any]) -> Any:
        """Run one step of the watch loop; an InstallError or OSError is logged
        (rate-limited) and the step retried at the next poll. Returns the step's result,
        False on error."""
        try:
            return step()
        except (InstallError, OSError) as e:
            if self._error_log.due(str(e)):
                log.error("%s; retrying every %g s", e, self.args.poll_interval)
            return False

    def serve(self, stop: Stop) -> int:
        """Install, then (unless --once) keep everything current until a signal.

        Returns the exit status: 0 on a signal (after cleanup) or a completed --once,
        1 when the primary did not appear within --primary-timeout or --once was
        interrupted. Raises InstallError for failures at startup.
        """
        a = self.args
        ensure_dir(a.conf_dir, 0o755)
        for path in remove_stale_temps(a.conf_dir, re.compile(rf"^\.{re.escape(CONF_NAME)}\.tmp-")):
            log.info("removed stale temp %s", path)
        for path in remove_stale_temps(self.kube_dir, re.compile(r"^\..*\.tmp-\d+$")):
            log.info("removed stale temp %s", path)
        presence = None if a.once else self.hold_presence()
        self.note_retired()
        self.sync_binary()
        self.sync_kubeconfig()
        waiting_since: float | None = None
        rule = None if presence is None or not a.cleanup_on_exit else _StartRule()
        while not stop.signum:
            self._retrying(self.sync_kubeconfig)
            ready = self._retrying(self.sync_conf)
            if ready:
                waiting_since = None
                if rule is not None and not rule.done:  # once installed: an API server
                    assert presence is not None      # late to answer never delays it
                    retired = self.start_rule(rule, presence)
                    if retired is not None:
                        return self.idle_retired(stop, retired)
                if a.once:
                    log.info("installed; exiting (--once)")
                    return 0
            else:
                waiting_since = waiting_since or time.monotonic()
                if time.monotonic() - waiting_since > a.primary_timeout:
                    log.error("gave up after %g s (--primary-timeout) waiting for the cluster "
                              "default network's config in %s; exiting 1 so that the pod "
                              "restarts", a.primary_timeout, a.conf_dir)
                    return 1
            stop.sleep(a.poll_interval)
        name = signal.Signals(stop.signum).name
        if a.once:
            log.error("%s before the installation completed; exiting 1", name)
            return 1
        if not a.cleanup_on_exit:
            log.info("%s received; leaving netattach installed (--no-cleanup-on-exit)", name)
            return 0
        assert presence is not None
        deadline = time.monotonic() + a.uninstall_timeout
        verdict = decide(self.ask_uninstalled, lambda: not self.last_one_out(presence),
                         a.uninstall_timeout)
        if not verdict.uninstall:
            log.info("%s received; netattach stays installed on this node: %s", name,
                     verdict.reason)
            return 0
        log.info("%s received; netattach is uninstalled: %s", name, verdict.reason)
        self.retire(presence, deadline)
        return 0

    # -- uninstall (uninstall.py)

    def daemonset_ref(self, sa: ServiceAccount | None) -> tuple[str, str]:
        """(namespace, name) of this installer's DaemonSet: the pod's namespace (the
        ServiceAccount volume's), kube-system when it has none; --daemonset."""
        return (sa.namespace if sa and sa.namespace else "kube-system"), self.args.daemonset

    def ask_uninstalled(self, budget: float) -> Verdict:
        """One try of the uninstall rule (uninstall.judge) with the ServiceAccount's token
        as it is now, within `budget` seconds."""
        try:
            sa = read_service_account(self.args.service_account_dir)
            server = api_server_url(self.args.api_server, self.environ)
        except InstallError as e:
            return Verdict(None, str(e))
        namespace, name = self.daemonset_ref(sa)
        return ask(server, sa, namespace, name, budget)

    def check_uninstall_rule(self) -> Verdict:
        """At start, one try of the rule, logged: a stop now would keep netattach or
        could not be told (INFO), or would be taken for an uninstall, which a wrong
        --daemonset or missing RBAC cause (WARNING). Returns the verdict."""
        verdict = self.ask_uninstalled(min(self.args.uninstall_timeout, 5.0))
        if verdict.uninstall is False:
            log.info("a stop of this installer keeps netattach on the node: %s",
                     verdict.reason)
        elif verdict.uninstall and verdict.sure:
            log.info("netattach is uninstalled: %s", verdict.reason)
        elif verdict.uninstall:
            log.warning("a stop of this installer would be taken for an uninstall: %s; "
                        "check --daemonset and the RBAC of deploy/base/rbac.yaml (Role "
                        "netattach-installer)", verdict.reason)
        else:  # asked again at the stop; a misconfiguration answers, and is warned of
            log.info("a stop of this installer could not be told from an uninstall now, "
                     "for want of an answer (%s): it would keep netattach on the node",
                     verdict.reason)
        return verdict

    def start_rule(self, rule: _StartRule, presence: int) -> str | None:
        """One step of the rule after the start (uninstall.at_start), a try each poll until
        it is done: the first (check_uninstall_rule), then again while an uninstall
        answer may be a misconfiguration's, no answer came, or a sure uninstall waits for
        its second try in a row or for the other installers of the node. On a sure
        uninstall said twice in a row, the last time now, retire the node, once this
        installer is the last one on it (another one stopping keeps the files for us).
        Returns why the node was retired (or found retired by another), else None."""
        now = time.monotonic()
        if rule.first_at is None:
            rule.first_at, verdict = now, self.check_uninstall_rule()
        else:
            verdict = self.ask_uninstalled(min(self.args.uninstall_timeout, 5.0))
            if verdict.uninstall is not None and verdict != rule.verdict:
                log.info("asked again: %s", verdict.reason)
        if verdict.uninstall is not None or rule.verdict is None:
            rule.verdict = verdict
        sure = bool(verdict.uninstall and verdict.sure)
        rule.sure_in_a_row = rule.sure_in_a_row + 1 if sure else 0
        action = at_start(rule.verdict, now - rule.first_at, rule.sure_in_a_row)
        if action == DONE:
            rule.done = True
            return None
        if action == ASK_AGAIN:
            return None
        if not self.last_one_out(presence):  # the conversion dropped our shared lock
            fcntl.flock(presence, fcntl.LOCK_SH)
            if nodefiles.still_there(presence, os.path.join(self.kube_dir, LOCK_NAME)):
                if self._wait_log.due("retire"):
                    log.info("another netattach installer runs on this node; retiring it "
                             "once that one stops")
                return None
            os.close(presence)  # removed with netattach's files: another one retired it
            return "another installer removed netattach's files"
        log.info("retiring this node now, not at this installer's stop, which may never "
                 "be signalled (a signal sent while it started is lost; "
                 "docs/install-lifecycle.md, \"An uninstall while an installer starts\")")
        self.retire(presence, now + self.args.uninstall_timeout)
        os.close(presence)  # the files that stay go with the last DEL, which needs it free
        return rule.verdict.reason

    def idle_retired(self, stop: Stop, reason: str) -> int:
        """After start_rule retired the node: nothing more to install or keep; wait for
        the stop signal (if it comes) and exit 0."""
        while not stop.signum:
            stop.sleep(WAIT_LOG_SECONDS)
        log.info("%s received; netattach was already uninstalled from this node: %s",
                 signal.Signals(stop.signum).name, reason)
        return 0

    def note_retired(self) -> None:
        """Log when the conflist is the retired one: an uninstall is being undone."""
        try:
            data = read_regular(self.conf_path)
            retired = data is not None and nodefiles.is_retired(json.loads(data))
        except (OSError, ValueError):
            retired = False
        if retired:
            log.info("netattach was being uninstalled from this node (%s is the retired "
                     "conflist); installing it again", self.conf_path)

    def retire(self, presence: int, deadline: float) -> None:
        """Uninstall (uninstall.py): write the retired conflist, then remove netattach's
        files at once when no sandbox netattach attached is left. Holds the presence lock
        exclusively (decide's last_one_out took it)."""
        active: bytes | None = None
        try:
            active = self.desired_conf()[0]
        except InstallError as e:  # --netconf-file refused now: the flags' settings
            log.warning("%s; the retired conflist has the flags' settings only", e)
        if active is None:  # no cluster default network config (yet): name the conf dir,
            # whose first config it would be (netconf: clusterNetwork a directory)
            active = render_conflist(self.args.host_conf_dir,
                                     Primary(self.args.conf_dir, {}, "1.0.0"), self.settings)
        data = retired_conflist(active, self.host_path(self.conf_path))
        try:
            replace_if_changed(self.conf_path, data, 0o644, "retired conflist")
        except InstallError as e:
            log.error("%s; netattach's files are left on the node", e)
            return
        log.info("wrote the retired %s: the cluster default network alone for new pods, "
                 "DEL from saved state for the sandboxes netattach attached", self.conf_path)
        state_dir = self.args.state_dir
        if not state_dir_mounted(state_dir):
            log.warning("%s is not mounted here: the attached sandboxes cannot be counted; "
                        "the plugin removes netattach's files after the last one's DEL",
                        os.path.dirname(state_dir))
            return
        removal = remove_files(self.conf_path, self.args.bin_dir, state_dir, presence, deadline)
        if removal.outcome == nodefiles.REMOVED:
            log.info("no sandbox needs netattach: %s", removal.detail)
            for path in removal.left:
                log.error("netattach's file %s could not be removed; remove it by hand", path)
        else:
            log.info("netattach's files stay for now: %s", removal.detail)

