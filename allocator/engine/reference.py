"""The engine in one short loop: start reading here.

:func:`reference_run` is the serving engine written the plain way, one step at a time, nothing
skipped: every running sequence is visited every step and every step is recorded, following the
six steps of ``allocator/engine/simulate.py``'s docstring (the rules: ``assets/reference_figures.md``
section R9) line by line. It is slow on purpose, and it is the specification: the engine the
pages run (:func:`allocator.engine.simulate.simulate`) must give exactly the same per-step numbers,
which ``tests/core/test_engine_reference.py`` checks on random workloads for both allocators and
both preemption modes.

Where that engine does each step (what it adds is speed, not rules):

1. arrivals: :meth:`allocator.engine.loop.Run.take_arrivals`, called by
   :func:`allocator.engine.loop.drive`, the loop around every step;
2. serve the running: :meth:`allocator.engine.classroom.ClassroomScheduler.step`, which wakes a
   sequence only at the step its room fills (a running sequence holds ``base + t`` tokens at the
   end of step t, so it is never visited in between), then ``serve`` and ``preempt_youngest``;
3. admission: ``ClassroomScheduler.admit``;
4. compute: the batch and its work, counted in ``step`` from the running sums;
5. finish: ``ClassroomScheduler.finish``, woken at the step each sequence finishes;
6. record: :meth:`allocator.engine.loop.Run.record` (the columns:
   :class:`allocator.engine.loop.StepRecord`), where a stretch with nothing running is one record
   (an idle gap) and a stretch of decode-only steps is written without the scheduler.

A sequence's status (:class:`allocator.engine.sequence.SequenceStatus`) is the same in both. Not
here: prefix caching, the seconds clock and vLLM v1's rules (``allocator/engine/v1.py``).
"""
from __future__ import annotations

from collections import deque

from allocator.engine.sequence import SequenceStatus

WAITING, RUNNING, PREEMPTED, SWAPPED, FINISHED = (SequenceStatus.WAITING, SequenceStatus.RUNNING,
                                                  SequenceStatus.PREEMPTED, SequenceStatus.SWAPPED,
                                                  SequenceStatus.FINISHED)


def reference_run(workload, allocator) -> dict:
    """Run ``workload`` against ``allocator`` (reset first) step by step, on the step clock.

    Returns:
        {metric: list with one entry per engine step} for running, waiting, finished,
        preemptions (counts), logical_tokens, recomputed_tokens (tokens), allocated_slots,
        next_need (slots), units and swapped_blocks (counts) -- each the per-step metric of that
        name (``allocator.engine.result.METRICS``) -- and ``rejected``: the ids of the requests
        that can never fit, in arrival order.

    Raises:
        FieldError: the allocator cannot serve this workload (``allocator.validate_workload``).
    """
    allocator.validate_workload(workload)
    allocator.reset(shared_prefix=workload.shared_prefix)
    pending = deque(sorted(workload.requests, key=lambda r: (r.arrival_step, r.id)))
    waiting, running = deque(), []          # running: admission order, oldest first
    state = {}                              # id -> dict(prompt, output, generated, held, room, status)
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
                                   room=0, status=WAITING)
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
                v["status"] = PREEMPTED if allocator.preempt(victim) == "recompute" else SWAPPED
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
                if st["status"] is PREEMPTED:                       # prefilled again: its work was lost
                    recomputed += context
                st["status"] = RUNNING
        batch = len(running)
        for sid in running:                                        # 4. compute
            state[sid]["held"] += 1
            state[sid]["generated"] += 1
        assert all(state[s]["held"] <= state[s]["room"] for s in running)
        still = []
        for sid in running:                                        # 5. finish
            if state[sid]["generated"] >= state[sid]["output"]:
                allocator.free(sid)
                state[sid]["status"] = FINISHED
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
