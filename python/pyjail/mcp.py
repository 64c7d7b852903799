"""pyjail-mcp: pyjail as an MCP server (the official MCP Python SDK).

Tools (each description states the jail's facts: the rootfs's packages from
its lock, the network, the limits):

- ``run_python(code, session=None, timeout=None)``: a cell in a persistent
  interpreter; variables, imports and /work's files stay for the next call
  of the same MCP session. stdout, stderr, the trailing expression's value
  and the exception come back as text, the figures a cell showed as MCP
  image content.
- ``run_python_fresh(code, timeout=None)``: the code in a fresh jail that
  ends with it.
- ``upload_file(path, content, base64=False, session=None)``,
  ``download_file(path, session=None)``, ``list_files(session=None)``:
  files in and out of the session's /work.
- ``reset_session(session=None)``: a new interpreter for the session.

Which session a call belongs to: over stdio, the one client's; over
streamable HTTP, the ``Mcp-Session-Id`` of the connection; on a transport
with no session (the stateless HTTP of protocol 2026-07-28) each call
without ``session`` starts a new one and says its name, which later calls
pass as ``session``. With ``--tokens``, every session is the tenant's own:
another tenant's name or Mcp-Session-Id reaches a session of the caller's.
Sessions not used for ``idle_timeout`` seconds are closed; at most
``max_sessions`` live at once, each tenant at most its share of them (the
tenant's least recently used is closed for its new one). Over HTTP with
tokens, a tenant also opens at most its share of MCP sessions (handshakes);
past it, its next handshake gets 503 until one of its own closes. Each
tenant's calls wait on worker threads of their own (40 shared among the
tenants): one tenant's calls queued behind a long cell hold none of another's.

Every run is a fork of a Pool's template: no code runs outside a jail.

    pyjail-mcp [--profile P] [--rootfs R] [--transport stdio|http]
               [--listen HOST:PORT] [--tokens FILE | --no-auth] [--config FILE]
               [--memory M] [--timeout S] [--net none|allow] [--allow-host H ...]
               [--preload MOD ...]

Over HTTP, whoever reaches the port can run code in the jails: with
``--tokens FILE`` (``TENANT TOKEN`` lines, mode 0600, as pyjail-server's)
every request must carry ``Authorization: Bearer TOKEN``. A listen address
other than loopback without ``--tokens`` is refused unless ``--no-auth``
says that something in front (a proxy, a network policy) does the checking.
"""


import argparse
import base64
import binascii
import json
import secrets
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import _tokens
from ._common import find_binary
from ._pool import Pool
from ._session import CellResult, Session

__all__ = ["Config", "JailSessions", "build_server", "jail_facts", "main"]

# What one tool call hands back to the model, per stream: a model's context is the limit.
MAX_TEXT = 64 << 10
# An upload's decoded size (the MCP message carrying it is bounded by the transport too).
MAX_UPLOAD = 16 << 20
MAX_DOWNLOAD = 16 << 20


@dataclass
class Config:
    """pyjail-mcp's settings: its command line, or a TOML file's keys of the same names."""

    profile: str = "repl"
    rootfs: Optional[str] = None
    transport: str = "stdio"
    listen: str = "127.0.0.1:8000"
    preload: List[str] = field(default_factory=list)
    size: int = 1
    memory: Optional[str] = None
    timeout: float = 60.0            # one call's time limit
    session_lifetime: float = 86400.0  # a session's whole life (the jail's wall time)
    net: Optional[str] = None
    allow_hosts: List[str] = field(default_factory=list)
    idle_timeout: float = 1800.0
    max_sessions: int = 16
    binary: Optional[str] = None
    tokens: Optional[str] = None     # HTTP: the bearer tokens' file
    no_auth: bool = False            # HTTP: serve a non-loopback address without tokens

    @classmethod
    def load(cls, path: str) -> "Config":
        import tomllib
        with open(path, "rb") as f:
            data = tomllib.load(f)
        known = {f for f in cls.__dataclass_fields__}
        unknown = sorted(k for k in data if k.replace("-", "_") not in known)
        if unknown:
            raise SystemExit("pyjail-mcp: %s: unknown setting(s) %s (known: %s)"
                             % (path, ", ".join(unknown), ", ".join(sorted(known))))
        return cls(**{k.replace("-", "_"): v for k, v in data.items()})


def jail_facts(binary: Optional[str], cfg: Config) -> str:
    """What a model should know of the jail, in a few lines: the Python version
    and packages (from the rootfs's lock, as ``pyjail rootfs info --json`` reads
    it), the network, the limits."""
    exe = find_binary(binary)
    rootfs = cfg.rootfs or "default"
    packages = "unknown"
    python = "3"
    try:
        r = subprocess.run([exe, "rootfs", "info", rootfs, "--json"], capture_output=True,
                           timeout=60, stdin=subprocess.DEVNULL)
        if r.returncode == 0 and len(r.stdout) < (8 << 20):
            info = json.loads(r.stdout)
            python = str(info.get("python") or python)[:20]
            lock = info.get("lock") or {}
            names = ["%s %s" % (str(p.get("name"))[:60], str(p.get("version"))[:40])
                     for p in (lock.get("packages") or [])[:500] if isinstance(p, dict)]
            packages = ", ".join(names) if names else "the standard library only"
    except (OSError, ValueError, subprocess.TimeoutExpired):
        pass
    if cfg.net == "allow" and cfg.allow_hosts:
        net = "only these hosts, by name: %s" % ", ".join(cfg.allow_hosts)
    else:
        net = "none (no network at all)"
    return ("Runs in a pyjail jail (Linux namespaces, seccomp; nothing of the host is visible). "
            "Python %s; packages: %s. Network: %s. Working directory /work (private; "
            "write files there). Limits: %s s per call%s. Figures shown with "
            "matplotlib come back as images."
            % (python, packages, net, _num(cfg.timeout),
               ", memory %s" % cfg.memory if cfg.memory else ""))


def _num(x: float) -> str:
    return ("%d" % x) if float(x).is_integer() else str(x)


def tenant_share(cfg: Config, tenants: int) -> int:
    """How many of --max-sessions one of ``tenants`` tenants may hold at once."""
    return max(1, cfg.max_sessions // max(1, tenants))


class JailSessions:
    """The live sessions of an MCP server, by key: forks of one Pool's template,
    closed when idle or when there are too many (least recently used first)."""

    def __init__(self, pool: Pool, cfg: Config, tenants: int = 1) -> None:
        self.pool = pool
        self.cfg = cfg
        # Attack: one tenant's new sessions evicting another's (its variables and files
        # gone): each tenant holds at most its share of --max-sessions, and a tenant at its
        # share gives up its own least recently used session.
        self.share = tenant_share(cfg, tenants)
        self._lock = threading.Lock()
        self._sessions: Dict[str, Tuple[Session, float]] = {}
        self._stop = threading.Event()
        self._reaper = threading.Thread(target=self._reap, name="pyjail-mcp-reaper", daemon=True)
        self._reaper.start()

    def get(self, key: str, create: bool = True) -> Session:
        """The session ``key``, made if ``create``; KeyError if it does not exist."""
        evicted: List[Session] = []
        with self._lock:
            entry = self._sessions.get(key)
            if entry is None:
                if not create:
                    raise KeyError(key)
                tenant = _tenant_of_key(key)
                while True:
                    own = [k for k in self._sessions if _tenant_of_key(k) == tenant]
                    if len(own) < self.share and len(self._sessions) < self.cfg.max_sessions:
                        break
                    candidates = own if own else list(self._sessions)
                    oldest = min(candidates, key=lambda k: self._sessions[k][1])
                    evicted.append(self._sessions.pop(oldest)[0])
                session = None
            else:
                session = entry[0]
                self._sessions[key] = (session, time.monotonic())
        for s in evicted:
            s.close()
        if session is None:
            session = self.pool.session(timeout=self.cfg.timeout)
            with self._lock:
                if key in self._sessions:    # made at once by two calls: keep the first
                    other = self._sessions[key][0]
                else:
                    other = None
                    self._sessions[key] = (session, time.monotonic())
            if other is not None:
                session.close()
                session = other
        return session

    def drop(self, key: str) -> bool:
        with self._lock:
            entry = self._sessions.pop(key, None)
        if entry is not None:
            entry[0].close()
        return entry is not None

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)

    def _reap(self) -> None:
        while not self._stop.wait(min(30.0, max(0.05, self.cfg.idle_timeout / 4))):
            now = time.monotonic()
            with self._lock:
                idle = [k for k, (_, t) in self._sessions.items()
                        if now - t > self.cfg.idle_timeout]
                gone = [self._sessions.pop(k)[0] for k in idle]
            for s in gone:
                s.close()

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            gone = [s for s, _ in self._sessions.values()]
            self._sessions.clear()
        for s in gone:
            s.close()


def _utf8(text: str) -> str:
    """``text`` as UTF-8 can carry it. A lone surrogate (undecodable bytes as Python keeps
    them, in an error's message, a file name or a JSON escape the model sent) has no UTF-8:
    the JSON encoder would fail the whole reply, and the client wait for it for ever. It
    becomes its escape (``\\udc80``)."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _tenant_of_key(key: str) -> str:
    """The tenant a session key (key_of) holds: between its kind's colon and a NUL."""
    head, sep, _ = key.partition("\0")
    return head.partition(":")[2] if sep else ""


def _clip(text: str) -> str:
    if len(text) <= MAX_TEXT:
        return text
    half = MAX_TEXT // 2
    return "%s\n[... %d characters left out ...]\n%s" % (text[:half], len(text) - MAX_TEXT,
                                                         text[-half:])


def cell_content(res: CellResult, session_note: str = "") -> Tuple[List[Any], bool]:
    """A cell's result as MCP content blocks (text, then its images) and whether
    it is an error."""
    from mcp.types import ImageContent, TextContent
    parts = []
    if res.stdout:
        parts.append("stdout:\n" + _clip(res.stdout))
    if res.stderr:
        parts.append("stderr:\n" + _clip(res.stderr))
    if res.value is not None:
        parts.append("value: " + _clip(res.value))
    if res.error is not None:
        parts.append("error:\n" + _clip(res.error.short_traceback or res.error.traceback
                                        or str(res.error)))
    if res.timed_out:
        parts.append("(the call ran out of time; the session keeps its variables)")
    if res.restarted:
        parts.append("(the interpreter was replaced: earlier variables are gone)")
    if session_note:
        parts.append(session_note)
    blocks: List[Any] = [TextContent(type="text", text=_utf8("\n".join(parts)) or "(no output)")]
    for img in res.images:
        blocks.append(ImageContent(type="image", mime_type=img.mime,
                                   data=base64.b64encode(img.data).decode("ascii")))
    return blocks, not res.ok


def build_server(cfg: Config, pool: Optional[Pool] = None,
                 tenants: int = 1) -> Tuple[Any, JailSessions]:
    """The MCP server (an ``mcp.server.mcpserver.MCPServer``) and its sessions.
    ``pool``: one to use (else one is made from ``cfg``; the caller closes it);
    ``tenants``: how many the tokens file names (each holds its share of sessions)."""
    import anyio
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.types import CallToolResult, TextContent

    if pool is None:
        pool = make_pool(cfg)
    tokens_in_use = bool(cfg.tokens)
    sessions = JailSessions(pool, cfg, tenants if tokens_in_use else 1)
    facts = jail_facts(cfg.binary, cfg)
    server = MCPServer("pyjail", instructions="Python in a pyjail jail. " + facts)

    def key_of(ctx: Context, session: Optional[str]) -> Tuple[str, str]:
        """The session a call is for, and what to tell the model of it. Attack: one
        tenant naming another's session (\"work\"), or sending another's Mcp-Session-Id,
        and so reading its variables and files: every key holds the caller's tenant (from
        BearerAuth's header; none without tokens)."""
        headers = ctx.headers
        tenant = ((headers or {}).get(TENANT_HEADER.decode()) or "") if tokens_in_use else ""
        if session:
            if len(session) > 128 or not session.isprintable():
                raise ValueError("session: at most 128 printable characters")
            return "named:%s\0%s" % (tenant, session), ""
        if headers is None:
            return "stdio", ""
        sid = headers.get("mcp-session-id")
        if sid:
            return "mcp:%s\0%s" % (tenant, sid[:256]), ""
        # No session on this transport: a new named one, which later calls pass back.
        name = secrets.token_urlsafe(12)
        return ("named:%s\0%s" % (tenant, name),
                "session: %s (pass session=%r to keep its state)" % (name, name))

    # Attack: one tenant's calls, each waiting on its session (a long cell, or the calls
    # queued behind one), held every worker thread of anyio's (40 in all), and every other
    # tenant's calls waited for them. Each tenant's calls now wait on threads of its own.
    threads = max(2, 40 // max(1, tenants if tokens_in_use else 1))
    limiters: Dict[str, Any] = {}

    async def in_thread(key: str, fn: Any, *args: Any) -> Any:
        """fn(*args) in a worker thread of the tenant whose session ``key`` is."""
        tenant = _tenant_of_key(key)
        if tenant not in limiters:
            limiters[tenant] = anyio.CapacityLimiter(threads)
        return await anyio.to_thread.run_sync(fn, *args, limiter=limiters[tenant])

    def text(s: str, error: bool = False) -> CallToolResult:
        return CallToolResult(content=[TextContent(type="text", text=_utf8(s))], is_error=error)

    def timeout_of(timeout: Optional[float]) -> float:
        if timeout is None or timeout <= 0:
            return cfg.timeout
        return min(float(timeout), cfg.timeout)

    @server.tool(description="Run Python code in a persistent jailed interpreter: variables, "
                 "imports and files in /work stay for the next call of this session. Returns "
                 "stdout, stderr, the value of a trailing expression, the error's traceback, "
                 "and figures as images. " + facts)
    async def run_python(code: str, ctx: Context, session: Optional[str] = None,
                         timeout: Optional[float] = None) -> CallToolResult:
        key, note = key_of(ctx, session)
        s = await in_thread(key, sessions.get, key)
        res = await in_thread(key, lambda: s.run(code, timeout=timeout_of(timeout)))
        blocks, err = cell_content(res, note)
        return CallToolResult(content=blocks, is_error=err)

    @server.tool(description="Run a Python program in a fresh jail that ends with it (nothing "
                 "is kept). Returns its stdout, stderr and exit status. " + facts)
    async def run_python_fresh(code: str, timeout: Optional[float] = None) -> CallToolResult:
        r = await pool.arun(code, timeout=timeout_of(timeout))
        parts = []
        if r.stdout:
            parts.append("stdout:\n" + _clip(r.stdout))
        if r.stderr:
            parts.append("stderr:\n" + _clip(r.stderr))
        parts.append("exit status %d (%s)" % (r.exit_code, r.status))
        return text("\n".join(parts), error=not r.ok)

    @server.tool(description="Write a file into the session's /work (path relative to "
                 "/work). content is text, or base64 when base64_encoded is true.")
    async def upload_file(path: str, content: str, ctx: Context, base64_encoded: bool = False,
                          session: Optional[str] = None) -> CallToolResult:
        if base64_encoded:
            try:
                data = base64.b64decode(content, validate=True)
            except (binascii.Error, ValueError):
                return text("content is not valid base64", True)
        else:
            data = content.encode("utf-8")
        if len(data) > MAX_UPLOAD:
            return text("the file is larger than %d bytes" % MAX_UPLOAD, True)
        key, note = key_of(ctx, session)
        s = await in_thread(key, sessions.get, key)
        try:
            n = await in_thread(key, s.upload, path, data)
        except (ValueError, OSError) as e:
            return text("cannot write %s: %s" % (path, e), True)
        return text("wrote %d bytes to /work/%s%s" % (n, path.lstrip("/"),
                                                        ("\n" + note) if note else ""))

    @server.tool(description="Read a file from the session's /work (path relative to /work): "
                 "text as text, images as images, other bytes as base64.")
    async def download_file(path: str, ctx: Context,
                            session: Optional[str] = None) -> CallToolResult:
        from mcp.types import ImageContent
        key, _ = key_of(ctx, session)
        s = await in_thread(key, sessions.get, key)
        try:
            data = await in_thread(key, lambda: s.download(path, max_bytes=MAX_DOWNLOAD))
        except Exception as e:   # the session's own errors: no such file, too large
            return text("cannot read %s: %s" % (path, e), True)
        mime = _image_mime(data)
        if mime:
            return CallToolResult(content=[ImageContent(
                type="image", mime_type=mime, data=base64.b64encode(data).decode("ascii"))])
        try:
            return text(_clip(data.decode("utf-8")))
        except UnicodeDecodeError:
            return text("base64:" + base64.b64encode(data).decode("ascii"))

    @server.tool(description="List the files in the session's /work.")
    async def list_files(ctx: Context, session: Optional[str] = None) -> CallToolResult:
        key, _ = key_of(ctx, session)
        s = await in_thread(key, sessions.get, key)
        names = await in_thread(key, s.list_files)
        return text("\n".join("%s\t%d bytes" % (n, size) for n, size in sorted(names.items()))
                    or "(no files)")

    @server.tool(description="End the session's interpreter and its files; the next call "
                 "starts a new one.")
    async def reset_session(ctx: Context, session: Optional[str] = None) -> CallToolResult:
        key, _ = key_of(ctx, session)
        existed = await in_thread(key, sessions.drop, key)
        return text("session reset" if existed else "no such session")

    return server, sessions


def _image_mime(data: bytes) -> Optional[str]:
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    return None


def make_pool(cfg: Config) -> Pool:
    options: Dict[str, Any] = {"wall_time": cfg.session_lifetime}
    if cfg.memory:
        options["memory"] = cfg.memory
    return Pool(cfg.preload, size=cfg.size, profile=cfg.profile, rootfs=cfg.rootfs,
                options=options, binary=cfg.binary, net=cfg.net,
                allow_hosts=cfg.allow_hosts if cfg.net == "allow" else ())


def parse_listen(listen: str) -> Tuple[str, int]:
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise SystemExit("pyjail-mcp: --listen %r: give HOST:PORT (e.g. 127.0.0.1:8000)" % listen)
    return host.strip("[]") or "127.0.0.1", int(port)


def _loopback(host: str) -> bool:
    import ipaddress
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_auth(cfg: Config) -> None:
    """Over HTTP, a listen address others can reach needs tokens, or an explicit
    --no-auth: code execution open to a network by default is not a default."""
    if cfg.transport != "http":
        if cfg.tokens or cfg.no_auth:
            raise SystemExit("pyjail-mcp: --tokens and --no-auth are for --transport http")
        return
    if cfg.tokens and cfg.no_auth:
        raise SystemExit("pyjail-mcp: --tokens and --no-auth: give one")
    host, _ = parse_listen(cfg.listen)
    if not cfg.tokens and not cfg.no_auth and not _loopback(host):
        raise SystemExit("pyjail-mcp: --listen %s without --tokens would let anyone who reaches "
                         "the port run code: give --tokens FILE (TENANT TOKEN lines, mode 600), "
                         "or --no-auth if a proxy in front checks who calls" % cfg.listen)


# The request header BearerAuth sets to the caller's tenant (and drops from what clients send).
TENANT_HEADER = b"x-pyjail-tenant"


class BearerAuth:
    """ASGI middleware: every HTTP request carries a token of the tokens file
    (else 401, before the MCP app reads its body)."""

    def __init__(self, app: Any, tokens: Dict[bytes, str]) -> None:
        self.app, self.tokens = app, tokens

    async def __call__(self, scope: Dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            header = next((v for k, v in scope.get("headers", ()) if k == b"authorization"), b"")
            tenant = _tokens.tenant_of(self.tokens, header.decode("latin-1"))
            if tenant is not None:
                # The tools learn the tenant from this header, set here alone: one a client
                # sent is dropped (key_of scopes every session by it).
                scope = dict(scope, headers=[(k, v) for k, v in scope.get("headers", ())
                                             if k != TENANT_HEADER] +
                         [(TENANT_HEADER, tenant.encode("utf-8"))])
            if tenant is None:
                body = b'{"error": "a valid bearer token is required (Authorization: Bearer TOKEN)"}'
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"www-authenticate", b"Bearer"),
                                        (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


class TenantShares:
    """ASGI middleware behind BearerAuth: each tenant has at most ``share`` MCP sessions
    (Mcp-Session-Id) open at once. Attack: the SDK's own cap (--max-sessions) counts every
    tenant's sessions together, so one tenant's handshakes filled it and every other tenant
    got 503 until they went idle. The SDK is watched from outside: a session is the tenant's
    from the answer that names it until a DELETE, a 404 (the SDK has forgotten it), or as long
    idle as the SDK lets a session be with no request in flight."""

    # Seconds past the idle timeout before a session is taken for closed by the SDK.
    MARGIN = 5.0

    def __init__(self, app: Any, share: int, idle_timeout: float,
                 handshake_versions: Sequence[str], path: str = "/mcp") -> None:
        self.app, self.share, self.idle = app, max(1, share), idle_timeout
        self.path = path  # the MCP endpoint: the only requests the SDK's sessions see
        # What may open a session, as the SDK routes requests: one without an Mcp-Session-Id
        # whose protocol (MCP-Protocol-Version), if it names one, has the initialize
        # handshake. The stateless protocol's requests open none, and are not counted.
        self.handshake_versions = frozenset(v.encode() for v in handshake_versions)
        # tenant -> {session id: [requests in flight, when the last one ended]}; one event
        # loop runs every call, so nothing here needs a lock.
        self._open: Dict[str, Dict[str, List[float]]] = {}
        self._opening: Dict[str, int] = {}  # opening requests not yet answered, per tenant

    async def __call__(self, scope: Dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        # The first of a header given twice, as the SDK (Starlette) reads it.
        headers: Dict[bytes, bytes] = {}
        for k, v in scope.get("headers", ()):
            headers.setdefault(k, v)
        version = headers.get(b"mcp-protocol-version")
        if scope.get("path") != self.path or not (
                version is None or version in self.handshake_versions):
            # Another route (its 404 says nothing of a session: attack, a tenant sending its
            # live session's id there to have it forgotten, and so open more), or the
            # stateless protocol, which opens none.
            await self.app(scope, receive, send)
            return
        tenant = headers.get(TENANT_HEADER, b"").decode("utf-8", "replace")
        sid = headers.get(b"mcp-session-id")
        own = self._open.setdefault(tenant, {})
        if sid is None:
            await self._opening_request(tenant, own, scope, receive, send)
            return
        key = sid.decode("latin-1")
        entry = own.get(key)
        status = [0]

        async def seen(message: Dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)
        if entry is not None:
            entry[0] += 1
        try:
            await self.app(scope, receive, seen)
        finally:
            if entry is not None:
                entry[0] -= 1
                entry[1] = time.monotonic()
            if status[0] == 404 or (scope.get("method") == "DELETE" and 0 < status[0] < 400):
                own.pop(key, None)

    async def _opening_request(self, tenant: str, own: Dict[str, List[float]], scope: Any,
                               receive: Any, send: Any) -> None:
        now = time.monotonic()
        for key in [k for k, (n, t) in own.items() if n <= 0 and now - t > self.idle + self.MARGIN]:
            del own[key]
        if len(own) + self._opening.get(tenant, 0) >= self.share:
            body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {
                "code": -32603, "message": "this tenant has its %d MCP sessions open: close one "
                "(DELETE), or wait until one has been idle %s s" % (self.share, _num(self.idle))}
            }).encode()
            await send({"type": "http.response.start", "status": 503,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
            return
        self._opening[tenant] = self._opening.get(tenant, 0) + 1
        opened: List[str] = []

        async def seen(message: Dict[str, Any]) -> None:
            if message["type"] == "http.response.start" and message["status"] < 400:
                for k, v in message.get("headers", ()):
                    if k.lower() == b"mcp-session-id":
                        opened.append(v.decode("latin-1"))
                        own[opened[0]] = [1, time.monotonic()]
                        break
            await send(message)
        try:
            await self.app(scope, receive, seen)
        finally:
            self._opening[tenant] -= 1
            if opened and opened[0] in own:
                own[opened[0]][0] -= 1
                own[opened[0]][1] = time.monotonic()


def serve_http(server: Any, cfg: Config, tokens: Optional[Dict[bytes, str]]) -> None:
    """The streamable HTTP transport on uvicorn, behind BearerAuth with ``tokens`` (and with
    them, TenantShares: each tenant its share of --max-sessions)."""
    import uvicorn
    host, port = parse_listen(cfg.listen)
    app = server.streamable_http_app(session_idle_timeout=cfg.idle_timeout,
                                     max_sessions=max(1, cfg.max_sessions), host=host)
    if tokens is not None:
        from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
        tenants = len(set(tokens.values()))
        if tenants > cfg.max_sessions:
            print("pyjail-mcp: warning: %d tenants and --max-sessions %d: each may open one "
                  "session, and once %d are open the others' are refused; raise "
                  "--max-sessions to at least %d" % (tenants, cfg.max_sessions,
                                                      cfg.max_sessions, tenants),
                  file=sys.stderr)
        app = BearerAuth(TenantShares(app, tenant_share(cfg, tenants), cfg.idle_timeout,
                                      HANDSHAKE_PROTOCOL_VERSIONS), tokens)
    uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning")).run()


def parse_args(argv: Optional[Sequence[str]] = None) -> Config:
    p = argparse.ArgumentParser(prog="pyjail-mcp",
                                description="pyjail as an MCP server: Python in a jail, as tools.")
    p.add_argument("--config", help="a TOML file of these settings (the command line wins)")
    p.add_argument("--profile")
    p.add_argument("--rootfs")
    p.add_argument("--transport", choices=["stdio", "http"])
    p.add_argument("--listen", help="HOST:PORT for --transport http (default 127.0.0.1:8000)")
    p.add_argument("--preload", action="append", help="a module the template imports")
    p.add_argument("--size", type=int, help="templates (default 1)")
    p.add_argument("--memory", help="each jail's memory limit, e.g. 512M")
    p.add_argument("--timeout", type=float, help="one call's time limit in seconds (default 60)")
    p.add_argument("--net", choices=["none", "allow"])
    p.add_argument("--allow-host", dest="allow_hosts", action="append",
                   help="with --net allow: a host the code may reach (repeat)")
    p.add_argument("--idle-timeout", type=float, help="close a session idle this long (s)")
    p.add_argument("--max-sessions", type=int)
    p.add_argument("--binary", help="the pyjail binary (default $PYJAIL_BIN, else on PATH)")
    p.add_argument("--tokens", help="HTTP: a file of TENANT TOKEN lines (mode 600); every "
                   "request then needs Authorization: Bearer TOKEN")
    p.add_argument("--no-auth", action="store_true", default=None,
                   help="HTTP: serve an address other than loopback without tokens")
    a = p.parse_args(argv)
    cfg = Config.load(a.config) if a.config else Config()
    for k, v in vars(a).items():
        if k != "config" and v is not None:
            setattr(cfg, k, v)
    if cfg.transport not in ("stdio", "http"):
        raise SystemExit("pyjail-mcp: transport %r: stdio or http" % cfg.transport)
    parse_listen(cfg.listen)
    check_auth(cfg)
    return cfg


def main(argv: Optional[Sequence[str]] = None) -> int:
    cfg = parse_args(argv)
    try:
        import mcp  # noqa: F401
    except ImportError:
        print("pyjail-mcp: the MCP SDK is missing: pip install 'pyjail-sandbox[mcp]'",
              file=sys.stderr)
        return 2
    from ._common import PyjailError
    import signal

    def stop(_sig: int, _frame: Any) -> None:
        raise KeyboardInterrupt
    # SIGTERM (a service manager, kubectl) ends the server as ^C does: its templates with it.
    signal.signal(signal.SIGTERM, stop)
    # Read before any jail starts: a tokens file others can read stops the server here.
    tokens = _tokens.read_tokens(cfg.tokens, "pyjail-mcp") if cfg.tokens else None
    try:
        pool = make_pool(cfg)
    except PyjailError as e:
        print(str(e).strip(), file=sys.stderr)
        return 125
    try:
        server, sessions = build_server(cfg, pool, len(set(tokens.values())) if tokens else 1)
        try:
            if cfg.transport == "stdio":
                server.run("stdio")
            else:
                serve_http(server, cfg, tokens)
        finally:
            sessions.close()
    except KeyboardInterrupt:
        pass
    finally:
        pool.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
