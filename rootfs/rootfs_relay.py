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

What the index sends lands on the host's disk (pip's staging directory, the wheel cache), so
the relay also bounds the total it passes to the jail, all its connections together
(DownloadBudget): past it, it cuts every connection, refuses new ones and records why
(Relay.stopped), and the builder fails the build.

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
# Bytes from the index's hosts to the jail, all connections of one relay together (one pip
# run; a build reaches the index in one pip run at most), unless --download-limit says
# otherwise. Attack: an index, or a package set, that makes pip download without end (many
# large wheels, dependencies that multiply) and so fills the host's disk through the staging
# directory and the wheel cache; --fsize caps each file, not their sum. 8 GiB is more than
# twice what the largest common build downloads (torch with its CUDA libraries: about 3.5 GiB;
# the data rootfs: 114 MiB; numpy and pandas: 70 MiB), and a bound a host's disk can spare.
DOWNLOAD_LIMIT = 8 << 30
MAX_REFUSED = 16            # refusals remembered for the error message
TLS_RECORD_LIMIT = 16384 + 2048   # a TLS record, at most (RFC 8446: 2^14 + 2048)

HOST_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,62})(\.[a-z0-9]([a-z0-9-]{0,62}))*$")
CONNECT_RE = re.compile(rb"^CONNECT ([^\s:]{1,253}):([0-9]{1,5}) HTTP/1\.[01]\r\n")


SIZE_RE = re.compile(r"([0-9]{1,20})(B|[KkMmGg]|KiB|MiB|GiB)?")
SIZE_UNITS = {None: 0, "B": 0, "K": 10, "k": 10, "KiB": 10, "M": 20, "m": 20, "MiB": 20,
              "G": 30, "g": 30, "GiB": 30}


def parse_size(text):
    """Bytes of a size as pyjail's options read one (bytes, or a number with K, M or G: powers
    of 1024); pure. Raises ValueError with the reason."""
    m = SIZE_RE.fullmatch(text)
    if not m:
        raise ValueError("not a size")
    n = int(m.group(1)) << SIZE_UNITS[m.group(2)]
    if n == 0:
        raise ValueError("a size must be more than 0")
    if n >= 1 << 64:
        raise ValueError("too large")
    return n


def format_size(n):
    """A size as pyjail writes one (pure): the largest of G, M, K it is a whole number of,
    else bytes, so an option given back in a message reads as it was typed."""
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n and n % (1 << shift) == 0:
            return "%d%s" % (n >> shift, unit)
    return str(n)


class DownloadBudget:
    """How much one relay may still pass from the index's hosts to the jail, all of its
    connections together; thread-safe, no syscalls."""

    def __init__(self, limit):
        self.limit, self.used, self.over = limit, 0, False
        self.lock = threading.Lock()

    def take(self, n):
        """Whether `n` more bytes may go to the jail. A chunk that would pass the limit is not
        taken, and from then on nothing is: the jail gets at most `limit` bytes in all."""
        with self.lock:
            if self.over or self.used + n > self.limit:
                self.over = True
                return False
            self.used += n
            return True


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


def client_hello_sni(record):
    """The server name (SNI) of a TLS ClientHello, given its whole first record (bytes); pure.
    Raises ValueError for anything that is not a ClientHello naming one host in that record."""
    def take(data, at, n):
        if at + n > len(data):
            raise ValueError("short")
        return data[at:at + n], at + n

    def number(data, at, n):
        raw, at = take(data, at, n)
        return int.from_bytes(raw, "big"), at

    if len(record) < 5 or record[0] != 0x16 or record[1] != 3:
        raise ValueError("not a TLS handshake")
    length, _ = number(record, 3, 2)
    body, _ = take(record, 5, length)
    if body[:1] != b"\x01":
        raise ValueError("not a ClientHello")
    hello_len, at = number(body, 1, 3)
    hello, _ = take(body, at, hello_len)   # the whole ClientHello is in this record
    at = 2 + 32                           # version, random
    n, at = number(hello, at, 1)
    _, at = take(hello, at, n)            # session id
    n, at = number(hello, at, 2)
    _, at = take(hello, at, n)            # cipher suites
    n, at = number(hello, at, 1)
    _, at = take(hello, at, n)            # compression methods
    n, at = number(hello, at, 2)
    exts, _ = take(hello, at, n)
    at, names = 0, []
    while at < len(exts):
        kind, at = number(exts, at, 2)
        n, at = number(exts, at, 2)
        data, at = take(exts, at, n)
        if kind != 0:                     # server_name
            continue
        m, i = number(data, 0, 2)
        entries, _ = take(data, i, m)
        j = 0
        while j < len(entries):
            name_type, j = number(entries, j, 1)
            k, j = number(entries, j, 2)
            name, j = take(entries, j, k)
            if name_type == 0:
                names.append(name.decode("ascii").lower())
    if len(names) != 1:
        raise ValueError("no single server name")
    return names[0]


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

    def __init__(self, path, allowed, private_ok=(), owner=None, download_limit=DOWNLOAD_LIMIT):
        self.allowed, self.private_ok = allowed, set(private_ok)
        self.refused, self.lock = [], threading.Lock()
        self.budget = DownloadBudget(download_limit)
        self.stopped = None     # why the relay stopped relaying (over the budget), or None
        self.live = set()       # sockets of the connections being served, to cut them at once
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        # Only the jail's user connects: the builder's own user, or for root the jail's host
        # id (`owner`). Attack: any local user taking the relay's connections (all of its
        # slots), or reaching the index's hosts through root's relay.
        if owner is not None:
            os.chown(path, owner, owner)
        os.chmod(path, 0o600)
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

    def stop(self):
        """Over the download budget: record why, and cut every connection being served (an idle
        one too, which would otherwise hold its slot until IDLE_TIMEOUT); serve() refuses new
        ones. Under the lock, so no socket is shut down after its thread closed it."""
        with self.lock:
            if self.stopped is None:
                self.stopped = "the index's hosts sent more than %s" % format_size(
                    self.budget.limit)
            for s in self.live:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def serving(self, s):
        """Registers socket `s` of a connection being served, for stop(); False once stopped."""
        with self.lock:
            if self.stopped is not None:
                return False
            self.live.add(s)
            return True

    def serve(self):
        while not self.closed:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            if self.stopped is not None or not self.slots.acquire(blocking=False):
                conn.close()        # over the download budget, or more at once than pip needs
                continue
            threading.Thread(target=self.serve_one, args=(conn,), daemon=True).start()

    def serve_one(self, conn):
        upstream = None
        try:
            if not self.serving(conn):
                return
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
            conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            # The tunnel carries TLS to that host and no other: its ClientHello must name it,
            # or a CDN that serves the index and other sites at one address (domain fronting)
            # would let the jail reach those too. Checked before anything is connected.
            hello = self.read_record(conn)
            try:
                sni = client_hello_sni(hello or b"")
            except (ValueError, UnicodeDecodeError):
                sni = None
            if sni != host and not (sni is None and _is_address(host) and hello):
                self.refuse("%s:%d (TLS for %s)" % (host, port, sni or "no name"))
                return
            upstream = self.connect(host, port)
            if upstream is None or not self.serving(upstream):
                return
            upstream.sendall(hello)
            self.splice(conn, upstream)
        except OSError:
            pass
        finally:
            with self.lock:
                self.live.difference_update((conn, upstream))
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

    @staticmethod
    def read_record(conn):
        """The first TLS record the jail sends through the tunnel (a 5-byte header and at most
        TLS_RECORD_LIMIT bytes), within HEAD_DEADLINE; None otherwise."""
        data, need, deadline = b"", 5, time.monotonic() + HEAD_DEADLINE
        while len(data) < need:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            conn.settimeout(left)
            try:
                chunk = conn.recv(need - len(data))
            except socket.timeout:
                return None
            if not chunk:
                return None
            data += chunk
            if len(data) == 5 and need == 5:
                need = 5 + int.from_bytes(data[3:5], "big")
                if need > 5 + TLS_RECORD_LIMIT:
                    return None
        return data

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

    def splice(self, conn, upstream):
        """Copies bytes both ways until both ends closed, BYTES_LIMIT one way, IDLE_TIMEOUT
        without a byte, or the relay's download budget is spent (then every connection ends)."""
        a, b = conn, upstream
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
                if s is upstream and not self.budget.take(len(data)):
                    self.stop()
                    return
                other[s].setblocking(True)
                other[s].settimeout(IDLE_TIMEOUT)
                other[s].sendall(data)
                other[s].setblocking(False)
