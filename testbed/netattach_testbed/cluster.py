"""A real Kubernetes control plane on loopback: etcd + kube-apiserver, TLS and RBAC.

Only the API exists: no controller-manager, scheduler or kubelet. Pods are plain
API objects (they stay Pending), which is all netattach needs: it reads pods and
NetworkAttachmentDefinitions and writes the network-status annotation.

Used by the pytest fixtures (tests/fixtures_cluster.py) and by hack/demo.py and
hack/bench.py, so nothing here imports pytest.

    with Cluster.start(workdir) as c:
        api = c.admin_api()
        apply_documents(api, kustomize(DEPLOY_DIR))   # what `kubectl apply -k deploy/` applies
        kubeconfig = plugin_kubeconfig(c)

Binaries come from `make testbin` (NETATTACH_K8S_BIN, default: the cache dir keyed
by the versions pinned in hack/testbin/k8s/go.mod, as mk/testbin.mk names it);
kubectl's built-in kustomize builds deploy/'s overlays, as an admin's kubectl does.
A second Kubernetes, the oldest minor still supported upstream, comes from
`make testbin-k8s-oldest` (NETATTACH_K8S_BIN_OLDEST, hack/testbin/k8s-oldest/go.mod):
the real node runs on it too (testbed/netattach_testbed/node.py), with the main etcd.
"""
from __future__ import annotations

import base64
import contextlib
import datetime as dt
import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.rest import ApiException

REPO_ROOT = Path(__file__).resolve().parents[2]
DEPLOY_DIR = REPO_ROOT / "deploy"
"""Thin mode's kustomization (`kubectl apply -k deploy/`); thick mode's is THICK_DIR."""
THICK_DIR = DEPLOY_DIR / "thick"
BASE_DIR = DEPLOY_DIR / "base"
"""The manifests both modes build on: crd.yaml, rbac.yaml (the thin plugin's), daemonset.yaml."""
K8S_GOMOD = REPO_ROOT / "hack" / "testbin" / "k8s" / "go.mod"
K8S_OLDEST_GOMOD = REPO_ROOT / "hack" / "testbin" / "k8s-oldest" / "go.mod"

NAD_GROUP, NAD_VERSION, NAD_PLURAL = "k8s.cni.cncf.io", "v1", "network-attachment-definitions"
SERVICE_CIDR = "10.0.0.0/24"
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"
READY_TIMEOUT = 60.0  # seconds, per component start
# The audit policy of Cluster(audit=True): one event per request (when the answer is
# complete), who asked for what, no bodies. `make bench` counts a plugin's requests with it.
AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
"""
STOP_TIMEOUT = 10.0   # seconds between SIGTERM and SIGKILL
FIELD_MANAGER = "netattach-testbed"


class ClusterError(RuntimeError):
    """The control plane could not be started, reached or stopped."""


class TestbinMissing(ClusterError):
    """The Go-built binaries are not there: the message says to run `make testbin`."""

    __test__ = False  # not a pytest test class, despite the name


# ---------------------------------------------------------------- binaries

@contextlib.contextmanager
def workdir(prefix: str, keep_env: str, what: str) -> Iterator[Path]:
    """A fresh temp dir named `prefix`*, removed afterwards unless the environment
    variable `keep_env` is "1" (to read the components' logs afterwards: then its path
    is printed, as `what`'s workdir)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        if os.environ.get(keep_env) == "1":
            print(f"\nnetattach: {what} workdir kept in {path}")
        else:
            shutil.rmtree(path, ignore_errors=True)


def gomod_version(gomod: Path, module: str) -> str:
    """The version `module` is required at in `gomod` ("v1.34.4"); ClusterError if absent."""
    for line in gomod.read_text().splitlines():
        parts = line.split()
        if parts[:1] == [module] and len(parts) > 1 and parts[1].startswith("v"):
            return parts[1]
    raise ClusterError(f"{module} is not required in {gomod}")


def _testbin_cache() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "netattach" / "testbin"


def default_k8s_bin_dir() -> Path:
    """Where `make testbin` puts kube-apiserver and etcd (same key as mk/testbin.mk)."""
    k8s_v = gomod_version(K8S_GOMOD, "k8s.io/kubernetes")
    etcd_v = gomod_version(K8S_GOMOD, "go.etcd.io/etcd/server/v3")
    return _testbin_cache() / f"k8s-{k8s_v}-etcd-{etcd_v}"


def k8s_bin_dir() -> Path:
    """$NETATTACH_K8S_BIN if set (as `make test/demo/bench` set it), else the default."""
    env = os.environ.get("NETATTACH_K8S_BIN")
    return Path(env) if env else default_k8s_bin_dir()


def default_k8s_oldest_bin_dir() -> Path:
    """Where `make testbin-k8s-oldest` puts the oldest supported Kubernetes's
    kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kubectl (same
    key as mk/testbin.mk: k8s-<version>, no etcd: the main one serves)."""
    return _testbin_cache() / f"k8s-{gomod_version(K8S_OLDEST_GOMOD, 'k8s.io/kubernetes')}"


def k8s_oldest_bin_dir() -> Path:
    """$NETATTACH_K8S_BIN_OLDEST if set (as `make test` sets it), else the default."""
    env = os.environ.get("NETATTACH_K8S_BIN_OLDEST")
    return Path(env) if env else default_k8s_oldest_bin_dir()


def kubectl(bin_dir: Path | None = None) -> Path:
    """The test bed's kubectl (with its built-in kustomize); TestbinMissing if absent."""
    path = (bin_dir or k8s_bin_dir()) / "kubectl"
    if not os.access(path, os.X_OK):
        raise TestbinMissing(f"kubectl not found in {path.parent} (NETATTACH_K8S_BIN): run "
                             "`make testbin` (or run the tests through `make test`)")
    return path


def kustomize(directory: Path) -> list[dict]:
    """The documents `kubectl kustomize <directory>` builds (what `kubectl apply -k`
    applies), in its order. Raises ClusterError with kubectl's message when the build
    fails, TestbinMissing without kubectl."""
    p = subprocess.run([str(kubectl()), "kustomize", str(directory)], capture_output=True,
                       text=True, timeout=120)
    if p.returncode != 0:
        raise ClusterError(f"kubectl kustomize {directory} failed: {p.stderr.strip()}")
    return [d for d in yaml.safe_load_all(p.stdout) if d]


def require_k8s_binaries(bin_dir: Path | None = None,
                         etcd: Path | None = None) -> tuple[Path, Path]:
    """Paths of (kube-apiserver, etcd): both in `bin_dir` (default k8s_bin_dir()), or
    etcd at `etcd`; TestbinMissing if either is not executable."""
    bin_dir = bin_dir or k8s_bin_dir()
    found = (bin_dir / "kube-apiserver", etcd or bin_dir / "etcd")
    missing = [str(p) for p in found if not os.access(p, os.X_OK)]
    if missing:
        raise TestbinMissing(
            f"{', '.join(missing)} not found (NETATTACH_K8S_BIN, NETATTACH_K8S_BIN_OLDEST): "
            "run `make testbin` (and `make testbin-k8s-oldest`) to build the test control "
            "plane (or run the tests through `make test`)")
    return found


# ---------------------------------------------------------------- PKI

def _write(path: Path, data: bytes | str, mode: int = 0o644) -> Path:
    """Write `data` to `path` created with `mode` from the start (no world-readable window)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode() if isinstance(data, str) else data
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(raw)
    os.chmod(path, mode)  # O_CREAT's mode does not apply to a file that already existed
    return path


def _key_pem(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _issue(subject: x509.Name, key, *, issuer: x509.Certificate | None, issuer_key,
           ca: bool = False, sans: list[x509.GeneralName] | None = None,
           usage: list | None = None, days: int = 30) -> x509.Certificate:
    """Sign a certificate for `key`; self-signed CA when `issuer` is None."""
    now = dt.datetime.now(dt.UTC)
    b = (x509.CertificateBuilder()
         .subject_name(subject)
         .issuer_name(issuer.subject if issuer else subject)
         .public_key(key.public_key())
         .serial_number(x509.random_serial_number())
         .not_valid_before(now - dt.timedelta(hours=1))  # tolerate clock skew
         .not_valid_after(now + dt.timedelta(days=days))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=0 if ca else None), critical=True)
         .add_extension(x509.KeyUsage(
             digital_signature=True, key_encipherment=not ca, key_cert_sign=ca, crl_sign=ca,
             content_commitment=False, data_encipherment=False, key_agreement=False,
             encipher_only=False, decipher_only=False), critical=True)
         .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False))
    if issuer is not None:
        b = b.add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
            issuer_key.public_key()), critical=False)
    if sans:
        b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    if usage:
        b = b.add_extension(x509.ExtendedKeyUsage(usage), critical=False)
    return b.sign(issuer_key, hashes.SHA256())


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def _load_ca(pki: Path):
    """(CA certificate, CA key) that make_pki wrote under `pki`."""
    ca = x509.load_pem_x509_certificate((pki / "ca.crt").read_bytes())
    key = serialization.load_pem_private_key((pki / "ca.key").read_bytes(), password=None)
    return ca, key


def issue_client_cert(pki: Path, stem: str, cn: str, org: str | None = None) -> tuple[Path, Path]:
    """A client certificate for `cn` (organization `org`: its group) signed by the test
    bed's CA under `pki`: (<stem>.crt, <stem>.key), the key 0600."""
    ca, ca_key = _load_ca(pki)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _issue(_name(cn, org), key, issuer=ca, issuer_key=ca_key,
                  usage=[ExtendedKeyUsageOID.CLIENT_AUTH])
    return (_write(pki / f"{stem}.crt", _cert_pem(cert)),
            _write(pki / f"{stem}.key", _key_pem(key), 0o600))


def issue_serving_cert(pki: Path, stem: str, cn: str, ips: list[str],
                       dns: list[str]) -> tuple[Path, Path]:
    """A serving certificate for `ips` and `dns` names signed by the test bed's CA under
    `pki`: (<stem>.crt, <stem>.key), the key 0600."""
    ca, ca_key = _load_ca(pki)
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns]
    sans += [x509.IPAddress(ipaddress.ip_address(a)) for a in ips]
    cert = _issue(_name(cn), key, issuer=ca, issuer_key=ca_key, sans=sans,
                  usage=[ExtendedKeyUsageOID.SERVER_AUTH])
    return (_write(pki / f"{stem}.crt", _cert_pem(cert)),
            _write(pki / f"{stem}.key", _key_pem(key), 0o600))


def make_pki(pki: Path, service_cidr: str = SERVICE_CIDR) -> dict[str, Path]:
    """Create the test bed's keys and certificates under `pki`.

    A CA; the apiserver serving cert (127.0.0.1, ::1, localhost, the in-cluster
    names and the first IP of `service_cidr`, the `kubernetes` Service's); an admin
    client cert (O=system:masters); the service-account token signing key pair (RSA
    2048). EC P-256 keys for TLS. Returns {"ca.crt", "ca.key", "apiserver.crt",
    "apiserver.key", "admin.crt", "admin.key", "sa.key", "sa.pub"} -> path; private
    keys are written 0600 (issue_client_cert and issue_serving_cert sign more).
    """
    name = _name
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _issue(name("netattach-testbed-ca"), ca_key, issuer=None, issuer_key=ca_key, ca=True)

    first_service_ip = next(ipaddress.ip_network(service_cidr).hosts())
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in (
        "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local")]
    sans += [x509.IPAddress(ipaddress.ip_address(a)) for a in ("127.0.0.1", "::1")]
    sans.append(x509.IPAddress(first_service_ip))
    srv_key = ec.generate_private_key(ec.SECP256R1())
    srv = _issue(name("kube-apiserver"), srv_key, issuer=ca, issuer_key=ca_key, sans=sans,
                 usage=[ExtendedKeyUsageOID.SERVER_AUTH])

    adm_key = ec.generate_private_key(ec.SECP256R1())
    adm = _issue(name("netattach-testbed-admin", "system:masters"), adm_key, issuer=ca,
                 issuer_key=ca_key, usage=[ExtendedKeyUsageOID.CLIENT_AUTH])

    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    sa_pub = sa_key.public_key().public_bytes(serialization.Encoding.PEM,
                                              serialization.PublicFormat.SubjectPublicKeyInfo)
    out = {
        "ca.crt": _write(pki / "ca.crt", _cert_pem(ca)),
        "ca.key": _write(pki / "ca.key", _key_pem(ca_key), 0o600),
        "apiserver.crt": _write(pki / "apiserver.crt", _cert_pem(srv)),
        "apiserver.key": _write(pki / "apiserver.key", _key_pem(srv_key), 0o600),
        "admin.crt": _write(pki / "admin.crt", _cert_pem(adm)),
        "admin.key": _write(pki / "admin.key", _key_pem(adm_key), 0o600),
        "sa.key": _write(pki / "sa.key", _key_pem(sa_key), 0o600),
        "sa.pub": _write(pki / "sa.pub", sa_pub),
    }
    return out


# ---------------------------------------------------------------- processes

def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on `host` that was free a moment ago (the kernel's pick); "0.0.0.0":
    one that no socket of the machine holds on any address."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _child_env() -> dict[str, str]:
    """Our environment without proxy settings: everything is on loopback."""
    return {k: v for k, v in os.environ.items()
            if k.lower() not in ("http_proxy", "https_proxy", "all_proxy", "no_proxy")}


def log_tail(path: Path, lines: int = 40) -> str:
    """The last `lines` lines of a log file ("" if it does not exist)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            text = f.read().decode(errors="replace")
    except FileNotFoundError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def started(service, timeout: float):
    """`service._start(timeout)`, then `service`; on any failure (Ctrl-C too) stops what
    it started (`service.stop()`) and re-raises. For the test bed's long-running
    services: Cluster, runtime.Containerd."""
    try:
        service._start(timeout)
    except BaseException:
        service.stop()
        raise
    return service


class _Process:
    """One long-running binary: its own session (process group), output to a log file.

    `setpriv --pdeathsig KILL` (util-linux) makes the kernel kill it if our process
    dies without running stop() (SIGKILL, OOM), so nothing is ever orphaned. The
    death signal follows the *thread* that started it: start clusters from a thread
    that lives as long as the cluster (the main thread in pytest and the scripts).
    """

    def __init__(self, name: str, argv: list[str], log: Path):
        self.name, self.argv, self.log = name, argv, log
        self.popen: subprocess.Popen | None = None

    def start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        wrapper = ["setpriv", "--pdeathsig", "KILL", "--"] if _HAVE_SETPRIV else []
        with open(self.log, "ab") as log:
            log.write(f"\n=== {time.strftime('%H:%M:%S')} starting {self.name}\n".encode())
            log.flush()
            self.popen = subprocess.Popen(
                wrapper + self.argv, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True, env=_child_env())

    @property
    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """SIGTERM its process group, SIGKILL after `timeout` s, and reap it. Idempotent."""
        p, self.popen = self.popen, None
        if p is None:
            return
        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, timeout)):
            if p.poll() is not None:
                break
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                break
            try:
                p.wait(wait)
                break
            except subprocess.TimeoutExpired:
                continue
        if p.poll() is None:
            raise ClusterError(f"{self.name} (pid {p.pid}) survived SIGKILL for {timeout}s")


_HAVE_SETPRIV = shutil.which("setpriv") is not None

# Probes go straight to loopback, never through a proxy from the environment.
_NO_PROXY_OPENER_HANDLERS = (urllib.request.ProxyHandler({}),)


def _probe(url: str, context: ssl.SSLContext | None = None) -> tuple[int, str]:
    """GET `url` (2 s timeout): (HTTP status, body); (0, error text) if unreachable."""
    handlers = list(_NO_PROXY_OPENER_HANDLERS)
    if context is not None:
        handlers.append(urllib.request.HTTPSHandler(context=context))
    opener = urllib.request.build_opener(*handlers)
    try:
        with opener.open(url, timeout=2) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except (OSError, ssl.SSLError) as e:
        return 0, str(e)


def _wait_ready(proc: _Process, url: str, ok, timeout: float,
                context: ssl.SSLContext | None = None) -> None:
    """Poll `url` every 0.2 s until ok(status, body); ClusterError (with the log tail)
    if the process exits or `timeout` s pass."""
    deadline = time.monotonic() + timeout
    last = (0, "not probed")
    while True:
        if not proc.running:
            rc = proc.popen.returncode if proc.popen else None
            raise ClusterError(f"{proc.name} exited (code {rc}) while starting; "
                               f"last lines of {proc.log}:\n{log_tail(proc.log)}")
        last = _probe(url, context)
        if ok(*last):
            return
        if time.monotonic() > deadline:
            raise ClusterError(
                f"{proc.name} not ready after {timeout:.0f}s ({url} answered {last[0]}: "
                f"{last[1].strip()[-2000:]}); last lines of {proc.log}:\n{log_tail(proc.log)}")
        time.sleep(0.2)


# ---------------------------------------------------------------- the cluster

class Cluster:
    """etcd + kube-apiserver on loopback, owned by this object; a context manager.

    Build with Cluster.start(workdir). Everything lives in `workdir`: pki/ (certs and
    keys), etcd/ (data), logs/{etcd,kube-apiserver}.log, admin.kubeconfig, and with
    audit=True logs/audit.log (AUDIT_POLICY; read with audit_events()). `stop()`
    (or leaving the `with` block, also on an exception) ends both processes; the
    workdir itself is the caller's to remove.

    Attributes: workdir, bin_dir, server ("https://127.0.0.1:<port>"), ca_file,
    admin_kubeconfig, etcd_url ("http://127.0.0.1:<port>"), apiserver_log, etcd_log.
    """

    def __init__(self, workdir: Path, bin_dir: Path | None = None, audit: bool = False,
                 service_cidr: str = SERVICE_CIDR, nodes: bool = False,
                 etcd: Path | None = None):
        self.workdir = Path(workdir).resolve()
        self.audit = audit
        self.service_cidr = service_cidr
        self.nodes = nodes
        self.audit_log = self.workdir / "logs" / "audit.log"
        self.bin_dir = bin_dir or k8s_bin_dir()
        self._apiserver_bin, self._etcd_bin = require_k8s_binaries(self.bin_dir, etcd)
        self.pki: dict[str, Path] = {}
        self.etcd_log = self.workdir / "logs" / "etcd.log"
        self.apiserver_log = self.workdir / "logs" / "kube-apiserver.log"
        self.admin_kubeconfig = self.workdir / "admin.kubeconfig"
        self.apiserver_port = 0
        self.etcd_url = ""
        self._etcd: _Process | None = None
        self._apiserver: _Process | None = None

    # -- lifecycle

    @classmethod
    def start(cls, workdir: Path, bin_dir: Path | None = None,
              timeout: float = READY_TIMEOUT, audit: bool = False,
              service_cidr: str = SERVICE_CIDR, nodes: bool = False,
              etcd: Path | None = None) -> Cluster:
        """Make the PKI, start etcd then kube-apiserver, wait for /readyz (each up to
        `timeout` s). Returns the running Cluster; on any failure stops what was
        started and raises ClusterError (TestbinMissing if binaries are missing).
        audit: the API server writes an audit log (see audit_events).
        service_cidr: the Service IP range (its first IP is in the serving cert).
        nodes: configured for real nodes (testbed/netattach_testbed/node.py), as a kubeadm cluster
        is: Node and RBAC authorization, the NodeRestriction and ServiceAccount admission
        plugins, a client certificate for the API server's calls to kubelets.
        etcd: the etcd binary, when not the one in `bin_dir` (the oldest Kubernetes's
        dir has none: the main etcd serves it)."""
        return started(cls(workdir, bin_dir, audit, service_cidr, nodes, etcd), timeout)

    def _start(self, timeout: float) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.pki = make_pki(self.workdir / "pki", self.service_cidr)
        if self.nodes:
            crt, key = issue_client_cert(self.workdir / "pki", "apiserver-kubelet-client",
                                         "kube-apiserver-kubelet-client", "system:masters")
            self.pki.update({"apiserver-kubelet-client.crt": crt,
                             "apiserver-kubelet-client.key": key})
        self._start_etcd(timeout)
        self.apiserver_port = free_port()
        self._write_admin_kubeconfig()
        self.start_apiserver(timeout)

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop kube-apiserver then etcd (SIGTERM, SIGKILL after 10 s); idempotent."""
        errors = []
        for proc in (self._apiserver, self._etcd):
            if proc is not None:
                try:
                    proc.stop()
                except ClusterError as e:
                    errors.append(str(e))
        self._apiserver = self._etcd = None
        if errors:
            raise ClusterError("; ".join(errors))

    @property
    def server(self) -> str:
        """The API server URL, https://127.0.0.1:<port> (stable across restarts)."""
        return f"https://127.0.0.1:{self.apiserver_port}"

    @property
    def ca_file(self) -> Path:
        """PEM file of the CA that signed the serving cert (and the admin client cert)."""
        return self.pki["ca.crt"]

    @property
    def apiserver_running(self) -> bool:
        return self._apiserver is not None and self._apiserver.running

    def _start_etcd(self, timeout: float, attempts: int = 3) -> None:
        for attempt in range(attempts):
            client_port, peer_port = free_port(), free_port()
            if client_port == peer_port:
                continue
            self.etcd_url = f"http://127.0.0.1:{client_port}"
            peer = f"http://127.0.0.1:{peer_port}"
            self._etcd = _Process("etcd", [
                str(self._etcd_bin), "--name=netattach",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={self.etcd_url}", f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=netattach={peer}", "--initial-cluster-state=new",
                "--unsafe-no-fsync",  # throwaway data: durability is not the point
                # One member: elect it within ~0.1 s instead of ~1 s.
                "--heartbeat-interval=10", "--election-timeout=100",
                "--log-level=warn",
            ], self.etcd_log)
            self._etcd.start()
            try:
                _wait_ready(self._etcd, f"{self.etcd_url}/health",
                            lambda st, body: st == 200 and '"health":"true"' in body.replace(" ", ""),
                            timeout)
                return
            except ClusterError:
                lost_race = "address already in use" in log_tail(self.etcd_log, 20)
                self._etcd.stop()
                if not lost_race or attempt == attempts - 1:
                    raise

    def _apiserver_argv(self) -> list[str]:
        p = self.pki
        return [
            str(self._apiserver_bin),
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            f"--secure-port={self.apiserver_port}",
            f"--cert-dir={self.workdir / 'apiserver-certs'}",
            f"--tls-cert-file={p['apiserver.crt']}", f"--tls-private-key-file={p['apiserver.key']}",
            f"--client-ca-file={p['ca.crt']}",
            f"--etcd-servers={self.etcd_url}",
            f"--service-cluster-ip-range={self.service_cidr}",
            f"--service-account-issuer={SA_ISSUER}",
            f"--service-account-key-file={p['sa.pub']}",
            f"--service-account-signing-key-file={p['sa.key']}",
            # as on any cluster that runs CNI DaemonSets (kubeadm's, k3s'...): deploy/thick's
            # daemon is privileged, as the runtime's own CNI plugins run
            "--allow-privileged=true",
            # No kube-proxy: do not maintain the `kubernetes` Service endpoints (a
            # loopback endpoint is invalid and would be retried forever).
            "--endpoint-reconciler-type=none",
            "--profiling=false",
            # On SIGTERM, end the open WATCHes within 2 s (clients reconnect, as after a
            # real control-plane rollout) instead of holding the listener until the
            # test bed's SIGKILL after STOP_TIMEOUT: without it a stop with watches open
            # always takes the whole STOP_TIMEOUT.
            "--shutdown-watch-termination-grace-period=2s",
            "--v=1",
        ] + self._authorization_argv() + self._audit_argv()

    def _authorization_argv(self) -> list[str]:
        if not self.nodes:
            # No controller-manager: nobody creates the `default` ServiceAccount the
            # ServiceAccount admission plugin requires of every pod.
            return ["--authorization-mode=RBAC", "--disable-admission-plugins=ServiceAccount"]
        p = self.pki
        # kubelets by their InternalIP: a node's name is not in any DNS (a lookup would
        # leave the machine)
        return ["--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
                "--kubelet-preferred-address-types=InternalIP",
                f"--kubelet-client-certificate={p['apiserver-kubelet-client.crt']}",
                f"--kubelet-client-key={p['apiserver-kubelet-client.key']}"]

    def _audit_argv(self) -> list[str]:
        if not self.audit:
            return []
        policy = _write(self.workdir / "audit-policy.yaml", AUDIT_POLICY)
        # blocking: an event is in the file before its request is answered; maxsize 0:
        # never rotated, so one file holds them all
        return [f"--audit-policy-file={policy}", f"--audit-log-path={self.audit_log}",
                "--audit-log-format=json", "--audit-log-mode=blocking",
                "--audit-log-maxsize=0"]

    def audit_events(self) -> list[dict]:
        """The audit log's events so far (Cluster(audit=True)), oldest first: dicts with
        `user.username`, `verb`, `objectRef`, `responseStatus.code`,
        `requestReceivedTimestamp`... (audit.k8s.io/v1 Event)."""
        if not self.audit_log.exists():
            return []
        return [json.loads(line) for line in self.audit_log.read_text().splitlines() if line]

    def start_apiserver(self, timeout: float = READY_TIMEOUT) -> None:
        """Start kube-apiserver on `server` (same port, same etcd data) and wait for
        /readyz, up to `timeout` s. ClusterError with the log tail on failure."""
        if self.apiserver_running:
            raise ClusterError("kube-apiserver is already running")
        if self._etcd is None or not self._etcd.running:
            raise ClusterError("etcd is not running")
        self._apiserver = _Process("kube-apiserver", self._apiserver_argv(), self.apiserver_log)
        self._apiserver.start()
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        ctx.load_cert_chain(str(self.pki["admin.crt"]), str(self.pki["admin.key"]))
        try:
            _wait_ready(self._apiserver, f"{self.server}/readyz",
                        lambda st, body: st == 200 and body.strip() == "ok", timeout, ctx)
        except BaseException:
            self._apiserver.stop()
            self._apiserver = None
            raise

    def stop_apiserver(self) -> None:
        """Stop kube-apiserver only (SIGTERM, SIGKILL after 10 s); etcd keeps the data.
        Requests fail with connection errors until start_apiserver()."""
        if self._apiserver is not None:
            proc, self._apiserver = self._apiserver, None
            proc.stop()

    # -- clients

    def _write_admin_kubeconfig(self) -> None:
        # Files, not *-data: the Python client would copy embedded data to temp files.
        write_kubeconfig(self.admin_kubeconfig, self.server, ca_file=self.ca_file, user={
            "client-certificate": str(self.pki["admin.crt"]),
            "client-key": str(self.pki["admin.key"]),
        }, name="netattach-testbed-admin")

    def admin_api(self) -> k8s.ApiClient:
        """A new kubernetes ApiClient authenticated as cluster admin (system:masters).
        The caller owns it (close() when done, or use it as a context manager)."""
        return api_client(self.admin_kubeconfig)


def start(workdir: Path, bin_dir: Path | None = None, timeout: float = READY_TIMEOUT,
          audit: bool = False) -> Cluster:
    """Same as Cluster.start() (a cluster without nodes)."""
    return Cluster.start(workdir, bin_dir, timeout, audit)


# ---------------------------------------------------------------- kubeconfigs

def write_kubeconfig(path: Path, server: str, *, user: dict, ca_file: Path | None = None,
                     ca_data: bytes | None = None, name: str = "netattach") -> Path:
    """Write a single-context kubeconfig (mode 0600) for `server` with `user` (the
    kubeconfig `user` mapping: token, or client-certificate/-key); the CA given as a
    file path (`ca_file`) or embedded (`ca_data`, PEM bytes). Returns `path`.

    JSON, as `netattach install` writes it (YAML loaders read it too): the plugin and
    the bench then run on the kubeconfig format of a deployed node, which the exec'd
    path reads without importing a YAML parser (transport.load)."""
    cluster: dict = {"server": server}
    if ca_data is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca_data).decode()
    elif ca_file is not None:
        cluster["certificate-authority"] = str(ca_file)
    doc = {
        "apiVersion": "v1", "kind": "Config", "preferences": {},
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
    }
    return _write(Path(path), json.dumps(doc, indent=1), 0o600)


def api_client(kubeconfig: Path) -> k8s.ApiClient:
    """A new kubernetes ApiClient from a kubeconfig file (its current context)."""
    return k8s_config.new_client_from_config(config_file=str(kubeconfig))


def service_account_token(cluster: Cluster, namespace: str = "kube-system",
                          sa: str = "netattach", expiration_seconds: int = 24 * 3600,
                          node: str | None = None) -> str:
    """A bearer token of ServiceAccount `namespace`/`sa` from the TokenRequest API, valid
    `expiration_seconds` s (what kubelet projects into the pod); creates the
    ServiceAccount if missing (deploy/base/rbac.yaml normally has).

    `node`: the token is bound to a pod of the ServiceAccount on node `node`, as the
    kubelet's projected token of a DaemonSet pod is: `<sa>-on-<node>` in `namespace`,
    created if missing and never run (no kubelet runs it; the Node object need not
    exist). The API server then authenticates the token with the extra
    `authentication.kubernetes.io/node-name` = `node` (ServiceAccountTokenPodNodeInfo,
    GA since 1.32), which Kubernetes 1.36+'s per-driver authorization of a
    ResourceClaim's status.devices (`associated-node:` verbs on resourceclaims/driver)
    and deploy/thick/rbac.yaml's ResourceSlice policy go by. Deleting that pod revokes
    the token."""
    with cluster.admin_api() as api:
        core = k8s.CoreV1Api(api)
        try:
            core.create_namespaced_service_account(
                namespace, k8s.V1ServiceAccount(metadata=k8s.V1ObjectMeta(name=sa)))
        except ApiException as e:
            if e.status != 409:
                raise
        bound = None
        if node is not None:
            holder = f"{sa}-on-{node}"
            try:
                pod = core.create_namespaced_pod(namespace, {
                    "metadata": {"name": holder},
                    "spec": {"nodeName": node, "serviceAccountName": sa,
                             "automountServiceAccountToken": False,
                             "containers": [{"name": "c", "image": "registry.invalid/none:1"}]}})
            except ApiException as e:
                if e.status != 409:
                    raise
                pod = core.read_namespaced_pod(holder, namespace)
            bound = k8s.V1BoundObjectReference(api_version="v1", kind="Pod", name=holder,
                                               uid=pod.metadata.uid)
        req = k8s.AuthenticationV1TokenRequest(spec=k8s.V1TokenRequestSpec(
            audiences=[], expiration_seconds=expiration_seconds, bound_object_ref=bound))
        return core.create_namespaced_service_account_token(sa, namespace, req).status.token


def plugin_kubeconfig(cluster: Cluster, namespace: str = "kube-system", sa: str = "netattach",
                      path: Path | None = None, expiration_seconds: int = 24 * 3600,
                      node: str | None = None) -> Path:
    """A kubeconfig with which the plugin acts as ServiceAccount `namespace`/`sa`.

    Creates the ServiceAccount if missing (deploy/base/rbac.yaml normally has), gets a
    token for it from the TokenRequest API valid `expiration_seconds` s (bound to a pod
    on `node` if given: service_account_token), and writes server + embedded CA + that
    bearer token, nothing else (no admin credentials), mode 0600, to `path` (default:
    <workdir>/<namespace>-<sa>.kubeconfig).
    """
    path = Path(path) if path else cluster.workdir / f"{namespace}-{sa}.kubeconfig"
    token = service_account_token(cluster, namespace, sa, expiration_seconds, node)
    return write_kubeconfig(path, cluster.server, user={"token": token},
                            ca_data=cluster.ca_file.read_bytes(), name=f"{namespace}-{sa}")


# ---------------------------------------------------------------- manifests

_API_CLASSES = {
    "v1": k8s.CoreV1Api,
    "apps/v1": k8s.AppsV1Api,
    "rbac.authorization.k8s.io/v1": k8s.RbacAuthorizationV1Api,
    "apiextensions.k8s.io/v1": k8s.ApiextensionsV1Api,
    "admissionregistration.k8s.io/v1": k8s.AdmissionregistrationV1Api,
}


def _snake(kind: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", kind).lower()


def load_manifests(paths: Iterable[Path]) -> list[dict]:
    """The non-empty YAML documents of `paths`, in order."""
    docs = []
    for p in paths:
        docs += [d for d in yaml.safe_load_all(Path(p).read_text()) if d]
    return docs


def apply_manifests(api: k8s.ApiClient, paths: Iterable[Path], timeout: float = 30.0,
                    dry_run: bool = False, namespace: str = "default") -> list[dict]:
    """apply_documents of every YAML document of `paths`; returns them as read."""
    return apply_documents(api, load_manifests(paths), timeout, dry_run, namespace)


def apply_documents(api: k8s.ApiClient, docs: list[dict], timeout: float = 30.0,
                    dry_run: bool = False, namespace: str = "default") -> list[dict]:
    """Server-side apply every document of `docs` (create or update, forcing
    ownership to field manager "netattach-testbed"), then wait up to `timeout` s
    for each CustomResourceDefinition among them to be Established and served.

    dry_run: the server validates and admits every document but stores nothing
    (dryRun=All), and CRDs are not waited for.
    namespace: for namespaced documents that name none.
    Supports the core, apps, rbac, apiextensions and admissionregistration v1 kinds and
    NetworkAttachmentDefinitions (ValueError otherwise).
    Returns `docs`. ApiException on rejection, ClusterError on timeout.
    """
    for doc in docs:
        av, kind = doc.get("apiVersion"), doc.get("kind")
        if (av, kind) == (f"{NAD_GROUP}/{NAD_VERSION}", "NetworkAttachmentDefinition"):
            meta = doc.get("metadata") or {}
            k8s.CustomObjectsApi(api).patch_namespaced_custom_object(
                NAD_GROUP, NAD_VERSION, meta.get("namespace") or namespace, NAD_PLURAL,
                meta["name"], doc, field_manager=FIELD_MANAGER, force=True,
                _content_type="application/apply-patch+yaml",
                **({"dry_run": "All"} if dry_run else {}))
            continue
        if av not in _API_CLASSES:
            raise ValueError(f"apply_manifests: unsupported apiVersion {av!r} ({kind})")
        api_obj = _API_CLASSES[av](api)
        meta = doc.get("metadata") or {}
        name, snake = meta["name"], _snake(kind)
        kw = dict(body=doc, field_manager=FIELD_MANAGER, force=True,
                  _content_type="application/apply-patch+yaml")
        if dry_run:
            kw["dry_run"] = "All"
        namespaced = getattr(api_obj, f"patch_namespaced_{snake}", None)
        if namespaced is not None:
            namespaced(name, meta.get("namespace") or namespace, **kw)
        else:
            getattr(api_obj, f"patch_{snake}")(name, **kw)
    for doc in docs:
        if doc["kind"] == "CustomResourceDefinition" and not dry_run:
            wait_crd_established(api, doc["metadata"]["name"], timeout)
    return docs


def wait_crd_established(api: k8s.ApiClient, name: str, timeout: float = 30.0) -> None:
    """Wait up to `timeout` s until CRD `name` has Established=True, its resource is
    listed by discovery of its served version(s) and a first list succeeded;
    ClusterError on timeout."""
    ext = k8s.ApiextensionsV1Api(api)
    deadline = time.monotonic() + timeout
    state = "not read"
    while True:
        crd = ext.read_custom_resource_definition(name)
        conds = {c.type: c for c in (crd.status.conditions if crd.status else None) or []}
        est = conds.get("Established")
        if est is not None and est.status == "True":
            plural = crd.spec.names.plural
            served = [v.name for v in crd.spec.versions if v.served]
            if all(_discovered(api, crd.spec.group, v, plural) for v in served):
                _warm_up(api, crd, timeout)
                return
            state = "Established but not yet in discovery"
        else:
            state = json.dumps({t: (c.status, c.reason, c.message) for t, c in conds.items()})
        if time.monotonic() > deadline:
            raise ClusterError(f"CRD {name} not established after {timeout:.0f}s: {state}")
        time.sleep(0.1)


def _warm_up(api: k8s.ApiClient, crd, timeout: float) -> None:
    """Pay the first-use costs of a new CRD here rather than in whoever uses it first:
    a first list sets up its storage and watch cache (~1 s), and a first create
    makes the ResourceQuota admission plugin start an informer for it (~2 s); a
    dry-run create of an empty object does the latter without storing anything.
    """
    objects = k8s.CustomObjectsApi(api)
    g, kind, plural = crd.spec.group, crd.spec.names.kind, crd.spec.names.plural
    for v in (v.name for v in crd.spec.versions if v.served):
        objects.list_cluster_custom_object(g, v, plural, _request_timeout=timeout)
        body = {"apiVersion": f"{g}/{v}", "kind": kind,
                "metadata": {"name": "netattach-testbed-warm-up"}}
        try:
            if crd.spec.scope == "Namespaced":
                objects.create_namespaced_custom_object(g, v, "default", plural, body,
                                                        dry_run="All", _request_timeout=timeout)
            else:
                objects.create_cluster_custom_object(g, v, plural, body, dry_run="All",
                                                     _request_timeout=timeout)
        except ApiException as e:
            if not 400 <= e.status < 500:  # a schema rejecting an empty object is fine
                raise


def _discovered(api: k8s.ApiClient, group: str, version: str, plural: str) -> bool:
    try:
        res = k8s.CustomObjectsApi(api).get_api_resources(group, version)
    except ApiException as e:
        if e.status == 404:
            return False
        raise
    return any(r.name == plural for r in res.resources)
