"""vLLM v1's scheduler, for replaying real runs (the classroom scenarios use
``allocator/engine/classroom.py``).

:meth:`V1Scheduler.step` follows vLLM's ``Scheduler.schedule`` (vllm/v1/core/sched/scheduler.py):
a token budget per step, the running scheduled first, chunked prefill, a cap on running
sequences, recompute-only preemption, prefix caching of prompt and generated blocks. The loop
around the step (clock, arrivals, idle gaps, pictures) is :func:`allocator.engine.loop.drive`.

Events, not steps, as in the classroom scheduler: sequences that only decode advance together
(a decoder's computed tokens are ``base + t``), and one is walked only at a step when something
changes for it -- a block boundary, its last token, a preemption -- or while it prefills
(:meth:`V1Scheduler.serve`). The numbers are those of walking every running sequence every step
(``tests/core/test_engine_digests.py``, the v1 cases).
"""
from __future__ import annotations

from collections import deque
from operator import attrgetter
from dataclasses import dataclass

import numpy as np

from allocator.common.limits import check
from allocator.common.mathutils import round_up
from allocator.common.errors import FieldError
from allocator.common.validate import whole_number
from allocator.engine.sequence import SequenceStatus

# the statuses as globals: read every step, and a global is faster than an enum member (sequence.py)
WAITING, RUNNING, PREEMPTED, FINISHED = (SequenceStatus.WAITING, SequenceStatus.RUNNING, SequenceStatus.PREEMPTED,
                                         SequenceStatus.FINISHED)

#: vLLM's defaults for the v1 rules: a cap of 256 running sequences (``max_num_seqs``) and a
#: per-step budget of 2,048 scheduled tokens (``max_num_batched_tokens``). Source:
#: ``EngineArgs.get_batch_defaults`` in vllm/engine/arg_utils.py, which sets both by usage context
#: and GPU: ``vllm serve`` (the OpenAI API server) on an A100 or a GPU under 70 GiB takes 2,048
#: tokens and 256 sequences -- the values taken here, for the lesson's A100 served online; the
#: offline ``LLM`` class takes 8,192 tokens, and a larger GPU (H100, MI300x) 8,192 (served) or
#: 16,384 (offline) tokens and 1,024 sequences. (vllm/config/scheduler.py's ``SchedulerConfig``
#: class defaults, 2,048 and 128, are "mainly for convenience when testing", its docstring says.)
#: A replay takes them from the run's own arguments.
V1_DEFAULT_MAX_NUM_SEQS = 256
V1_DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048
#: The acceptance rate a speculating run takes unless told otherwise: a lesson's middle value, not a
#: measurement (the rate depends on the draft model, the target and the text; Leviathan et al. 2023,
#: section 4, measure it per pair of models and task).
DEFAULT_ACCEPTANCE_RATE = 0.7


def accepted_drafts(rng: np.random.Generator, drafts: int, rate: float) -> int:
    """How many of ``drafts`` draft tokens the verifier accepts: each is accepted independently with
    probability ``rate`` until the first rejection, after which none counts (one uniform draw per draft,
    from ``rng``, in order; ``rate`` 1 accepts all, 0 none).

    The model is Leviathan, Kalman and Matias, "Fast Inference from Transformers via Speculative
    Decoding", ICML 2023 (arXiv:2211.17192), section 3.1: acceptances i.i.d. with rate alpha, so a
    step of gamma drafts yields (1 - alpha**(gamma + 1)) / (1 - alpha) tokens on average (their
    equation 1) -- the accepted drafts plus the one token the target samples itself.

    Returns:
        an int in 0 .. ``drafts``.
    """
    if drafts <= 0:
        return 0
    rejected = np.flatnonzero(rng.random(drafts) >= rate)
    return int(rejected[0]) if len(rejected) else drafts


@dataclass(frozen=True)
class V1Rules:
    """vLLM v1's scheduling rules, each an option with vLLM's default (read vLLM's
    vllm/v1/core/sched/scheduler.py, ``Scheduler.schedule``).

    Args:
        max_num_seqs: cap on running sequences (default 256). A waiting request is not admitted
            while this many run.
        max_num_batched_tokens: the step's token budget (default 2,048): a decode costs one token,
            a prefill chunk its length.
        chunked_prefill: True (vLLM v1's default): a prompt longer than what is left of the budget
            is prefilled in chunks over several steps. False: admission stops at a waiting request
            whose whole prefill does not fit the budget left, and a request whose prompt is longer
            than the whole budget is rejected (vLLM then asks for a budget of at least the model's
            context). A preempted sequence whose prompt and generated tokens together exceed the
            whole budget is still recomputed in chunks (it could never come back otherwise).

    Each step (what :func:`simulate` does with ``rules``):

    1. Arrivals join the waiting queue (FCFS).
    2. Running sequences are scheduled first, in admission order, while budget is left: each asks
       for its remaining tokens (one for a decode; the rest of its prompt, capped by the budget,
       for a sequence still prefilling). Its block table grows to hold its computed tokens plus
       the scheduled ones, no more (``allocate_slots``). If too few blocks are free, the running
       sequence admitted last is preempted -- **recompute only**: its blocks are freed (they stay
       in the prefix cache, if on), it returns to the head of the queue with nothing computed, and
       is prefilled again, prompt and generated tokens, when re-admitted -- until the sequence fits
       or is itself the one preempted.
    3. Unless a sequence was preempted in this step, waiting requests are admitted FCFS while the
       budget lasts and fewer than ``max_num_seqs`` run: a new request first takes its cached
       leading blocks (prefix caching: prompt and generated blocks under chained hashes; at least
       its last token is computed), then as much of the rest as the budget allows (one chunk).
       Stop at the first that does not get blocks (no skipping).
    4. Compute: every scheduled sequence computes its scheduled tokens' KV; one whose computed
       tokens reach its prompt plus generated tokens emits a token -- the first token comes from
       the step that completes the prompt. A sequence that has emitted ``output_len`` tokens frees
       its blocks (last block first; cached ones stay findable).

    Speculative decoding (``num_speculative_tokens`` k > 0): every decode step of a running
    sequence schedules its last sampled token plus k draft tokens (fewer when the step's budget is
    short: 1 + k tokens of budget) and its block table grows to hold them all: computed + 1 + k
    slots, so k **lookahead slots** are reserved beyond what a plain decode needs. This is
    ``num_tokens_need_slot`` in vLLM's ``KVCacheManager.allocate_slots``
    (vllm/v1/core/kv_cache_manager.py: computed + new + ``num_lookahead_tokens``), where the
    scheduler (vllm/v1/core/sched/scheduler.py) counts the k drafts among the new tokens; a
    proposer that keeps a KV cache of its own (EAGLE, a draft model) reserves k more through
    ``num_lookahead_tokens``, which the lab leaves out (it models a proposer without one, as
    vLLM's n-gram proposer). The verifier then accepts each draft with probability
    ``acceptance_rate`` until the first rejection (:func:`accepted_drafts`, seeded by
    ``spec_seed``), and the step emits the accepted drafts plus one token (capped by what is left
    of the answer). The rejected drafts' slots are given back to the sequence: its computed
    tokens stop after the accepted ones, and the next step writes over them. No block is freed
    when drafts are rejected (vLLM keeps the block table), but the next step's reservation starts
    from the shorter length, so the rejected slots cost no new block. Prefill chunks reserve no
    lookahead (vLLM: none for a request with nothing computed), and draft tokens are never cached
    (vLLM caches only up to the request's own tokens). With k = 0 every step is exactly the
    plain decode above.

    No block is taken at admission for the token prefill emits (the classroom scheduler takes one):
    v1 allocates it in the step that computes it. Swap preemption is older vLLM's (v0) option and is
    not part of these rules; a paged allocator with ``preemption="swap"`` is refused.

    Raises:
        FieldError: ``max_num_seqs`` or ``max_num_batched_tokens`` not a whole number >= 1;
            ``num_speculative_tokens`` not a whole number 0 .. 64, ``acceptance_rate`` not a number
            from 0 to 1, ``spec_seed`` not a whole number 0 .. 2**32 - 1.
    """

    max_num_seqs: int = V1_DEFAULT_MAX_NUM_SEQS
    max_num_batched_tokens: int = V1_DEFAULT_MAX_NUM_BATCHED_TOKENS
    chunked_prefill: bool = True
    num_speculative_tokens: int = 0
    acceptance_rate: float = DEFAULT_ACCEPTANCE_RATE
    spec_seed: int = 0

    def __post_init__(self):
        whole_number("max_num_seqs", self.max_num_seqs, 1, 1 << 20)
        whole_number("max_num_batched_tokens", self.max_num_batched_tokens, 1, 1 << 24)
        object.__setattr__(self, "chunked_prefill", bool(self.chunked_prefill))
        object.__setattr__(self, "num_speculative_tokens", check("num_speculative_tokens", self.num_speculative_tokens))
        object.__setattr__(self, "acceptance_rate", check("acceptance_rate", self.acceptance_rate))
        object.__setattr__(self, "spec_seed", check("spec_seed", self.spec_seed))

    def describe(self) -> str:
        """One line naming the rules in force, e.g. for a page's caption."""
        text = (f"vLLM v1 rules: at most {self.max_num_seqs} running, a budget of "
                f"{self.max_num_batched_tokens:,} tokens per step, chunked prefill "
                f"{'on' if self.chunked_prefill else 'off'}, recompute preemption")
        if self.num_speculative_tokens:
            text += (f", speculative decoding of {self.num_speculative_tokens} draft tokens per step "
                     f"(each accepted with probability {self.acceptance_rate:g} until the first rejection, "
                     f"seed {self.spec_seed})")
        return text


class _V1Seq:
    """A request inside the v1 scheduler: ``computed`` tokens have KV; it holds ``prompt_len +
    generated`` tokens in all. ``status`` (:class:`allocator.engine.sequence.SequenceStatus`) is
    vLLM v1's: WAITING until its first admission, PREEMPTED (recompute) back in the queue.

    A running sequence that only decodes is a **decoder** (``base`` not None): its ``computed`` and
    ``generated`` are not written each step; at the start of step t it has computed ``base + t``
    tokens and holds one more (``generated = base + t + 1 - prompt_len``). It is woken at
    ``event``, the first step at which it crosses a block boundary or emits its last token
    (:meth:`V1Scheduler._settle`)."""

    __slots__ = ("id", "prompt_len", "output_len", "generated", "computed", "arrival", "first_step",
                 "recomputing", "status", "order", "base", "event")

    def __init__(self, req, arrival):
        self.id = req.id
        self.prompt_len = req.prompt_len
        self.output_len = req.output_len
        self.arrival = arrival
        self.status = WAITING
        self.generated = 0
        self.computed = 0
        self.first_step = None          # the step that emitted its first token (None: none yet)
        self.recomputing = 0            # tokens still to recompute after a preemption
        self.order = 0                  # admission order (the running list's order)
        self.base = None                # a decoder's computed tokens at step 0 (None: not a decoder)
        self.event = None               # the step a decoder is woken at


#: What :meth:`V1Scheduler._walk` returns for its counts when it walks no one.
_NOTHING_WALKED = ((0, 0, 0, 0), 0, 0, None)


_by_order = attrgetter("order")          # a sort key (C-level: sorted every step)


def _prefill_chunk(s: _V1Seq, c: int, new: int) -> tuple[int, int]:
    """Account a prefill chunk of ``new`` tokens computed after the ``c`` that ``s`` has computed:
    returns (its query-key pairs -- token c + i attends to c + i + 1 tokens, summed over
    i < new --, the tokens of it that recompute what a preemption lost), and takes the latter off
    ``s.recomputing``. (:meth:`V1Scheduler._walk` and :meth:`V1Scheduler.compute` both count a
    chunk this way.)"""
    r = s.recomputing
    if r:
        if new < r:
            r = new
        s.recomputing -= r
    return new * c + new * (new + 1) // 2, r


def check_allocator(allocator) -> None:
    """Refuse an allocator the v1 rules cannot drive.

    Raises:
        FieldError: a non-paged allocator (``rules``) or one with swap preemption (``preemption``).
    """
    if allocator.kind != "paged" or not hasattr(allocator, "v1_allocate"):
        raise FieldError("rules", ": vLLM v1's scheduler needs the paged allocator")
    if allocator.preemption != "recompute":
        raise FieldError("preemption", f" = {allocator.preemption!r}: vLLM v1 preempts by recompute only "
                         "(swap is older vLLM's option; use the classroom scheduler for it)")


class V1Scheduler:
    """:class:`V1Rules` over a paged allocator (see there for the step). Same records as the
    classroom scheduler; the ``tokens`` column counts tokens emitted (a prefill chunk that leaves
    its prompt unfinished emits none), ``admitted`` requests taken from the queue, ``prefill``
    every token computed other than decodes (chunks, recomputes), ``recomputed`` the part of them
    that recomputes a preempted sequence.

    Attributes:
        waiting: the queue (FCFS; a preempted sequence returns to its head).
        running: {id: sequence} for the running, in admission order (the last one is the youngest).
        busy_limit: busy steps no run can legitimately need (a bug guard).
    """

    name = "v1 simulation"                 # how the loop's bug guard names it
    new_seq = _V1Seq                       # what an arrival becomes
    quiet_stretches = True                 # its decode-only steps may be written out (loop._quiet_stretch)

    __slots__ = ("allocator", "run", "waiting", "running", "budget_cap", "seq_cap", "chunked", "reject_reason",
                 "busy_limit", "spent", "computed_sum", "final_sum", "active", "wake_at", "n_dec", "dec_base",
                 "order", "t", "edge", "spec", "rate", "rng", "drafts", "drafts_accepted",
                 "win")

    def __init__(self, allocator, run, rules: V1Rules) -> None:
        self.allocator, self.run = allocator, run
        self.waiting: deque[_V1Seq] = deque()
        self.running: dict[int, _V1Seq] = {}
        self.budget_cap, self.seq_cap = rules.max_num_batched_tokens, rules.max_num_seqs
        self.chunked = rules.chunked_prefill
        self.reject_reason = None if self.chunked else self._prompt_over_budget
        self.busy_limit = 4 * (sum(r.prompt_len + r.output_len for r in run.pending) + run.n) + 16
        self.spent = 0                     # tokens scheduled in the last step (checked against the budget)
        # The running are of two kinds. The *active* (prefilling, or woken for this step) are walked
        # one by one, in admission order. The *decoders* advance together: each step every one of
        # them computes one token and emits it, counted from two sums (their number and their bases);
        # one is woken (made active for a step) only at a block boundary or its last token
        # (``wake_at``), or when it is preempted. ``computed_sum`` sums the active's computed tokens;
        # ``final_sum`` every running one's prompt + output lengths (kept as they change, not summed
        # over the running every record).
        self.active: list[_V1Seq] = []
        self.wake_at: dict[int, list[_V1Seq]] = {}
        self.n_dec = self.dec_base = 0
        self.computed_sum = self.final_sum = 0
        self.order = 0
        self.t = 0
        # a decode from c computed tokens calls the allocator when c % block_size is 0 (a new block)
        # or, with prefix caching, block_size - 1 (a block fills: its key is registered)
        self.edge = 1 if allocator.prefix_caching else 0
        # speculative decoding: k drafts per decode step, every running sequence walked every step
        self.spec = rules.num_speculative_tokens
        self.rate = rules.acceptance_rate
        self.rng = np.random.default_rng(rules.spec_seed) if self.spec else None
        self.drafts = self.drafts_accepted = 0          # draft tokens verified and accepted, whole run
        allocator.lookahead_slots = self.spec           # a block table may hold this many slots ahead
        # a sliding-window pool (allocator.memory.sliding_window) also releases blocks behind the window
        # at the start of every allocation (vLLM calls remove_skipped_blocks each step): a decoder is
        # woken when its next release is due, and every walked decode calls the allocator
        self.win = bool(getattr(allocator, "windowed", False))

    @property
    def grow_at(self) -> dict:
        """{step: decoders woken then} (a block boundary or a last token): the steps the loop's
        quiet stretches stop at (``allocator.engine.loop.drive`` reads ``grow_at`` and ``finish_at``)."""
        return self.wake_at

    finish_at = grow_at

    @property
    def base_sum(self) -> int:
        """What the loop's quiet stretch takes for the running's tokens at the end of step t, less
        ``t`` per sequence (the classroom scheduler's meaning): the decoders' bases + 1 each (a
        decoder holds ``base + t + 1`` computed tokens after step t)."""
        return self.dec_base + self.n_dec

    def quiet_ok(self) -> bool:
        """Whether the next step, if nothing is woken, waits or arrives, is decodes alone: every
        running sequence is a decoder and their tokens fit the budget (the loop asks before it
        writes out a quiet stretch)."""
        return not self.active and self.n_dec <= self.budget_cap

    def _prompt_over_budget(self, req) -> str | None:
        """Without chunked prefill, a prompt longer than the whole budget can never be scheduled."""
        if req.prompt_len > self.budget_cap:
            return (f"its {req.prompt_len}-token prompt is longer than the step's token budget "
                    f"({self.budget_cap}) and chunked prefill is off")
        return None

    def step(self, t: int) -> tuple:
        """One busy step at ``t`` (arrivals already queued); returns its work for the cost model:
        (prefill tokens, prefill query-key pairs, decodes, decode query-key pairs)."""
        self.t = t
        done: list[_V1Seq] = []                                  # emitted their last token, in schedule order
        # 2. the running first, each computed as it is scheduled (4.): nothing later in the step reads
        # what a running sequence computes, and a preemption only ever takes one not yet scheduled
        budget, preempted, served, counts = self.serve(done, t)
        scheduled: list[tuple[_V1Seq, int]] = []                 # admitted now: (sequence, tokens to compute)
        if self.waiting and not preempted:                       # 3. admit (not after a preemption)
            budget, admitted, hit, prompt_in = self.admit(scheduled, budget)
        else:
            admitted = hit = prompt_in = 0
        self.spent = self.budget_cap - budget
        if scheduled:                                            # 4. compute the admitted
            more = self.compute(scheduled, t)
            work = tuple(a + b for a, b in zip(counts[0], more[0]))
            emitted, recomputed = counts[1] + more[1], counts[2] + more[2]
            done += more[3]
            self.active += [s for s, _ in scheduled]
        else:
            work, emitted, recomputed, _ = counts
        if done:
            self.finish(done, t)                                 # 5. free the finished
        if self.spec:                                            # speculating: nobody decodes in step
            self.active = [s for s in self.active if s.status is RUNNING]
        elif self.active:
            self._settle(t)                                      # who decodes on, together, from here
        self.record(t, served + len(scheduled), preempted, recomputed, admitted, work, hit, prompt_in, emitted)  # 6.
        return work

    def serve(self, done: list, t: int) -> tuple:
        """Schedule the running in admission order while budget is left: each its remaining
        tokens (one for a decode; the rest of its prompt, capped by the budget, while prefilling),
        its block table grown to hold them; when blocks run out, preempt the youngest. Each is
        computed as it is scheduled (as :meth:`compute` does; those that emit their last token are
        appended to ``done``).

        Event-driven: when the running ask for no more than the budget (every decode one token,
        every prefill the rest of its prompt), nobody's share depends on the order, so only the
        active -- the prefilling and the decoders woken at ``t`` -- are walked, in admission order;
        the other decoders each decode one token, counted together. Otherwise every decoder is
        woken and all the running are walked (:meth:`_walk`).

        A decode that crosses no block boundary does not call the allocator: ``v1_allocate`` would
        find its table already holding ceil(upto / block_size) blocks and, with prefix caching, no
        newly full block to register (``allocator.memory.paged.PagedAllocator.v1_allocate``), and
        change nothing. A running sequence's table holds ceil(computed / block_size) blocks, so a
        decode from ``c`` computed tokens needs a block only when ``c % block_size == 0`` and fills
        one (to register) only when ``(c + 1) % block_size == 0``: a decoder is woken for both.

        Returns:
            (budget left, sequences preempted, sequences scheduled, what :meth:`compute` returns
            for them).
        """
        woke = self.wake_at.pop(t, None)
        if woke and not self.active and not self.edge and self.n_dec <= self.budget_cap \
                and not getattr(self.allocator, "windowed", False):   # (a window releases blocks per decode)
            fast = self._decode_woken(woke, done, t)  # the usual step: decoders alone, some at a boundary
            if fast is not None:
                return fast
        if woke:                                      # _wake for each, the sums changed once
            bases = 0
            for s in woke:
                b = s.base
                bases += b
                s.computed = c = b + t
                s.generated = c + 1 - s.prompt_len
                s.base = None
            self.n_dec -= len(woke)
            self.dec_base -= bases
            self.computed_sum += bases + len(woke) * t
            self.active += woke
            self.active.sort(key=_by_order)
        active = self.active
        demand = self.n_dec
        for s in active:
            demand += s.prompt_len + s.generated - s.computed
        if demand > self.budget_cap and not self._decoders_all_fit(active):   # walk them all, in order
            for s in self.running.values():
                if s.base is not None:
                    self._wake(s, t)
            self.wake_at.clear()
            self.active = active = list(self.running.values())
        n_before = self.n_dec
        if active:
            budget, preempted, served, counts = self._walk(active, self.budget_cap - n_before, done, t)
        else:                                         # decoders alone, within the budget: nothing to walk
            budget, preempted, served, counts = self.budget_cap - n_before, 0, 0, _NOTHING_WALKED
        n = self.n_dec                                # decoders left after the preemptions
        budget += n_before - n
        if n:
            (prefill, prefill_pairs, decodes, decode_pairs), emitted, recomputed, _ = counts
            counts = ((prefill, prefill_pairs, decodes + n, decode_pairs + self.dec_base + n * (t + 1)),
                      emitted + n, recomputed, None)
        return budget, preempted, served + n, counts

    def _decoders_all_fit(self, active: list) -> bool:
        """When the running ask for more than the budget: whether every decoder still gets its
        token in the order of admission, so that walking only ``active`` (given the budget less
        one token per decoder) schedules what walking every running sequence would. True when the
        decoders and the wants of the active admitted before the youngest decoder fit the budget:
        then those active get all they ask for wherever the decoders sit among them, and only the
        active admitted after every decoder (typically the youngest, prefilling in chunks) are
        cut -- given, in both walks, the budget less every decoder's token and the earlier
        actives' wants. (A preemption takes the youngest: such a trailing active before any
        decoder.) False: a decoder would go without its token; :meth:`serve` walks them all.

        Under these rules it is always true, as far as the engine's runs show (issue 39: not one
        False in the bench's runs nor in random small pools and budgets): a sequence is admitted
        only while budget is left, and one still prefilling leaves none, so no decoder is younger
        than a prefill and the running never outnumber the budget. Kept as the guard that makes
        the shortcut safe, not as a rule the loop relies on."""
        n = self.n_dec
        if not n:
            return True
        i = len(active) - 1
        for s in reversed(self.running.values()):    # the active admitted after every decoder
            if i < 0 or s is not active[i]:
                break
            i -= 1
        for k in range(i + 1):
            s = active[k]
            n += s.prompt_len + s.generated - s.computed
        return n <= self.budget_cap

    def _decode_woken(self, woke: list, done: list, t: int) -> tuple | None:
        """:meth:`serve`'s usual step, in one pass: no one else is active, the decoders' tokens fit
        the budget, no prefix cache registers blocks and no sliding window releases any, so the
        woken (each at a block boundary or its last token) only decode. Those at a boundary get
        their new blocks in one call, in
        admission order (``PagedAllocator.grow_all``: the blocks, and the slots never written, that
        one ``v1_allocate`` each gives them); the rest of them stay decoders with the same base,
        woken again at their next event, as :meth:`_walk` then :meth:`_settle` would leave them.
        Returns what :meth:`serve` returns, or None -- nothing changed -- when too few blocks are
        free for all of them (then :meth:`serve` walks them, preempting as it goes)."""
        bs = self.allocator.block_size
        if len(woke) > 1:
            woke.sort(key=_by_order)
        grow = [s.id for s in woke if (s.base + t) % bs == 0]
        if grow and self.allocator.grow_all(grow) is None:
            self.wake_at[t] = woke                    # as it was: serve() takes the step
            return None
        n_before = self.n_dec
        t1 = t + 1
        wake_at = self.wake_at
        decodes = pairs = bases = held = 0
        for s in woke:
            b = s.base
            c = b + t + 1                             # computed after this step's decode
            g = c + 1 - s.prompt_len                  # tokens emitted, this one too (it holds c + 1)
            if g >= s.output_len:                     # its last token: out of the decoders, finished
                s.computed, s.generated, s.base = c, g, None
                bases += b
                held += c
                decodes += 1
                pairs += c
                done.append(s)
                continue
            gap = -c % bs                             # (_settle's rule, without prefix caching)
            last = s.output_len - g - 1
            s.event = wake = t1 + (gap if gap < last else last)
            bucket = wake_at.get(wake)
            if bucket is None:
                wake_at[wake] = [s]
            else:
                bucket.append(s)
        if decodes:
            self.n_dec -= decodes
            self.dec_base -= bases
            self.computed_sum += held
        n = self.n_dec
        counts = ((0, 0, decodes + n, pairs + self.dec_base + n * t1), decodes + n, 0, None)
        return self.budget_cap - n_before, 0, n_before, counts

    def _walk(self, seqs: list, budget: int, done: list, t: int) -> tuple[int, int, int, tuple]:
        """Schedule and compute ``seqs`` (running, in admission order; those preempted meanwhile are
        skipped) with ``budget`` tokens: see :meth:`serve`. Returns (budget left, preempted,
        scheduled, counts as :meth:`compute`'s)."""
        allocate = self.allocator.v1_allocate
        bs, edge, win = self.allocator.block_size, self.edge, self.win
        preempted = served = 0
        prefill = prefill_pairs = decodes = decode_pairs = emitted = recomputed = 0
        for s in seqs:
            if budget <= 0:
                break
            if s.status is not RUNNING:
                continue                                        # preempted earlier in this step
            c = s.computed
            total = s.prompt_len + s.generated
            if c == total - 1 and s.generated and self.spec and budget > 1:
                n, gained, more_preempted = self._speculate(s, c, total, budget, done)
                preempted += more_preempted
                if not n:                                       # s itself was preempted
                    return budget, preempted, served, ((prefill, prefill_pairs, decodes, decode_pairs),
                                                       emitted, recomputed, None)
                decodes += n
                decode_pairs += n * c + n * (n + 1) // 2
                budget -= n
                emitted += gained
                served += 1
                continue
            if c == total - 1 and s.generated:                  # a decode: one token of budget
                r = c % bs
                if r == 0 or (edge and r == bs - 1) or win:
                    while not allocate(s.id, s.prompt_len, total, total, final=s.prompt_len + s.output_len,
                                       computed=c):
                        victim = self.preempt_youngest()
                        preempted += 1
                        if victim is s:
                            return budget, preempted, served, ((prefill, prefill_pairs, decodes, decode_pairs),
                                                               emitted, recomputed, None)
                decodes += 1
                decode_pairs += total
                budget -= 1
                self.computed_sum += 1
                s.computed = total
                s.generated += 1
                emitted += 1
                served += 1
                if s.generated >= s.output_len:
                    done.append(s)
                continue
            want = total - c
            new = want if want < budget else budget
            while not allocate(s.id, s.prompt_len, total, c + new, final=s.prompt_len + s.output_len, computed=c):
                victim = self.preempt_youngest()
                preempted += 1
                if victim is s:
                    return budget, preempted, served, ((prefill, prefill_pairs, decodes, decode_pairs),
                                                       emitted, recomputed, None)
            pairs, r = _prefill_chunk(s, c, new)
            prefill += new
            prefill_pairs += pairs
            recomputed += r
            budget -= new
            self.computed_sum += new
            s.computed = c + new
            served += 1
            if s.computed != total:
                continue
            s.generated += 1
            emitted += 1
            if s.first_step is None:
                s.first_step = t
            if s.generated >= s.output_len:
                done.append(s)
        return budget, preempted, served, ((prefill, prefill_pairs, decodes, decode_pairs), emitted, recomputed, None)

    def _speculate(self, s: _V1Seq, c: int, total: int, budget: int, done: list):
        """One speculative decode step of running sequence ``s`` (``c`` computed of its ``total``
        tokens; ``budget`` > 1 tokens left): schedule its last token and up to k drafts, grow its
        block table to hold them (preempting the youngest while blocks are short), let the verifier
        accept some (:func:`accepted_drafts`) and keep those and one more token. See
        :class:`V1Rules` for the rule and its source.

        Returns:
            (tokens scheduled, tokens emitted, sequences preempted); 0 tokens scheduled when ``s``
            was itself preempted (its own preemption counted among them; nothing of it computed).
        """
        n = 1 + self.spec if 1 + self.spec <= budget else budget
        preempted = 0
        final = s.prompt_len + s.output_len
        while not self.allocator.v1_allocate(s.id, s.prompt_len, total, c + n, final=final):
            victim = self.preempt_youngest()
            preempted += 1
            if victim is s:
                return 0, 0, preempted
        accepted = accepted_drafts(self.rng, n - 1, self.rate)
        gained = min(accepted + 1, s.output_len - s.generated)
        self.drafts += n - 1
        self.drafts_accepted += min(accepted, gained)      # the accepted drafts the answer keeps
        s.computed = c + gained                  # the rejected drafts' slots: written over next step
        self.computed_sum += gained
        s.generated += gained
        if s.generated >= s.output_len:
            done.append(s)
        return n, gained, preempted

    def _wake(self, s: _V1Seq, t: int) -> None:
        """Make decoder ``s`` active at the start of step ``t``: write its computed and generated
        tokens (``base + t`` computed, one more held) and take it out of the decoders' sums."""
        c = s.base + t
        s.computed = c
        s.generated = c + 1 - s.prompt_len
        self.n_dec -= 1
        self.dec_base -= s.base
        self.computed_sum += c
        s.base = None

    def _settle(self, t: int) -> None:
        """After step ``t`` (the finished freed): every active sequence that is running and decoding
        becomes a decoder; the rest stay active, in admission order.

        A decoder with ``c`` computed tokens at the start of step t + 1 has ``base = c - (t + 1)``
        and is woken at the first step from t + 1 at which it crosses a block boundary (``c %
        block_size == 0``, a new block; with prefix caching also ``block_size - 1``, a block that
        fills) or emits its last token (``output_len - generated - 1`` steps after t + 1).
        """
        keep = []
        bs, edge, win, wake_at, t1 = self.allocator.block_size, self.edge, self.win, self.wake_at, t + 1
        n = bases = held = 0
        for s in self.active:
            if s.status is not RUNNING:
                continue
            g, c = s.generated, s.computed
            if g and c == s.prompt_len + g - 1 and g < s.output_len:
                gap = -c % bs
                if edge:
                    other = (bs - 1 - c) % bs
                    if other < gap:
                        gap = other
                if win:                                  # its next release behind the window
                    other = self.allocator.window_gap(s.id, c)
                    if other < gap:
                        gap = other
                last = s.output_len - g - 1
                wake = t1 + (gap if gap < last else last)
                s.base = b = c - t1
                s.event = wake
                n += 1
                bases += b
                held += c
                bucket = wake_at.get(wake)
                if bucket is None:
                    wake_at[wake] = [s]
                else:
                    bucket.append(s)
            else:
                keep.append(s)
        if n:
            self.n_dec += n
            self.dec_base += bases
            self.computed_sum -= held
        self.active = keep

    def preempt_youngest(self) -> _V1Seq:
        """Preempt the running sequence admitted last by recompute: free its blocks (they stay in
        the prefix cache, if on) and put it back at the head of the queue with nothing computed."""
        victim = self.running.popitem()[1]
        if victim.base is not None:                      # a decoder: as it was at the start of the step
            self.wake_at[victim.event].remove(victim)
            self._wake(victim, self.t)
        self.allocator.v1_free(victim.id, keep_keys=True)
        self.computed_sum -= victim.computed
        self.final_sum -= victim.prompt_len + victim.output_len
        victim.recomputing = victim.computed       # work lost: computed again on return
        victim.computed = 0
        victim.status = PREEMPTED
        self.waiting.appendleft(victim)
        return victim

    def admit(self, scheduled: list, budget: int) -> tuple[int, int, int, int]:
        """Admit from the queue (FCFS, no skipping) while budget is left and fewer than
        ``max_num_seqs`` run: each takes its cached leading blocks, then one chunk of the rest.

        Returns:
            (budget left, admitted, prompt tokens found in the prefix cache, prompt tokens of
            first admissions).
        """
        allocator, waiting, running = self.allocator, self.waiting, self.running
        bs, budget_cap, seq_cap, chunked = allocator.block_size, self.budget_cap, self.seq_cap, self.chunked
        admitted = hit = prompt_in = 0
        while waiting and budget > 0 and len(running) < seq_cap:
            s = waiting[0]
            total = s.prompt_len + s.generated
            hits = allocator.v1_computed_blocks(s.id, s.prompt_len, total)
            cached = len(hits) * bs
            want = total - cached
            if not chunked and budget < want <= budget_cap:
                break
            new = want if want < budget else budget
            if not allocator.v1_allocate(s.id, s.prompt_len, total, cached + new, hits,
                                         final=s.prompt_len + s.output_len, computed=cached):
                break
            waiting.popleft()
            s.computed = cached
            if s.recomputing:
                s.recomputing = max(0, s.recomputing - cached)
            if s.status is WAITING:                  # its first admission: the hit rate counts each prompt once
                hit += cached
                prompt_in += s.prompt_len
            s.status = RUNNING
            self.order += 1
            s.order = self.order
            running[s.id] = s
            self.computed_sum += cached
            self.final_sum += s.prompt_len + s.output_len
            scheduled.append((s, new))
            budget -= new
            admitted += 1
        return budget, admitted, hit, prompt_in

    def compute(self, scheduled: list, t: int) -> tuple[tuple, int, int, list]:
        """Every scheduled sequence computes its scheduled tokens' KV; one that reaches its prompt
        plus generated tokens emits a token (the admitted ones: :meth:`serve` computes the running
        as it schedules them, the same way).

        Returns:
            ((prefill tokens, prefill pairs, decodes, decode pairs), tokens emitted, tokens
            recomputed, the sequences that emitted their last token).
        """
        prefill = prefill_pairs = decodes = decode_pairs = emitted = recomputed = 0
        done = []
        for s, new in scheduled:
            c = s.computed
            total = s.prompt_len + s.generated
            if s.generated and c == total - 1 and new == 1:
                decodes += 1
                decode_pairs += c + 1
            else:
                pairs, r = _prefill_chunk(s, c, new)
                prefill += new
                prefill_pairs += pairs
                recomputed += r
            s.computed = c + new
            self.computed_sum += new
            if s.computed == total:
                s.generated += 1
                emitted += 1
                if s.first_step is None:
                    s.first_step = t
                if s.generated >= s.output_len:
                    done.append(s)
        return (prefill, prefill_pairs, decodes, decode_pairs), emitted, recomputed, done

    def finish(self, done: list, t: int) -> None:
        """Free the sequences that emitted their last token at ``t`` (last block first; cached
        blocks stay findable)."""
        run, v1_free, running = self.run, self.allocator.v1_free, self.running
        for s in done:
            v1_free(s.id)
            del running[s.id]
            self.computed_sum -= s.computed
            self.final_sum -= s.prompt_len + s.output_len
            s.status = FINISHED
            run.served.append((s.id, s.prompt_len, s.output_len, s.arrival, s.first_step, t))
        run.finished += len(done)

    def record(self, t, batch, preempted, recomputed, admitted, work, hit, prompt_in, emitted) -> None:
        """Write the step's record (:class:`allocator.engine.loop.StepRecord`, then the cache
        counters and the tokens emitted)."""
        run, waiting, running = self.run, self.waiting, self.running
        if waiting:
            head = waiting[0]
            need = round_up(head.prompt_len + head.generated, self.allocator.block_size)
        else:
            need = 0
        prefill, prefill_pairs, _, decode_pairs = work
        run.record(step=t, span=1, logical_tokens=self.computed_sum + self.dec_base + self.n_dec * (t + 1),
                   holders=len(running),
                   running=batch, waiting=len(waiting), finished=run.finished, preemptions=preempted,
                   next_need=need, recomputed_tokens=recomputed, admitted=admitted, prefill_tokens=prefill,
                   prefill_pairs=prefill_pairs, decode_pairs=decode_pairs,
                   final=self.final_sum,
                   prefix_hit_tokens=hit, prompt_tokens_admitted=prompt_in, tokens=emitted)

    def lengths(self, t: int) -> dict:
        """{id: tokens with KV at the end of step t} for the running (pictures and checks)."""
        return {s.id: s.computed if s.base is None else s.base + t + 1 for s in self.running.values()}

    def check_invariants(self, lengths: dict, t: int) -> None:
        """Assert the step kept the rules' caps (tests run with this)."""
        assert len(self.running) <= self.seq_cap, "more running than max_num_seqs"
        assert self.spent <= self.budget_cap, "token budget overspent"
        assert all(s.status is RUNNING for s in self.running.values()), "a stopped sequence is listed as running"
        assert self.computed_sum + self.dec_base + self.n_dec * (t + 1) == sum(lengths.values()), \
            "computed tokens drifted"
        decoders = [s for s in self.running.values() if s.base is not None]
        assert len(decoders) == self.n_dec and sum(s.base for s in decoders) == self.dec_base, "decoders drifted"
        assert all(s in self.wake_at[s.event] and s.event > t for s in decoders), "a decoder is not woken"
        assert [s for s in self.running.values() if s.base is None] == self.active, "the active are not the running's rest"
        assert self.final_sum == sum(s.prompt_len + s.output_len for s in self.running.values()), "final lengths drifted"
