"""Digests of whole simulation results, to show that a change to the engine's hot paths changes no
number: every per-record metric (values and dtype), the summary, every snapshot, the per-request
table and the rejections go into one sha256.

``CASES`` are the runs compared: classroom-40 (both allocators, recompute and swap under memory
pressure, a shared prefix, the seconds clock), an Azure window, a Mooncake window with prefix
caching (step and seconds clocks, with pictures) and the vLLM v1 rules (with and without prefix
caching, and the shipped vLLM run's replay; an Azure window roomy and tight, with pictures, and
classroom-40 with a small pool, without chunked prefill, on the seconds clock and with a shared
prompt found by the prefix cache: issue 39's v1 cases). ``python -m tests.tools.engine_digest`` prints each case's
digest; ``tests/core/test_engine_digests.py`` holds the values the engine gave before its hot paths
were rewritten (issue 24).

A pool picture's cached-free entry was a tuple of block ids and is a read-only int64 array now
(``ArrayBlockPool.cached_free_blocks``, so that a picture of a million cached blocks is one numpy
pass): :func:`picture_as_tuples` turns each such array back into the new tuple of Python ints
the picture used to hold before pickling, so the same content gives the same digest as before.
"""
from __future__ import annotations

import hashlib
import json
import pickle
import sys

import numpy as np


def _feed(h, obj) -> None:
    """Hash ``obj`` canonically (dict keys sorted; arrays by dtype, shape and bytes)."""
    if isinstance(obj, np.ndarray):
        h.update(f"nd{obj.dtype.str}{obj.shape}".encode())
        h.update(np.ascontiguousarray(obj).tobytes())
    elif isinstance(obj, dict) and obj and isinstance(next(iter(obj.values())), tuple):
        h.update(pickle.dumps(sorted((k, picture_as_tuples(v)) for k, v in obj.items()), protocol=4))  # snapshots
    elif isinstance(obj, dict):
        h.update(b"{")
        for k in sorted(obj, key=repr):
            _feed(h, k)
            _feed(h, obj[k])
        h.update(b"}")
    elif isinstance(obj, (list, tuple)):
        h.update(b"[" if isinstance(obj, list) else b"(")
        for v in obj:
            _feed(h, v)
        h.update(b"]")
    elif isinstance(obj, (np.integer, np.floating)):
        h.update(repr(obj.item()).encode() + type(obj).__name__.encode())
    else:
        h.update(repr(obj).encode() + type(obj).__name__.encode())


def picture_as_tuples(picture: tuple) -> tuple:
    """A pool picture with each array entry (a cached-free entry) as a new tuple of Python ints;
    the picture itself when it has none (its block tables' tuples are kept as they are, so pickle
    sees the same objects it saw before)."""
    if not any(isinstance(e[-1], np.ndarray) for e in picture):
        return picture
    return tuple(e[:-1] + (tuple(e[-1].tolist()),) if isinstance(e[-1], np.ndarray) else e for e in picture)


def digest(result) -> str:
    """sha256 (hex, first 16 digits) of everything a :class:`SimulationResult` reports."""
    h = hashlib.sha256()
    for part in (result.kind, result.label, result.workload, result.total_slots, result.block_size,
                 result.metrics, result.snapshots, result.snapshot_stride, result.rejected,
                 json.dumps(result.summary.to_dict(), sort_keys=True), result.shared_prefix, result.preemption,
                 result.requests, result.prefix_caching):
        _feed(h, part)
    return h.hexdigest()[:16]


def _classroom(alloc, clock=False, prefix=0):
    def go():
        from allocator.workloads.requests import classroom_40
        from allocator.engine.simulate import simulate
        from allocator.workloads.requests import with_shared_prefix
        w = classroom_40()
        if prefix:
            w = with_shared_prefix(w, prefix)
        cost = None
        if clock:
            from allocator.cost.roofline import cost_model
            cost = cost_model().for_blocks(alloc().block_size)
        return simulate(w, alloc(), clock=cost, seconds_per_step=0.05 if clock else None)
    return go


def _azure(alloc, count=2000, snapshots=False):
    def go():
        from allocator.engine.simulate import simulate
        from allocator.workloads.trace import shipped_trace, trace_workload
        w = trace_workload(shipped_trace(), offset=500, count=count, steps_per_second=20.0, max_new_tokens=1024)
        return simulate(w, alloc(), record_snapshots=snapshots)
    return go


def _mooncake(pool_blocks, block=16, count=120, clock=False, snapshots=True, caching=True):
    def go():
        from allocator.memory.paged import PagedAllocator
        from allocator.engine.simulate import simulate
        from allocator.workloads.mooncake import mooncake_workload, shipped_mooncake
        w = mooncake_workload(shipped_mooncake(), offset=100, count=count)
        cost = None
        if clock:
            from allocator.cost.roofline import cost_model
            cost = cost_model().for_blocks(block)
        return simulate(w, PagedAllocator(pool_blocks * block, block, prefix_caching=caching),
                        record_snapshots=snapshots, clock=cost)
    return go


def _v1(caching, pool_blocks=1500, block=16, count=80, budget=2048):
    def go():
        from allocator.memory.paged import PagedAllocator
        from allocator.engine.simulate import simulate
        from allocator.engine.v1 import V1Rules
        from allocator.workloads.mooncake import mooncake_workload, shipped_mooncake
        w = mooncake_workload(shipped_mooncake(), offset=100, count=count)
        return simulate(w, PagedAllocator(pool_blocks * block, block, prefix_caching=caching),
                        rules=V1Rules(max_num_batched_tokens=budget))
    return go


def _v1_on(workload, alloc, rules, snapshots=False, clock=False):
    """A v1 run of ``workload()`` ("classroom", "classroom prefix 40" or "azure N") on ``alloc()``
    under ``rules()`` (issue 39: the cases the event-driven v1 loop must keep)."""
    def go():
        from allocator.engine.simulate import simulate
        from allocator.workloads.requests import classroom_40, with_shared_prefix
        from allocator.workloads.trace import shipped_trace, trace_workload
        if workload.startswith("azure"):
            w = trace_workload(shipped_trace(), offset=500, count=int(workload.split()[1]), steps_per_second=20.0,
                               max_new_tokens=1024)
        else:
            w = classroom_40()
            if workload.endswith("prefix 40"):
                w = with_shared_prefix(w, 40)
        a = alloc()
        cost = None
        if clock:
            from allocator.cost.roofline import cost_model
            cost = cost_model().for_blocks(a.block_size)
        return simulate(w, a, rules=rules(), record_snapshots=snapshots, clock=cost,
                        seconds_per_step=0.05 if clock else None)
    return go


def _replay_shipped():
    import allocator.studies.vllm_replay as rp
    from allocator.studies.vllm_replay import replay
    from allocator.workloads.vllm_run import SHIPPED_RUN, load_run

    # replay() keeps only figures: catch the result of the simulation it runs, to digest all of it
    captured = {}
    real = rp.simulate

    def spy(*a, **k):
        captured["res"] = real(*a, **k)
        return captured["res"]
    rp.simulate = spy
    try:
        replay(load_run(SHIPPED_RUN), calibration="run")     # the roofline fitted on the run, as when digested
    finally:
        rp.simulate = real
    return captured["res"]


def _cases():
    from allocator.engine.v1 import V1Rules
    from allocator.memory.paged import PagedAllocator
    from allocator.memory.reserve_max import ReserveMaxAllocator
    return {
        "classroom paged 16": _classroom(lambda: PagedAllocator(2048, 16)),
        "classroom paged 1": _classroom(lambda: PagedAllocator(2048, 1)),
        "classroom reserve-max": _classroom(lambda: ReserveMaxAllocator(4096, 600)),
        "classroom reserve-pow2": _classroom(lambda: ReserveMaxAllocator(4096, 600, "pow2")),
        "classroom recompute small pool": _classroom(lambda: PagedAllocator(700, 16)),
        "classroom swap small pool": _classroom(lambda: PagedAllocator(700, 16, preemption="swap")),
        "classroom swap tiny host": _classroom(lambda: PagedAllocator(600, 8, preemption="swap", host_blocks=12)),
        "classroom shared prefix 40": _classroom(lambda: PagedAllocator(2048, 16), prefix=40),
        "classroom shared prefix swap": _classroom(lambda: PagedAllocator(900, 8, preemption="swap"), prefix=40),
        "classroom seconds clock": _classroom(lambda: PagedAllocator(1024, 16), clock=True),
        "azure 2000 paged": _azure(lambda: PagedAllocator(1 << 16, 16)),
        "azure 2000 paged tight": _azure(lambda: PagedAllocator(1 << 14, 16)),
        "azure 2000 reserve-max": _azure(lambda: ReserveMaxAllocator(1 << 17, 1024)),
        "azure 300 paged pictures": _azure(lambda: PagedAllocator(1 << 13, 16), count=300, snapshots=True),
        "mooncake caching": _mooncake(2000),
        "mooncake caching tight": _mooncake(1100, count=80),
        "mooncake caching block 64": _mooncake(700, block=64),
        "mooncake caching seconds": _mooncake(2000, clock=True, snapshots=False),
        "mooncake no caching": _mooncake(2000, caching=False, snapshots=False),
        "v1 caching": _v1(True),
        "v1 caching tight": _v1(True, pool_blocks=800, budget=512),
        "v1 no caching": _v1(False),
        "v1 replay shipped run": _replay_shipped,
        "v1 azure 2000": _v1_on("azure 2000", lambda: PagedAllocator(1 << 16, 16), lambda: V1Rules()),
        "v1 azure 2000 tight": _v1_on("azure 2000", lambda: PagedAllocator(1 << 14, 16),
                                      lambda: V1Rules(max_num_batched_tokens=512)),
        "v1 azure 300 pictures": _v1_on("azure 300", lambda: PagedAllocator(1 << 13, 16),
                                        lambda: V1Rules(max_num_seqs=16), snapshots=True),
        "v1 classroom small pool": _v1_on("classroom", lambda: PagedAllocator(700, 16),
                                          lambda: V1Rules(max_num_batched_tokens=100), snapshots=True),
        "v1 classroom no chunking": _v1_on("classroom", lambda: PagedAllocator(700, 8),
                                           lambda: V1Rules(max_num_batched_tokens=256, chunked_prefill=False)),
        "v1 classroom seconds clock": _v1_on("classroom", lambda: PagedAllocator(1024, 16), lambda: V1Rules(),
                                             clock=True),
        "v1 classroom prefix caching": _v1_on("classroom prefix 40",
                                              lambda: PagedAllocator(2048, 16, prefix_caching=True),
                                              lambda: V1Rules(max_num_seqs=8), snapshots=True),
    }


def case_names() -> list[str]:
    return list(_cases())


def run_case(name: str):
    return _cases()[name]()


def main(argv=None) -> int:
    out = {name: digest(fn()) for name, fn in _cases().items()}
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
