#!/usr/bin/env python3
"""The deepagents sandbox backend's costs, side by side with deepagents' own LocalShellBackend
(no isolation: the host's shell) on the same machine.

1. `execute("echo hi")` round trip: p50 and p99 over --trips calls on a warm backend.
2. One `create_deep_agent` step: an agent whose scripted model makes one `execute` call and
   then answers, invoked --steps times; p50 of the whole invoke, so the difference between
   the two columns is what the jail adds to a step.

    bench/sandbox_backend.py [--pyjail build/pyjail] [--trips 500] [--steps 30]

Needs deepagents (the package's `deepagents` extra); python/ of this checkout is used.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "python"))


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]


def round_trips(backend, trips):
    backend.execute("echo warm")
    times = []
    for _ in range(trips):
        t = time.perf_counter()
        backend.execute("echo hi")
        times.append(time.perf_counter() - t)
    return times


def agent_steps(backend, steps):
    from deepagents import create_deep_agent
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage

    class ScriptedModel(GenericFakeChatModel):
        def bind_tools(self, tools, **kwargs):
            return self

    times = []
    for i in range(steps + 1):
        call = {"name": "execute", "args": {"command": "echo hi"}, "id": "c%d" % i}
        model = ScriptedModel(messages=iter([AIMessage("", tool_calls=[call]), AIMessage("ok")]))
        agent = create_deep_agent(model=model, backend=backend)
        t = time.perf_counter()
        agent.invoke({"messages": [{"role": "user", "content": "say hi"}]})
        if i:                   # the first builds caches: left out
            times.append(time.perf_counter() - t)
    return times


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pyjail", help="the pyjail binary (default: $PYJAIL_BIN or PATH)")
    ap.add_argument("--trips", type=int, default=500)
    ap.add_argument("--steps", type=int, default=30)
    args = ap.parse_args()
    if args.pyjail:
        os.environ["PYJAIL_BIN"] = os.path.abspath(args.pyjail)
    from deepagents.backends import LocalShellBackend
    from pyjail.deepagents import PyjailSandbox

    ms = lambda s: "%.2f ms" % (s * 1000)  # noqa: E731
    print("| backend | execute('echo hi') p50 | p99 | create_deep_agent step p50 |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as d:
        local = LocalShellBackend(root_dir=d)
        rt, st = round_trips(local, args.trips), agent_steps(local, args.steps)
        print("| LocalShellBackend (no isolation) | %s | %s | %s |"
              % (ms(statistics.median(rt)), ms(pct(rt, 99)), ms(statistics.median(st))))
    with PyjailSandbox() as sandbox:
        rt, st = round_trips(sandbox, args.trips), agent_steps(sandbox, args.steps)
        print("| PyjailSandbox | %s | %s | %s |"
              % (ms(statistics.median(rt)), ms(pct(rt, 99)), ms(statistics.median(st))))


if __name__ == "__main__":
    main()
