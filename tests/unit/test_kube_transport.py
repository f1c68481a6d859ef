"""Which kubeconfigs the standard-library transport serves (transport.load), and which
it leaves to lightkube (None): a kubeconfig it misread would send the plugin's
requests somewhere else or without credentials, so each rule is pinned here. The
requests themselves run against a loopback stub (test_kube_client.py) and the real API
server (tests/e2e/test_kube_client_e2e.py)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from netattach.kube import transport


def write(tmp_path: Path, cluster: dict, user: dict | None = None, *, yaml_text: bool = False,
          namespace: str | None = None) -> str:
    context = {"cluster": "c", "user": "u", **({"namespace": namespace} if namespace else {})}
    doc = {"apiVersion": "v1", "kind": "Config", "current-context": "x",
           "clusters": [{"name": "c", "cluster": cluster}],
           "users": [{"name": "u", "user": user if user is not None else {"token": "t0k"}}],
           "contexts": [{"name": "x", "context": context}]}
    path = tmp_path / "kc"
    if yaml_text:
        import yaml
        path.write_text(yaml.safe_dump(doc))
    else:
        path.write_text(json.dumps(doc))
    return str(path)


def test_a_token_over_http_with_the_contexts_namespace(tmp_path):
    t, ns = transport.load(write(tmp_path, {"server": "http://127.0.0.1:8080/prefix/"},
                                 namespace="kube-system"))
    assert (t.base_url, t._prefix, ns) == ("http://127.0.0.1:8080/prefix", "/prefix", "kube-system")
    assert t._headers["Authorization"] == "Bearer t0k"


def test_yaml_and_the_default_namespace(tmp_path):
    t, ns = transport.load(write(tmp_path, {"server": "http://[::1]:6443"}, yaml_text=True))
    assert (t._host, t._port, ns) == ("::1", 6443, "default")


def test_a_token_file_relative_to_the_kubeconfig(tmp_path):
    (tmp_path / "token").write_text("from-file\n")
    t, _ = transport.load(write(tmp_path, {"server": "http://h:1"}, {"tokenFile": "token"}))
    assert t._headers["Authorization"] == "Bearer from-file"


def test_an_unreadable_file_it_names_is_a_kubeconfig_error(tmp_path):
    with pytest.raises(transport.KubeconfigError, match="token file gone"):
        transport.load(write(tmp_path, {"server": "http://h:1"}, {"tokenFile": "gone"}))
    with pytest.raises(transport.KubeconfigError, match="certificate authority"):
        transport.load(write(tmp_path, {"server": "https://h:1",
                                        "certificate-authority": "no-ca.crt"}))


@pytest.mark.parametrize("cluster,user", [
    ({"server": "https://h:1"}, {"exec": {"command": "x"}}),
    ({"server": "https://h:1"}, {"auth-provider": {"name": "oidc"}}),
    ({"server": "https://h:1"}, {"client-certificate-data": "eA==", "client-key-data": "eA=="}),
    ({"server": "https://h:1"}, {"token": "a", "tokenFile": "b"}),
    ({"server": "https://h:1"}, {"client-certificate": "c.crt"}),
    ({"server": "https://h:1"}, {"username": "u", "password": "p"}),
    ({"server": "https://h:1", "proxy-url": "http://proxy:3128"}, None),
    ({"server": "https://h:1", "tls-server-name": "kubernetes"}, None),
    ({"server": "https://h:1", "insecure-skip-tls-verify": True,
      "certificate-authority": "ca.crt"}, None),
    ({"server": "ftp://h:1"}, None),
    ({"server": 7}, None),
], ids=["exec", "auth-provider", "embedded-client-cert", "token-and-file", "cert-without-key",
        "basic-auth", "proxy", "tls-server-name", "insecure-with-ca", "not-http", "not-a-string"])
def test_left_to_lightkube(tmp_path, cluster, user):
    assert transport.load(write(tmp_path, cluster, user)) is None


@pytest.mark.parametrize("text", ["", "[]", "just text", "{not json nor: [yaml", "\xff"],
                         ids=["empty", "list", "string", "broken", "not-utf8"])
def test_unreadable_documents_are_left_to_lightkube(tmp_path, text):
    path = tmp_path / "kc"
    path.write_bytes(text.encode("latin-1"))
    assert transport.load(str(path)) is None


def test_no_kubeconfig_or_no_file_is_left_to_lightkube(tmp_path, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert transport.load(None) is None  # not in a pod: lightkube's lookup goes on
    assert transport.load(str(tmp_path / "absent")) is None


def test_insecure_skip_tls_verify_turns_verification_off(tmp_path):
    import ssl
    t, _ = transport.load(write(tmp_path, {"server": "https://h:1",
                                           "insecure-skip-tls-verify": True}))
    assert t._context.verify_mode == ssl.CERT_NONE and not t._context.check_hostname
    t, _ = transport.load(write(tmp_path, {"server": "https://h:1"}))
    assert t._context.verify_mode == ssl.CERT_REQUIRED and t._context.check_hostname


@pytest.mark.parametrize("token", ["t0k\n", " t0k", "t0k\x7f", "a\rb", "t0k\u20ac"],
                         ids=["newline", "leading-space", "del", "carriage-return", "non-ascii"])
def test_a_token_that_cannot_be_a_header_is_refused_unquoted(tmp_path, token):
    """Sent, it would be refused as a header value (http11.request_bytes)."""
    with pytest.raises(transport.KubeconfigError) as e:
        transport.load(write(tmp_path, {"server": "https://h:1"}, {"token": token}))
    assert "Illegal header value" in str(e.value) and token.strip() not in str(e.value)


# ------------------------------------------------------------------ in-cluster (no kubeconfig)

def _ca_pem() -> bytes:
    """A self-signed CA certificate (PEM), as the kubelet mounts ca.crt."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes-ca")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(1)
            .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM)


@pytest.fixture
def service_account(tmp_path):
    d = tmp_path / "serviceaccount"
    d.mkdir()
    (d / "token").write_text("eyJhbGc.payload.sig")
    (d / "namespace").write_text("netattach-system")
    (d / "ca.crt").write_bytes(_ca_pem())
    return d


IN_POD = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}


def test_in_cluster_is_the_service_accounts_token_namespace_and_ca(service_account):
    import ssl
    t, ns = transport.in_cluster(str(service_account), IN_POD)
    assert (t.base_url, ns) == ("https://10.96.0.1:443", "netattach-system")
    assert t._headers["Authorization"] == "Bearer eyJhbGc.payload.sig"
    assert t._context.verify_mode == ssl.CERT_REQUIRED and t._context.check_hostname
    [ca] = t._context.get_ca_certs()
    assert dict(x[0] for x in ca["subject"])["commonName"] == "kubernetes-ca"


def test_in_cluster_ipv6_host_is_bracketed_and_a_trailing_newline_dropped(service_account):
    (service_account / "token").write_text("t0k\n")
    t, _ = transport.in_cluster(str(service_account), {"KUBERNETES_SERVICE_HOST": "fd00::1",
                                                       "KUBERNETES_SERVICE_PORT": "6443"})
    assert (t.base_url, t._host, t._port) == ("https://[fd00::1]:6443", "fd00::1", 6443)
    assert t._headers["Authorization"] == "Bearer t0k"


@pytest.mark.parametrize("missing", ["token", "namespace", "ca.crt", "KUBERNETES_SERVICE_HOST",
                                     "KUBERNETES_SERVICE_PORT"])
def test_not_in_a_pod_is_left_to_lightkube(service_account, missing):
    environ = dict(IN_POD)
    if missing in environ:
        environ[missing] = ""
    else:
        (service_account / missing).unlink()
    assert transport.in_cluster(str(service_account), environ) is None


@pytest.mark.parametrize("file, text", [("ca.crt", "not a certificate"), ("token", "a b"),
                                        ("token", ""), ("token", "t\x00k")],
                         ids=["bad-ca", "space-inside", "empty-token", "control-character"])
def test_in_cluster_files_this_transport_does_not_take_are_left_to_lightkube(service_account, file, text):
    (service_account / file).write_text(text)
    assert transport.in_cluster(str(service_account), IN_POD) is None


# ------------------------------------------------------------------ kept-alive connections

class _Loopback:
    """A threading HTTP server on 127.0.0.1 (`serve`), `url` its address; `close` sets
    `release` (what a waiting handler waits for) and shuts it down."""

    release: Any

    def serve(self, handler: type) -> None:
        import threading
        from http.server import ThreadingHTTPServer
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


class _KeepAlive(_Loopback):
    """A loopback HTTP/1.1 server that keeps connections open and records the client
    port of each request (one port, one connection); a request for /wait is answered
    once `release` is set, one for /drop is answered and its connection then closed
    without a `Connection: close` (the client keeps a connection that is gone)."""

    def __init__(self):
        import threading
        from http.server import BaseHTTPRequestHandler
        self.ports: list[int] = []
        self.release = threading.Event()
        self.arrived = threading.Semaphore(0)
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):  # noqa: N802 (http.server's name)
                outer.ports.append(self.client_address[1])
                if self.path == "/wait":
                    outer.arrived.release()
                    outer.release.wait(10)
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")
                if self.path == "/drop":  # closed without saying so: stale on the client
                    self.close_connection = True

            def log_message(self, *args):
                pass

        self.serve(Handler)


@pytest.fixture
def keepalive():
    s = _KeepAlive()
    yield s
    s.close()


def _at_once(t, n: int, server: _KeepAlive) -> None:
    """n requests for /wait at the same time, answered once all n arrived."""
    import threading
    threads = [threading.Thread(target=t.request, args=("GET", "/wait")) for _ in range(n)]
    for th in threads:
        th.start()
    for _ in range(n):
        assert server.arrived.acquire(timeout=10), "hang guard"
    server.release.set()
    for th in threads:
        th.join(10)
    server.release.clear()


def test_one_request_after_another_keeps_one_connection(keepalive):
    t = transport.StdlibTransport(keepalive.url, None, None)
    for _ in range(3):
        assert t.request("GET", "/x").status_code == 200
    assert len(keepalive.ports) == 3 and len(set(keepalive.ports)) == 1


def test_requests_at_once_each_get_a_connection_and_all_are_kept(keepalive):
    t = transport.StdlibTransport(keepalive.url, None, None)
    _at_once(t, 2, keepalive)
    _at_once(t, 2, keepalive)  # no new connection: both were kept
    assert len(keepalive.ports) == 4 and len(set(keepalive.ports)) == 2
    assert len(t._idle) == 2


def test_no_more_than_max_idle_connections_are_kept(keepalive):
    t = transport.StdlibTransport(keepalive.url, None, None)
    _at_once(t, transport.MAX_IDLE + 2, keepalive)
    assert len(set(keepalive.ports)) == transport.MAX_IDLE + 2
    assert len(t._idle) == transport.MAX_IDLE


def test_a_kept_connection_the_server_closed_is_replaced_once(keepalive):
    t = transport.StdlibTransport(keepalive.url, None, None)
    assert t.request("GET", "/drop").status_code == 200
    assert len(t._idle) == 1  # kept: nothing said it would close
    assert t.request("GET", "/x").status_code == 200  # sent again on a new connection
    assert len(set(keepalive.ports)) == 2 and len(t._idle) == 1


def test_a_failed_request_does_not_keep_its_connection(keepalive):
    t = transport.StdlibTransport(keepalive.url, None, None)
    with pytest.raises(transport.ERRORS[0]):
        t.request("GET", "/wait", timeout=0.2)  # never answered in time
    assert t._idle == []
    keepalive.release.set()
    assert t.request("GET", "/x").status_code == 200
    assert len(set(keepalive.ports)) == 2  # a new one, not the failed one


@pytest.mark.parametrize("port", ["443x", "99999"])
def test_in_cluster_port_that_is_no_port_is_left_to_lightkube(service_account, port):
    environ = dict(IN_POD, KUBERNETES_SERVICE_PORT=port)
    assert transport.in_cluster(str(service_account), environ) is None


# ------------------------------------------------------------------ streamed answers

class _Streaming(_Loopback):
    """A loopback HTTP/1.1 server answering a GET with a chunked body: /lines sends
    LINES with the second line split across two chunks; /stall sends one line and then
    nothing; anything else is a 404 with a JSON body. It records each request's path and
    query, and sets `closed` once the client closed the connection."""

    LINES = [b'{"type":"ADDED","object":{"n":1}}\n', b'{"type":"MODIFIED","object":{"n":2}}\n',
             b"\n", b'{"type":"DELETED","object":{"n":3}}\n']

    def __init__(self):
        import threading
        from http.server import BaseHTTPRequestHandler
        self.paths: list[str] = []
        self.closed = threading.Event()
        self.release = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def chunk(self, data: bytes) -> None:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

            def do_GET(self):  # noqa: N802 (http.server's name)
                outer.paths.append(self.path)
                path = self.path.removeprefix("/p")
                if path.startswith(("/lines", "/stall")):
                    self.send_response(200)
                    self.send_header("Transfer-Encoding", "chunked")
                    if "close" in self.path:  # a proxy that ends every connection
                        self.send_header("Connection", "close")
                    self.end_headers()
                    if path.startswith("/stall"):
                        self.chunk(outer.LINES[0])
                        outer.release.wait(10)
                        return
                    first, second = outer.LINES[:2]
                    self.chunk(first + second[:5])
                    self.chunk(second[5:])
                    for line in outer.LINES[2:]:
                        self.chunk(line)
                    self.wfile.write(b"0\r\n\r\n")
                else:
                    body = b'{"kind":"Status","code":404}'
                    self.send_response(404)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                if not self.rfile.read(1):  # the client closed its end
                    outer.closed.set()

            def log_message(self, *args):
                pass

        self.serve(Handler)


@pytest.fixture
def streaming():
    s = _Streaming()
    yield s
    s.close()


def test_a_stream_gives_whole_lines_across_chunks_and_closes_its_connection(streaming):
    t = transport.StdlibTransport(streaming.url + "/p", None, "tok")
    with t.stream("GET", "/lines", {"watch": "1", "fieldSelector": "spec.nodeName=n 1"},
                  read_timeout=5) as resp:
        assert resp.status_code == 200
        assert list(resp.iter_lines()) == _Streaming.LINES
    assert streaming.paths == ["/p/lines?watch=1&fieldSelector=spec.nodeName%3Dn+1"]
    assert streaming.closed.wait(5), "the stream's connection was not closed"
    assert t._idle == []  # never kept for a request


def test_a_stream_gives_its_body_as_chunks(streaming):
    t = transport.StdlibTransport(streaming.url, None, None)
    with t.stream("GET", "/lines") as resp:
        assert b"".join(resp.iter_bytes()) == b"".join(_Streaming.LINES)


def test_an_error_answer_is_read_whole(streaming):
    t = transport.StdlibTransport(streaming.url, None, None)
    with t.stream("GET", "/nothing") as resp:
        assert resp.status_code == 404
        assert resp.read() == b'{"kind":"Status","code":404}'
        assert json.loads(resp.text)["code"] == 404


def test_a_stream_that_stalls_times_out_after_its_read_timeout(streaming):
    t = transport.StdlibTransport(streaming.url, None, None)
    with t.stream("GET", "/stall", read_timeout=0.3) as resp:
        lines = resp.iter_lines()
        assert next(lines) == _Streaming.LINES[0]
        with pytest.raises(transport.ERRORS[0]):
            next(lines)


def test_the_read_timeout_holds_when_the_answer_ends_the_connection(streaming):
    """An answer with `Connection: close`: the body's reads get `read_timeout`, not the
    connect timeout; a chunked body the server ends without its last chunk is an error
    (the WATCH broke), not a quiet end."""
    import threading
    t = transport.StdlibTransport(streaming.url, None, None)
    # the server ends it 4 s on: past the 3 s for connecting and the headers
    threading.Timer(4, streaming.release.set).start()
    with t.stream("GET", "/stall-close", read_timeout=60, timeout=3) as resp:
        lines = resp.iter_lines()
        assert next(lines) == _Streaming.LINES[0]
        with pytest.raises(transport.ERRORS[1], match="the answer ended inside"):
            next(lines)


def test_the_daemons_watches_take_the_transport_kube_would(tmp_path, monkeypatch):
    """daemon/cache.connector: StdlibTransport for a kubeconfig transport.py reads whole,
    lightkube's httpx2 client (behind the same `stream`) for any other; each call loads
    the kubeconfig anew (a rotated token is read by the next LIST or WATCH)."""
    from netattach.daemon import cache
    path = write(tmp_path, {"server": "http://127.0.0.1:1"}, {"tokenFile": "tok"})
    (tmp_path / "tok").write_text("first")
    connect = cache.connector(path)
    first = connect()
    assert isinstance(first, transport.StdlibTransport)
    assert first._headers["Authorization"] == "Bearer first"
    (tmp_path / "tok").write_text("second")
    assert connect()._headers["Authorization"] == "Bearer second"
    other = write(tmp_path, {"server": "http://127.0.0.1:1"},
                  {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "x"}})
    client = cache.connector(other)()
    assert isinstance(client, cache._Httpx)
    client.close()


@pytest.mark.parametrize("client", ["stdlib", "httpx2"])
def test_both_clients_give_the_cache_the_same_events(streaming, client):
    import httpx2

    from netattach.daemon import cache
    http = (transport.StdlibTransport(streaming.url, None, None) if client == "stdlib"
            else cache._Httpx(httpx2.Client(base_url=streaming.url)))
    with http.stream("GET", "/lines", {"watch": "1"}, read_timeout=5) as resp:
        events = list(cache._events(resp.iter_lines()))
    http.close()
    assert [e["object"]["n"] for e in events] == [1, 2, 3]
