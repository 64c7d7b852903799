#!/usr/bin/env python3
"""Controlled egress (--net allow): what it costs, interleaved in one run, as ratios.

1. Start-up: `pyjail --net allow --allow-host one.test -- python -c pass` against the same with
   `--net none`, fresh jails; and the same pair as runs from templates (`pyjail serve` with and
   without the allowlist, `pyjail --via`). Rounds run every command once, in a random order; the
   time is the whole command's, start to exit. Paired differences (median) per round.
2. Throughput: a 100 MB download from an HTTP server on the host's loopback, through the relay
   (a jailed client, `--net-resolve web.test:127.0.0.1`) against the same client code run on the
   host; the time is measured by the client itself, from its connect to its last byte, so the
   jail's start-up is not in it. Interleaved, best and median of each; and pyjail's own CPU
   time for each relayed download (all of the supervisor's work: its start-up and the relay).
3. A flood: 200 connections at once from one jail (200 threads, each a 100 KB download) through
   one supervisor; its peak memory (VmHWM) and CPU time (utime + stime of the pyjail process
   itself, read from /proc before it exits), against an idle jail with the same allowlist.

With `--baseline PYJAIL`, the downloads through another build's relay join the same interleaved
rounds (a third command in each), so two builds are compared in one run; `--parts` runs only some
of the three parts.

    bench/egress.py [--pyjail build/pyjail] [--baseline PYJAIL] [--rounds 40] [--downloads 5]
                    [--parts startup,throughput,flood] [--markdown FILE]
"""
from __future__ import annotations

import argparse
import http.server
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from publish import publish

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
MB = 1 << 20
BIG = 100 * MB
SMALL = 100 * 1024
CLK_TCK = os.sysconf("SC_CLK_TCK")

# The client, the same on the host and in the jail: connect, one GET, read to the end.
CLIENT = """
import socket, sys, time
host, port, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
t0 = time.perf_counter()
s = socket.create_connection((host, port))
s.sendall(("GET /%d HTTP/1.1\\r\\nHost: web.test:%d\\r\\nConnection: close\\r\\n\\r\\n" % (size, port)).encode())
buf = bytearray(1 << 20)
got = 0
while True:
    n = s.recv_into(buf)
    if not n:
        break
    got += n
t1 = time.perf_counter()
print(got, t1 - t0, flush=True)
sys.stdin.readline()
"""

FLOOD = """
import socket, sys, threading
port, n, size = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
ok = []
def one():
    try:
        s = socket.create_connection(("web.test", port), timeout=120)
        s.sendall(("GET /%d HTTP/1.1\\r\\nHost: web.test:%d\\r\\nConnection: close\\r\\n\\r\\n" % (size, port)).encode())
        got = 0
        while True:
            b = s.recv(1 << 16)
            if not b:
                break
            got += len(b)
        ok.append(got)
    except OSError as e:
        print("error", e, file=sys.stderr)
threading.stack_size(256 * 1024)  # 200 default stacks would pass the profile's memory limit
threads = [threading.Thread(target=one) for _ in range(n)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(len(ok), sum(ok), flush=True)
sys.stdin.readline()
"""


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    payload = memoryview(b"x" * BIG)

    def do_GET(self):  # noqa: N802 (the stdlib's name)
        size = min(int(self.path.lstrip("/") or 0), BIG)
        self.send_response(200)
        self.send_header("Content-Length", str(size))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(self.payload[:size])

    def log_message(self, *args):
        pass


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256


def start_web() -> int:
    srv = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv.server_address[1]


def allow(port: int) -> list[str]:
    return ["--net", "allow", "--allow-host", f"web.test:{port}", "--net-resolve", "web.test:127.0.0.1"]


class Template:
    def __init__(self, pyjail: str, sock: str, args: list[str]):
        self.sock = sock
        self.p = subprocess.Popen([pyjail, "serve", "--quiet", "--socket", sock, *args],
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
        line = self.p.stdout.readline().decode()
        if not line.startswith("pyjail serve: ready"):
            raise SystemExit(f"pyjail serve {' '.join(args)} did not start: {line!r}")

    def close(self):
        self.p.terminate()
        self.p.wait(15)


def run_ms(argv: list[str]) -> float:
    t0 = time.perf_counter()
    r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True)
    t1 = time.perf_counter()
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({r.returncode}): {r.stderr.decode()[-500:]}")
    return (t1 - t0) * 1e3


def startup(pyjail: str, port: int, rounds: int, tmp: str) -> dict[str, list[float]]:
    web = allow(port)
    plain = Template(pyjail, os.path.join(tmp, "plain.sock"), [])
    egress = Template(pyjail, os.path.join(tmp, "egress.sock"), web)
    cmds = {
        "fresh --net none": [pyjail, "--quiet", "--", "python", "-c", "pass"],
        "fresh --net allow": [pyjail, "--quiet", *web, "--", "python", "-c", "pass"],
        "template --net none": [pyjail, "--quiet", "--via", plain.sock, "--", "python", "-c", "pass"],
        "template --net allow": [pyjail, "--quiet", *web, "--via", egress.sock, "--", "python", "-c", "pass"],
    }
    times: dict[str, list[float]] = {k: [] for k in cmds}
    try:
        for k, argv in cmds.items():  # warm-up
            run_ms(argv)
        for i in range(rounds):
            order = list(cmds)
            random.shuffle(order)
            for k in order:
                times[k].append(run_ms(cmds[k]))
            if (i + 1) % 10 == 0:
                print(f"start-up: {i + 1}/{rounds} rounds", file=sys.stderr)
    finally:
        plain.close()
        egress.close()
    return times


SUPERVISOR_CPU: dict[str, list[float]] = {}  # pyjail's own CPU seconds per relayed download


def download(argv: list[str], cpu: list[float] | None = None) -> float:
    """MiB/s as the client measured it; for pyjail, its own CPU time is kept too (read from /proc
    while the program waits for its stdin to close, after it printed)."""
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    fields = p.stdout.readline().split()
    if cpu is not None and fields:
        cpu.append(proc_status(p.pid)[2])
    p.stdin.close()
    err = p.stderr.read()
    p.wait()
    p.stdout.close()
    p.stderr.close()
    if p.returncode != 0 or len(fields) != 2 or int(fields[0]) < BIG:
        raise SystemExit(f"{' '.join(argv[:3])}... failed ({p.returncode}): {fields} {err[-500:]}")
    return BIG / float(fields[1]) / MB  # MiB/s


def relayed(pyjail: str, port: int) -> list[str]:
    return [pyjail, "--quiet", *allow(port), "--", "python", "-c", CLIENT, "web.test", str(port), str(BIG)]


def throughput(pyjail: str, python: str, port: int, n: int, baseline: str | None = None) -> dict[str, list[float]]:
    cmds = {"host": [python, "-c", CLIENT, "127.0.0.1", str(port), str(BIG)], "relay": relayed(pyjail, port)}
    if baseline:
        cmds["baseline"] = relayed(baseline, port)
    out: dict[str, list[float]] = {k: [] for k in cmds}
    for k in cmds:
        download(cmds[k])  # warm-up
        if k != "host":
            SUPERVISOR_CPU[k] = []
    for i in range(n):
        order = list(cmds)
        random.shuffle(order)
        for k in order:
            out[k].append(download(cmds[k], SUPERVISOR_CPU.get(k)))
        print(f"download: {i + 1}/{n}", file=sys.stderr)
    return out


def proc_status(pid: int) -> tuple[int, int, float]:
    """VmHWM and VmRSS (KiB), and CPU seconds (utime + stime) of the process itself."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        k, _, v = line.partition(":")
        fields[k] = v.strip()
    stat = Path(f"/proc/{pid}/stat").read_text()
    rest = stat[stat.rindex(")") + 2:].split()
    cpu = (int(rest[11]) + int(rest[12])) / CLK_TCK
    return int(fields["VmHWM"].split()[0]), int(fields["VmRSS"].split()[0]), cpu


def flood(pyjail: str, port: int, connections: int) -> tuple[tuple[int, int, float], tuple[int, int, float], str, float]:
    def one(n: int) -> tuple[tuple[int, int, float], str, float]:
        t0 = time.perf_counter()
        # A thread per connection: more than the strict profile's process limit.
        p = subprocess.Popen([pyjail, "--quiet", *allow(port), "--wall-time", "600", "--pids", str(n + 64), "--",
                              "python", "-c", FLOOD, str(port), str(n), str(SMALL)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = p.stdout.readline()
        t1 = time.perf_counter()
        if not line:
            raise SystemExit(f"the flood of {n} failed: {p.stderr.read()[-1000:]}")
        st = proc_status(p.pid)
        p.stdin.close()
        p.wait(60)
        return st, line.strip(), t1 - t0

    idle, _, _ = one(0)
    busy, line, secs = one(connections)
    return idle, busy, line, secs


def med(xs):
    return statistics.median(xs)


def report(args, times, dl, fl) -> str:
    lines = ["## Controlled egress (`bench/egress.py`)", ""]
    lines += [f"`{' '.join(sys.argv)}`, "
              f"{time.strftime('%Y-%m-%d %H:%M %z')}, uid {os.geteuid()}, {os.cpu_count()} CPUs (shared: read the "
              "ratios, which come from the same interleaved rounds).", ""]
    if times:
        lines += ["| start-up (`python -c pass`, whole command) | median ms | p90 ms | paired median difference |",
                  "|---|---|---|---|"]
        for base, egress in (("fresh --net none", "fresh --net allow"), ("template --net none", "template --net allow")):
            for k in (base, egress):
                xs = sorted(times[k])
                p90 = xs[int(0.9 * (len(xs) - 1))]
                diff = ""
                if k == egress:
                    d = med([a - b for a, b in zip(times[egress], times[base])])
                    diff = f"{d:+.2f} ms ({med(times[egress]) / med(times[base]):.3f}x)"
                lines.append(f"| {k} | {med(xs):.2f} | {p90:.2f} | {diff} |")
        lines.append("")
    if dl:
        host = dl["host"]
        names = {"relay": f"in the jail, through the relay (`{args.pyjail}`)",
                 "baseline": f"in the jail, through the relay (`{args.baseline}`)"}
        lines += [f"| 100 MB download from a loopback HTTP server, {args.downloads} rounds | median MiB/s | best MiB/s "
                  "| ratio to the host: median | best | paired (median of the rounds' ratios) "
                  "| supervisor CPU per download (median) |", "|---|---|---|---|---|---|---|",
                  f"| on the host (python3) | {med(host):.0f} | {max(host):.0f} | | | | |"]
        for k in ("relay", "baseline"):
            if k in dl:
                xs = dl[k]
                lines.append(f"| {names[k]} | {med(xs):.0f} | {max(xs):.0f} | **{med(xs) / med(host):.2f}** "
                             f"| {max(xs) / max(host):.2f} | {med([r / h for r, h in zip(xs, host)]):.2f} "
                             f"| {med(SUPERVISOR_CPU[k]):.3f} s |")
        lines.append("")
    if fl:
        (ih, ir, ic), (bh, br, bc), line, secs = fl
        got = line.split()
        lines += [f"| one supervisor, {args.connections} connections at once (each 100 KB) | VmHWM | VmRSS at the end "
                  "| CPU (user+sys) |", "|---|---|---|---|",
                  f"| idle jail, same allowlist | {ih} KiB | {ir} KiB | {ic:.2f} s |",
                  f"| {got[0] if got else '?'} of {args.connections} downloads done "
                  f"({int(got[1]) / MB if len(got) > 1 else 0:.1f} MiB, {secs:.1f} s) | {bh} KiB | {br} KiB | {bc:.2f} s |",
                  ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pyjail", default=str(REPO / "build" / "pyjail"))
    ap.add_argument("--baseline", help="another pyjail whose relay's downloads join the same rounds")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--downloads", type=int, default=5)
    ap.add_argument("--connections", type=int, default=200)
    ap.add_argument("--parts", default="startup,throughput,flood")
    ap.add_argument("--markdown")
    args = ap.parse_args()
    parts = set(args.parts.split(","))
    if parts - {"startup", "throughput", "flood"}:
        ap.error(f"--parts: unknown {sorted(parts - {'startup', 'throughput', 'flood'})}")
    port = start_web()
    times, dl, fl = {}, {}, None
    if "startup" in parts:
        with tempfile.TemporaryDirectory(prefix="pyjail-bench-") as tmp:
            times = startup(args.pyjail, port, args.rounds, tmp)
    if "throughput" in parts:
        dl = throughput(args.pyjail, args.python, port, args.downloads, args.baseline)
    if "flood" in parts:
        fl = flood(args.pyjail, port, args.connections)
    text = report(args, times, dl, fl)
    publish(text + "\n", args.markdown)


if __name__ == "__main__":
    main()
