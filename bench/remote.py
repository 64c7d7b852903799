#!/usr/bin/env python3
"""The remote client against a local Pool: what one pyjail-server pod sustains.

For 1, 2, 4, 8 and 16 concurrent clients (threads), each calling back to back for a fixed
block of time, the calls per second and each call's latency (p50, p99), of:

- fresh runs, `run("print(1)")` (every result's exit status and output checked);
- session cells, `x = x + 1`, each client in a session of its own (opened before the block,
  not timed; at its end `x` must equal the number of cells the client ran);

through `pyjail.remote.connect(URL, token=...)` to a `pyjail-server` this script starts on
loopback, and through a local `pyjail.Pool` made as the server makes its own (the same
profile, rootfs, preload, size, time limit, session lifetime and output bound), so the
difference is the service: HTTP, JSON, the server's event loop. Remote and local blocks of
the same configuration run back to back in a random order, the configurations in a fresh
random order per round, so that a shared machine's noise falls on both alike; the ratios come
from the same run.

Each client is a tenant of its own (a tokens file of one line per client, mode 0600, in a
temporary directory), each with its own HTTP connection, so the per-tenant quotas of
calls at once and live sessions do not refuse the load; the hourly CPU quota is off.
The clients run on the same CPUs as the server: their own work (httpx, JSON) is counted and
reported, as it would be on another machine in a real deployment.

Needs the server's packages (Starlette, uvicorn, prometheus_client, httpx), which the
package itself does not: give the benchmark a venv of its own.

    python3 -m venv /tmp/bench-venv
    /tmp/bench-venv/bin/pip install starlette uvicorn prometheus-client httpx
    /tmp/bench-venv/bin/python bench/remote.py [--pyjail build/pyjail] [--rounds 4]
        [--block-seconds 1.5] [--clients 1,2,4,8,16] [--profile repl] [--size 1]
        [--preload MOD ...] [--rootfs R] [--markdown FILE]

Everything it starts (the server and its templates, the local Pool, the temporary files)
is stopped and removed on the way out, Ctrl-C or SIGTERM included.
"""
from __future__ import annotations

import argparse
import datetime
import math
import os
import platform
import random
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "python"))

import pyjail  # noqa: E402
from pyjail.server import MAX_OUTPUT, ServerConfig  # noqa: E402
from publish import publish

RUN_CODE = "print(1)"
CELL_CODE = "x = x + 1"
RUNS = "fresh run `print(1)`"
CELLS = "session cell `x = x + 1`"
REMOTE, LOCAL = "remote", "local"


@dataclass
class Config:
    side: str          # REMOTE or LOCAL
    kind: str          # RUNS or CELLS
    clients: int
    latencies: List[float] = field(default_factory=list)   # ms, every call
    seconds: float = 0.0
    cpu: float = 0.0                                      # this process's CPU seconds
    failures: List[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return len(self.latencies) / self.seconds if self.seconds else 0.0


def pct(xs: List[float], q: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tree_of(pid: int) -> Dict[int, str]:
    """Every process under pid, with its start time (to recognise it later, not a reused pid)."""
    children: Dict[int, List[int]] = {}
    start: Dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/stat" % entry) as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            children.setdefault(int(fields[1]), []).append(int(entry))
            start[int(entry)] = fields[19]
    out, todo = {}, [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out[c] = start[c]
            todo.append(c)
    return out


class Server:
    """`pyjail-server` on a loopback port, one tenant a client, for the benchmark's life."""

    def __init__(self, args: argparse.Namespace, tenants: int) -> None:
        self.dir = tempfile.mkdtemp(prefix="pyjail-bench-remote-")
        self.tokens = ["bench-token-%02d-%s" % (i, os.urandom(12).hex()) for i in range(tenants)]
        path = os.path.join(self.dir, "tokens")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.writelines("client%02d %s\n" % (i, t) for i, t in enumerate(self.tokens))
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.argv = ["--listen", "127.0.0.1:%d" % self.port, "--tokens", path,
                     "--profile", args.profile, "--size", str(args.size), "--cpu-seconds", "0",
                     "--binary", args.pyjail]
        if args.rootfs:
            self.argv += ["--rootfs", args.rootfs]
        for mod in args.preload:
            self.argv += ["--preload", mod]
        env = dict(os.environ, PYJAIL_BIN=args.pyjail,
                   PYTHONPATH=os.pathsep.join(filter(None, [str(REPO / "python"),
                                                            os.environ.get("PYTHONPATH")])))
        self.err = open(os.path.join(self.dir, "stderr"), "w+b")
        # A session of its own: Ctrl-C reaches this script alone, which stops the server in order.
        self.proc = subprocess.Popen([sys.executable, "-m", "pyjail.server", *self.argv],
                                     env=env, stdin=subprocess.DEVNULL, stdout=self.err,
                                     stderr=self.err, start_new_session=True)
        self._wait_ready()

    def _wait_ready(self) -> None:
        import httpx
        deadline = time.monotonic() + 300
        while True:
            if self.proc.poll() is not None:
                raise SystemExit("pyjail-server exited (%s) before it was ready: %s"
                                 % (self.proc.returncode, self.stderr()))
            try:
                if httpx.get(self.url + "/readyz", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("pyjail-server was not ready in 300 s: %s" % self.stderr())
            time.sleep(0.1)

    def stderr(self) -> str:
        self.err.seek(0)
        return self.err.read().decode("utf-8", "replace").strip()[-2000:] or "(nothing on stderr)"

    def stop(self) -> None:
        """SIGTERM (the server closes its sessions and its Pool), then what is left of its tree."""
        tree = tree_of(self.proc.pid) if self.proc.poll() is None else {}
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for pid, started in tree.items():
            try:
                with open("/proc/%d/stat" % pid) as f:
                    if f.read().rsplit(")", 1)[1].split()[19] != started:
                        continue
                os.kill(pid, signal.SIGKILL)
                print("remote: killed pid %d, left over by the server" % pid, file=sys.stderr)
            except (OSError, IndexError):
                pass
        self.err.close()
        for name in os.listdir(self.dir):
            os.unlink(os.path.join(self.dir, name))
        os.rmdir(self.dir)


class Sides:
    """The two ways to call: a remote client per thread (a tenant each), one local Pool."""

    def __init__(self, server: Server, pool: pyjail.Pool, cfg: ServerConfig) -> None:
        import pyjail.remote
        self.remote = [pyjail.remote.connect(server.url, token=t) for t in server.tokens]
        self.pool = pool
        self.timeout = cfg.timeout

    def runner(self, side: str, i: int) -> Callable[..., Any]:
        if side == REMOTE:
            return self.remote[i].run
        # As the server calls its Pool for POST /v1/runs.
        return lambda code: self.pool.run(code, timeout=self.timeout, max_output=MAX_OUTPUT)

    def session(self, side: str, i: int) -> Any:
        if side == REMOTE:
            return self.remote[i].session()
        return self.pool.session(timeout=self.timeout)

    def close(self) -> None:
        for c in self.remote:
            c.close()


def check_run(r: Any) -> Optional[str]:
    if r.exit_code != 0 or r.stdout != "1\n":
        return "exit %s, stdout %r, stderr %r" % (r.exit_code, r.stdout[:80], r.stderr[-200:])
    return None


def cell(s: Any, side: str, code: str) -> Any:
    # The server runs every cell with want_data=True: the local side does as much.
    c = s.run(code, want_data=True) if side == LOCAL else s.run(code)
    if c.error is not None or c.timed_out:
        raise RuntimeError("cell %r: %s" % (code, c.error.message if c.error else "timed out"))
    return c


def block(cfg: Config, sides: Sides, seconds: float, stop: threading.Event) -> None:
    """cfg's clients call until the deadline; the block lasts until the last call ends.
    Before it (not timed) each client makes one call, or opens its session: the connection
    is up and the session exists when the clock starts."""
    lock = threading.Lock()
    t0: List[float] = []
    barrier = threading.Barrier(cfg.clients + 1, action=lambda: t0.append(time.perf_counter()))

    def fail(why: str) -> None:
        with lock:
            cfg.failures.append(why)

    def client(i: int) -> None:
        session = None
        try:
            try:
                if cfg.kind == RUNS:
                    run = sides.runner(cfg.side, i)
                    why = check_run(run(RUN_CODE))
                    if why:
                        raise RuntimeError(why)
                else:
                    session = sides.session(cfg.side, i)
                    cell(session, cfg.side, "x = 0")
            except Exception as e:
                fail("before the block: %s" % e)
                barrier.abort()
                return
            try:
                barrier.wait()
            except threading.BrokenBarrierError:
                return
            deadline = t0[0] + seconds
            mine: List[float] = []
            try:
                while not stop.is_set() and time.perf_counter() < deadline:
                    start = time.perf_counter_ns()
                    if cfg.kind == RUNS:
                        why = check_run(run(RUN_CODE))
                    else:
                        cell(session, cfg.side, CELL_CODE)
                        why = None
                    mine.append((time.perf_counter_ns() - start) / 1e6)
                    if why:
                        fail(why)
                        break
                if session is not None and not stop.is_set():
                    got = cell(session, cfg.side, "x").value
                    if got != str(len(mine)):
                        fail("x is %r after %d cells" % (got, len(mine)))
            except Exception as e:
                fail("%s: %s" % (type(e).__name__, e))
            with lock:
                cfg.latencies.extend(mine)
        finally:
            if session is not None:
                try:
                    session.close()
                except Exception as e:
                    fail("closing the session: %s" % e)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(cfg.clients)]
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    for t in threads:
        t.start()
    try:
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            pass
        for t in threads:
            t.join()
    except BaseException:
        stop.set()
        barrier.abort()
        for t in threads:
            t.join()
        raise
    if t0:
        cfg.seconds += time.perf_counter() - t0[0]
        cpu1 = resource.getrusage(resource.RUSAGE_SELF)
        cfg.cpu += (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime)


def measure(sides: Sides, clients: List[int], rounds: int, seconds: float) -> List[Config]:
    configs = {(side, kind, n): Config(side, kind, n)
               for kind in (RUNS, CELLS) for n in clients for side in (LOCAL, REMOTE)}
    stop = threading.Event()
    rng = random.Random()
    pairs = [(kind, n) for kind in (RUNS, CELLS) for n in clients]
    for r in range(rounds):
        rng.shuffle(pairs)
        print("remote: round %d of %d" % (r + 1, rounds), file=sys.stderr)
        for kind, n in pairs:
            for side in rng.sample((LOCAL, REMOTE), 2):
                cfg = configs[(side, kind, n)]
                block(cfg, sides, seconds, stop)
                if cfg.failures:
                    raise SystemExit("remote: %s %s with %d clients failed: %s"
                                     % (side, kind, n, "; ".join(cfg.failures[:3])))
    return list(configs.values())


def table(configs: List[Config]) -> List[str]:
    by = {(c.side, c.kind, c.clients): c for c in configs}
    lines = ["| calls | clients | local calls/s | remote calls/s | remote / local "
             "| local p50 ms | remote p50 ms | local p99 ms | remote p99 ms "
             "| calls timed (local / remote) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for (side, kind, n), loc in by.items():
        if side != LOCAL:
            continue
        rem = by[(REMOTE, kind, n)]
        ratio = rem.rate / loc.rate if loc.rate else float("nan")
        lines.append("| %s | %d | %.1f | %.1f | %.2f | %.2f | %.2f | %.2f | %.2f | %d / %d |"
                     % (kind, n, loc.rate, rem.rate, ratio, pct(loc.latencies, 50),
                        pct(rem.latencies, 50), pct(loc.latencies, 99), pct(rem.latencies, 99),
                        len(loc.latencies), len(rem.latencies)))
    return lines


def about(x: float) -> str:
    """x to two significant figures, as a sentence says it."""
    if x <= 0 or math.isnan(x):
        return "0"
    digits = max(0, 1 - int(math.floor(math.log10(x))))
    return "%.*f" % (digits, round(x, digits))


def sustains(configs: List[Config], kind: str, what: str) -> str:
    """What the pod sustains: the fewest clients whose remote rate is within 10% of the best
    remote rate (more clients add latency, not throughput), its rate and its p99."""
    mine = sorted((c for c in configs if c.side == REMOTE and c.kind == kind and c.latencies),
                  key=lambda c: c.clients)
    if not mine:
        return "no %s measured" % what
    best = max(c.rate for c in mine)
    knee = next(c for c in mine if c.rate >= 0.9 * best)
    top = max(mine, key=lambda c: c.rate)
    return ("one pod of %d CPUs sustains about %s %s/s at p99 <= %d ms (%s at once; the most "
            "measured, %.1f/s, with %s)"
            % (os.cpu_count(), about(knee.rate), what, math.ceil(pct(knee.latencies, 99)),
               plural(knee.clients, "client"), best, plural(top.clients, "client")))


def plural(n: int, noun: str) -> str:
    return "%d %s%s" % (n, noun, "" if n == 1 else "s")


def versions(pyjail_bin: str) -> str:
    out = []
    try:
        v = subprocess.run([pyjail_bin, "--version"], capture_output=True, text=True, timeout=10)
        out.append(v.stdout.strip() or "pyjail (no version)")
    except (OSError, subprocess.TimeoutExpired) as e:
        out.append("pyjail (--version failed: %s)" % e)
    for mod in ("uvicorn", "starlette", "httpx"):
        try:
            out.append("%s %s" % (mod, __import__(mod).__version__))
        except ImportError:
            pass
    out.append("Python %s" % platform.python_version())
    return ", ".join(out)


def main() -> int:
    defaults = ServerConfig()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pyjail", default=str(REPO / "build" / "pyjail"))
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--block-seconds", type=float, default=1.5)
    ap.add_argument("--clients", default="1,2,4,8,16")
    ap.add_argument("--profile", default=defaults.profile)
    ap.add_argument("--size", type=int, default=defaults.size, help="templates (both sides)")
    ap.add_argument("--preload", action="append", default=[], help="a module (repeatable)")
    ap.add_argument("--rootfs")
    ap.add_argument("--markdown", help="also write the report to this file")
    args = ap.parse_args()
    clients = sorted({int(n) for n in args.clients.split(",")})
    if not clients or clients[0] < 1:
        ap.error("--clients: numbers of 1 or more, e.g. 1,2,4")
    try:
        import httpx  # noqa: F401
        import prometheus_client  # noqa: F401
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as e:
        raise SystemExit("remote: %s: run it from a venv with starlette, uvicorn, "
                         "prometheus-client and httpx (see --help)" % e)
    args.pyjail = os.path.abspath(args.pyjail)

    def terminated(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, terminated)

    server = pool = sides = None
    try:
        server = Server(args, max(clients))
        # The local side: a Pool made as the server makes its own (Service._make_pool).
        pool = pyjail.Pool(args.preload, size=args.size, profile=args.profile,
                           rootfs=args.rootfs, binary=args.pyjail,
                           options={"wall_time": defaults.session_lifetime})
        sides = Sides(server, pool, defaults)
        configs = measure(sides, clients, args.rounds, args.block_seconds)
    except KeyboardInterrupt:
        print("remote: interrupted; stopping what it started", file=sys.stderr)
        return 130
    finally:
        if sides is not None:
            sides.close()
        if pool is not None:
            pool.close()
        if server is not None:
            server.stop()

    remote = [c for c in configs if c.side == REMOTE]
    wall = sum(c.seconds for c in remote) * (os.cpu_count() or 1)
    client_share = 100 * sum(c.cpu for c in remote) / wall if wall else 0.0
    cmdline = " ".join(["bench/remote.py"] + sys.argv[1:])
    server_cmd = " ".join(["pyjail-server", *server.argv[4:]]).replace(args.pyjail, "PYJAIL")
    lines = [
        "Produced by `%s` on %s (kernel %s, %d CPUs, uid %d; %s): %s of a %g s block "
        "per configuration, remote and local blocks of each configuration back to back in a "
        "random order." % (cmdline, "{:%Y-%m-%d %H:%M %z}".format(
            datetime.datetime.now().astimezone()), platform.release(), os.cpu_count(),
            os.geteuid(), versions(args.pyjail), plural(args.rounds, "round"),
            args.block_seconds),
        "",
        "Remote: `pyjail.remote.connect(URL, token=...)` to `%s` on loopback (a tenant and an "
        "HTTP connection per client); local: `pyjail.Pool` with the same profile (%s), "
        "rootfs (%s), preload (%s) and %s. Latency: one call, from the client's "
        "call to its result." % (server_cmd, args.profile, args.rootfs or "the default",
                                 ", ".join(args.preload) or "none",
                                 plural(args.size, "template")),
        "",
        *table(configs),
        "",
        "From these figures: %s; %s. The clients ran on the same %d CPUs and took %.0f%% of "
        "them during the remote blocks (this process's CPU time), which a pod serving clients "
        "elsewhere would have for itself." % (
            sustains(configs, RUNS, "runs"), sustains(configs, CELLS, "session cells"),
            os.cpu_count(), client_share),
    ]
    text = "\n".join(lines) + "\n"
    publish(text, args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
