"""Controlled egress (--net allow): the jail reaches the hosts it is allowed, by name, through
pyjail, and nothing else.

The tests build a small internet on the host's loopback: an HTTP server, an HTTPS server with
a test CA (the jailed client trusts it through SSL_CERT_FILE), a "database" that speaks first,
and a DNS server (--net-dns) whose answers the tests choose. Names reach the servers through
--net-resolve NAME:127.0.0.1, as curl's --resolve. Each attack is first shown to reach its
target without the jail (the positive control), then to fail in it.
"""

from __future__ import annotations

import fcntl
import http.server
import json
import os
import socket
import socketserver
import ssl
import struct
import subprocess
import threading
import time

import pytest

from pyjail_testing import skip_or_fail
from pyjail_testing.runs import describe


# --------------------------------------------------------------------------------------------
# The fake internet


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):  # noqa: N802 (the stdlib's name)
        if self.path == "/gigabyte":
            return self.stream(1 << 30)
        size = {"/big": 1 << 20, "/small": 1000}.get(self.path, 0)
        body = b"x" * size if size else f"hello {self.headers.get('Host')}\n".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def stream(self, size):
        """`size` bytes, a MiB at a time, until the reader is gone."""
        self.send_response(200)
        self.send_header("Content-Length", str(size))
        self.end_headers()
        chunk, sent = b"x" * (1 << 20), 0
        try:
            while sent < size:
                self.wfile.write(chunk)
                sent += len(chunk)
        except OSError:
            pass  # the reader is gone

    def log_message(self, *args):
        pass


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


class Database:
    """A TCP server that speaks first ("DB READY"), then echoes; counts connections at once."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(256)
        self.port = self.sock.getsockname()[1]
        self.open = 0
        self.most = 0
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        with self.lock:
            self.open += 1
            self.most = max(self.most, self.open)
        try:
            conn.sendall(b"DB READY\n")
            while data := conn.recv(4096):
                conn.sendall(data)
        except OSError:
            pass
        finally:
            conn.close()
            with self.lock:
                self.open -= 1


class FakeDns:
    """A UDP DNS server: A records from `records`, NXDOMAIN for the rest; logs every name."""

    def __init__(self, records: dict[str, str]):
        self.records = records
        self.asked: list[str] = []
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                msg, peer = self.sock.recvfrom(512)
            except OSError:
                return
            qid = msg[:2]
            labels, i = [], 12
            while msg[i]:
                labels.append(msg[i + 1:i + 1 + msg[i]].decode())
                i += 1 + msg[i]
            question = msg[12:i + 5]
            name = ".".join(labels).lower()
            self.asked.append(name)
            addr = self.records.get(name)
            if addr:
                answer = b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 60, 4) + socket.inet_aton(addr)
                head = qid + struct.pack(">HHHHH", 0x8180, 1, 1, 0, 0)
            else:
                answer = b""
                head = qid + struct.pack(">HHHHH", 0x8183, 1, 0, 0, 0)
            self.sock.sendto(head + question + answer, peer)


def resolve_with(dns: FakeDns, name: str) -> str | None:
    """Asks `dns` for `name` from the host, as a resolver would (the positive control)."""
    q = struct.pack(">HHHHHH", 0x4242, 0x0100, 1, 0, 0, 0)
    q += b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0" + struct.pack(">HH", 1, 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(3)
        s.sendto(q, ("127.0.0.1", dns.port))
        r = s.recv(512)
    return socket.inet_ntoa(r[-4:]) if struct.unpack(">H", r[6:8])[0] else None


class Internet:
    def __init__(self, tmp):
        self.dir = tmp.dir(0o755)
        # A test CA and a server certificate for files.test and other.test (the fronting test
        # needs a server that would serve both names).
        d = self.dir

        def openssl(*args):
            subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=d)

        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=pyjail test CA",
                "-keyout", "ca.key", "-out", "ca.pem")
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=files.test", "-keyout", "srv.key",
                "-out", "srv.csr")
        (d / "ext.cnf").write_text("subjectAltName=DNS:files.test,DNS:other.test\n")
        openssl("x509", "-req", "-in", "srv.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                "-days", "2", "-extfile", "ext.cnf", "-out", "srv.pem")
        (d / "ca.pem").chmod(0o644)
        self.ca = d / "ca.pem"
        self.http = _Server(("127.0.0.1", 0), _Handler)
        self.https = _Server(("127.0.0.1", 0), _Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(d / "srv.pem", d / "srv.key")
        self.https.socket = ctx.wrap_socket(self.https.socket, server_side=True)
        for s in (self.http, self.https):
            threading.Thread(target=s.serve_forever, daemon=True).start()
        self.http_port = self.http.server_address[1]
        self.https_port = self.https.server_address[1]
        self.db = Database()
        self.dns = FakeDns({"internal.test": "127.0.0.1", "metadata.test": "169.254.169.254",
                            "lan.test": "10.255.255.1"})
        self.server_ctx = ssl.create_default_context(cafile=str(self.ca))

    def close(self):
        for s in (self.http, self.https):
            s.shutdown()
            s.server_close()
        self.db.sock.close()
        self.dns.sock.close()


@pytest.fixture(scope="module")
def internet():
    from conftest import WorldTmp

    tmp = WorldTmp()
    net = Internet(tmp)
    yield net
    net.close()
    tmp.cleanup()


def egress_run(run_py, world_tmp, internet, code, user, opts, check=True, **kwargs):
    """Runs `code` with --net allow and `opts`, the test CA trusted; returns it with .report.

    The program writes the CA itself (no host bind), so that under PYJAIL_THROUGH_TEMPLATE=1
    the run goes through a template too."""
    d = world_tmp.dir(0o777)
    report = d / "report.json"
    kwargs["setup"] = f"open('/tmp/ca.pem', 'w').write({internet.ca.read_text()!r})\n" + kwargs.get("setup", "")
    r = run_py(code, user=user, check=check,
               opts=["--net", "allow", "--report", str(report), "--env", "SSL_CERT_FILE=/tmp/ca.pem", *opts],
               **kwargs)
    r.report = json.loads(report.read_text()) if report.exists() else None
    return r


def decisions(report, verdict=None):
    return [d for d in report["egress"]["decisions"] if verdict is None or d["verdict"] == verdict]


PINNED = ["--net-resolve", "web.test:127.0.0.1", "--net-resolve", "files.test:127.0.0.1",
          "--net-resolve", "db.test:127.0.0.1"]


def allow(internet):
    return ["--allow-host", f"web.test:{internet.http_port}", "--allow-host", f"files.test:{internet.https_port}",
            "--allow-host", f"db.test:{internet.db.port}"]


HELPERS = """\
import socket, ssl, urllib.request
def fetch(url):
    try:
        return urllib.request.urlopen(url, timeout=5).read().decode()
    except Exception as e:
        return type(e).__name__
def resolve(name):
    try:
        return socket.gethostbyname(name)
    except socket.gaierror as e:
        return "gaierror %d" % e.errno
"""


# --------------------------------------------------------------------------------------------
# What is allowed works


def test_allowed_names_work_with_urllib_and_sockets(run_py, world_tmp, internet, as_user):
    r = egress_run(run_py, world_tmp, internet, f"""\
        out = {{"addr": resolve("web.test"),
               "http": fetch("http://web.test:{internet.http_port}/"),
               "https": fetch("https://files.test:{internet.https_port}/")}}
        with socket.create_connection(("db.test", {internet.db.port}), timeout=5) as s:
            f = s.makefile("rwb")
            out["banner"] = f.readline().decode()
            f.write(b"ping\\n"); f.flush()
            out["echo"] = f.readline().decode()
        emit(out)
        """, as_user, [*allow(internet), *PINNED], setup=HELPERS)
    got = r.result
    assert got["addr"].startswith("127.100."), got
    assert got["http"] == f"hello web.test:{internet.http_port}\n", got
    assert got["https"] == f"hello files.test:{internet.https_port}\n", got
    assert (got["banner"], got["echo"]) == ("DB READY\n", "ping\n"), got
    allowed = {(d["host"], d["port"]) for d in decisions(r.report, "allowed")}
    assert {("web.test", internet.http_port), ("files.test", internet.https_port),
            ("db.test", internet.db.port), ("web.test", "dns")} <= allowed, r.report["egress"]
    conn = [d for d in decisions(r.report, "allowed") if d["host"] == "files.test" and d["port"] != "dns"][0]
    assert conn["bytes_out"] > 0 and conn["bytes_in"] > 0
    assert r.report["egress"]["refused"] == 0


def test_requests_and_httpx_reach_allowed_names_and_no_other(run_py, run_jail, current_user, world_tmp,
                                                             internet, as_user):
    # The data rootfs's requests (urllib3 underneath, its own CA bundle unless told) and httpx
    # (httpcore and h11, its own connection code): the same relay, with no proxy variable; a
    # name not allowed fails as a name that does not exist, an address goes nowhere.
    r = run_jail(["--rootfs", "data", "--explain"], user=current_user)
    if r.returncode != 0:
        skip_or_fail("no data rootfs (cmake --build build --target rootfs-data): " + r.stderr.strip())
    r = egress_run(run_py, world_tmp, internet, f"""\
        import httpx, requests
        out = {{"http": requests.get("http://web.test:{internet.http_port}/", timeout=5).text,
               "https": requests.get("https://files.test:{internet.https_port}/", timeout=5).text}}
        try:
            requests.get("http://elsewhere.test:{internet.http_port}/", timeout=5)
        except requests.ConnectionError as e:
            out["elsewhere"] = "NameResolutionError" if "NameResolutionError" in repr(e) else repr(e)[:300]
        with httpx.Client(verify="/tmp/ca.pem", timeout=5) as client:
            out["httpx"] = [client.get("http://web.test:{internet.http_port}/").text,
                            client.get("https://files.test:{internet.https_port}/").text]
            for url in ("http://elsewhere.test:{internet.http_port}/", "http://127.0.0.1:{internet.http_port}/"):
                try:
                    client.get(url)
                except httpx.ConnectError as e:
                    out["httpx"].append(str(e)[:200])
        emit(out)
        """, as_user, ["--rootfs", "data", "--env", "REQUESTS_CA_BUNDLE=/tmp/ca.pem",
                       *allow(internet), *PINNED])
    res = dict(r.result)
    got = res.pop("httpx")
    assert got[:2] == [f"hello web.test:{internet.http_port}\n",
                       f"hello files.test:{internet.https_port}\n"], r.result
    assert res == {"http": f"hello web.test:{internet.http_port}\n",
                   "https": f"hello files.test:{internet.https_port}\n",
                   "elsewhere": "NameResolutionError"}, r.result
    elsewhere, by_address = got[2:]
    assert "Name or service not known" in elsewhere and "refused" in by_address, r.result
    refused = {d["host"]: d["why"] for d in decisions(r.report, "refused")}
    assert refused.get("elsewhere.test") == "not an allowed host", r.report["egress"]


# busybox's wget (Debian's busybox-static, bound in): a client with its own HTTP and
# resolver code, written in C, that reads no proxy variable. Control: on the host it reaches
# the server by name and by address.
def test_busybox_wget_reaches_allowed_names_and_no_other(run_jail, world_tmp, internet, as_user):
    if not os.path.isfile("/bin/busybox"):
        skip_or_fail("no /bin/busybox (apt-get install busybox-static)")
    url = f"http://127.0.0.1:{internet.http_port}/"
    host = subprocess.run(["/bin/busybox", "wget", "-q", "-O", "-", url], capture_output=True, text=True,
                          timeout=30)
    assert host.stdout == f"hello 127.0.0.1:{internet.http_port}\n", host

    def wget(url):
        return run_jail(["--quiet", "--net", "allow", *allow(internet), *PINNED,
                         "--ro-bind", "/bin/busybox:/tmp/busybox", "--",
                         "/tmp/busybox", "wget", "-q", "-O", "-", url], user=as_user, timeout=60)

    r = wget(f"http://web.test:{internet.http_port}/")
    assert r.returncode == 0 and r.stdout == f"hello web.test:{internet.http_port}\n", describe(r)
    r = wget(f"http://elsewhere.test:{internet.http_port}/")
    assert r.returncode == 1 and "bad address 'elsewhere.test" in r.stderr, describe(r)
    r = wget(url)
    assert r.returncode == 1 and "Connection refused" in r.stderr, describe(r)


@pytest.fixture(scope="module")
def ca_rootfs(pyjail_bin, internet):
    """A rootfs built by `pyjail rootfs build --ca-certificates` with the test CA: what its
    OpenSSL trusts by default is that CA (on a real host, the host's bundle or a company's)."""
    from conftest import WorldTmp

    tmp = WorldTmp()
    out = tmp.dir() / "rootfs"
    r = subprocess.run([str(pyjail_bin), "rootfs", "build", "--out", str(out), "--ca-certificates",
                        str(internet.ca), "--quiet"], capture_output=True, text=True, timeout=600, cwd="/")
    assert r.returncode == 0, r.stderr
    yield out
    tmp.cleanup()


VERIFY = """\
import ssl, urllib.error, urllib.request
def fetch(url):
    try:
        return urllib.request.urlopen(url, timeout=5).read().decode()
    except urllib.error.URLError as e:
        return repr(e.reason)[:300]
"""


def test_https_is_verified_against_the_ca_bundle_the_rootfs_was_built_with(
        run_py, internet, ca_rootfs, as_user):
    """No SSL_CERT_FILE, no bind: urllib's default context trusts the rootfs's bundle. Built with
    the server's CA, the rootfs verifies the server; the default rootfs (the host's bundle, which
    lacks that CA) refuses it, and so does the same rootfs for a name the certificate lacks."""
    url = f"https://files.test:{internet.https_port}/"
    opts = ["--net", "allow", *allow(internet), *PINNED,
            "--allow-host", f"web.test:{internet.https_port}"]
    code = f"""\
        emit({{"stats": ssl.create_default_context().cert_store_stats(), "files": fetch("{url}"),
               "web": fetch("https://web.test:{internet.https_port}/")}})
        """
    r = run_py(code, user=as_user, setup=VERIFY, opts=["--rootfs", str(ca_rootfs), *opts], timeout=60)
    assert r.result["stats"] == {"x509": 1, "crl": 0, "x509_ca": 1}, describe(r)
    assert r.result["files"] == f"hello files.test:{internet.https_port}\n", describe(r)
    assert "CERTIFICATE_VERIFY_FAILED" in r.result["web"] and "Hostname mismatch" in r.result["web"], \
        describe(r)
    r = run_py(code, user=as_user, setup=VERIFY, opts=opts, timeout=60)
    assert r.result["stats"]["x509_ca"] > 0, describe(r)     # the host's CAs, not the test's
    assert "CERTIFICATE_VERIFY_FAILED" in r.result["files"], describe(r)
    assert "unable to get local issuer certificate" in r.result["files"], describe(r)


# --------------------------------------------------------------------------------------------
# Names


def test_a_denied_name_is_nxdomain_and_never_leaves_the_host(run_py, world_tmp, internet, as_user):
    # Control: the resolver pyjail is told to use does log the names it is asked.
    secret = f"secret-{as_user.name}.exfil.test"
    assert resolve_with(internet.dns, secret) is None
    assert secret in internet.dns.asked
    internet.dns.asked.clear()
    leak = f"leak-{as_user.name}.exfil.test"
    r = egress_run(run_py, world_tmp, internet, f"""\
        emit({{"denied": resolve("{leak}"), "plain": resolve("web.test.evil.test")}})
        """, as_user, [*allow(internet), *PINNED, "--net-dns", f"127.0.0.1:{internet.dns.port}"], setup=HELPERS)
    assert r.result == {"denied": "gaierror -2", "plain": "gaierror -2"}, r.result  # EAI_NONAME
    assert leak not in internet.dns.asked, internet.dns.asked  # no exfiltration through names
    refused = {d["host"]: d["why"] for d in decisions(r.report, "refused")}
    assert refused.get(leak) == "not an allowed host", r.report["egress"]
    assert r.report["egress"]["dns_refused"] >= 2


def test_a_name_resolving_to_a_private_or_metadata_address_is_refused_unless_pinned(
        run_py, world_tmp, internet, as_user):
    # Control: the resolver says internal.test is 127.0.0.1, where the web server answers.
    assert resolve_with(internet.dns, "internal.test") == "127.0.0.1"
    with socket.create_connection(("127.0.0.1", internet.http_port), timeout=3):
        pass
    code = f"""\
        emit({{"internal": fetch("http://internal.test:{internet.http_port}/"),
               "metadata": fetch("http://metadata.test/latest/meta-data/"),
               "lan": fetch("http://lan.test/")}})
        """
    hosts = ["--allow-host", f"internal.test:{internet.http_port}", "--allow-host", "metadata.test",
             "--allow-host", "lan.test", "--net-dns", f"127.0.0.1:{internet.dns.port}"]
    r = egress_run(run_py, world_tmp, internet, code, as_user, hosts, setup=HELPERS)
    assert all(v in ("URLError", "RemoteDisconnected", "ConnectionResetError") for v in r.result.values()), r.result
    why = {d["host"]: d["why"] for d in decisions(r.report, "refused") if d["port"] != "dns"}
    assert why["internal.test"] == "internal.test resolves to 127.0.0.1, a loopback address", why
    assert "link-local" in why["metadata.test"] and "169.254.169.254" in why["metadata.test"], why
    assert "private" in why["lan.test"], why
    # Pinned by the user, the same name works.
    r = egress_run(run_py, world_tmp, internet, code, as_user,
                   [*hosts, "--net-resolve", "internal.test:127.0.0.1"], setup=HELPERS)
    assert r.result["internal"] == f"hello internal.test:{internet.http_port}\n", r.result


# --------------------------------------------------------------------------------------------
# Connections that do not name their host go nowhere


def host_address() -> str | None:
    """An address of this host that is not loopback, if it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # no packet is sent: only a route is chosen
            addr = s.getsockname()[0]
        except OSError:
            return None
    return None if addr.startswith("127.") else addr


def test_addresses_udp_and_other_ports_go_nowhere(run_py, world_tmp, internet, as_user):
    ip = host_address()
    targets = ["127.0.0.1"] + ([ip] if ip else [])
    tcp = socket.socket()
    tcp.bind(("0.0.0.0", 0))
    tcp.listen(8)
    tcp.settimeout(0.5)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("0.0.0.0", tcp.getsockname()[1]))
    udp.settimeout(0.5)
    port = tcp.getsockname()[1]
    try:
        # Controls: from the host, both servers are reached at every address.
        for t in targets:
            with socket.create_connection((t, port), timeout=3):
                tcp.accept()[0].close()
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.sendto(b"control", (t, port))
            assert udp.recvfrom(64)[0] == b"control"
        r = egress_run(run_py, world_tmp, internet, f"""\
            out = {{}}
            for t in {targets!r}:
                out["tcp " + t] = attempt(socket.create_connection, (t, {port}), timeout=3)
                with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                    out["udp " + t] = attempt(s.sendto, b"leak", (t, {port}))
            out["tcp public"] = attempt(socket.create_connection, ("8.8.8.8", 443), timeout=3)
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                out["udp public"] = attempt(s.sendto, b"leak", ("8.8.8.8", 53))
            # The allowed name's address, on a port it is not allowed.
            out["other port"] = attempt(socket.create_connection, (resolve("web.test"), 22), timeout=3)
            emit(out)
            """, as_user, [*allow(internet), *PINNED], setup=HELPERS)
        got = r.result
        assert got["tcp 127.0.0.1"] == "ECONNREFUSED", got  # the jail's own loopback
        assert got["udp 127.0.0.1"] == "ok", got  # sent into the jail's own loopback
        assert got["tcp public"] == "ENETUNREACH" and got["udp public"] == "ENETUNREACH", got
        assert got["other port"] == "ECONNREFUSED", got
        if ip:
            assert got[f"tcp {ip}"] == "ENETUNREACH" and got[f"udp {ip}"] == "ENETUNREACH", got
        with pytest.raises(socket.timeout):
            udp.recvfrom(64)
        with pytest.raises(socket.timeout):
            tcp.accept()
        assert r.report["egress"]["connections"] == 0, r.report["egress"]
    finally:
        udp.close()
        tcp.close()


def read_all(s) -> bytes:
    data = b""
    while chunk := s.recv(4096):
        data += chunk
    return data


PIPELINED = (b"GET / HTTP/1.1\r\nHost: web.test\r\n\r\n"
             b"GET / HTTP/1.1\r\nHost: other.test\r\nConnection: close\r\n\r\n")


def test_a_spoofed_host_header_or_sni_is_refused(run_py, world_tmp, internet, as_user):
    # Controls: the servers serve other.test too (a shared front), by Host and by SNI.
    with socket.create_connection(("127.0.0.1", internet.http_port), timeout=3) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: other.test\r\nConnection: close\r\n\r\n")
        assert b"hello other.test" in read_all(s)
    with socket.create_connection(("127.0.0.1", internet.https_port), timeout=3) as raw:
        with internet.server_ctx.wrap_socket(raw, server_hostname="other.test") as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: other.test\r\nConnection: close\r\n\r\n")
            assert b"hello other.test" in read_all(s)
    # ... and a second request on a kept-alive connection is served for its own Host.
    with socket.create_connection(("127.0.0.1", internet.http_port), timeout=3) as s:
        s.sendall(PIPELINED)
        assert b"hello other.test" in read_all(s)
    r = egress_run(run_py, world_tmp, internet, f"""\
        def http_as(host):
            with socket.create_connection(("web.test", {internet.http_port}), timeout=5) as s:
                s.sendall(("GET / HTTP/1.1\\r\\nHost: %s\\r\\nConnection: close\\r\\n\\r\\n" % host).encode())
                try:
                    return s.recv(4096).decode()[:40] or "closed"
                except OSError as e:
                    return _errno.errorcode.get(e.errno)
        def tls_as(name):
            ctx = ssl.create_default_context()
            try:
                with socket.create_connection(("files.test", {internet.https_port}), timeout=5) as raw:
                    with ctx.wrap_socket(raw, server_hostname=name) as s:
                        s.sendall(("GET / HTTP/1.1\\r\\nHost: %s\\r\\nConnection: close\\r\\n\\r\\n" % name).encode())
                        return s.recv(4096).decode()[:40]
            except (OSError, ssl.SSLError) as e:
                return type(e).__name__
        def pipelined():
            with socket.create_connection(("web.test", {internet.http_port}), timeout=5) as s:
                s.sendall({PIPELINED!r})
                data = b""
                while chunk := s.recv(4096):
                    data += chunk
                return data.decode()
        emit({{"spoofed http": http_as("other.test"), "spoofed tls": tls_as("other.test"),
               "http": http_as("web.test"), "tls": tls_as("files.test"), "pipelined": pipelined()}})
        """, as_user, [*allow(internet), *PINNED], setup=HELPERS)
    got = r.result
    assert got["http"].startswith("HTTP/1.1 200"), got
    assert got["tls"].startswith("HTTP/1.1 200"), got
    assert got["spoofed http"] in ("closed", "ECONNRESET"), got
    # Only the first request of a connection reaches the server.
    assert "hello web.test" in got["pipelined"] and "other.test" not in got["pipelined"], got
    assert got["spoofed tls"] in ("SSLEOFError", "ConnectionResetError", "SSLError", "SSLZeroReturnError"), got
    why = {d["host"]: d["why"] for d in decisions(r.report, "refused")}
    assert why["web.test"] == "HTTP Host names other.test, not web.test", why
    assert why["files.test"] == "TLS SNI names other.test, not files.test", why


# --------------------------------------------------------------------------------------------
# Limits


def test_net_bytes_cuts_a_download_over_it(run_py, world_tmp, internet, as_user):
    code = f"""\
        emit({{"small": len(fetch("http://web.test:{internet.http_port}/small")),
               "big": fetch("http://web.test:{internet.http_port}/big")[:20]}})
        """
    # Under the limit (1 MiB each way), both downloads are whole.
    r = egress_run(run_py, world_tmp, internet, code, as_user, [*allow(internet), *PINNED, "--net-bytes", "2M"],
                   setup=HELPERS)
    assert r.result == {"small": 1000, "big": "x" * 20}, r.result
    assert not r.report["egress"]["bytes_limit_hit"]
    # Over it: the small one still fits, the big one is cut.
    r = egress_run(run_py, world_tmp, internet, code, as_user, [*allow(internet), *PINNED, "--net-bytes", "100K"],
                   setup=HELPERS)
    assert r.result["small"] == 1000, r.result
    assert r.result["big"] in ("IncompleteRead", "ConnectionResetError", "RemoteDisconnected"), r.result
    e = r.report["egress"]
    assert e["bytes_limit_hit"] and e["bytes_in"] <= 100 * 1024, e
    assert [d["why"] for d in decisions(r.report, "cut")] == ["over --net-bytes"], e


def test_net_bytes_cuts_a_gigabyte_download_at_its_limit(run_py, world_tmp, internet, as_user):
    # Control: without the jail, the server offers the whole gigabyte.
    with socket.create_connection(("127.0.0.1", internet.http_port), timeout=3) as s:
        s.sendall(b"GET /gigabyte HTTP/1.1\r\nHost: web.test\r\n\r\n")
        assert b"Content-Length: 1073741824" in s.recv(4096)
    r = egress_run(run_py, world_tmp, internet, f"""\
        import urllib.request
        length, got, err = 0, 0, None
        try:
            with urllib.request.urlopen("http://web.test:{internet.http_port}/gigabyte", timeout=5) as u:
                length = int(u.headers["Content-Length"])
                while chunk := u.read(1 << 16):
                    got += len(chunk)
        except Exception as e:
            err = type(e).__name__
        emit({{"length": length, "got": got, "err": err}})
        """, as_user, [*allow(internet), *PINNED, "--net-bytes", "2M"], setup=HELPERS)
    got = r.result
    # Cut at the limit, with a reset: the client reads less than the length it was promised,
    # and an error, not an end of stream it could take for the whole body.
    assert got["length"] == 1 << 30 and got["got"] <= 2 << 20, got
    assert got["err"] == "ConnectionResetError", got
    e = r.report["egress"]
    assert e["bytes_limit_hit"] and e["bytes_in"] <= 2 << 20, e
    assert [d["why"] for d in decisions(r.report, "cut")] == ["over --net-bytes"], e


def test_a_connection_flood_is_bounded_and_the_run_ends_on_time(run_py, world_tmp, internet, as_user):
    # Control: without the jail, the database holds 100 connections at once.
    held = [socket.create_connection(("127.0.0.1", internet.db.port), timeout=3) for _ in range(100)]
    for s in held:
        s.recv(16)
    assert internet.db.most >= 100
    for s in held:
        s.close()
    r = egress_run(run_py, world_tmp, internet, f"""\
        import time
        held, failed = [], 0
        start = time.monotonic()
        while len(held) + failed < 400 and time.monotonic() < start + 2:
            try:
                s = socket.create_connection(("db.test", {internet.db.port}), timeout=0.2)
                s.setblocking(False)
                held.append(s)
            except OSError:
                failed += 1
        emit({{"held": len(held), "failed": failed}})
        time.sleep(60)
        """, as_user, [*allow(internet), *PINNED, "--wall-time", "6"], check=False, timeout=60, setup=HELPERS)
    assert r.report["status"] == "wall-timeout", describe(r)
    e = r.report["egress"]
    # The jail had far more connections open than pyjail relays at once (the rest waited in
    # its own kernel, or timed out there).
    assert r.result["held"] > 32, r.result
    assert 0 < e["most_at_once"] <= 32, e  # kMaxConnections
    assert e["connections"] <= 400, e


# Attack: a slow-drip client. The jail opens as many connections as pyjail relays at once and
# sends each request a byte at a time, never ending its head, to hold the relay's places (and
# the servers' threads) as long as it likes. pyjail closes each one that has not said which host
# it wants within 10 s (kEgressSniffMs): the places come back and a fetch made after works. A
# connection that has named its host and then drips is bounded the same way as any allowed
# one: 60 s idle, --net-bytes, the 32 at once and the run's wall time.
def test_a_slow_drip_client_is_cut_when_it_has_not_named_its_host(run_py, world_tmp, internet, as_user):
    # Control: without the jail, the server waits for a dripping request as long as it drips.
    with socket.create_connection(("127.0.0.1", internet.http_port), timeout=3) as s:
        for byte in b"GET / HTTP/1.1\r\nX-Pad: ":
            s.sendall(bytes([byte]))
            time.sleep(0.1)
        s.settimeout(1)
        with pytest.raises(socket.timeout):
            s.recv(1)
    r = egress_run(run_py, world_tmp, internet, f"""\
        import time
        conns = [socket.create_connection(("web.test", {internet.http_port}), timeout=5) for _ in range(32)]
        for s in conns:
            s.setblocking(False)
        start, cut = time.monotonic(), {{}}
        head = b"GET / HTTP/1.1\\r\\nX-Pad: " + b"a" * 100
        i = 0
        while len(cut) < len(conns) and time.monotonic() < start + 30:
            for k, s in enumerate(conns):
                if k in cut:
                    continue
                try:
                    if s.recv(1) == b"":
                        cut[k] = time.monotonic() - start
                        continue
                except BlockingIOError:
                    pass
                except OSError:
                    cut[k] = time.monotonic() - start
                    continue
                try:
                    s.send(head[i:i + 1])
                except BlockingIOError:
                    pass
                except OSError:
                    cut[k] = time.monotonic() - start
            i = min(i + 1, len(head) - 1)
            time.sleep(0.25)
        emit({{"cut": len(cut), "first": min(cut.values(), default=None),
               "last": max(cut.values(), default=None),
               "after": len(fetch("http://web.test:{internet.http_port}/small"))}})
        """, as_user, [*allow(internet), *PINNED, "--wall-time", "60"], timeout=90, setup=HELPERS)
    res = r.result
    # All 32 held on for most of the 10 s, then were cut; the places came back.
    assert res["cut"] == 32 and res["first"] > 7 and res["last"] < 30, res
    assert res["after"] == 1000, res
    refused = {d["why"]: d["count"] for d in decisions(r.report, "refused")}
    assert refused == {"the client did not say which host it wants within 10 s": 32}, r.report["egress"]
    assert r.report["egress"]["refused"] == 32 and r.report["egress"]["most_at_once"] == 32


def supervisor_pipe_sizes(pid: int) -> list[int]:
    """The sizes (F_GETPIPE_SZ) of the pipes process `pid` holds, each once."""
    sizes = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
            if link.startswith("pipe:") and link not in sizes:
                own = os.open(f"/proc/{pid}/fd/{fd}", os.O_RDONLY | os.O_NONBLOCK)
                try:
                    sizes[link] = fcntl.fcntl(own, 1032)  # F_GETPIPE_SZ
                finally:
                    os.close(own)
        except OSError:
            pass  # closed meanwhile
    return sorted(sizes.values())


# The relay's pipes count against the invoking user's pipe budget (fs.pipe-user-pages-soft) by
# their size, not by what they hold, for as long as they exist; past that budget every new
# pipe of the user (any of its processes) gets two pages. Attack: a jail holding its 32
# connections idle made the supervisor charge 32 x 256 KiB of download pipes to the user.
# Only a download that fills its pipe gets the larger one.
def test_idle_connections_hold_only_default_pipes_and_a_download_grows_its_own(popen_jail, internet, as_user):
    from conftest import read_line

    db = ["--allow-host", f"db.test:{internet.db.port}", "--net-resolve", "db.test:127.0.0.1"]
    web = ["--allow-host", f"web.test:{internet.http_port}", "--net-resolve", "web.test:127.0.0.1"]
    p = popen_jail(["--quiet", "--net", "allow", *db, *web, "--wall-time", "60", "--", "python", "-c", f"""
import socket, sys
held = []
for _ in range(30):
    s = socket.create_connection(("db.test", {internet.db.port}), timeout=10)
    assert s.recv(16) == b"DB READY\\n"
    held.append(s)
print("idle", flush=True)
sys.stdin.readline()
# A download the program does not read yet: the relay's pipe fills.
big = socket.socket()
big.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
big.settimeout(10)
big.connect(("web.test", {internet.http_port}))
big.sendall(b"GET /big HTTP/1.1\\r\\nHost: web.test:{internet.http_port}\\r\\n\\r\\n")
print("downloading", flush=True)
sys.stdin.readline()
"""], user=as_user, stdin=subprocess.PIPE)
    try:
        assert read_line(p.stdout, 60) == b"idle\n", p.stderr.read1() if p.poll() is not None else "no line"
        idle = supervisor_pipe_sizes(p.pid)
        assert len(idle) >= 60, idle  # two per relayed connection
        assert max(idle) <= 64 << 10, idle
        p.stdin.write(b"\n")
        p.stdin.flush()
        assert read_line(p.stdout, 60) == b"downloading\n"
        grown = []
        for _ in range(200):  # until the relay has filled the download's pipe
            grown = [s for s in supervisor_pipe_sizes(p.pid) if s > 64 << 10]
            if grown:
                break
            time.sleep(0.05)
        assert grown == [256 << 10], supervisor_pipe_sizes(p.pid)
    finally:
        try:
            p.stdin.write(b"\n\n")  # both of the program's waits end
            p.stdin.flush()
        except OSError:
            pass
        p.wait(60)


# --------------------------------------------------------------------------------------------
# Bad input


def test_egress_options_need_net_allow_and_valid_values(run_jail, as_user):
    for args, message in [
        (["--allow-host", "pypi.org"], "pyjail: --allow-host needs --net allow, but "),
        (["--net", "allow"], "pyjail: --net: 'allow' without --allow-host reaches nothing"),
        (["--net", "allow", "--allow-host", "10.0.0.1"],
         "pyjail: --allow-host: '10.0.0.1' is not a host name with a domain"),
        (["--net", "allow", "--allow-host", "a.test", "--net-resolve", "a.test"],
         "pyjail: --net-resolve: 'a.test' is not HOST:ADDRESS"),
    ]:
        r = run_jail([*args, "--", "python", "-c", "pass"], user=as_user)
        assert r.returncode == 125, describe(r)
        assert r.stderr.splitlines()[0].startswith(message), r.stderr


def test_a_wildcard_allows_subdomains_up_to_its_pool(run_py, world_tmp, internet, as_user):
    pins = [a for i in range(10) for a in ("--net-resolve", f"n{i}.svc.test:127.0.0.1")]
    r = egress_run(run_py, world_tmp, internet, f"""\
        names = ["n%d.svc.test" % i for i in range(10)]
        addrs = [resolve(n) for n in names]
        emit({{"addrs": addrs, "apex": resolve("svc.test"),
               "n3": fetch("http://n3.svc.test:{internet.http_port}/"),
               "n3 again": resolve("n3.svc.test") == addrs[3]}})
        """, as_user, ["--allow-host", f"*.svc.test:{internet.http_port}", *pins], setup=HELPERS)
    got = r.result
    # Eight names of *.svc.test get an address each; the ninth and tenth do not.
    assert len(set(got["addrs"][:8])) == 8 and all(a.startswith("127.100.") for a in got["addrs"][:8]), got
    assert got["addrs"][8:] == ["gaierror -2", "gaierror -2"], got
    assert got["apex"] == "gaierror -2", got  # *.svc.test is not svc.test
    assert got["n3"] == f"hello n3.svc.test:{internet.http_port}\n", got
    assert got["n3 again"], got
    why = {d["host"]: d["why"] for d in decisions(r.report, "refused")}
    assert why["n8.svc.test"] == "more than 8 names of *.svc.test", why


def test_the_jail_holds_only_lo_and_cannot_take_pyjails_sockets(run_py, world_tmp, internet, as_user):
    r = egress_run(run_py, world_tmp, internet, f"""\
        lines = open("/proc/net/dev").read().splitlines()[2:]
        addr = resolve("web.test")
        def bind(kind, address, reuse=False):
            with socket.socket(socket.AF_INET, kind) as s:
                if reuse:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
                s.bind(address)
        emit({{"interfaces": sorted(l.split(":")[0].strip() for l in lines),
               "dns port": attempt(bind, socket.SOCK_DGRAM, ("127.0.0.1", 53)),
               "listener": attempt(bind, socket.SOCK_STREAM, (addr, {internet.http_port}), True),
               "resolv.conf": open("/etc/resolv.conf").read() if os.path.exists("/etc/resolv.conf") else None,
               "hosts writable": attempt(open, "/etc/hosts", "a")}})
        """, as_user, [*allow(internet), *PINNED], setup=HELPERS)
    got = r.result
    assert got["interfaces"] == ["lo"], got
    assert got["dns port"] == "EACCES", got  # no capability to bind below 1024
    assert got["listener"] == "EADDRINUSE", got  # pyjail's listener, without SO_REUSEPORT
    assert got["resolv.conf"] in (None, "nameserver 127.0.0.1\noptions timeout:2 attempts:2\n"), got
    assert got["hosts writable"] in ("EROFS", "EACCES"), got


# --------------------------------------------------------------------------------------------
# Runs from a template (`pyjail serve --net allow`, `pyjail --via`)


VIA_HELPERS = HELPERS + """\
import errno
def attempt(fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
"""


def via_egress(run_jail, user, sock, code, opts, **kwargs):
    return run_jail(["--quiet", "--net", "allow", *opts, "--via", sock, "--", "python", "-c", VIA_HELPERS + code],
                    user=user, **kwargs)


def test_a_template_s_allowlist_bounds_what_its_runs_may_ask(run_jail, serve, internet, as_user):
    web = ["--allow-host", f"web.test:{internet.http_port}", "--net-resolve", "web.test:127.0.0.1"]
    files = ["--allow-host", f"files.test:{internet.https_port}", "--net-resolve", "files.test:127.0.0.1"]
    code = f"print(fetch('http://web.test:{internet.http_port}/'), resolve('files.test'))"
    # Control: a fresh jail allowed files.test reaches it.
    r = run_jail(["--quiet", "--net", "allow", *web, *files, "--", "python", "-c", HELPERS + code], user=as_user)
    assert r.returncode == 0 and r.stdout.startswith(f"hello web.test:{internet.http_port}\n 127.100."), describe(r)
    sock, _ = serve(as_user, "--net", "allow", *web, "--net-bytes", "10M")
    # Within the template's allowlist: the run reaches its host; files.test is no name to it.
    r = via_egress(run_jail, as_user, sock, code, [*web, "--net-bytes", "1M"])
    assert (r.returncode, r.stdout) == (0, f"hello web.test:{internet.http_port}\n gaierror -2\n"), describe(r)
    # Beyond it: refused before the run exists, in one line naming what it asked for.
    for extra, asked in [
        (files, f"--allow-host files.test:{internet.https_port}, beyond this server's runs' allowlist "
                f"(web.test:{internet.http_port})"),
        (["--allow-host", "web.test"], f"--allow-host web.test:80,443,{internet.http_port}, beyond"),
        (["--allow-host", "*.web.test:80"], "--allow-host *.web.test:80, beyond"),
        (["--net-resolve", "other.test:127.0.0.2"], "--net-resolve other.test:127.0.0.2, which this server's runs do not"),
        (["--net-dns", f"127.0.0.1:{internet.dns.port}"], f"--net-dns 127.0.0.1:{internet.dns.port};"),
        (["--net-bytes", "20M"], "--net-bytes 20M; this server's runs have at most 10M"),
    ]:
        opts = [*web, "--net-bytes", "1M", *extra] if extra[0] != "--net-bytes" else [*web, *extra]
        r = via_egress(run_jail, as_user, sock, code, opts)
        assert r.returncode == 125 and r.stdout == "", describe(r)
        lines = [line for line in r.stderr.splitlines() if line.startswith("pyjail:")]
        assert len(lines) == 1 and "cannot start the run: the run asks for " + asked in lines[0], describe(r)


def test_a_run_with_a_seccomp_set_of_its_own_reaches_the_template_s_allowed_hosts(run_jail, serve, internet,
                                                                                    world_tmp, as_user):
    # A run whose set is not its template's gets a filter the server compiles for it. Under
    # --net allow that filter must let the program open internet sockets, as a fresh jail's
    # does: it was compiled as for --net none, and the run reached no allowed host.
    from pathlib import Path
    web = ["--allow-host", f"web.test:{internet.http_port}", "--net-resolve", "web.test:127.0.0.1"]
    shipped = (Path(__file__).resolve().parents[2] / "profiles" / "seccomp" / "python.toml").read_text()
    assert ', "@numa-self"]' in shipped
    no_numa = str(world_tmp.file("no-numa.toml", shipped.replace(', "@numa-self"]', "]", 1)))
    sock, _ = serve(as_user, "--net", "allow", *web)
    code = f"""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
numa = "ok" if libc.syscall(239, 0, 0, 0, 0, 0) == 0 else errno.errorcode[ctypes.get_errno()]
print(fetch('http://web.test:{internet.http_port}/').strip(), attempt(socket.socket, socket.AF_INET6), numa)
"""
    # Control: under the template's own set.
    r = via_egress(run_jail, as_user, sock, code, web)
    assert (r.returncode, r.stdout) == (0, f"hello web.test:{internet.http_port} ok ok\n"), describe(r)
    # Under a set of its own (get_mempolicy is no name to it: the set took effect).
    r = via_egress(run_jail, as_user, sock, code, [*web, "--seccomp", no_numa])
    assert (r.returncode, r.stdout) == (0, f"hello web.test:{internet.http_port} ok ENOSYS\n"), describe(r)


def test_a_run_from_a_template_reaches_no_other_run_s_listeners(run_jail, popen_jail, serve, internet, as_user):
    db = ["--allow-host", f"db.test:{internet.db.port}", "--net-resolve", "db.test:127.0.0.1"]
    web = ["--allow-host", f"web.test:{internet.http_port}", "--net-resolve", "web.test:127.0.0.1"]
    sock, _ = serve(as_user, "--net", "allow", *db, *web)
    # Run A (db.test only) holds its listener and shows it works: the control.
    a = popen_jail(["--quiet", "--net", "allow", *db, "--via", sock, "--", "python", "-c", HELPERS + f"""
import sys
addr = resolve("db.test")
with socket.create_connection((addr, {internet.db.port}), timeout=5) as s:
    print(addr, s.recv(16).decode().strip(), flush=True)
sys.stdin.readline()
"""], user=as_user, stdin=subprocess.PIPE, text=True)
    line = a.stdout.readline().split()
    assert len(line) == 3 and line[0].startswith("127.100.") and line[1:] == ["DB", "READY"], a.stderr.read()
    try:
        # Run B (web.test only), at the same time: A's address and port lead nowhere in its
        # namespace, and db.test, which the template allows, is no name to B.
        r = via_egress(run_jail, as_user, sock, f"""
out = {{"db": resolve("db.test"), "web": fetch("http://web.test:{internet.http_port}/")}}
out["a's listener"] = attempt(socket.create_connection, ("{line[0]}", {internet.db.port}), timeout=3)
print(out)
""", web)
        got = eval(r.stdout) if r.returncode == 0 else describe(r)
        assert got == {"db": "gaierror -2", "web": f"hello web.test:{internet.http_port}\n",
                       "a's listener": "ECONNREFUSED"}, got
    finally:
        a.stdin.write("\n")
        a.stdin.flush()
        assert a.wait(30) == 0


def test_a_failed_run_names_the_hosts_the_jail_refused(run_py, world_tmp, internet, as_user):
    # The program sees only a failed lookup; pyjail's last line names the refusal and the
    # option, once the run failed (one that went on without the host is not told).
    code = f"""\
        import sys
        ok = fetch("http://web.test:{internet.http_port}/")
        gone = fetch("http://elsewhere.test:{internet.http_port}/")
        print(ok.strip(), gone)
        sys.exit(int(sys.argv[1]))
        """
    r = egress_run(run_py, world_tmp, internet, code, as_user, [*allow(internet), *PINNED],
                   check=False, setup=HELPERS, argv=["3"])
    assert r.returncode == 3, r.stderr
    assert r.stdout.splitlines()[-1] == f"hello web.test:{internet.http_port} URLError", r.stdout
    lines = [line for line in r.stderr.splitlines() if line.startswith("pyjail: the jail refused ")]
    assert lines == ["pyjail: the jail refused elsewhere.test (not an allowed host): --allow-host "
                     "HOST[:PORT] names what the program may reach (--report's egress lists every "
                     "decision)"], r.stderr
    r = egress_run(run_py, world_tmp, internet, code, as_user, [*allow(internet), *PINNED],
                   check=False, setup=HELPERS, argv=["0"])
    assert r.returncode == 0 and "the jail refused" not in r.stderr, r.stderr
