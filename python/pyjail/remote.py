"""pyjail.remote: the client of a pyjail-server, with Pool's API.

    import pyjail.remote
    pool = pyjail.remote.connect("https://sandbox.example.com", token="...")
    print(pool.run("print(6 * 7)").stdout)          # a pyjail.Result
    with pool.session() as s:                        # a Session's API
        s.run("x = 1")
        print(s.run("x + 1").value)                  # a pyjail.CellResult
        s.upload("data.csv", b"a,b\\n1,2\\n")

Code moves from a local ``pyjail.Pool`` to a service by changing the one
constructor. Results are the package's ``Result`` and ``CellResult``;
``on_stdout``/``on_stderr`` receive output as the jail writes it (the server
streams it); ``session.expose()`` runs host functions here, on the client,
when the jailed code calls them (the agent adapters' tools, smolagents'
final_answer), and ``set_variables`` sends plain data. The LangChain and
smolagents adapters take a remote session as they take a local one
(``PythonREPL(session=pool.session())``, ``PyjailExecutor(session=...)``).

The server is treated as hostile as a jail is: every line of its streams is
bounded, values are rebuilt with the package's plain-data codec (nothing is
ever unpickled), file names are checked as local runs check them. A session
whose server went away (a pod deleted, a connection reset mid-cell, the
server forgot the session) raises SessionDiedError at once; a wrong token
raises PermissionError; a quota, JailError with the server's reason.

Needs httpx (``pip install 'pyjail-sandbox[remote]'``).
"""

import base64
import json
import threading
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union
from urllib.parse import quote

from . import _wire
from ._common import JailError, PyjailError, Report, check_name
from ._run import Result
from ._session import (_NOT_GIVEN, CellError, CellResult, FinalCall, HostFileCopies, Image, JailObject,
                       SessionClosedError, SessionDiedError, SessionError)

__all__ = ["connect", "RemotePool", "RemoteSession", "encode_result", "decode_result",
           "encode_cell", "decode_cell"]

# One line of a stream (a chunk of output, a host call, a result with its images and files).
MAX_LINE = 96 << 20
MAX_CHUNK = 1 << 20


# ------------------------------------------------------------------ the wire

def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(s: Any, what: str) -> bytes:
    if not isinstance(s, str):
        raise PyjailError("pyjail.remote: the server sent a malformed %s" % what)
    try:
        return base64.b64decode(s, validate=True)
    except ValueError:
        raise PyjailError("pyjail.remote: the server sent a malformed %s" % what) from None


def _plain(value: Any) -> Tuple[Any, Optional[str]]:
    """A value as the package's plain-data tree (never a pickle), or why not."""
    try:
        return _wire.encode_value(value, allow_pickle=False), None
    except _wire.PlainDataError as e:
        return None, str(e)[:1024]


def _unplain(tree: Any) -> Any:
    # A server (or a client, on the server) that sends a pickle gets ValueError, never code
    # run by pickle.loads: values cross as plain data only, with the jail's bounds.
    return _wire.decode_value(tree, allow_pickle=False, pickle_fallback=False, from_jail=True)


def encode_result(r: Result) -> Dict[str, Any]:
    return {"exit_code": r.exit_code, "stdout": _b64(r.stdout_bytes),
            "stderr": _b64(r.stderr_bytes), "stdout_omitted": r.stdout_omitted,
            "stderr_omitted": r.stderr_omitted,
            "stdout_split": r._stdout_split, "stderr_split": r._stderr_split,
            "report": None if r.report is None else r.report.raw,
            "files": {k: _b64(v) for k, v in r.files.items()},
            "skipped_files": dict(r.skipped_files)}


def _int(d: Mapping[str, Any], key: str, default: int = 0) -> int:
    v = d.get(key, default)
    if type(v) is not int or v < -(1 << 62) or v > (1 << 62):
        raise PyjailError("pyjail.remote: the server sent a malformed %s" % key)
    return v


def decode_result(d: Any) -> Result:
    if not isinstance(d, dict):
        raise PyjailError("pyjail.remote: the server sent a malformed result")
    files = d.get("files") or {}
    if not isinstance(files, dict):
        raise PyjailError("pyjail.remote: the server sent a malformed list of files")
    out_files: Dict[str, bytes] = {}
    for name, data in files.items():
        try:
            out_files[check_name(name)] = _unb64(data, "file")
        except ValueError as e:      # a name outside the work directory
            raise PyjailError("pyjail.remote: the server sent back a file name %r: %s"
                              % (name, e)) from None
    skipped = d.get("skipped_files") or {}
    rep = d.get("report")
    stdout, stderr = _unb64(d.get("stdout", ""), "stdout"), _unb64(d.get("stderr", ""), "stderr")
    return Result(exit_code=_int(d, "exit_code"), stdout_bytes=stdout, stderr_bytes=stderr,
                  stdout_omitted=_int(d, "stdout_omitted"),
                  stderr_omitted=_int(d, "stderr_omitted"),
                  report=Report.from_json(rep) if isinstance(rep, dict) else None,
                  files=out_files,
                  skipped_files={str(k)[:4096]: str(v)[:1024] for k, v in skipped.items()}
                  if isinstance(skipped, dict) else {},
                  _stdout_split=max(0, min(_int(d, "stdout_split"), len(stdout))),
                  _stderr_split=max(0, min(_int(d, "stderr_split"), len(stderr))))


def encode_cell(c: CellResult, final_ids: Optional[Mapping[int, str]] = None) -> Dict[str, Any]:
    out: Dict[str, Any] = {
        "stdout": c.stdout, "stderr": c.stderr, "value": c.value, "value_str": c.value_str,
        "timed_out": c.timed_out, "restarted": c.restarted, "duration_s": c.duration_s,
        "stdout_omitted": c.stdout_omitted, "stderr_omitted": c.stderr_omitted,
        "data_error": c.data_error, "processes_killed": c.processes_killed,
        "report": None if c.report is None else c.report.raw,
        "images": [{"mime": i.mime, "data": _b64(i.data)} for i in c.images],
        "formats": {k: v for k, v in c.formats.items() if isinstance(v, str)},
        "displays": json.loads(json.dumps(c.displays, default=str)),
    }
    if c.error is not None:
        out["error"] = {"type": c.error.type, "message": c.error.message,
                        "traceback": c.error.traceback, "repr": c.error.repr,
                        "short_traceback": c.error.short_traceback}
    if c.value is not None and not isinstance(c.data, JailObject):
        tree, why = _plain(c.data)
        if why is None:
            out["data"] = tree
        elif c.data_error is None:
            out["data_error"] = "not plain data, so not sent by the server: %s" % why
    if c.final is not None:
        # A host function's return value is the client's own: the server sends back the
        # call it answered, and the client puts its value in.
        out["final"] = {"name": c.final.name, "call": c.final.value}
    return out


def decode_cell(d: Any, finals: Optional[Mapping[str, Any]] = None) -> CellResult:
    if not isinstance(d, dict):
        raise PyjailError("pyjail.remote: the server sent a malformed cell result")

    def s(key: str) -> Optional[str]:
        v = d.get(key)
        return v if isinstance(v, str) else None

    c = CellResult(stdout=s("stdout") or "", stderr=s("stderr") or "", value=s("value"),
                   value_str=s("value_str"), timed_out=d.get("timed_out") is True,
                   restarted=d.get("restarted") is True,
                   duration_s=float(d["duration_s"]) if isinstance(d.get("duration_s"),
                                                                   (int, float)) else 0.0,
                   stdout_omitted=_int(d, "stdout_omitted"),
                   stderr_omitted=_int(d, "stderr_omitted"), data_error=s("data_error"),
                   processes_killed=_int(d, "processes_killed"))
    err = d.get("error")
    if isinstance(err, dict):
        c.error = CellError(str(err.get("type", "Exception")), str(err.get("message", "")),
                            str(err.get("traceback", "")), str(err.get("repr", "")),
                            str(err.get("short_traceback", "")))
    rep = d.get("report")
    if isinstance(rep, dict):
        c.report = Report.from_json(rep)
    for img in d.get("images") or []:
        if isinstance(img, dict) and isinstance(img.get("mime"), str):
            c.images.append(Image(img["mime"][:100], _unb64(img.get("data"), "image")))
    formats = d.get("formats")
    if isinstance(formats, dict):
        c.formats = {str(k): v for k, v in formats.items() if isinstance(v, str)}
    displays = d.get("displays")
    if isinstance(displays, list):
        c.displays = [x for x in displays if isinstance(x, dict)]
    if c.value is not None:
        if "data" in d:
            try:
                c.data = _unplain(d["data"])
            except ValueError as e:
                c.data = JailObject(c.value)
                c.data_error = "the value could not be rebuilt here: %s" % e
        else:
            c.data = JailObject(c.value)
    final = d.get("final")
    if isinstance(final, dict) and finals is not None:
        call = final.get("call")
        if isinstance(call, str) and call in finals:
            c.final = FinalCall(str(final.get("name")), finals[call])
    return c


# --------------------------------------------------------------- the client

def _raise_for(status: int, body: bytes, session: bool = False) -> None:
    code = None
    try:
        obj = json.loads(body[:65536])
        msg = obj.get("error", "")
        code = obj.get("errno")
    except (ValueError, AttributeError):
        msg = body[:1024].decode("utf-8", "replace")
    if type(code) is int and 0 <= code < 4096:
        # A file of the session's: raised as the local session raises it.
        raise OSError(code, str(msg)[:2048])
    msg = "pyjail.remote: %s (HTTP %d)" % (str(msg)[:2048] or "the server refused", status)
    if status == 401:
        raise PermissionError(msg)
    if status == 404 and session:
        raise SessionDiedError(msg)
    if status == 409:
        raise SessionError(msg)
    raise JailError(msg)


def _lines(resp: Any) -> Iterator[Dict[str, Any]]:
    """The JSON objects of a streamed answer, each line bounded."""
    buf = b""
    for chunk in resp.iter_bytes():
        buf += chunk
        while True:
            nl = buf.find(b"\n")
            if nl < 0:
                if len(buf) > MAX_LINE:
                    raise PyjailError("pyjail.remote: a line of the server's stream is over "
                                      "%d bytes" % MAX_LINE)
                break
            line, buf = buf[:nl], buf[nl + 1:]
            if line.strip():
                try:
                    obj = json.loads(line)
                except ValueError:
                    raise PyjailError("pyjail.remote: the server sent a malformed line") from None
                if not isinstance(obj, dict):
                    raise PyjailError("pyjail.remote: the server sent a malformed line")
                yield obj


class RemotePool:
    """A pyjail-server, as a ``pyjail.Pool``: ``run``, ``arun``, ``session()``."""

    def __init__(self, url: str, token: str, *, timeout: float = 30.0,
                 verify: Union[bool, str] = True) -> None:
        import httpx
        self.url = url.rstrip("/")
        self._headers = {"Authorization": "Bearer " + token}
        # Connect and write times are bounded; reading waits as long as a run may last (the
        # server ends every run at its time limit, and its stream has keep-alive lines).
        self._timeout = httpx.Timeout(timeout, read=None)
        self._client = httpx.Client(base_url=self.url, headers=self._headers,
                                    timeout=self._timeout, verify=verify,
                                    limits=httpx.Limits(keepalive_expiry=30))
        self._verify = verify

    # -------------------------------------------------------------- plumbing

    def _request(self, method: str, path: str, *, session: bool = False, **kw: Any) -> Any:
        import httpx
        try:
            r = self._client.request(method, path, **kw)
        except httpx.TransportError as e:
            if session:
                raise SessionDiedError("pyjail.remote: the session's server went away: %s"
                                       % e) from None
            raise JailError("pyjail.remote: cannot reach %s: %s" % (self.url, e)) from None
        if r.status_code >= 400:
            _raise_for(r.status_code, r.content, session)
        return r

    def _stream(self, path: str, body: Mapping[str, Any], on_stdout: Any, on_stderr: Any,
                on_call: Optional[Callable[[Dict[str, Any]], None]] = None,
                session: bool = False) -> Dict[str, Any]:
        import httpx
        try:
            with self._client.stream("POST", path, json=body) as resp:
                if resp.status_code >= 400:
                    _raise_for(resp.status_code, resp.read(), session)
                for obj in _lines(resp):
                    if "stdout" in obj and on_stdout is not None:
                        on_stdout(str(obj["stdout"])[:MAX_CHUNK])
                    elif "stderr" in obj and on_stderr is not None:
                        on_stderr(str(obj["stderr"])[:MAX_CHUNK])
                    elif "call" in obj and on_call is not None:
                        on_call(obj["call"])
                    elif "result" in obj:
                        return obj["result"]
                    elif "error" in obj:
                        err = obj["error"] if isinstance(obj["error"], dict) else {}
                        _raise_for(int(err.get("status", 500)) if isinstance(
                            err.get("status"), int) else 500,
                            json.dumps({"error": str(err.get("message", ""))}).encode(),
                            session)
        except httpx.TransportError as e:
            if session:
                raise SessionDiedError("pyjail.remote: the session's server went away "
                                       "mid-call: %s" % e) from None
            raise JailError("pyjail.remote: the connection to %s broke: %s"
                            % (self.url, e)) from None
        if session:
            raise SessionDiedError("pyjail.remote: the session's server ended the stream "
                                   "without a result")
        raise JailError("pyjail.remote: the server ended the stream without a result")

    # ------------------------------------------------------------------ Pool

    def run(self, code: Optional[str] = None, *, timeout: Optional[float] = None,
            memory: Optional[str] = None, files: Optional[Mapping[str, Union[bytes, str]]] = None,
            outputs: Union[bool, Sequence[str]] = False, stdin: Optional[Union[bytes, str]] = None,
            on_stdout: Optional[Callable[[str], Any]] = None,
            on_stderr: Optional[Callable[[str], Any]] = None, **unsupported: Any) -> Result:
        """A fresh jail on the server, as ``Pool.run``: the program's output as it is
        written to ``on_stdout``/``on_stderr``, and a ``pyjail.Result``."""
        if unsupported:
            raise TypeError("pyjail.remote: run() does not take %s over the network"
                            % ", ".join(sorted(unsupported)))
        if not isinstance(code, str):
            raise TypeError("code must be a str")
        body: Dict[str, Any] = {"code": code}
        if timeout is not None:
            body["timeout"] = float(timeout)
        if memory is not None:
            body["memory"] = str(memory)
        if files:
            body["files"] = {check_name(k): _b64(v.encode("utf-8") if isinstance(v, str) else
                                                  bytes(v)) for k, v in files.items()}
        if outputs:
            body["outputs"] = True if outputs is True else [str(p) for p in outputs]
        if stdin is not None:
            body["stdin"] = _b64(stdin.encode("utf-8") if isinstance(stdin, str) else stdin)
        return decode_result(self._stream("/v1/runs", body, on_stdout, on_stderr))

    async def arun(self, code: Optional[str] = None, **kwargs: Any) -> Result:
        """``run`` for asyncio (in a thread of its own). Cancelling the await abandons
        the call; the run goes on in the server until it ends or reaches its time limit."""
        from ._async import _in_thread
        return await _in_thread(self.run, code, **kwargs)

    def session(self, *, timeout: Optional[float] = None, memory: Optional[str] = None,
                **unsupported: Any) -> "RemoteSession":
        """A session on the server (a ``Session``'s methods); close() ends it."""
        if unsupported:
            raise TypeError("pyjail.remote: session() does not take %s over the network"
                            % ", ".join(sorted(unsupported)))
        body: Dict[str, Any] = {}
        if memory is not None:
            body["memory"] = str(memory)
        r = self._request("POST", "/v1/sessions", json=body)
        info = r.json()
        if not isinstance(info, dict) or not isinstance(info.get("id"), str):
            raise PyjailError("pyjail.remote: the server sent a malformed session")
        return RemoteSession(self, info, timeout)

    def health(self) -> bool:
        try:
            return self._client.get("/readyz").status_code == 200
        except Exception:
            return False

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> "RemotePool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class RemoteSession(HostFileCopies):
    """A session on a pyjail-server, with ``pyjail.Session``'s methods."""

    def __init__(self, pool: RemotePool, info: Mapping[str, Any],
                 timeout: Optional[float]) -> None:
        self._pool = pool
        self.id = str(info["id"])[:200]
        self._path = "/v1/sessions/" + quote(self.id, safe="")
        self.timeout = timeout
        egress = info.get("egress")
        self._egress: Tuple[Optional[str], List[str]] = (
            (egress[0] if isinstance(egress[0], str) else None,
             [str(h) for h in egress[1]][:1000] if isinstance(egress[1], list) else [])
            if isinstance(egress, list) and len(egress) == 2 else (None, []))
        sinfo = info.get("server_info")
        self.server_info: Dict[str, Any] = dict(sinfo) if isinstance(sinfo, dict) else {}
        self.restarts = 0
        self.interrupt_grace = 2.0
        self.last_report: Optional[Report] = None
        self._functions: Dict[str, Callable[..., Any]] = {}
        self._closed = False
        self._lock = threading.RLock()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def egress(self) -> Tuple[Optional[str], List[str]]:
        return self._egress

    def _check_open(self) -> None:
        if self._closed:
            raise SessionClosedError("the session is closed")

    def run(self, code: str, timeout: Any = _NOT_GIVEN, *, want_data: bool = False,
            want_str: bool = False, name: Optional[str] = None,
            on_stdout: Optional[Callable[[str], Any]] = None,
            on_stderr: Optional[Callable[[str], Any]] = None,
            want_formats: bool = True) -> CellResult:
        """One cell, as ``Session.run``; output streams to the callbacks as it is written."""
        if not isinstance(code, str):
            raise TypeError("code must be a str, not %s" % type(code).__name__)
        if timeout is _NOT_GIVEN:
            timeout = self.timeout
        finals: Dict[str, Any] = {}
        body = {"code": code, "timeout": timeout, "want_str": bool(want_str),
                "want_formats": bool(want_formats)}
        with self._lock:
            self._check_open()
            d = self._pool._stream(self._path + "/run", body, on_stdout, on_stderr,
                                   lambda call: self._answer(call, finals), session=True)
        restarts = d.get("restarts") if isinstance(d, dict) else None
        if type(restarts) is int:
            self.restarts = restarts
        res = decode_cell(d.get("cell") if isinstance(d, dict) else None, finals)
        if res.restarted and res.report is not None:
            self.last_report = res.report
        return res

    def _answer(self, call: Any, finals: Dict[str, Any]) -> None:
        """Runs the host function the jailed code called, here, and sends its answer."""
        if not isinstance(call, dict) or not isinstance(call.get("id"), str):
            raise PyjailError("pyjail.remote: the server sent a malformed call")
        cid = call["id"][:64]
        reply: Dict[str, Any]
        try:
            fn = self._functions.get(call.get("name"))  # type: ignore[arg-type]
            if fn is None:
                raise NameError("%r is not a host function of this session"
                                % (str(call.get("name"))[:100],))
            args = _unplain(call.get("args"))
            kwargs = _unplain(call.get("kwargs"))
            if not isinstance(args, list) or not isinstance(kwargs, dict):
                raise TypeError("malformed arguments")
            value = fn(*args, **kwargs)
            if call.get("ends_cell"):
                finals[cid] = value
                reply = {"value": _plain(cid)[0]}
            else:
                tree, why = _plain(value)
                reply = {"value": tree if why is None else _plain(str(value))[0]}
        except Exception as e:
            msg = e.args[0] if len(e.args) == 1 and isinstance(e.args[0], str) else str(e)
            reply = {"error": msg[:4096], "type": type(e).__name__}
        self._pool._request("POST", self._path + "/calls/" + quote(cid, safe=""),
                            json=reply, session=True)

    def expose(self, functions: Mapping[str, Callable[..., Any]], *,
               ends_cell: Iterable[str] = (), docs: Optional[Mapping[str, str]] = None) -> None:
        """Host functions (here, on the client) the jailed code may call by name, as
        ``Session.expose``: arguments and results cross as plain data."""
        ends = set(ends_cell)
        for n, fn in functions.items():
            if not n.isidentifier():
                raise ValueError("%r is not a Python identifier" % n)
            if not callable(fn):
                raise TypeError("%s is not callable" % n)
        body = {"functions": {n: str((docs or {}).get(n) or getattr(fn, "__doc__", None) or "")
                              for n, fn in functions.items()},
                "ends_cell": [n for n in functions if n in ends]}
        with self._lock:
            self._check_open()
            self._pool._request("POST", self._path + "/expose", json=body, session=True)
            self._functions.update(functions)

    def set_variables(self, variables: Mapping[str, Any]) -> Dict[str, str]:
        """Puts plain data into the namespace; the names that were not set, with why
        (objects are not pickled over the network)."""
        tree: Dict[str, Any] = {}
        failed: Dict[str, str] = {}
        for k, v in variables.items():
            t, why = _plain(v)
            if why is None:
                tree[k] = t
            else:
                failed[k] = "not plain data (a remote session takes no pickles): %s" % why
        if tree:
            r = self._pool._request("POST", self._path + "/variables", json={"variables": tree},
                                    session=True)
            more = r.json().get("failed")
            if isinstance(more, dict):
                failed.update({str(k): str(v)[:1024] for k, v in more.items() if k in tree})
        return failed

    def upload(self, name: str, data: Union[bytes, str], *, mode: Optional[int] = None) -> int:
        raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        params = {} if mode is None else {"mode": "%o" % mode}
        r = self._pool._request("PUT", self._path + "/files/" + quote(check_name(name)),
                                content=raw, params=params, session=True)
        n = r.json().get("bytes")
        return n if type(n) is int else len(raw)

    def download(self, name: str, *, max_bytes: Optional[int] = None) -> bytes:
        params = {} if max_bytes is None else {"max_bytes": str(int(max_bytes))}
        params["path"] = str(name)
        r = self._pool._request("GET", self._path + "/file", params=params, session=True)
        data = r.content
        if max_bytes is not None and len(data) > max_bytes:
            raise SessionError("%s is larger than max_bytes=%d" % (name, max_bytes))
        return data

    def list_files(self, path: str = ".", patterns: Optional[Sequence[str]] = None,
                   max_entries: int = 10000) -> Dict[str, int]:
        r = self._pool._request("GET", self._path + "/files", session=True,
                                params={"path": path, "patterns": list(patterns or []),
                                        "max_entries": str(max_entries)})
        out: Dict[str, int] = {}
        entries = r.json().get("files")
        if not isinstance(entries, dict) or len(entries) > max_entries:
            raise PyjailError("pyjail.remote: the server sent a malformed file listing")
        for k, v in entries.items():
            try:
                out[check_name(k)] = v if type(v) is int and v >= 0 else 0
            except ValueError as e:
                raise PyjailError("pyjail.remote: a listed %s" % e) from None
        return out

    def restart(self) -> None:
        self._pool._request("POST", self._path + "/restart", session=True)
        self.restarts += 1

    def _interrupt(self, only_if: Optional[Callable[[], bool]] = None) -> None:
        """What AsyncSession does to a cancelled call: the server interrupts the cell."""
        if only_if is not None and not only_if():
            return
        try:
            self._pool._request("POST", self._path + "/interrupt", session=True)
        except PyjailError:
            pass

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._pool._request("DELETE", self._path, session=True)
        except (SessionError, JailError):
            pass       # the server forgot it already (expired, gone with its pod)

    def __enter__(self) -> "RemoteSession":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def connect(url: str, token: str, **kwargs: Any) -> RemotePool:
    """A pyjail-server at ``url`` (``http(s)://host:port``), with a tenant's bearer
    ``token``: an object with ``Pool``'s methods (``run``, ``arun``, ``session()``)."""
    return RemotePool(url, token, **kwargs)
