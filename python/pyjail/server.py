"""pyjail-server: pyjail as an HTTP service (an ASGI app on Starlette, served by uvicorn).

    pyjail-server --listen 0.0.0.0:8080 --tokens /etc/pyjail/tokens [--profile P]
                  [--rootfs R] [--preload MOD ...] [--size N] [--memory M] [--timeout S]
                  [--net none|allow] [--allow-host H ...] [--max-sessions N]
                  [--max-runs N] [--cpu-seconds N] [--idle-timeout S]

The tokens file has one ``TENANT TOKEN`` a line (``#`` comments); it must not
be readable by others than its owner (mode 0600), or the server refuses to
start. Every request but /healthz, /readyz and /metrics carries
``Authorization: Bearer TOKEN``.

Endpoints (JSON bodies; output streamed as NDJSON lines ``{"stdout": ...}``,
``{"stderr": ...}``, ``{"call": ...}``, then ``{"result": ...}`` or
``{"error": ...}``):

- ``POST /v1/runs``: a fresh jail (``code``, ``timeout``, ``memory``, ``files``
  as base64, ``outputs``, ``stdin``).
- ``POST /v1/sessions``: a session (``{"id": ...}``); ``POST
  /v1/sessions/ID/run`` a cell; ``PUT``/``GET /v1/sessions/ID/files/NAME``
  a file of its /work; ``GET /v1/sessions/ID/files`` the list; ``POST
  .../expose``, ``.../calls/CALL``, ``.../variables``, ``.../interrupt``,
  ``.../restart``; ``DELETE /v1/sessions/ID`` ends it.
- ``GET /healthz`` (the process answers), ``GET /readyz`` (every template
  is alive), ``GET /metrics`` (Prometheus).

Every request body is hostile: its size is bounded before it is read
whole, its fields are checked, nothing is unpickled (values cross as the
package's plain-data codec). A tenant sees only its own sessions: another
tenant's session id answers 404, as an unknown one does. Quotas per tenant:
live sessions, calls running at once, CPU seconds per hour (a run is charged
its jail's CPU time; a cell the CPU time its session's jail used since the
session was last charged, its cgroup's count (cgroup v2) or else the host's /proc's,
or its wall time where the interpreter was replaced; a session's last stretch when it is restarted or
closed). Sessions idle for ``--idle-timeout`` are closed.
"""

import argparse
import asyncio
import concurrent.futures
import errno
import hmac
import json
import os
import re
import secrets
import sys
import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Dict, List, Optional, Sequence, Tuple

from . import _tokens, _wire
from ._async import AsyncSession, WorkersBusy, _in_thread
from ._common import PyjailError, check_name
from ._pool import Pool
from ._session import Session, SessionClosedError, SessionDiedError, SessionError
from ._tokens import read_tokens
from .remote import _plain, encode_cell, encode_result

__all__ = ["ServerConfig", "Service", "create_app", "read_tokens", "main"]

MAX_BODY = 8 << 20          # a JSON request: code, base64 files
MAX_FILE = 64 << 20         # one uploaded file (a raw body)
MAX_CODE = 1 << 20
_ESCAPED_SURROGATE = re.compile(rb"\\[uU][dD][89a-fA-F]")
MAX_OUTPUT = 4 << 20        # per stream of a run, as it is kept for its result
KEEPALIVE = 15.0            # seconds between keep-alive lines of a quiet stream


class HTTPError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class ServerConfig:
    listen: str = "127.0.0.1:8080"
    tokens: str = ""
    profile: str = "repl"
    rootfs: Optional[str] = None
    preload: List[str] = field(default_factory=list)
    size: int = 1
    memory: Optional[str] = None
    timeout: float = 60.0              # one call's time limit, and the most a call may ask
    session_lifetime: float = 86400.0
    net: Optional[str] = None
    allow_hosts: List[str] = field(default_factory=list)
    max_sessions: int = 8              # per tenant, live
    max_runs: int = 4                  # per tenant, calls at once
    cpu_seconds: float = 3600.0        # per tenant, per hour (0: no limit)
    idle_timeout: float = 1800.0
    call_timeout: float = 300.0        # a host function's answer from the client
    binary: Optional[str] = None



@dataclass
class Tenant:
    sessions: int = 0
    running: int = 0
    cpu_window: float = 0.0
    cpu_used: float = 0.0


@dataclass
class LiveSession:
    id: str
    tenant: str
    session: Session
    asession: AsyncSession
    last_used: float
    busy: int = 0
    queue: Optional["asyncio.Queue[Any]"] = None     # the running cell's stream
    calls: Dict[str, "concurrent.futures.Future[Any]"] = field(default_factory=dict)
    ends_cell: set = field(default_factory=set)
    # The CPU seconds its jail had used when the session was last charged, and that
    # jail's pyjail (a restart replaces it): see Service.charge_session.
    cpu_seen: Optional[float] = None
    cpu_jail: Any = None


class Metrics:
    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
        self.registry = CollectorRegistry()
        self.runs = Counter("pyjail_runs", "Runs and cells ended, by kind and status",
                            ["kind", "status"], registry=self.registry)
        self.duration = Histogram("pyjail_run_duration_seconds", "Wall time of runs and cells",
                                  ["kind"], registry=self.registry,
                                  buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300))
        self.live = Gauge("pyjail_live_sessions", "Sessions open", registry=self.registry)
        self.restarts = Counter("pyjail_template_restarts",
                                "Templates found dead and started again", registry=self.registry)
        self.refused = Counter("pyjail_refused_requests", "Requests refused, by reason",
                               ["reason"], registry=self.registry)


class Service:
    """The state behind the app: the Pool, the tokens, the sessions, the quotas."""

    def __init__(self, cfg: ServerConfig, tokens: Dict[bytes, str],
                 pool: Optional[Pool] = None) -> None:
        self.cfg = cfg
        self.tokens = tokens
        self.metrics = Metrics()
        self.pool = pool if pool is not None else self._make_pool()
        self.sessions: Dict[str, LiveSession] = {}
        self.tenants: Dict[str, Tenant] = {}
        self._reaper: Optional["asyncio.Task[None]"] = None

    def limits_warnings(self) -> List[str]:
        """What a tenant could get past on this host, from one run's report: without
        cgroup v2 (the limits are rlimits), --memory bounds each process, not a jail, and
        CPU seconds miss processes the kernel reaped itself (a parent ignoring SIGCHLD)."""
        try:
            rep = self.pool.run("pass", timeout=60).report
        except PyjailError:
            return []
        limits = rep.limits if rep is not None else {}
        memory = limits.get("memory") if isinstance(limits.get("memory"), dict) else {}
        if not memory or memory.get("mechanism") == "cgroup-v2":
            return []
        return ["no cgroup v2 for the jails here (pyjail doctor says why): --memory is %s, "
                "a bound per process, not per jail, and the CPU charged misses processes the "
                "kernel reaps itself (their parent ignores SIGCHLD); man pyjail-server, LIMITS"
                % str(memory.get("detail") or memory.get("mechanism"))[:80]]

    def _make_pool(self) -> Pool:
        c = self.cfg
        options: Dict[str, Any] = {"wall_time": c.session_lifetime}
        if c.memory:
            options["memory"] = c.memory
        return Pool(c.preload, size=c.size, profile=c.profile, rootfs=c.rootfs, options=options,
                    binary=c.binary, net=c.net,
                    allow_hosts=c.allow_hosts if c.net == "allow" else ())

    # ---------------------------------------------------------------- auth

    def tenant_of(self, authorization: Optional[str]) -> str:
        if not authorization or not authorization.startswith("Bearer ") or \
                len(authorization) > _tokens.MAX_HEADER:
            self.metrics.refused.labels("auth").inc()
            raise HTTPError(401, "a bearer token is required (Authorization: Bearer TOKEN)")
        found = _tokens.tenant_of(self.tokens, authorization)
        if found is None:
            self.metrics.refused.labels("auth").inc()
            raise HTTPError(401, "the token is not valid")
        return found

    def tenant(self, name: str) -> Tenant:
        return self.tenants.setdefault(name, Tenant())

    # -------------------------------------------------------------- quotas

    def start_call(self, tenant: str) -> None:
        t = self.tenant(tenant)
        now = time.monotonic()
        if now - t.cpu_window >= 3600:
            t.cpu_window, t.cpu_used = now, 0.0
        if self.cfg.cpu_seconds and t.cpu_used >= self.cfg.cpu_seconds:
            self.metrics.refused.labels("cpu").inc()
            raise HTTPError(429, "tenant %s used its %s CPU seconds of this hour"
                            % (tenant, _num(self.cfg.cpu_seconds)))
        if t.running >= self.cfg.max_runs:
            self.metrics.refused.labels("runs").inc()
            raise HTTPError(429, "tenant %s has %d calls running, its most at once"
                            % (tenant, t.running))
        t.running += 1

    def end_call(self, tenant: str, cpu: float) -> None:
        t = self.tenant(tenant)
        t.running -= 1
        t.cpu_used += max(0.0, cpu)

    def charge_session(self, live: LiveSession, fallback: float) -> float:
        """The CPU seconds a session's jail used since it was last charged (its cells',
        and what they left running between calls), read from the host (Session.
        _jail_cpu_seconds), where nothing in the jail can change it; ``fallback`` (a cell's wall time: an upper
        bound at the repl profile's one CPU) where the jail was replaced meanwhile or
        cannot be read."""
        before, jail = live.cpu_seen, live.cpu_jail
        live.cpu_seen, live.cpu_jail = live.session._jail_cpu_seconds(), live.session._proc
        if live.cpu_seen is None or before is None or live.cpu_jail is not jail:
            return fallback
        return max(0.0, live.cpu_seen - before)

    def session_of(self, tenant: str, sid: str) -> LiveSession:
        live = self.sessions.get(sid)
        # Another tenant's session answers as an unknown one: ids are not a way to probe.
        if live is None or not hmac.compare_digest(live.tenant.encode(), tenant.encode()):
            raise HTTPError(404, "no such session (it was closed, expired, or never existed)")
        live.last_used = time.monotonic()
        return live

    def timeout_of(self, value: Any) -> float:
        if value is None:
            return self.cfg.timeout
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise HTTPError(400, "timeout: a number of seconds > 0")
        return min(float(value), self.cfg.timeout)

    # ------------------------------------------------------------ sessions

    async def open_session(self, tenant: str, body: Dict[str, Any]) -> LiveSession:
        t = self.tenant(tenant)
        if t.sessions >= self.cfg.max_sessions:
            self.metrics.refused.labels("sessions").inc()
            raise HTTPError(429, "tenant %s has %d live sessions, its most"
                            % (tenant, t.sessions))
        kwargs: Dict[str, Any] = {"timeout": self.cfg.timeout}
        if body.get("memory") is not None:
            kwargs["memory"] = _short_str(body["memory"], "memory")
        t.sessions += 1
        try:
            session = await _in_thread(self.pool.session, **kwargs)
        except BaseException:
            t.sessions -= 1
            raise
        sid = secrets.token_urlsafe(24)
        live = LiveSession(sid, tenant, session, AsyncSession.wrap(session), time.monotonic())
        self.charge_session(live, 0.0)    # from here: its start is the service's
        self.sessions[sid] = live
        self.metrics.live.set(len(self.sessions))
        return live

    async def close_session(self, live: LiveSession) -> None:
        if self.sessions.pop(live.id, None) is None:
            return
        t = self.tenant(live.tenant)
        t.sessions -= 1
        t.cpu_used += self.charge_session(live, 0.0)    # what ran since its last call
        self.metrics.live.set(len(self.sessions))
        for fut in live.calls.values():
            fut.cancel()
        await _in_thread(live.session.close)

    async def reap(self) -> None:
        """Closes sessions idle for longer than idle_timeout (not one with a call running)."""
        period = max(0.05, min(30.0, self.cfg.idle_timeout / 4))
        while True:
            await asyncio.sleep(period)
            now = time.monotonic()
            for live in list(self.sessions.values()):
                if live.busy == 0 and now - live.last_used > self.cfg.idle_timeout:
                    await self.close_session(live)

    def ready(self) -> Tuple[bool, str]:
        dead = [s.socket for s in self.pool._servers if s.proc.poll() is not None]
        if self.pool._closed or dead or not self.pool._servers:
            return False, "%d of %d templates are not running" % (len(dead),
                                                                  len(self.pool._servers))
        return True, "ready"

    async def close(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
        for live in list(self.sessions.values()):
            await self.close_session(live)
        await _in_thread(self.pool.close)


def _num(x: float) -> str:
    return ("%d" % x) if float(x).is_integer() else str(x)


def _short_str(v: Any, what: str, limit: int = 64) -> str:
    if not isinstance(v, str) or len(v) > limit:
        raise HTTPError(400, "%s: a string of at most %d characters" % (what, limit))
    return v


def _line(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode() + b"\n"


def create_app(service: Service) -> Any:
    """The ASGI application (Starlette) of ``service``."""
    from starlette.applications import Starlette
    from starlette.requests import ClientDisconnect, Request
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    m = service.metrics

    def error(status: int, message: str) -> Response:
        return JSONResponse({"error": message}, status_code=status)

    async def read_body(request: Request, limit: int) -> bytes:
        """The body, refused with 413 as soon as it is over ``limit`` (whatever
        Content-Length says: a client may lie, or send chunks)."""
        declared = request.headers.get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            m.refused.labels("size").inc()
            raise HTTPError(413, "the body is larger than %d bytes" % limit)
        chunks, size = [], 0
        try:
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    m.refused.labels("size").inc()
                    raise HTTPError(413, "the body is larger than %d bytes" % limit)
                chunks.append(chunk)
        except ClientDisconnect:
            raise HTTPError(400, "the client went away")
        return b"".join(chunks)

    async def read_json(request: Request) -> Dict[str, Any]:
        raw = await read_body(request, MAX_BODY)
        if not raw:
            return {}
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError):   # RecursionError: arrays nested 100000 deep
            raise HTTPError(400, "the body is not JSON")
        if not isinstance(body, dict):
            raise HTTPError(400, "the body is not a JSON object")
        # A \\udXXX escape alone (no pair) is a string no UTF-8 holds: code, a name or a
        # value with one cut the call's response short (and left a traceback in the log).
        if _ESCAPED_SURROGATE.search(raw):
            try:
                json.dumps(body, ensure_ascii=False).encode("utf-8")
            except UnicodeEncodeError:
                raise HTTPError(400, "the body holds a lone surrogate (a \\udXXX escape with "
                                     "no pair): no UTF-8 text has one")
        return body

    def code_of(body: Dict[str, Any]) -> str:
        code = body.get("code")
        if not isinstance(code, str) or len(code) > MAX_CODE:
            raise HTTPError(400, "code: a string of at most %d characters" % MAX_CODE)
        return code

    def endpoint(fn: Any) -> Any:
        async def handler(request: Request) -> Response:
            try:
                tenant = service.tenant_of(request.headers.get("authorization"))
                return await fn(request, tenant)
            except HTTPError as e:
                return error(e.status, e.message)
            except SessionClosedError as e:
                return error(409, str(e))
            except WorkersBusy as e:
                return error(503, "the server is busy (%s): try again later" % e)
            except OSError as e:
                # A file of the session's (missing, a directory): the client raises it again.
                what = "%s: %s" % (e.strerror, e.filename) if e.strerror else str(e)
                return JSONResponse({"error": what[:4096], "errno": e.errno or 0},
                                    status_code=404 if e.errno == errno.ENOENT else 400)
            except (PyjailError, ValueError, TypeError) as e:
                return error(400, str(e).strip()[:4096])
            except Exception as e:     # a bug: said so, and the connection kept
                import traceback
                traceback.print_exc()
                return error(500, "internal error: %s" % type(e).__name__)
        return handler

    async def stream(request: Request, tenant: str, make_call: Any, finish: Any,
                     kind: str, live: Optional[LiveSession] = None) -> Response:
        """A call whose output is streamed as it is written. ``make_call(out, err)``
        is the call's coroutine; ``finish(value)`` its result line and CPU seconds."""
        service.start_call(tenant)
        queue: "asyncio.Queue[Any]" = asyncio.Queue()
        if live is not None:
            live.busy += 1
            live.queue = queue

        async def out(text: str) -> None:
            queue.put_nowait({"stdout": text})

        async def err(text: str) -> None:
            queue.put_nowait({"stderr": text})

        start = time.monotonic()
        state: Dict[str, Any] = {"task": None, "status": "cancelled", "cpu": 0.0, "done": False}

        def settle() -> None:
            """Once, however the response ends (the client gone before the first byte
            too): the call is ended, the quotas and metrics given back."""
            if state["done"]:
                return
            state["done"] = True
            task = state["task"]
            if task is not None and not task.done():
                # A run's jail is killed; a cell is interrupted, its session kept.
                task.cancel()
                state["status"] = "cancelled"
            if live is not None:
                live.busy -= 1
                live.queue = None
                live.last_used = time.monotonic()
            wall = time.monotonic() - start
            if live is not None:     # a cell: what its session's jail used (charge_session)
                cpu = service.charge_session(live, wall)
            else:
                cpu = state["cpu"] if task is not None and task.done() and \
                    not task.cancelled() else wall
            service.end_call(tenant, cpu)
            m.runs.labels(kind, state["status"]).inc()
            m.duration.labels(kind).observe(time.monotonic() - start)

        async def body() -> AsyncIterator[bytes]:
            task = state["task"] = asyncio.ensure_future(make_call(out, err))
            try:
                while True:
                    getter = asyncio.ensure_future(queue.get())
                    done, _ = await asyncio.wait({getter, task}, timeout=KEEPALIVE,
                                                 return_when=asyncio.FIRST_COMPLETED)
                    if getter in done:
                        yield _line(getter.result())
                        continue
                    getter.cancel()
                    if task not in done:
                        yield b"\n"        # a keep-alive for proxies; the client skips it
                        continue
                    while not queue.empty():
                        yield _line(queue.get_nowait())
                    state["status"] = "error"
                    try:
                        value = task.result()
                    except HTTPError as e:
                        yield _line({"error": {"status": e.status, "message": e.message}})
                        break
                    except SessionError as e:
                        state["status"] = "died"
                        yield _line({"error": {"status": 409 if isinstance(
                            e, SessionClosedError) else 404, "message": str(e)}})
                        break
                    except PyjailError as e:
                        yield _line({"error": {"status": 400, "message": str(e).strip()}})
                        break
                    result, state["status"], state["cpu"] = finish(value)
                    yield _line({"result": result})
                    break
            finally:
                settle()

        class CallResponse(StreamingResponse):
            async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
                try:
                    await super().__call__(scope, receive, send)
                finally:
                    settle()

        return CallResponse(body(), media_type="application/x-ndjson")

    # ---------------------------------------------------------------- runs

    async def post_run(request: Request, tenant: str) -> Response:
        body = await read_json(request)
        code = code_of(body)
        kwargs: Dict[str, Any] = {"timeout": service.timeout_of(body.get("timeout")),
                                  "max_output": MAX_OUTPUT}
        if body.get("memory") is not None:
            kwargs["memory"] = _short_str(body["memory"], "memory")
        files = body.get("files")
        if files is not None:
            if not isinstance(files, dict) or len(files) > 1000:
                raise HTTPError(400, "files: an object of at most 1000 {name: base64}")
            kwargs["files"] = {check_name(k): _unb64(v, "files") for k, v in files.items()}
        outputs = body.get("outputs")
        if outputs is not None and outputs is not False:
            # Bounded: each pattern is compiled in this process (_wire._glob_regexes).
            if outputs is not True and not (isinstance(outputs, list) and len(outputs) <= 100
                                            and all(isinstance(p, str) and len(p) <= 1024
                                                    for p in outputs)):
                raise HTTPError(400, "outputs: true or a list of at most 100 patterns of at "
                                     "most 1024 characters")
            kwargs["outputs"] = outputs
        if body.get("stdin") is not None:
            kwargs["stdin"] = _unb64(body["stdin"], "stdin")
        if service.pool._closed:
            raise HTTPError(503, "the server is shutting down")

        async def call(out: Any, err: Any) -> Any:
            return await service.pool.arun(code, on_stdout=out, on_stderr=err, **kwargs)

        def finish(r: Any) -> Tuple[Any, str, float]:
            rep = r.report
            cpu = ((rep.cpu_user_s or 0.0) + (rep.cpu_system_s or 0.0)) if rep else 0.0
            if "it was started again" in r.stderr:
                m.restarts.inc()
            return encode_result(r), r.status, cpu

        return await stream(request, tenant, call, finish, "run")

    # ------------------------------------------------------------ sessions

    async def post_session(request: Request, tenant: str) -> Response:
        body = await read_json(request)
        live = await service.open_session(tenant, body)
        if await request.is_disconnected():
            # Attack: clients that give up on their creations left sessions nobody holds,
            # counted against the tenant's quota until their idle expiry (30 minutes).
            await service.close_session(live)
            return Response(status_code=499)
        return JSONResponse({"id": live.id, "egress": list(live.session.egress),
                             "server_info": {k: v for k, v in live.session.server_info.items()
                                             if isinstance(v, (str, int, float, bool))}},
                            status_code=201)

    async def delete_session(request: Request, tenant: str) -> Response:
        live = service.session_of(tenant, request.path_params["sid"])
        await service.close_session(live)
        return Response(status_code=204)

    async def post_cell(request: Request, tenant: str) -> Response:
        live = service.session_of(tenant, request.path_params["sid"])
        body = await read_json(request)
        code = code_of(body)
        timeout = service.timeout_of(body.get("timeout"))
        if live.busy:
            raise HTTPError(409, "the session is running another call")

        async def call(out: Any, err: Any) -> Any:
            try:
                return await live.asession.run(code, timeout,
                                               want_str=body.get("want_str") is True,
                                               want_data=True,
                                               want_formats=body.get("want_formats") is not False,
                                               on_stdout=out, on_stderr=err)
            except (SessionError, PyjailError) as e:
                proc = live.session._proc
                if isinstance(e, SessionClosedError) or (proc is not None and
                                                         proc.poll() is None):
                    raise
                # Its interpreter is gone and could not be started again (its template
                # died): the session is over, and the client is told so at once.
                await service.close_session(live)
                raise SessionDiedError("the session's interpreter died and cannot start "
                                       "again: %s" % str(e).strip())

        def finish(c: Any) -> Tuple[Any, str, float]:
            status = "timeout" if c.timed_out else ("error" if c.error else "ok")
            return ({"cell": encode_cell(c), "restarts": live.session.restarts}, status,
                    c.duration_s)

        return await stream(request, tenant, call, finish, "cell", live)

    async def post_expose(request: Request, tenant: str) -> Response:
        live = service.session_of(tenant, request.path_params["sid"])
        body = await read_json(request)
        functions = body.get("functions")
        ends = body.get("ends_cell") or []
        if not isinstance(functions, dict) or len(functions) > 200 or \
                not isinstance(ends, list):
            raise HTTPError(400, "functions: an object of at most 200 {name: doc}")
        loop = asyncio.get_running_loop()

        def proxy(name: str) -> Any:
            # Runs in the cell's thread when the jailed code calls `name`: the client
            # runs the function and posts its answer (plain data) to /calls/ID.
            def call(*args: Any, **kwargs: Any) -> Any:
                queue = live.queue
                if queue is None:
                    raise RuntimeError("no client is waiting for this cell")
                cid = secrets.token_urlsafe(12)
                fut: "concurrent.futures.Future[Any]" = concurrent.futures.Future()
                live.calls[cid] = fut
                a, why = _plain(list(args))
                k, why2 = _plain(dict(kwargs))
                if why or why2:
                    live.calls.pop(cid, None)
                    raise TypeError("arguments of %s() are not plain data" % name)
                loop.call_soon_threadsafe(queue.put_nowait, {"call": {
                    "id": cid, "name": name, "args": a, "kwargs": k,
                    "ends_cell": name in live.ends_cell}})
                try:
                    answer = fut.result(service.cfg.call_timeout)
                except concurrent.futures.TimeoutError:
                    raise TimeoutError("the client did not answer %s() in %s s"
                                       % (name, _num(service.cfg.call_timeout))) from None
                finally:
                    live.calls.pop(cid, None)
                if "error" in answer:
                    exc = {"ValueError": ValueError, "TypeError": TypeError,
                           "KeyError": KeyError, "NameError": NameError}.get(
                        str(answer.get("type")), RuntimeError)
                    raise exc(str(answer["error"])[:4096])
                if name in live.ends_cell:
                    return cid
                # The client's answer is as hostile as a jail's: plain data within the jail's
                # bounds, never a pickle.
                return _wire.decode_value(answer.get("value"), from_jail=True)
            return call

        fns, docs = {}, {}
        for name, doc in functions.items():
            if not isinstance(name, str) or not name.isidentifier() or not isinstance(doc, str):
                raise HTTPError(400, "functions: {identifier: doc string}")
            fns[name] = proxy(name)
            docs[name] = doc[:65536]
        live.ends_cell.update(n for n in ends if n in fns)
        await _in_thread(live.session.expose, fns, ends_cell=[n for n in ends if n in fns],
                         docs=docs)
        return JSONResponse({"exposed": sorted(fns)})

    async def post_call_answer(request: Request, tenant: str) -> Response:
        live = service.session_of(tenant, request.path_params["sid"])
        body = await read_json(request)
        fut = live.calls.get(request.path_params["cid"])
        if fut is None or fut.done():
            raise HTTPError(404, "no such call waiting")
        fut.set_result(body)
        return JSONResponse({"ok": True})

    async def post_variables(request: Request, tenant: str) -> Response:
        live = service.session_of(tenant, request.path_params["sid"])
        body = await read_json(request)
        tree = body.get("variables")
        if not isinstance(tree, dict):
            raise HTTPError(400, "variables: an object")
        try:
            values = {str(k): _wire.decode_value(v, from_jail=True) for k, v in tree.items()}
        except ValueError as e:
            raise HTTPError(400, "variables: %s" % e)
        failed = await _in_thread(live.session.set_variables, values)
        return JSONResponse({"failed": failed})

    async def post_interrupt(request: Request, tenant: str) -> Response:
        live = service.session_of(tenant, request.path_params["sid"])
        live.session._interrupt()
        return JSONResponse({"ok": True})

    async def post_restart(request: Request, tenant: str) -> Response:
        live = service.session_of(tenant, request.path_params["sid"])
        # What ran since its last call is charged before the jail it ran in ends.
        service.tenant(tenant).cpu_used += service.charge_session(live, 0.0)
        await _in_thread(live.session.restart)
        service.charge_session(live, 0.0)
        return JSONResponse({"restarts": live.session.restarts})

    async def put_file(request: Request, tenant: str) -> Response:
        live = service.session_of(tenant, request.path_params["sid"])
        name = check_name(request.path_params["name"])
        mode = request.query_params.get("mode")
        if mode is not None and (len(mode) > 4 or any(c not in "01234567" for c in mode)):
            raise HTTPError(400, "mode: octal permissions")
        data = await read_body(request, MAX_FILE)
        n = await _in_thread(live.session.upload, name, data,
                             mode=None if mode is None else int(mode, 8))
        return JSONResponse({"bytes": n})

    async def get_file(request: Request, tenant: str) -> Response:
        live = service.session_of(tenant, request.path_params["sid"])
        q = request.query_params.get("max_bytes")
        limit = MAX_FILE if q is None or not q.isdigit() else min(int(q), MAX_FILE)
        path = request.query_params.get("path")
        if not path or len(path) > 4096:
            raise HTTPError(400, "path: a file of the session (relative to /work, or absolute)")
        data = await _in_thread(live.session.download, path, max_bytes=limit)
        return Response(data, media_type="application/octet-stream")

    async def get_files(request: Request, tenant: str) -> Response:
        live = service.session_of(tenant, request.path_params["sid"])
        q = request.query_params
        patterns = q.getlist("patterns")[:100]
        n = q.get("max_entries", "10000")
        files = await _in_thread(live.session.list_files, q.get("path", ".")[:4096],
                                 patterns or None, min(int(n) if n.isdigit() else 10000, 10000))
        return JSONResponse({"files": files})

    # ------------------------------------------------------------- service

    async def healthz(request: Request) -> Response:
        # A template server that died does not come back by itself: the process is not
        # healthy, and its orchestrator should start it again.
        ok, why = service.ready()
        return Response(("ok" if ok else why) + "\n", status_code=200 if ok else 503,
                        media_type="text/plain")

    async def readyz(request: Request) -> Response:
        ok, why = service.ready()
        return Response(why + "\n", status_code=200 if ok else 503, media_type="text/plain")

    async def metrics(request: Request) -> Response:
        return Response(generate_latest(m.registry), media_type=CONTENT_TYPE_LATEST)

    async def startup() -> None:
        service._reaper = asyncio.ensure_future(service.reap())

    async def shutdown() -> None:
        await service.close()

    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        await startup()
        try:
            yield
        finally:
            await shutdown()

    sid = "/v1/sessions/{sid}"
    routes = [
        Route("/healthz", healthz), Route("/readyz", readyz), Route("/metrics", metrics),
        Route("/v1/runs", endpoint(post_run), methods=["POST"]),
        Route("/v1/sessions", endpoint(post_session), methods=["POST"]),
        Route(sid, endpoint(delete_session), methods=["DELETE"]),
        Route(sid + "/run", endpoint(post_cell), methods=["POST"]),
        Route(sid + "/expose", endpoint(post_expose), methods=["POST"]),
        Route(sid + "/calls/{cid}", endpoint(post_call_answer), methods=["POST"]),
        Route(sid + "/variables", endpoint(post_variables), methods=["POST"]),
        Route(sid + "/interrupt", endpoint(post_interrupt), methods=["POST"]),
        Route(sid + "/restart", endpoint(post_restart), methods=["POST"]),
        Route(sid + "/files", endpoint(get_files), methods=["GET"]),
        Route(sid + "/files/{name:path}", endpoint(put_file), methods=["PUT"]),
        Route(sid + "/file", endpoint(get_file), methods=["GET"]),
    ]
    return Starlette(routes=routes, lifespan=lifespan)


def _unb64(v: Any, what: str) -> bytes:
    import base64
    import binascii
    if not isinstance(v, str):
        raise HTTPError(400, "%s: base64 strings" % what)
    try:
        return base64.b64decode(v, validate=True)
    except (binascii.Error, ValueError):
        raise HTTPError(400, "%s: not valid base64" % what)


def parse_args(argv: Optional[Sequence[str]] = None) -> ServerConfig:
    p = argparse.ArgumentParser(prog="pyjail-server",
                                description="pyjail as an HTTP service: runs and sessions.")
    p.add_argument("--listen", required=True, help="HOST:PORT")
    p.add_argument("--tokens", required=True, help="a file of TENANT TOKEN lines, mode 0600")
    p.add_argument("--profile")
    p.add_argument("--rootfs")
    p.add_argument("--preload", action="append")
    p.add_argument("--size", type=int)
    p.add_argument("--memory")
    p.add_argument("--timeout", type=float, help="a call's time limit (s)")
    p.add_argument("--net", choices=["none", "allow"])
    p.add_argument("--allow-host", dest="allow_hosts", action="append")
    p.add_argument("--max-sessions", type=int, help="live sessions per tenant")
    p.add_argument("--max-runs", type=int, help="calls at once per tenant")
    p.add_argument("--cpu-seconds", type=float, help="CPU seconds per tenant per hour (0: none)")
    p.add_argument("--idle-timeout", type=float, help="close a session idle this long (s)")
    p.add_argument("--binary")
    a = p.parse_args(argv)
    cfg = ServerConfig()
    for k, v in vars(a).items():
        if v is not None:
            setattr(cfg, k, v)
    return cfg


def main(argv: Optional[Sequence[str]] = None) -> int:
    cfg = parse_args(argv)
    from .mcp import parse_listen
    host, port = parse_listen(cfg.listen)
    tokens = read_tokens(cfg.tokens)
    try:
        import uvicorn
    except ImportError:
        print("pyjail-server: uvicorn is missing: pip install 'pyjail-sandbox[server]'",
              file=sys.stderr)
        return 2
    try:
        service = Service(cfg, tokens)
    except PyjailError as e:
        print(str(e).strip(), file=sys.stderr)
        return 125
    for line in service.limits_warnings():
        print("pyjail-server: warning: " + line, file=sys.stderr)
    # h11 bounds the request line and headers; bodies are bounded by the app.
    # Keep-alive outlasts the client's (30 s), so that the server never closes a
    # connection the client is about to reuse.
    # Attack: clients opening connections until the process has no descriptor left (its runs
    # then fail to make their pipes): past a quarter of the open-file limit, new connections
    # are answered 503. (A client that sends its headers slowly still holds its connection:
    # on an untrusted network, a proxy in front bounds that; see man pyjail-server.)
    import resource
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    connections = max(32, min(4096, (nofile if nofile != resource.RLIM_INFINITY else 16384) // 4))
    uvicorn.run(create_app(service), host=host, port=port, log_level="warning",
                timeout_graceful_shutdown=10, timeout_keep_alive=75,
                limit_concurrency=connections)
    return 0


if __name__ == "__main__":
    sys.exit(main())
