"""The classroom scheduler: what one busy step does in every scenario of the lesson.

:meth:`ClassroomScheduler.step` reads like a serving engine's ``schedule()``: serve the running
(make room for this step's token, preempting the youngest when memory runs out), admit from the
queue, compute, finish, record (the rules: ``allocator/engine/simulate.py``'s docstring and
``assets/reference_figures.md`` section R9). The loop around the step -- clock, arrivals, idle
gaps, pictures -- is :func:`allocator.engine.loop.drive`.

Events, not tokens: a running sequence holds ``base + t`` tokens at the end of step t, so the
scheduler touches it only at the step its room fills (``grow_at``) and the step it finishes
(``finish_at``); sums over the running (``base_sum``, ``final_sum``) are kept as they change.

A block table grows by one block (``block_size`` tokens of room) each time, so a sequence's room
fills every ``block_size`` steps from the first time (its ``grow_step``) until it finishes: the
sequences whose room filled at t fill it again at t + block_size, all of them, in the same order.
The step's list of them is moved there whole (no per-sequence work, no sort: a list only ever
gains younger sequences at its end), and a sequence leaves its list when it finishes or is
preempted (:meth:`ClassroomScheduler.wait_step` says which list it is in).
"""
from __future__ import annotations

from collections import deque
from operator import attrgetter

from allocator.engine.sequence import SequenceStatus

# the statuses as globals: read every step, and a global is faster than an enum member (sequence.py)
WAITING, RUNNING, PREEMPTED, SWAPPED, FINISHED = (SequenceStatus.WAITING, SequenceStatus.RUNNING,
                                                  SequenceStatus.PREEMPTED, SequenceStatus.SWAPPED,
                                                  SequenceStatus.FINISHED)


class _Seq:
    """A request inside the engine. While running, it holds ``base + t`` tokens at the end of step t.

    ``status`` (:class:`allocator.engine.sequence.SequenceStatus`) says where it stands; the steps
    are None until they happen.
    """

    __slots__ = ("id", "prompt_len", "output_len", "generated", "context_len", "base", "order",
                 "finish_step", "grow_step", "status", "arrival", "first_step")

    def __init__(self, req, arrival):
        self.id = req.id
        self.arrival = arrival             # arrival step, or seconds on the seconds clock
        self.status = WAITING
        self.first_step = None             # the step that emitted its first token (its first admission)
        self.prompt_len = req.prompt_len
        self.output_len = req.output_len
        self.generated = 0                 # tokens emitted before the current admission
        self.context_len = req.prompt_len  # tokens to (re)compute at admission: prompt + generated
        self.base = 0
        self.order = 0                     # admission counter: the youngest running has the largest
        self.finish_step = None            # the step it emits its last token (set at each admission)
        self.grow_step = None              # the first step its room fills after its admission (None: it
                                           # finishes first); it fills again every block_size steps


_ID = attrgetter("id")
_NO_ADMISSIONS = (0, 0, 0, 0, 0, 0, 0)


def _add(buckets: dict, step: int, s: _Seq) -> None:
    """Put ``s`` in the bucket of sequences woken at ``step``."""
    bucket = buckets.get(step)
    if bucket is None:
        buckets[step] = [s]
    else:
        bucket.append(s)


class ClassroomScheduler:
    """The lesson's scheduler over any :class:`allocator.memory.allocators.Allocator`, in vLLM's order:
    the running are served before new requests are admitted.

    Attributes:
        waiting: the queue (FCFS; a preempted sequence returns to its head).
        running: {id: sequence} in admission order (the last one is the youngest).
        grow_at, finish_at: {step: sequences whose room fills / that emit their last token then},
            each list in admission order (oldest first).
        period: steps between two fillings of a sequence's room (the allocator's ``block_size``:
            a grow adds one block; None for a reservation allocator, whose room never fills).
        base_sum, final_sum: sums over the running of ``base`` and of prompt + output_len.
        busy_limit: busy steps no run can legitimately need (every busy step emits a token, or
            preempts everything that ran and the next one admits).
    """

    name = "simulation"                    # how the loop's bug guard names it
    new_seq = _Seq                         # what an arrival becomes
    reject_reason = None                   # no rule of its own beyond the allocator's never_fits
    quiet_stretches = True                 # its decode-only steps may be written out (loop._quiet_stretch)

    __slots__ = ("allocator", "run", "waiting", "running", "grow_at", "finish_at", "order", "base_sum", "final_sum",
                 "busy_limit", "period")

    def __init__(self, allocator, run) -> None:
        self.allocator, self.run = allocator, run
        self.waiting: deque[_Seq] = deque()
        self.running: dict[int, _Seq] = {}
        self.grow_at: dict[int, list[_Seq]] = {}
        self.finish_at: dict[int, list[_Seq]] = {}
        self.order = self.base_sum = self.final_sum = 0
        self.period = getattr(allocator, "block_size", None)
        self.busy_limit = 2 * (sum(r.output_len for r in run.pending) + run.n) + 16

    def step(self, t: int) -> tuple:
        """One busy step at ``t`` (arrivals already queued); returns its work for the cost model:
        (prefill tokens, prefill query-key pairs, decodes, decode query-key pairs)."""
        running, waiting, run = self.running, self.waiting, self.run
        # 2. serve the running. Almost every step wakes some sequences whose room filled and finds
        # memory for all of them, so that case is written out here (a call to serve() per step cost
        # more than it explained); serve() takes the rest, growing one by one and preempting.
        preempted = 0
        needs = self.grow_at.pop(t, None)
        if needs:                              # oldest first (see the module's docstring)
            if self.allocator.grow_all(list(map(_ID, needs))) is None:
                preempted = self.serve(needs, t)
            else:                              # each gained a block: its room fills again a block on
                self.grow_at[t + self.period] = needs   # (no list there yet: admissions at t come later)
        if waiting and not preempted:                                        # 3. admit (not after a preemption)
            admitted, prefill, prefill_pairs, recomputed, hit, prompt_in, lost = self.admit(t)
        else:
            admitted, prefill, prefill_pairs, recomputed, hit, prompt_in, lost = _NO_ADMISSIONS
        # 4. compute: everything running now emits one token (admitted ones after their prefill);
        # a decoding sequence attends to the base + t tokens it holds at the end of the step
        batch = len(running)
        decode_pairs = self.base_sum + batch * t - (prefill - lost + admitted)
        done = self.finish_at.pop(t, None)
        if done:
            self.finish(done, t)                                            # 5. free the finished
        if waiting:                                                          # 6. record
            head = waiting[0]
            need = self.allocator.admission_need(head.prompt_len, head.context_len, head.output_len, head.id)
        else:
            need = 0
        holders = len(running)
        if run.plain:                          # most runs: positional, the same record (Run.record_plain)
            run.record_plain(t, self.base_sum + holders * t, holders, batch, len(waiting), run.finished, preempted,
                             need, recomputed, admitted, prefill, prefill_pairs, decode_pairs, self.final_sum)
        else:
            run.record(step=t, span=1, logical_tokens=self.base_sum + holders * t, holders=holders, running=batch,
                       waiting=len(waiting), finished=run.finished, preemptions=preempted, next_need=need,
                       recomputed_tokens=recomputed, admitted=admitted, prefill_tokens=prefill,
                       prefill_pairs=prefill_pairs, decode_pairs=decode_pairs, final=self.final_sum,
                       prefix_hit_tokens=hit, prompt_tokens_admitted=prompt_in)
        return prefill, prefill_pairs, batch - admitted, decode_pairs

    def serve(self, needs: list, t: int) -> int:
        """Give more room to the running sequences whose room filled at ``t`` (``needs``, oldest
        first) when memory is short for all of them at once: one by one, preempting the youngest
        while memory is short; returns how many were preempted. (The usual case, memory for all
        of them, is :meth:`step`'s.)"""
        grow, preempted, grown = self.allocator.grow, 0, []
        for s in needs:
            if s.status is not RUNNING:
                continue                       # preempted earlier in this step
            room = grow(s.id)
            while room is None:
                victim = self.preempt_youngest(t)
                preempted += 1
                if victim is s:
                    break
                room = grow(s.id)
            else:
                grown.append(s)                # (the victims are younger: none of these is preempted later)
        if grown:
            self.grow_at[t + self.period] = grown
        return preempted

    def preempt_youngest(self, t: int) -> _Seq:
        """Preempt the running sequence admitted last (recompute or swap, as the allocator decides)
        and put it back at the head of the queue; returns it."""
        victim = self.running.pop(next(reversed(self.running)))
        victim.context_len = victim.base + t - 1   # its KV holds everything computed up to step t - 1
        victim.generated = victim.context_len - victim.prompt_len
        self.base_sum -= victim.base
        self.final_sum -= victim.prompt_len + victim.output_len
        self.finish_at[victim.finish_step].remove(victim)
        if victim.grow_step is not None:
            self._unwait(victim, t)
        victim.status = SWAPPED if self.allocator.preempt(victim.id) == "swap" else PREEMPTED
        self.waiting.appendleft(victim)
        return victim

    def admit(self, t: int) -> tuple:
        """Admit the queue's head while it fits (FCFS, no skipping): each prefills its context
        (less what the prefix cache holds) and emits its first token at ``t``. A sequence coming
        back from a swap prefills nothing: its K/V is copied back from host memory, and it decodes
        its next token at ``t`` like any running sequence (it is not counted in ``admitted``);
        only blocks it had shared and that were freed meanwhile are computed again.

        Returns:
            (admitted: sequences that prefilled, prefill tokens, prefill query-key pairs,
            recomputed tokens, prompt tokens found in the prefix cache, prompt tokens of first
            admissions, tokens the swapped-in sequences computed again).
        """
        waiting, allocator = self.waiting, self.allocator
        s = waiting[0]
        room = allocator.admit(s.id, s.prompt_len, s.context_len, s.output_len)
        if room is None:
            return _NO_ADMISSIONS              # the usual case while a queue waits: the head does not fit
        running = self.running
        admitted = prefill = prefill_pairs = recomputed = hit = prompt_in = lost = 0
        while room is not None:
            waiting.popleft()
            self.order += 1
            s.order = self.order
            was, s.status = s.status, RUNNING
            running[s.id] = s
            c = s.context_len
            s.base = c + 1 - t
            self.base_sum += s.base
            self.final_sum += s.prompt_len + s.output_len
            if was is SWAPPED:                     # swap-in: a decode, not a prefill
                redo = allocator.last_lost_tokens  # shared blocks freed while it was out
                lo = allocator.last_lost_start     # they start after the blocks still found
                lost += redo
                prefill += redo
                prefill_pairs += (lo + redo) * (lo + redo + 1) // 2 - lo * (lo + 1) // 2
            else:
                admitted += 1
                cached = allocator.last_hit_tokens     # prompt tokens found in the prefix cache
                prefill += c - cached                  # tokens computed: the cached ones are not
                prefill_pairs += c * (c + 1) // 2 - cached * (cached + 1) // 2
            if was is WAITING:                     # its first admission: the hit rate counts each prompt once
                s.first_step = t
                hit += cached
                prompt_in += s.prompt_len
            elif was is PREEMPTED:                 # back from a recompute preemption
                recomputed += c
            s.finish_step = t + s.output_len - s.generated - 1
            _add(self.finish_at, s.finish_step, s)
            self._wake_when_full(s, t + room - c)
            if not waiting:
                break
            s = waiting[0]
            room = allocator.admit(s.id, s.prompt_len, s.context_len, s.output_len)
        return admitted, prefill, prefill_pairs, recomputed, hit, prompt_in, lost

    def finish(self, done: list, t: int) -> None:
        """Free the sequences that emitted their last token at ``t``."""
        run, free, running = self.run, self.allocator.free, self.running
        for s in done:
            if s.grow_step is not None:        # it waits in the list of a step it will not see
                self._unwait(s, t)
            free(s.id)
            del running[s.id]
            s.status = FINISHED
            self.base_sum -= s.base
            self.final_sum -= s.prompt_len + s.output_len
            run.served.append((s.id, s.prompt_len, s.output_len, s.arrival, s.first_step, t))
        run.finished += len(done)

    def wait_step(self, s: _Seq, t: int) -> int:
        """The step after ``t`` at which running ``s`` (with a ``grow_step``) waits in ``grow_at``:
        the first step after ``t`` of grow_step, grow_step + period, ..."""
        return t + 1 + (s.grow_step - t - 1) % self.period

    def _unwait(self, s: _Seq, t: int) -> None:
        """Take ``s`` out of the list it waits in (finished or preempted at ``t``). During
        :meth:`serve` a sequence of the list being served is in no list yet: nothing to do."""
        step = self.wait_step(s, t)
        bucket = self.grow_at.get(step)
        if bucket is not None and s in bucket:
            bucket.remove(s)
            if not bucket:
                del self.grow_at[step]         # (the loop's quiet stretches look for the next list)

    def _wake_when_full(self, s: _Seq, step: int) -> None:
        """Wake ``s`` at ``step``, the step its room fills, unless it finishes before then."""
        if step <= s.finish_step:
            s.grow_step = step
            _add(self.grow_at, step, s)
        else:
            s.grow_step = None

    def lengths(self, t: int) -> dict:
        """{id: tokens held at the end of step t} for the running (pictures and checks)."""
        return {s.id: s.base + t for s in self.running.values()}

    def check_invariants(self, lengths: dict, t: int) -> None:
        """Assert the scheduler's own sums agree with its sequences (tests run with this)."""
        assert sum(lengths.values()) == self.base_sum + len(self.running) * t, "token count drifted"
        assert all(s.status is RUNNING for s in self.running.values()), "a stopped sequence is listed as running"
        waiting_in = {id(s): step for step, bucket in self.grow_at.items() for s in bucket}
        assert len(waiting_in) == sum(map(len, self.grow_at.values())), "a sequence waits in two lists"
        assert all(bucket and step > t for step, bucket in self.grow_at.items()), "an empty or past list"
        assert all([s.order for s in bucket] == sorted(s.order for s in bucket) for bucket in self.grow_at.values()), (
            "a list of growing sequences out of admission order")
        for s in self.running.values():
            expected = self.wait_step(s, t) if s.grow_step is not None else None
            assert waiting_in.pop(id(s), None) == expected, f"sequence {s.id} waits in the wrong list"
        assert not waiting_in, "a sequence that is not running waits to grow"
