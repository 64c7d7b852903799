"""Throughput: completed runs per second of a command with one caller and with two.

Each caller is a thread that launches the command back to back (the GIL is free while it waits
for the child, which is nearly all the time). The configurations take turns in short blocks,
in a fresh random order per block, so that noise on the machine falls on all of them alike.
A block's callers start runs until its deadline; the block lasts until the last run ends, and
the rate is all runs divided by all blocks' time, so runs in flight at a deadline are counted
with the time they took.
"""
from __future__ import annotations

import random
import subprocess
import threading
import time
from dataclasses import dataclass

BLOCK_SECONDS = 1.0


@dataclass
class Config:
    name: str
    argv: list[str]
    callers: int
    runs: int = 0
    seconds: float = 0.0
    failures: int = 0

    @property
    def rate(self) -> float:
        return self.runs / self.seconds if self.seconds else 0.0


def caller(argv: list[str], deadline: float, counts: list[int], slot: int, failed: list[int]) -> None:
    while time.perf_counter() < deadline:
        r = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
        counts[slot] += 1
        if r.returncode != 0:
            failed[slot] += 1


def block(cfg: Config, seconds: float) -> None:
    """Run cfg's callers for about `seconds` and add what they did to cfg."""
    counts, failed = [0] * cfg.callers, [0] * cfg.callers
    start = time.perf_counter()
    threads = [threading.Thread(target=caller, args=(cfg.argv, start + seconds, counts, i, failed))
               for i in range(cfg.callers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    cfg.seconds += time.perf_counter() - start
    cfg.runs += sum(counts)
    cfg.failures += sum(failed)


def measure(configs: list[Config], seconds: float) -> None:
    """About `seconds` per configuration, in interleaved blocks of at most BLOCK_SECONDS."""
    blocks = max(1, round(seconds / BLOCK_SECONDS))
    rng = random.Random()
    for _ in range(blocks):
        order = list(configs)
        rng.shuffle(order)
        for cfg in order:
            block(cfg, seconds / blocks)
