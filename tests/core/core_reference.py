"""A deliberately naive engine: the step rules of ``assets/reference_figures.md`` R9, one step at
a time, nothing skipped.

Every running sequence is visited every step and every step is a record, so it is easy to read
against those rules and slow on purpose. The event-driven engine
(``allocator.engine.simulate.simulate``) must give exactly the same per-step numbers
(tests/core/test_engine_reference.py); only the compression of idle gaps into one record differs.
"""
from __future__ import annotations

from collections import deque


def reference_run(workload, allocator) -> dict:
    """Run ``workload`` step by step; returns per-step lists (one entry per engine step).

    Keys: running, waiting, finished, preemptions, logical_tokens, allocated_slots, units,
    recomputed_tokens, swapped_blocks, next_need, and ``rejected`` (ids).
    """
    allocator.validate_workload(workload)
    allocator.reset(shared_prefix=workload.shared_prefix)
    pending = deque(sorted(workload.requests, key=lambda r: (r.arrival_step, r.id)))
    waiting, running = deque(), []          # running: admission order, oldest first
    state = {}                              # id -> dict(prompt, output, generated, held, room, recompute)
    out = {k: [] for k in ("running", "waiting", "finished", "preemptions", "logical_tokens",
                           "allocated_slots", "units", "recomputed_tokens", "swapped_blocks", "next_need")}
    rejected, finished, t = [], 0, 0
    total = len(pending)
    while finished + len(rejected) < total:
        while pending and pending[0].arrival_step <= t:            # 1. arrivals
            r = pending.popleft()
            if allocator.never_fits(r.prompt_len, r.output_len):
                rejected.append(r.id)
            else:
                state[r.id] = dict(prompt=r.prompt_len, output=r.output_len, generated=0, held=0,
                                   room=0, recompute=False)
                waiting.append(r.id)
        swap_before = allocator.swap_traffic
        preempted = 0
        i = 0
        while i < len(running):                                    # 2. serve the running
            sid = running[i]
            st = state[sid]
            stopped = False
            while st["held"] + 1 > st["room"]:
                room = allocator.grow(sid)
                if room is not None:
                    st["room"] = room
                    continue
                victim = running.pop()                              # the youngest
                v = state[victim]
                v["recompute"] = allocator.preempt(victim) == "recompute"
                waiting.appendleft(victim)
                preempted += 1
                if victim == sid:
                    stopped = True
                    break
            if not stopped:
                i += 1
        recomputed = 0
        if not preempted:                                          # 3. admission
            while waiting:
                sid = waiting[0]
                st = state[sid]
                context = st["prompt"] + st["generated"]
                room = allocator.admit(sid, st["prompt"], context, st["output"])
                if room is None:
                    break
                waiting.popleft()
                running.append(sid)
                st["held"], st["room"] = context, room
                if st["recompute"]:
                    recomputed += context
                    st["recompute"] = False
        batch = len(running)
        for sid in running:                                        # 4. compute
            state[sid]["held"] += 1
            state[sid]["generated"] += 1
        assert all(state[s]["held"] <= state[s]["room"] for s in running)
        still = []
        for sid in running:                                        # 5. finish
            if state[sid]["generated"] >= state[sid]["output"]:
                allocator.free(sid)
                finished += 1
            else:
                still.append(sid)
        running = still
        if waiting:                                                # 6. record
            h = state[waiting[0]]
            need = allocator.admission_need(h["prompt"], h["prompt"] + h["generated"], h["output"])
        else:
            need = 0
        out["running"].append(batch)
        out["waiting"].append(len(waiting))
        out["finished"].append(finished)
        out["preemptions"].append(preempted)
        out["logical_tokens"].append(sum(state[s]["held"] for s in running))
        out["allocated_slots"].append(allocator.allocated_slots)
        out["units"].append(allocator.units_in_use)
        out["recomputed_tokens"].append(recomputed)
        out["swapped_blocks"].append(allocator.swap_traffic - swap_before)
        out["next_need"].append(need)
        t += 1
    out["rejected"] = rejected
    return out
