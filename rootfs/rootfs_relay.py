"""The pip jail's only way out: a relay to the package index's hosts, and nothing else.

pip runs in a jail whose network is its own loopback (rootfs_packages.pip_jail_command). In
that jail, a forwarder of ours (rootfs_packages.RUN_PIP_RELAYED) listens on 127.0.0.1 and
passes each connection to a Unix socket bound into the jail; pip uses it as its HTTPS proxy.
On the host, the builder serves that socket (Relay): it reads one `CONNECT host:port` request,
and connects only to a host the build named as its index (--index-url, --extra-index-url,
--find-links URLs; PyPI's two hosts by default) on that URL's port, to an address that is
not link-local, multicast or unspecified (and not loopback or private, unless the user named
that host as an index). Then it copies bytes both ways, bounded in time and size. TLS stays end to end:
pip checks the index's certificate itself.

Everything the jail sends is hostile: the request head is bounded in size and time, the host
name is matched exactly against the list, and a refusal is remembered (bounded) so a failed
build can say which host pip wanted.

Only the standard library of any python3 >= 3.9 is used.
"""

import ipaddress
import os
import re
import select
import socket
import threading
import time
import urllib.parse

PYPI = ("https://pypi.org/simple", "https://files.pythonhosted.org")

HEAD_LIMIT = 8192           # a CONNECT request's head
HEAD_DEADLINE = 30          # seconds to send it
CONNECT_TIMEOUT = 30        # seconds to reach the index
IDLE_TIMEOUT = 300          # seconds without a byte either way
BYTES_LIMIT = 16 << 30      # bytes each way, per connection
MAX_CONNECTIONS = 32        # at once
MAX_REFUSED = 16            # refusals remembered for the error message

HOST_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,62})(\.[a-z0-9]([a-z0-9-]{0,62}))*$")
CONNECT_RE = re.compile(rb"^CONNECT ([^\s:]{1,253}):([0-9]{1,5}) HTTP/1\.[01]\r\n")


def allowed_hosts(index_urls, find_links):
    """{host: {ports}} the relay lets through, from the index URLs (PyPI's when none) and the
    --find-links URLs; pure. Raises ValueError for a URL that is not https://HOST[:PORT]/..."""
    allowed = {}
    for url in list(index_urls or PYPI) + [u for u in find_links if "://" in u]:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme != "https" or not parts.hostname:
            raise ValueError(url)
        host = parts.hostname.lower()
        if not HOST_RE.match(host) and not _is_address(host):
            raise ValueError(url)
        allowed.setdefault(host, set()).add(parts.port or 443)
    if not index_urls:
        allowed.setdefault("files.pythonhosted.org", set()).add(443)
    return allowed


def _is_address(host):
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return False


def parse_connect(head):
    """(host, port) of a CONNECT request head (bytes, up to its blank line); pure. Raises
    ValueError for anything else."""
    m = CONNECT_RE.match(head)
    if not m or not head.endswith(b"\r\n\r\n"):
        raise ValueError("not a CONNECT request")
    host = m.group(1).decode("ascii", "strict").lower()
    port = int(m.group(2))
    if not 0 < port < 65536:
        raise ValueError("port")
    return host, port


# The host's own loopback and the networks of its site (a LAN, a carrier's NAT, IPv6 unique
# local): reached only for a host the user named as an index (a private index, a mirror on this
# host). Link-local (cloud metadata), multicast and unspecified addresses never.
PRIVATE_NETS = tuple(ipaddress.ip_network(n) for n in (
    "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "0.0.0.0/8",
    "fc00::/7", "fec0::/10"))


def address_ok(address, private_ok):
    """Whether the relay may connect to this address; pure."""
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    if ip.is_link_local or ip.is_multicast or ip.is_unspecified:
        return False
    if ip.is_loopback or any(ip in n for n in PRIVATE_NETS if n.version == ip.version):
        return private_ok
    return True


class Relay:
    """Serves the jail's Unix socket at `path` in threads of the builder's own, until close()."""

    def __init__(self, path, allowed, private_ok=()):
        self.allowed, self.private_ok = allowed, set(private_ok)
        self.refused, self.lock = [], threading.Lock()
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        # The jail's user connects (nobody, for root): it may, and only through this file's
        # bind into the jail does it find it.
        os.chmod(path, 0o666)
        self.sock.listen(64)
        self.closed = False
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def close(self):
        self.closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()

    def refuse(self, why):
        with self.lock:
            if len(self.refused) < MAX_REFUSED and why not in self.refused:
                self.refused.append(why)

    def serve(self):
        while not self.closed:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            if not self.slots.acquire(blocking=False):
                conn.close()        # more at once than a pip install needs
                continue
            threading.Thread(target=self.serve_one, args=(conn,), daemon=True).start()

    def serve_one(self, conn):
        upstream = None
        try:
            head = self.read_head(conn)
            if head is None:
                return
            try:
                host, port = parse_connect(head)
            except (ValueError, UnicodeDecodeError):
                self.refuse("a request that is not CONNECT")
                conn.sendall(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
                return
            if port not in self.allowed.get(host, ()):
                self.refuse("%s:%d" % (host, port))
                conn.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
                return
            upstream = self.connect(host, port)
            if upstream is None:
                conn.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
                return
            conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            self.splice(conn, upstream)
        except OSError:
            pass
        finally:
            for s in (conn, upstream):
                if s is not None:
                    s.close()
            self.slots.release()

    @staticmethod
    def read_head(conn):
        """The request head, read a byte at a time so nothing of the tunnel is taken; None
        when it is too long or the deadline passed (one deadline for the whole head: a jail
        that trickles bytes gains nothing)."""
        head, deadline = b"", time.monotonic() + HEAD_DEADLINE
        while not head.endswith(b"\r\n\r\n"):
            left = deadline - time.monotonic()
            if len(head) >= HEAD_LIMIT or left <= 0:
                return None
            conn.settimeout(left)
            try:
                b = conn.recv(1)
            except socket.timeout:
                return None
            if not b:
                return None
            head += b
        return head

    def connect(self, host, port):
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError:
            self.refuse("%s (no address)" % host)
            return None
        for family, kind, proto, _, addr in infos:
            if not address_ok(addr[0], host in self.private_ok):
                self.refuse("%s (address %s)" % (host, addr[0]))
                continue
            s = socket.socket(family, kind, proto)
            s.settimeout(CONNECT_TIMEOUT)
            try:
                s.connect(addr)
                return s
            except OSError:
                s.close()
        return None

    @staticmethod
    def splice(a, b):
        a.setblocking(False)
        b.setblocking(False)
        sent = {a: 0, b: 0}
        other = {a: b, b: a}
        open_ = {a, b}
        while open_:
            ready, _, _ = select.select(list(open_), [], [], IDLE_TIMEOUT)
            if not ready:
                return          # idle
            for s in ready:
                try:
                    data = s.recv(65536)
                except BlockingIOError:
                    continue
                if not data:
                    open_.discard(s)
                    try:
                        other[s].shutdown(socket.SHUT_WR)
                    except OSError:
                        pass
                    continue
                sent[s] += len(data)
                if sent[s] > BYTES_LIMIT:
                    return
                other[s].setblocking(True)
                other[s].settimeout(IDLE_TIMEOUT)
                other[s].sendall(data)
                other[s].setblocking(False)
