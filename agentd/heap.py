"""The garbage collector of the CLI's long-running processes, set for a job loop.

A worker's job allocates thousands of short-lived containers (rows, dicts, events) that
reference counting frees moments later. CPython's default generation-0 threshold (700)
runs a collection every few hundred of them, each traversing objects about to die anyway,
and every full collection walks again the tens of thousands of objects start-up made
(modules, classes, the registry) that live as long as the process. Measured on B11's
worker (bench/README.md): 8.92 -> 8.35 M instructions per job, RSS 100 -> 106 MiB (cyclic
garbage waits longer); (20,000, 20, 50) held 112 MiB for no fewer instructions, and
(10,000, 10, 10) saved half as much. In time it does not show: the worker with and without
it, turn about (bench.b11_worker_ab), 0.997 CPU per job, within that tool's ±1.7 %.
"""

from __future__ import annotations

import gc

#: Generation 0 collects after 20,000 net container allocations (a few jobs' worth, about
#: a millisecond to traverse), not 700; the older generations keep CPython's ratios.
THRESHOLDS = (20_000, 10, 10)


def settle() -> None:
    """Call once start-up is done: what it made is moved out of the collector's sight
    (`gc.freeze`: never traversed again, never freed, as it would not be anyway), and later
    collections run less often. Cycles are still found, only later."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
