"""`netattach install`: the DaemonSet container's entry point.

It runs as root in a pod that mounts the node's CNI bin and conf dirs, and
1. copies the netattach executable into the bin dir, atomically (a running ADD
   never sees half a binary);
2. writes a kubeconfig for the plugin (0600, in `<conf dir>/netattach.d/`, dir
   0700) from the pod's ServiceAccount token and CA, and rewrites it whenever
   kubelet rotates the projected token;
3. waits, bounded, for the cluster default network's config in the conf dir
   (multi-net spec §6.1: do not signal readiness before the default network
   has), then writes `00-netattach.conflist`, which sorts before it, and keeps it
   in step with the primary while the primary changes, moves or disappears;
4. on SIGTERM/SIGINT removes `00-netattach.conflist` (cleanup on, the default)
   and exits 0. The binary and the kubeconfig stay: DEL of running pods needs them.

Which file is the primary (the libcni rule the runtimes use to pick a network,
libcni `ConfFiles` + a lexical sort, as in containerd's go-cni and CRI-O's ocicni):
the first name in byte order ending in `.conf`, `.conflist` or `.json`, hidden
names included (libcni does not skip them), directories excluded, skipping
* `00-netattach.conflist` (ours), and
* any config whose plugins include a delegating meta-plugin: `netattach`,
  `multus` or `multus-shim`. Delegating to another meta-plugin would attach every
  selected network twice. (A Multus conf that sorts before ours is loaded by the
  runtime instead of ours; that is logged as a warning.)
When the first remaining file cannot be read, is not JSON (a half-written file)
or is not a CNI config (no `type`, or no non-empty `plugins`), there is no
primary *yet*: the installer waits for it rather than falling through to a later
file, as the runtime itself would fail on that file, and a later file (say, a
loopback conf) is not the cluster's default network.

Every write is a temp file (or dir, or symlink) beside the target, fsync'ed,
renamed over the target, then the directory fsync'ed. Temp names never end in
`.conf`/`.conflist`/`.json` and never equal `netattach`, so neither the runtime's
config loader nor its plugin lookup ever sees one; they are created with
O_EXCL|O_NOFOLLOW, so a symlink planted at a temp name is never followed.

Signals only set a flag; the loop acts on it between steps, so a removal never
interleaves with a write. Logs go to stderr; stdout is unused.

Imported only for `netattach install` (cli.SUBCOMMANDS), never on the CNI path.
"""
from __future__ import annotations

import argparse
import contextlib
import fcntl
import errno
import hashlib
import json
import logging
import os
import re
import select
import shutil
import signal
import stat
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable

log = logging.getLogger("netattach.install")

BINARY_NAME = "netattach"
CONF_NAME = "00-netattach.conflist"
NETWORK_NAME = "netattach-cni-network"
KUBECONFIG_SUBDIR = "netattach.d"
CA_NAME = "ca.crt"  # in KUBECONFIG_SUBDIR: the API server's CA, named by the kubeconfig
LOCK_NAME = "installer.lock"  # in KUBECONFIG_SUBDIR: one shared flock per running installer
CONF_EXTENSIONS = (".conf", ".conflist", ".json")
META_PLUGIN_TYPES = frozenset({"netattach", "multus", "multus-shim"})
SUPPORTED_VERSIONS = ("0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")
VERSION_DIR = re.compile(r"^\.netattach-[0-9a-f]{12}$")
BIN_TEMP = re.compile(r"^\.netattach\.tmp-")
WAIT_LOG_SECONDS = 10.0
MAX_CONFIG_BYTES = 1 << 20
PLUGIN_LOG_LEVELS = ("panic", "error", "warning", "info", "debug", "verbose")
_CHUNK = 1 << 20


class InstallError(Exception):
    """A step failed; the message names what and where. The installer exits 1 on it."""


# ---------------------------------------------------------------- files, atomically

def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove(path: str) -> None:
    """Remove a file, symlink or directory tree at `path` without following a symlink."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(path)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _write_new(path: str, mode: int, write: Callable[[Any], None]) -> None:
    """Create `path` afresh (a stale entry there is removed first, never followed), let
    `write(binary file object)` fill it, fsync, chmod `mode`. On failure `path` is removed."""
    _remove(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise


def _temp_name(directory: str, name: str) -> str:
    """`<directory>/.<name>.tmp-<pid>`: hidden, and ends in neither a config extension nor
    `netattach`, so no runtime loads or execs it."""
    return os.path.join(directory, f".{name}.tmp-{os.getpid()}")


def _rename_over(tmp: str, path: str) -> None:
    """Rename the finished temp entry `tmp` over `path` (one atomic step: a reader sees
    the old or the new entry), then fsync the directory. On failure `tmp` is removed."""
    try:
        os.rename(tmp, path)
    except BaseException:
        _remove(tmp)
        raise
    _fsync_dir(os.path.dirname(path))


def write_atomic(path: str, data: bytes, mode: int) -> None:
    """Replace `path` with `data` (file mode `mode`) so that a reader sees the old or the
    new content, never a mix: temp file beside it, fsync, rename, fsync of the dir.

    A symlink or file at `path` is replaced, not followed. Raises OSError.
    """
    tmp = _temp_name(*os.path.split(path))
    _write_new(tmp, mode, lambda f: f.write(data))
    _rename_over(tmp, path)


def replace_if_changed(path: str, data: bytes, mode: int, what: str) -> tuple[bool, bytes | None]:
    """Write `data` to `path` atomically (write_atomic) unless the regular file there
    already holds it. Returns (written, the content before: None when there was no
    regular file or it could not be read). Raises InstallError naming `what` when the
    write fails."""
    try:
        current = _read_regular(path)
    except OSError:
        current = None
    if current == data:
        return False, current
    try:
        write_atomic(path, data, mode)
    except OSError as e:
        raise InstallError(f"cannot write {what} {path}: {e.strerror}") from None
    return True, current


def _read_regular(path: str, limit: int = MAX_CONFIG_BYTES) -> bytes | None:
    """Content of the regular file at `path` (not through a symlink), or None when there
    is none or it is something else. Raises OSError for other read failures."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        if e.errno == errno.ELOOP:  # a symlink: not a file we wrote
            return None
        raise
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return None
        return f.read(limit + 1)


def _ensure_dir(path: str, mode: int, own: bool = False) -> None:
    """Create `path` (parents too, `mode`) or check it is a directory. When `own` (a dir
    only netattach uses) it must be a real directory, not a symlink, and an existing one
    gets `mode`. Raises InstallError."""
    try:
        os.makedirs(path, mode, exist_ok=True)
        st = os.lstat(path) if own else os.stat(path)
        if not stat.S_ISDIR(st.st_mode):
            raise InstallError(f"{path} is not a directory{' (a symlink?)' if own else ''}; "
                               "refusing to use it")
        if own and stat.S_IMODE(st.st_mode) != mode:
            os.chmod(path, mode)
    except OSError as e:
        raise InstallError(f"cannot create directory {path}: {e.strerror}") from None


def remove_stale_temps(directory: str, pattern: re.Pattern[str]) -> list[str]:
    """Remove the entries of `directory` whose names match `pattern` (temp files, dirs or
    symlinks an interrupted installer left). Returns the removed paths; [] when the dir is
    absent."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    removed = []
    for name in names:
        if pattern.match(name):
            _remove(os.path.join(directory, name))
            removed.append(os.path.join(directory, name))
    return removed


# ---------------------------------------------------------------- the binary

def default_source() -> str | None:
    """The artifact this process runs from, or None when it is not a frozen build.

    PyInstaller sets `sys.frozen`. A onedir build has `sys._MEIPASS` inside (or equal
    to) the directory of `sys.executable`: the artifact is that directory. A onefile
    build unpacks to a temp `_MEIPASS` elsewhere: the artifact is `sys.executable`.
    """
    if not getattr(sys, "frozen", False):
        return None
    exe = os.path.realpath(sys.executable)
    here = os.path.dirname(exe)
    meipass = os.path.realpath(getattr(sys, "_MEIPASS", "") or "/nonexistent")
    if meipass == here or meipass.startswith(here + os.sep):
        return here
    return exe


def _file_digest(path: str, h: Any) -> None:
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)


def tree_digest(root: str) -> str:
    """First 12 hex digits of a sha256 over a directory tree: every entry's relative
    path and kind, a file's exec bit and bytes, a symlink's target; names in byte order.

    Symlinks are hashed, not followed. Raises OSError.
    """
    h = hashlib.sha256()

    def walk(directory: str, rel: str) -> None:
        for entry in sorted(os.scandir(directory), key=lambda e: e.name):
            path = f"{rel}/{entry.name}" if rel else entry.name
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                h.update(f"l {len(path)}:{path} {os.readlink(entry.path)}\n".encode())
            elif stat.S_ISDIR(st.st_mode):
                h.update(f"d {len(path)}:{path}\n".encode())
                walk(entry.path, path)
            elif stat.S_ISREG(st.st_mode):
                h.update(f"f {len(path)}:{path} {int(bool(st.st_mode & 0o111))} "
                         f"{st.st_size}\n".encode())
                _file_digest(entry.path, h)
            else:
                raise InstallError(f"{entry.path} in the artifact is neither a file, a "
                                   "directory nor a symlink")

    walk(root, "")
    return h.hexdigest()[:12]


def _same_file_content(a: str, b: str) -> bool:
    with open(a, "rb") as fa, open(b, "rb") as fb:
        if os.fstat(fa.fileno()).st_size != os.fstat(fb.fileno()).st_size:
            return False
        while True:
            ca, cb = fa.read(_CHUNK), fb.read(_CHUNK)
            if ca != cb:
                return False
            if not ca:
                return True


def _copy_into(source: str, path: str, mode: int | None = None) -> None:
    """Copy the file `source` to a fresh `path`, fsync'ed, with `mode` (default: 0755 when
    `source` has an exec bit, else 0644)."""
    if mode is None:
        mode = 0o755 if os.stat(source).st_mode & 0o111 else 0o644
    with open(source, "rb") as src:
        _write_new(path, mode, lambda f: shutil.copyfileobj(src, f, _CHUNK))


def _copy_tree(source: str, dest: str) -> None:
    """Copy the tree `source` into the existing empty dir `dest`: files (fsync'ed, 0755
    or 0644), symlinks as symlinks, dirs 0755 (fsync'ed)."""
    for entry in sorted(os.scandir(source), key=lambda e: e.name):
        target = os.path.join(dest, entry.name)
        if entry.is_symlink():
            os.symlink(os.readlink(entry.path), target)
        elif entry.is_dir(follow_symlinks=False):
            os.mkdir(target, 0o755)
            _copy_tree(entry.path, target)
        else:
            _copy_into(entry.path, target)
    _fsync_dir(dest)


def _linked_version(bin_dir: str) -> str | None:
    """The `.netattach-<digest>` dir `<bin_dir>/netattach` links to, if it is such a link."""
    try:
        target = os.readlink(os.path.join(bin_dir, BINARY_NAME))
    except OSError:
        return None
    head, _, tail = target.partition("/")
    return head if tail == BINARY_NAME and VERSION_DIR.match(head) else None


def _install_tree(source: str, bin_dir: str) -> tuple[bool, str]:
    """Copy the onedir `source` to `<bin_dir>/.netattach-<digest>/` (temp dir + rename)
    unless that dir already holds the same content, then point `<bin_dir>/netattach` at
    `.netattach-<digest>/netattach` with a relative symlink (temp link + rename).
    Returns (anything changed, version dir name)."""
    exe = os.path.join(source, BINARY_NAME)
    if not (os.path.isfile(exe) and not os.path.islink(exe) and os.access(exe, os.X_OK)):
        raise InstallError(f"artifact directory {source} has no executable file {BINARY_NAME}")
    digest = tree_digest(source)
    name = f".netattach-{digest}"
    final = os.path.join(bin_dir, name)
    changed = False
    if os.path.lexists(final):
        st = os.lstat(final)
        if not stat.S_ISDIR(st.st_mode) or tree_digest(final) != digest:
            log.warning("%s does not hold the artifact's content; replacing it", final)
            aside = _temp_name(bin_dir, BINARY_NAME) + ".old"
            _remove(aside)
            os.rename(final, aside)
            _remove(aside)
    if not os.path.lexists(final):
        tmp = _temp_name(bin_dir, BINARY_NAME) + ".d"
        _remove(tmp)
        os.mkdir(tmp, 0o755)
        try:
            _copy_tree(source, tmp)
        except BaseException:
            _remove(tmp)
            raise
        _rename_over(tmp, final)
        log.info("copied artifact directory %s to %s", source, final)
        changed = True
    link = os.path.join(bin_dir, BINARY_NAME)
    want = f"{name}/{BINARY_NAME}"
    if not (os.path.islink(link) and os.readlink(link) == want):
        tmp_link = _temp_name(bin_dir, BINARY_NAME) + ".link"
        _remove(tmp_link)
        os.symlink(want, tmp_link)
        _rename_over(tmp_link, link)
        log.info("pointed %s at %s", link, want)
        changed = True
    return changed, name


def _install_file(source: str, bin_dir: str) -> bool:
    """Replace `<bin_dir>/netattach` with a 0755 copy of `source` (temp + fsync + rename)
    unless it is already a regular 0755 file with the same bytes. Returns whether it
    changed anything."""
    target = os.path.join(bin_dir, BINARY_NAME)
    st = os.lstat(target) if os.path.lexists(target) else None
    if (st is not None and stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o755
            and _same_file_content(source, target)):
        return False
    tmp = _temp_name(bin_dir, BINARY_NAME)
    _copy_into(source, tmp, 0o755)
    _rename_over(tmp, target)
    log.info("copied %s to %s", source, target)
    return True


def install_binary(source: str, bin_dir: str) -> bool:
    """Install the artifact `source` as `<bin_dir>/netattach`; returns whether anything
    changed.

    source: a single executable file (copied to `<bin_dir>/netattach`) or a PyInstaller
    onedir directory holding `netattach` and `_internal/` (copied to
    `<bin_dir>/.netattach-<12 hex of its content sha256>/`, `netattach` a relative
    symlink into it, so the bootloader finds `_internal/` beside its real path).
    Either way the switch is one rename: a runtime exec'ing the plugin (CNI SPEC.md:
    the plugin is looked up by name in the bin dir) sees the old or the new one, never
    a partial file. Afterwards every `.netattach-*` dir but the current one and the one
    just replaced (an ADD may still run from it) is removed.

    Raises InstallError when `<bin_dir>/netattach` is a directory or the source is
    unusable, OSError on I/O failures.
    """
    target = os.path.join(bin_dir, BINARY_NAME)
    if os.path.isdir(target) and not os.path.islink(target):
        raise InstallError(f"{target} is a directory; refusing to replace it")
    if not os.path.exists(source):
        raise InstallError(f"artifact {source} does not exist")
    previous = _linked_version(bin_dir)
    if os.path.isdir(source):
        changed, current = _install_tree(source, bin_dir)
    else:
        changed, current = _install_file(source, bin_dir), None
    keep = {current, previous if changed else None}
    for name in os.listdir(bin_dir):
        if VERSION_DIR.match(name) and name not in keep:
            _remove(os.path.join(bin_dir, name))
            log.info("removed old version %s", os.path.join(bin_dir, name))
    if not changed:
        log.info("%s is already the artifact %s; not copied", target, source)
    return changed


def binary_problem(source: str | None, bin_dir: str) -> str | None:
    """None when `<bin_dir>/netattach` is the installed `source`, else what is wrong.

    Without a source (not frozen, no --source) it only checks that an executable
    `netattach` is there. Reads only; raises nothing for missing files.
    """
    target = os.path.join(bin_dir, BINARY_NAME)
    try:
        if source is None:
            ok = os.access(target, os.X_OK) and os.path.isfile(target)
            return None if ok else f"{target} is missing or not executable"
        if os.path.isdir(source):
            want = f".netattach-{tree_digest(source)}/{BINARY_NAME}"
            if not (os.path.islink(target) and os.readlink(target) == want
                    and os.path.isfile(os.path.join(bin_dir, want))):
                return f"{target} does not point to {want} (the artifact {source})"
            return None
        st = os.lstat(target)
        if (not stat.S_ISREG(st.st_mode) or stat.S_IMODE(st.st_mode) != 0o755
                or not _same_file_content(source, target)):
            return f"{target} differs from the artifact {source} (content or mode 0755)"
        return None
    except OSError as e:
        return f"cannot compare {target} with the artifact {source}: {e.strerror}"


# ---------------------------------------------------------------- the kubeconfig

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


# ---------------------------------------------------------------- the primary and our conflist

def _plugins(config: dict[str, Any]) -> list[Any]:
    """The plugin configs: a conflist's `plugins`, or the single conf itself."""
    plugins = config.get("plugins")
    return plugins if isinstance(plugins, list) else [config]


def _meta_types(config: dict[str, Any]) -> list[str]:
    """The delegating meta-plugin types among the config's plugins."""
    return sorted({p.get("type") for p in _plugins(config) if isinstance(p, dict)}
                  & META_PLUGIN_TYPES)


@dataclass(frozen=True)
class Primary:
    """The cluster default network's config: path in this container, decoded config."""
    path: str
    config: dict[str, Any]

    def capabilities(self) -> dict[str, bool]:
        """The union of the plugins' `capabilities` set to true (CNI CONVENTIONS.md: the
        runtime sends runtimeConfig for a capability any plugin of the list declares)."""
        caps = {k for p in _plugins(self.config) if isinstance(p.get("capabilities"), dict)
                for k, v in p["capabilities"].items() if v is True}
        return {k: True for k in sorted(caps)}

    def cni_version(self) -> str:
        """The primary's `cniVersion` as netattach can serve it: the same when netattach
        supports it; an unknown one becomes the highest supported version not above it
        (1.1.0 for a newer one); a missing one is 0.1.0, as libcni reads it."""
        v = self.config.get("cniVersion")
        if not isinstance(v, str) or not v:
            return "0.1.0"
        if v in SUPPORTED_VERSIONS:
            return v

        def key(version: str) -> tuple[int, ...]:
            return tuple(int(x) if x.isdigit() else 0 for x in version.split("."))
        lower = [s for s in SUPPORTED_VERSIONS if key(s) <= key(v)]
        return lower[-1] if lower else SUPPORTED_VERSIONS[0]


@dataclass(frozen=True)
class Lookup:
    """What find_primary found: the primary, or why there is none yet (`why`) and
    whether that is because there is no candidate config at all (`absent`, as opposed
    to one that is not usable yet). `skipped`: meta-plugin configs passed over."""
    primary: Primary | None
    why: str = ""
    absent: bool = False
    skipped: tuple[str, ...] = ()


def config_problem(doc: Any) -> str | None:
    """None when `doc` is a CNI network config (a conf with a `type`, or a conflist with
    a non-empty `plugins` list of objects with a `type`), else what is wrong with it."""
    if not isinstance(doc, dict):
        return "not a JSON object"
    plugins = doc["plugins"] if "plugins" in doc else [doc]
    if not isinstance(plugins, list) or not plugins:
        return "'plugins' is not a non-empty list"
    for p in plugins:
        if not isinstance(p, dict) or not isinstance(p.get("type"), str) or not p["type"]:
            return "a plugin has no 'type'"
    return None


def read_config(path: str) -> tuple[dict[str, Any] | None, str]:
    """(decoded config, "") or (None, why it is not usable yet): unreadable, not JSON
    (half-written), or not a CNI config. Follows symlinks, as libcni does."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as e:
        return None, f"cannot be read ({e.strerror})"
    if len(raw) > MAX_CONFIG_BYTES:
        return None, f"is larger than {MAX_CONFIG_BYTES} bytes"
    try:
        doc = json.loads(raw)
    except ValueError as e:
        return None, f"is not valid JSON yet ({e})"
    problem = config_problem(doc)
    return (None, f"is not a CNI config ({problem})") if problem else (doc, "")


def config_candidates(conf_dir: str) -> list[str]:
    """Names in `conf_dir` the runtime would consider, in its order (libcni ConfFiles:
    extension .conf, .conflist or .json, not a directory; sorted as Go sorts strings, by
    bytes), without ours. Raises OSError when the dir cannot be listed."""
    names = []
    for name in sorted(os.listdir(conf_dir), key=os.fsencode):
        dot = name.rfind(".")
        if name == CONF_NAME or dot < 0 or name[dot:] not in CONF_EXTENSIONS:
            continue
        if not os.path.isdir(os.path.join(conf_dir, name)):
            names.append(name)
    return names


def find_primary(conf_dir: str, explicit: str | None = None) -> Lookup:
    """Find the cluster default network's config (multi-net spec §6.1; rule: module doc).

    conf_dir: the CNI conf dir as mounted here. explicit: a path to use instead of
    the lexical search (it must still be a usable config and not a meta-plugin's).
    Reads only; never raises for missing or bad files.
    """
    if explicit:
        config, why = read_config(explicit)
        if config is None:
            return Lookup(None, f"primary config {explicit} {why}",
                          absent=not os.path.lexists(explicit))
        if _meta_types(config):
            return Lookup(None, f"primary config {explicit} is a delegating meta-plugin's "
                                f"({', '.join(_meta_types(config))}), not a network")
        return Lookup(Primary(explicit, config))
    try:
        names = config_candidates(conf_dir)
    except OSError as e:
        return Lookup(None, f"cannot list the CNI conf dir {conf_dir}: {e.strerror}")
    skipped: list[str] = []
    for name in names:
        path = os.path.join(conf_dir, name)
        config, why = read_config(path)
        if config is None:
            return Lookup(None, f"the first CNI config in {conf_dir}, {name}, {why}",
                          skipped=tuple(skipped))
        if _meta_types(config):
            skipped.append(name)
            continue
        return Lookup(Primary(path, config), skipped=tuple(skipped))
    others = f" and {', '.join(skipped)} (meta-plugins)" if skipped else ""
    return Lookup(None, f"no CNI config (.conf, .conflist, .json) in {conf_dir} other than "
                        f"netattach's own{others}", absent=True, skipped=tuple(skipped))


@dataclass(frozen=True)
class PluginSettings:
    """What the generated conf tells the plugin, all as the HOST sees paths."""
    conf_dir: str
    bin_dir: str
    cni_dir: str
    kubeconfig: str
    log_level: str
    log_file: str | None = None
    namespace_isolation: bool = False
    global_namespaces: str | None = None
    multus_namespace: str | None = None
    system_namespaces: str | None = None
    readiness_indicator_file: str | None = None


def render_conflist(primary_host_path: str, primary: Primary, s: PluginSettings) -> bytes:
    """netattach's conflist for the primary: the primary's cniVersion (as netattach
    serves it), the union of its capabilities (so the runtime passes runtimeConfig,
    which netattach hands to the default network only, spec §7.5), `clusterNetwork`
    the primary's host path. Keys are netconf.py's; optional ones only when set.
    Same input, same bytes."""
    plugin: dict[str, Any] = {
        "type": "netattach",
        "name": NETWORK_NAME,
        "kubeconfig": s.kubeconfig,
        "clusterNetwork": primary_host_path,
        "confDir": s.conf_dir,
        "cniDir": s.cni_dir,
        "binDir": s.bin_dir,
        "logLevel": s.log_level,
        "namespaceIsolation": s.namespace_isolation,
    }
    optional = {"logFile": s.log_file, "globalNamespaces": s.global_namespaces,
                "multusNamespace": s.multus_namespace,
                "readinessindicatorfile": s.readiness_indicator_file}
    plugin.update({k: v for k, v in optional.items() if v})
    if s.system_namespaces is not None:
        plugin["systemNamespaces"] = [n.strip() for n in s.system_namespaces.split(",")
                                      if n.strip()]
    caps = primary.capabilities()
    if caps:
        plugin["capabilities"] = caps
    doc = {"cniVersion": primary.cni_version(), "name": NETWORK_NAME, "plugins": [plugin]}
    return (json.dumps(doc, indent=2) + "\n").encode()


# ---------------------------------------------------------------- signals, pacing

class _Stop:
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
    """One node's installation, from the parsed arguments (see add_arguments)."""

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
        self.settings = PluginSettings(
            conf_dir=args.host_conf_dir, bin_dir=args.host_bin_dir, cni_dir=args.cni_dir,
            kubeconfig=os.path.join(args.host_conf_dir, KUBECONFIG_SUBDIR, args.kubeconfig_name),
            log_level=args.log_level, log_file=args.log_file,
            namespace_isolation=args.namespace_isolation,
            global_namespaces=args.global_namespaces, multus_namespace=args.multus_namespace,
            system_namespaces=args.system_namespaces,
            readiness_indicator_file=args.readiness_indicator_file)
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

    def desired_conf(self) -> tuple[bytes | None, Lookup]:
        """(our conflist's bytes, lookup) or (None, lookup saying why there is no primary)."""
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
        return render_conflist(self.host_path(found.primary.path), found.primary,
                               self.settings), found

    # -- one pass of each step

    def sync_binary(self) -> None:
        """Install the artifact, or warn that there is none to install."""
        if self.source is None:
            log.warning("not a frozen build and no --source: %s/%s is not installed or updated",
                        self.args.bin_dir, BINARY_NAME)
            return
        _ensure_dir(self.args.bin_dir, 0o755)
        for path in remove_stale_temps(self.args.bin_dir, BIN_TEMP):
            log.info("removed stale temp %s", path)
        try:
            install_binary(os.path.abspath(self.source), self.args.bin_dir)
        except OSError as e:
            raise InstallError(f"cannot install {self.source} into {self.args.bin_dir}: "
                               f"{e.strerror or e}") from None

    def sync_kubeconfig(self) -> None:
        """Write the kubeconfig when it differs from what the ServiceAccount gives now
        (token rotated, CA changed, file deleted or edited). Raises InstallError."""
        data, sa = self.desired_kubeconfig()
        _ensure_dir(self.kube_dir, 0o700, own=True)
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
        if found.primary is None:
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
                log.info("%s changed: rewrote %s", primary, self.conf_path)
            else:
                log.info("%s was edited by someone else: rewrote it", self.conf_path)
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
            _fsync_dir(self.args.conf_dir)
        self._conf_primary = None
        log.info("removed %s: %s", self.conf_path, why)

    # -- installers side by side (DaemonSet rolling update with maxSurge)

    def hold_presence(self) -> int:
        """Take a shared flock on <conf-dir>/netattach.d/installer.lock for this
        installer's lifetime and return its fd. A new installer starting while the old
        one still runs (maxSurge) holds one too, so the old one's cleanup on SIGTERM can
        tell it is not the last and leave the conflist to its successor: no window in
        which the runtime sees only the primary and starts pods without their networks.
        Raises InstallError when the lock file cannot be opened."""
        _ensure_dir(self.kube_dir, 0o700, own=True)
        path = os.path.join(self.kube_dir, LOCK_NAME)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        except OSError as e:
            raise InstallError(f"cannot open {path}: {e.strerror}") from None
        fcntl.flock(fd, fcntl.LOCK_SH)  # waits only while an old installer cleans up
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
        problem = binary_problem(self.source, self.args.bin_dir)
        if problem:
            problems.append(problem)
        try:
            data, sa = self.desired_kubeconfig()
            if _read_regular(self.kube_path) != data:
                problems.append(f"kubeconfig {self.kube_path} is missing or not current")
            if _read_regular(self.ca_path) != sa.ca:
                problems.append(f"CA {self.ca_path} is missing or not current")
        except (InstallError, OSError) as e:
            problems.append(str(e))
        try:
            conf, found = self.desired_conf()
            if conf is None:
                problems.append(found.why)
            elif _read_regular(self.conf_path) != conf:
                problems.append(f"{self.conf_path} is missing or not current")
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

    def serve(self, stop: _Stop) -> int:
        """Install, then (unless --once) keep everything current until a signal.

        Returns the exit status: 0 on a signal (after cleanup) or a completed --once,
        1 when the primary did not appear within --primary-timeout or --once was
        interrupted. Raises InstallError for failures at startup.
        """
        a = self.args
        _ensure_dir(a.conf_dir, 0o755)
        for path in remove_stale_temps(a.conf_dir, re.compile(rf"^\.{re.escape(CONF_NAME)}\.tmp-")):
            log.info("removed stale temp %s", path)
        for path in remove_stale_temps(self.kube_dir, re.compile(r"^\..*\.tmp-\d+$")):
            log.info("removed stale temp %s", path)
        presence = None if a.once else self.hold_presence()
        self.sync_binary()
        self.sync_kubeconfig()
        waiting_since: float | None = None
        while not stop.signum:
            self._retrying(self.sync_kubeconfig)
            ready = self._retrying(self.sync_conf)
            if ready:
                waiting_since = None
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
        if a.cleanup_on_exit and presence is not None and not self.last_one_out(presence):
            log.info("%s received; another netattach installer on this node (a rolling "
                     "update) keeps %s", name, self.conf_path)
        elif a.cleanup_on_exit:
            self.remove_conf(f"{name} received, cleanup on exit")
        else:
            log.info("%s received; leaving %s in place (--no-cleanup-on-exit)", name,
                     self.conf_path)
        return 0


# ---------------------------------------------------------------- command line

def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 < value <= 86400:
        raise argparse.ArgumentTypeError(f"seconds must be in (0, 86400]: {text!r}")
    return value


def _file_name(text: str) -> str:
    if not text or "/" in text or text.startswith("."):
        raise argparse.ArgumentTypeError(f"a plain file name is needed, not {text!r}")
    return text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of `netattach install` (cli.SUBCOMMANDS); each documents its default."""
    parser.description = (
        "DaemonSet entry point. Copies the netattach executable into the node's CNI bin dir, "
        "writes a kubeconfig for the plugin from this pod's ServiceAccount (rewritten when "
        "the token rotates), waits for the cluster default network's config in the CNI conf "
        "dir (multi-net spec §6.1), writes " + CONF_NAME + " in front of it, and keeps all "
        "of it current until SIGTERM. Logs go to stderr.")
    g = parser.add_argument_group("paths")
    g.add_argument("--bin-dir", default="/host/opt/cni/bin",
                   help="the host's CNI bin dir as mounted in this container "
                        "(default: %(default)s)")
    g.add_argument("--conf-dir", default="/host/etc/cni/net.d",
                   help="the host's CNI conf dir as mounted in this container; the primary is "
                        "looked for and " + CONF_NAME + " written here (default: %(default)s)")
    g.add_argument("--host-conf-dir", default="/etc/cni/net.d",
                   help="the same conf dir as the host and the runtime see it: the paths "
                        "written into the conflist (clusterNetwork, kubeconfig, confDir) "
                        "(default: %(default)s)")
    g.add_argument("--host-bin-dir", default="/opt/cni/bin",
                   help="the bin dir as the host sees it, written as binDir (default: %(default)s)")
    g.add_argument("--cni-dir", default="/var/lib/cni/netattach",
                   help="the plugin's state dir on the host, written as cniDir "
                        "(default: %(default)s)")
    g.add_argument("--source", default=None,
                   help="the artifact to install: an executable file, or a PyInstaller onedir "
                        "directory holding `netattach` and `_internal/`. Default: the running "
                        "frozen build (its directory when onedir); when not frozen, no copy")
    g = parser.add_argument_group("kubeconfig")
    g.add_argument("--service-account-dir",
                   default="/var/run/secrets/kubernetes.io/serviceaccount",
                   help="the ServiceAccount volume: token, ca.crt, namespace "
                        "(default: %(default)s)")
    g.add_argument("--api-server", default=None,
                   help="API server URL for the kubeconfig. Default: "
                        "https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT")
    g.add_argument("--kubeconfig-name", type=_file_name, default="netattach.kubeconfig",
                   help="file name of the kubeconfig under <conf-dir>/" + KUBECONFIG_SUBDIR
                        + "/ (default: %(default)s)")
    g = parser.add_argument_group("cluster default network")
    g.add_argument("--primary-config", default=None,
                   help="the cluster default network's config: a file name in --conf-dir or a "
                        "path. Default: the first .conf/.conflist/.json file in --conf-dir in "
                        "lexical order that is neither netattach's nor Multus's")
    g.add_argument("--primary-timeout", type=_seconds, default=600.0,
                   help="seconds to wait for the primary config before exiting 1 "
                        "(default: %(default)s)")
    g.add_argument("--poll-interval", type=_seconds, default=1.0,
                   help="seconds between checks of the primary, the token and our files "
                        "(default: %(default)s)")
    g = parser.add_argument_group("written into the plugin's conf")
    g.add_argument("--log-level", choices=PLUGIN_LOG_LEVELS, default="info",
                   help="the plugin's logLevel (default: %(default)s)")
    g.add_argument("--log-file", default=None,
                   help="the plugin's logFile (host path). Default: none, stderr only")
    g.add_argument("--namespace-isolation", action="store_true",
                   help="namespaceIsolation: pods select NADs only in their own namespace or "
                        "--global-namespaces")
    g.add_argument("--global-namespaces", default=None,
                   help="globalNamespaces, comma-separated. Default: none")
    g.add_argument("--multus-namespace", default=None,
                   help="multusNamespace, where clusterNetwork/defaultNetworks NADs are looked "
                        "up. Default: the plugin's, kube-system")
    g.add_argument("--system-namespaces", default=None,
                   help="systemNamespaces, comma-separated. Default: the plugin's, kube-system")
    g.add_argument("--readiness-indicator-file", default=None,
                   help="readinessindicatorfile (host path) the plugin waits for on ADD. "
                        "Default: none")
    g = parser.add_argument_group("behaviour")
    g.add_argument("--cleanup-on-exit", action=argparse.BooleanOptionalAction, default=True,
                   help="on SIGTERM/SIGINT remove " + CONF_NAME + " (never the binary or the "
                        "kubeconfig, which DEL of running pods needs). Default: on")
    g.add_argument("--installer-log-level", choices=("debug", "info", "warning", "error"),
                   default="info",
                   help="level of the installer's own logs on stderr (default: %(default)s)")
    mode = g.add_mutually_exclusive_group()
    mode.add_argument("--once", action="store_true",
                      help="one pass (binary, kubeconfig, wait for the primary, conflist), "
                           "then exit 0; for init containers and tests")
    mode.add_argument("--check", action="store_true",
                      help="exit 0 iff the binary, the kubeconfig and the conflist are present "
                           "and current, else 1; writes nothing (the readiness probe)")


def _setup_logging(level: str) -> None:
    logger = logging.getLogger("netattach.install")
    logger.handlers.clear()
    logger.propagate = False
    logger.setLevel(getattr(logging, level.upper()))
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(
        f"%(asctime)s netattach-install[{os.getpid()}] %(levelname)s: %(message)s"))
    logger.addHandler(handler)


def run(args: argparse.Namespace) -> int:
    """`netattach install`: 0 done or stopped by a signal, 1 failed (message on stderr)."""
    _setup_logging(args.installer_log_level)
    try:
        installer = Installer(args, dict(os.environ))
        if args.check:
            return installer.check()
        return installer.serve(_Stop())
    except (InstallError, OSError) as e:
        log.error("%s", e)
        return 1
    except Exception:  # a bug: say so, and let the DaemonSet restart us
        log.exception("internal error")
        return 1
