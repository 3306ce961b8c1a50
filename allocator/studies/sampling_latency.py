"""The PagedAttention paper's Figure 14, run on ShareGPT: latency of requests with several outputs.

Kwon et al., SOSP 2023, section 6.3 (Figure 14) serve OPT-13B on one A100-40GB with requests that
each ask for several output sequences -- parallel sampling with 2, 4 and 6 samples, beam search
with widths 2, 4 and 6 -- and plot the normalised latency (s/token) against the request rate for
vLLM and the three Orca baselines. Their statement: the more sequences a request asks for, the
more vLLM gains over Orca; beam search, which shares more, gains more still; against Orca (Oracle)
on OPT-13B the gain rises from 1.3x in basic sampling to 2.3x in beam search of width 6
(:data:`PAPER_FIG14`). The paper runs it on Alpaca; this lab ships ShareGPT's lengths only, so
:func:`figure14` runs it on ShareGPT and says so.

**The systems.**

* vLLM: :func:`allocator.engine.sampling.simulate_sampling` -- the prompt's blocks shared by
  refcount, copy-on-write of the partly filled last block, beams forked and freed step by step by
  the beam model at its default replacement probability (the same runs as Figure 15's, at
  other rates).
* Orca (Max / Pow2 / Oracle): :class:`OrcaSequences` -- every one of a request's ``width``
  sequences reserves its own run of prompt + the policy's output estimate, placed by the
  artifact's buddy allocator, all of them at admission or none: nothing is shared, as in the
  paper's Orca. A beam holds its own run whether it was forked or not, so Orca's beam-search runs
  are its parallel-sampling runs (the copy of a parent's K/V into a forked beam's run is not
  priced). The classroom scheduler runs the request as one unit; :class:`SequencesClock` prices
  its ``width`` sequences' decodes (each reads its own copy of the context), and the prompt is
  prefilled once, as vLLM's is -- so the two systems differ in memory alone.

**The measure.** For every system, width and arrival seed, normalised latency (mean over the
requests of end-to-end latency / output length) is measured on a grid of request rates
(:data:`GRID_STEP` apart, the paper's rate scale: this model's rates / the replication's load
scale) until it crosses the budget, and the sustained rate is interpolated there
(:func:`allocator.studies.sustained.sustained_rate`). The budget is Figure 12's: :data:`allocator.
studies.paper.LATENCY_FACTOR` x a one-sequence request served alone. vLLM's **advantage** at a
width is its sustained rate over Orca (Oracle)'s (and Pow2's, Max's), per seed; the spread is over
the seeds. Each run is :data:`REQUESTS` ShareGPT requests drawn as Figure 15 draws them
(:func:`allocator.studies.sharing.sharing_workload`), not the artifact's 600 s of arrivals (whose
vLLM runs would hold thousands of requests): with much fewer than 200, requests arriving at once can fit
the pool together, and vLLM's latency then never passes the budget at any rate, so no ratio could be
stated (tested). Nothing is tuned to the paper: the rates,
budget, beam model and requests are set before and apart from the comparison.

Each (width, seed) search is independent of the others, so :func:`figure14` can run them in a
process pool (``workers``); the result is the same number for number.
"""
from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field

from allocator.common.errors import FieldError
from allocator.common.validate import whole_number
from allocator.cost.timing import price
from allocator.engine.sampling import DEFAULT_REPLACEMENT, Sampling, simulate_sampling
from allocator.engine.simulate import simulate
from allocator.memory.buddy import ORCA_BLOCK_SIZE, ORCA_MAX_CONTEXT, BuddyBlocks
from allocator.memory.forking import ForkingPagedAllocator
from allocator.memory.paged import PagedAllocator
from allocator.studies.paper import (LATENCY_FACTOR, PAPER_LABELS, PAPER_POOL_SLOTS, BuddyReservation, load_scale,
                                     paper_cost, run_all, spread)
from allocator.studies.rate_sweep import unloaded_latency
from allocator.studies.sharing import MAX_SPAN_S, MODE_LABELS, WIDTHS, sharing_workload
from allocator.studies.sustained import rate_ratio, sustained_rate
from allocator.workloads.sharegpt import sharegpt_workload

#: The two ways a request asks for several sequences, and the Orca baselines (the paper's order).
MODES = ("parallel", "beam")
ORCA_SYSTEMS = ("oracle", "pow2", "max")
#: Arrival (and length-sample, and beam-model) seeds: each sustained rate is found once per seed.
SEEDS = (0, 1, 2)
#: ShareGPT requests per run.
REQUESTS = 200
#: Sequences per request: 1 (basic sampling, the same runs for both modes: the reference the paper's
#: 1.3x is stated against) and the paper's widths 2, 4, 6.
FIG14_WIDTHS = (1, *WIDTHS)
#: Neighbouring rates of the grid (the paper's scale, requests/s) are this factor apart: rate k is
#: GRID_STEP ** k. Below :data:`allocator.studies.sustained.INTERPOLATION_SPAN`, so every crossing
#: is interpolated, never left as a bracket.
GRID_STEP = 1.25
#: The grid's lowest and highest index (rates about 0.0012 to 87 requests/s on the paper's scale); the
#: lowest is raised where :func:`allocator.studies.sharing.sharing_workload` would refuse the rate.
GRID_RANGE = (-30, 20)
#: The paper's statement (Kwon et al., SOSP 2023, section 6.3 and Figure 14: OPT-13B, one A100-40GB,
#: the Alpaca dataset): vLLM's improvement over Orca (Oracle) grows with the number of sequences,
#: more for beam search, from 1.3x in basic sampling to 2.3x in beam search of width 6.
PAPER_FIG14 = {
    "dataset": "Alpaca",
    "oracle_improvement": {"basic sampling": 1.3, "beam search, width 6": 2.3},
    "said": "the more sequences a request samples, the more vLLM improves on the Orca baselines, and beam "
            "search, which shares more, improves more; over Orca (Oracle) on OPT-13B and Alpaca the improvement "
            "goes from 1.3x in basic sampling to 2.3x in beam search of width 6 (section 6.3, Figure 14)",
}
#: Why this lab's advantages differ from the paper's, in one sentence (shown beside them).
WHY = ("The paper runs Alpaca, whose short answers keep every Orca reservation small, where ShareGPT's answers are "
       "several times longer, so each sequence costs Orca far more memory here (and parallel sampling's shared "
       "prompts, short beside those answers, save little as the width grows); and which "
       "beams survive comes from the beam model (one parameter at its default), not from OPT-13B's real beam search.")


class OrcaSequences(BuddyReservation):
    """The paper's Orca baselines for requests of ``width`` sequences: every sequence reserves its own
    run of prompt + the policy's output estimate (:meth:`allocator.memory.reserve_max.ReserveMaxAllocator.reservation`,
    buddy placement as the artifact's; sizes remembered, :class:`allocator.studies.paper.BuddyReservation`), nothing shared; a request is admitted when all ``width`` runs
    can be placed, and frees them all when it finishes.

    The engine sees one holder per request (its sequences have equal lengths); its per-step memory
    metrics therefore count one sequence's tokens, and only the run's timing (with
    :class:`SequencesClock`) is read from it.

    Args:
        width: sequences per request (>= 1).
        policy: ``"max"``, ``"pow2"`` or ``"oracle"``.
        total_slots: the pool (default: the paper's Table 1, :data:`allocator.studies.paper.PAPER_POOL_SLOTS`).

    Raises:
        FieldError: ``width`` not a whole number >= 1; as
            :class:`allocator.memory.reserve_max.ReserveMaxAllocator` otherwise.
    """

    def __init__(self, width: int, policy: str, total_slots: int = PAPER_POOL_SLOTS):
        self.width = whole_number("width", width, 1)
        super().__init__(total_slots, ORCA_MAX_CONTEXT, policy, placement="buddy", block_size=ORCA_BLOCK_SIZE,
                         max_context=ORCA_MAX_CONTEXT)
        self.label = f"{self.label}, {self.width} sequences a request"

    def admission_need(self, prompt_len: int, context_len: int, output_len: int, seq_id=None) -> int:
        """Slots the request's ``width`` runs take together (``width`` x one sequence's reservation)."""
        return self.width * self.reservation(prompt_len, output_len)

    def never_fits(self, prompt_len: int, output_len: int) -> str | None:
        """Why the request can never be admitted: one sequence's run never fits
        (:meth:`allocator.memory.reserve_max.ReserveMaxAllocator.never_fits`), or ``width`` such runs cannot all be placed in the
        empty pool. None when it fits."""
        reason = super().never_fits(prompt_len, output_len)
        if reason is not None:
            return reason
        blocks = self.reservation(prompt_len, output_len) // self.unit
        empty = BuddyBlocks(self._buddy.num_blocks, self.max_context // self.unit)
        for _ in range(self.width):
            if empty.allocate(blocks) is None:
                return (f"needs {self.width} buddy runs of {blocks} blocks of {self.unit} slots, one a sequence, and "
                        "the empty pool cannot place them all")
        return None

    def admit(self, seq_id, prompt_len: int, context_len: int, output_len: int) -> int | None:
        """Place ``width`` runs, one a sequence (all or none); returns one sequence's room (slots), or
        None when they do not all fit now (at once, without a search, when the same lengths found no room
        and no run has changed since: a failed attempt frees what it placed, and the buddy allocator's free
        runs depend only on the runs it holds)."""
        key = (self._version, prompt_len, output_len)
        if key == self._full:
            return None
        one = self.reservation(prompt_len, output_len)
        starts = []
        for _ in range(self.width):
            start = self._buddy.allocate(one // self.unit)
            if start is None:
                for s in starts:
                    self._buddy.free(s)
                self._full = key
                return None
            starts.append(start)
        for j, start in enumerate(starts):
            self._place((seq_id, j), start * self.unit, one, prompt_len + output_len)
        return one

    def free(self, seq_id) -> None:
        """Release every run of the request."""
        for j in range(self.width):
            super().free((seq_id, j))

    def runs_of(self, seq_id) -> list[tuple[int, int]]:
        """[(start slot, length in slots)] of the request's runs, one a sequence."""
        return [self.run_of((seq_id, j)) for j in range(self.width)]

    def check_invariants(self, lengths: dict) -> None:
        """The reservation allocator's ``check_invariants`` with each request's length given to each of its runs."""
        super().check_invariants({(s, j): n for s, n in lengths.items() for j in range(self.width)})


class SequencesClock:
    """A bound cost model (``step_seconds(prefill_tokens, prefill_pairs, decodes, decode_pairs,
    swapped_blocks)``, e.g. ``paper_cost().for_blocks(16)``) for runs whose every request stands for
    ``width`` sequences of equal length: each decode and each query-key pair it reads counts
    ``width`` times; the prompt's prefill counts once (as vLLM's does: its sequences are forked
    after it). Exact, since all of a request's sequences hold the same number of tokens."""

    def __init__(self, clock, width: int):
        self.clock, self.width = clock, whole_number("width", width, 1)

    def step_seconds(self, prefill_tokens, prefill_pairs, decodes, decode_pairs, swapped_blocks) -> float:
        """Seconds of a step in which ``decodes`` requests each decode ``width`` sequences."""
        n = self.width
        return self.clock.step_seconds(prefill_tokens, prefill_pairs, n * decodes, n * decode_pairs, swapped_blocks)

    def pricer(self):
        """:meth:`step_seconds` as one plain function (the engine's loop calls it every step)."""
        inner = self.clock.pricer() if hasattr(self.clock, "pricer") else self.clock.step_seconds
        n = self.width

        def step_seconds(prefill_tokens, prefill_pairs, decodes, decode_pairs, swapped_blocks) -> float:
            return inner(prefill_tokens, prefill_pairs, n * decodes, n * decode_pairs, swapped_blocks)
        return step_seconds


def latency(system: str, mode: str, width: int, rate: float, seed: int, cost, requests: int = REQUESTS) -> float:
    """Normalised latency (s/token: mean over finished requests of end-to-end latency / output length)
    of one run: ``requests`` ShareGPT requests (:func:`allocator.studies.sharing.sharing_workload`,
    ``seed``) at ``rate`` requests/s (this model's clock), each asking for ``width`` sequences.

    Args:
        system: ``"paged"`` (vLLM, sharing; ``mode`` decides parallel sampling or beam search; at
            ``width`` 1 a plain paged run, the same for both modes) or an
            Orca baseline (``"oracle"``, ``"pow2"``, ``"max"``: :class:`OrcaSequences`; ``mode`` plays no part).
        cost: the cost model (:func:`allocator.studies.paper.paper_cost`).

    Returns:
        s/token, or ``math.inf`` when no request finished.
    """
    w = sharing_workload(rate, seed, requests)
    if system == "paged" and width == 1:             # basic sampling: the classroom engine's one sequence
        res = simulate(w, PagedAllocator(PAPER_POOL_SLOTS, ORCA_BLOCK_SIZE, preemption="recompute"),
                       record_snapshots=False, clock=cost.for_blocks(ORCA_BLOCK_SIZE))
    elif system == "paged":
        out = simulate_sampling(w, ForkingPagedAllocator(PAPER_POOL_SLOTS, ORCA_BLOCK_SIZE),
                                Sampling(mode, width, DEFAULT_REPLACEMENT, seed),
                                clock=cost.for_blocks(ORCA_BLOCK_SIZE))
        res = out.result
    else:
        res = simulate(w, OrcaSequences(width, system), record_snapshots=False,
                       clock=SequencesClock(cost.for_blocks(ORCA_BLOCK_SIZE), width))
    value = price(res, cost).summary["normalized_latency_s_per_token"]
    return math.inf if value is None else float(value)


def grid_rate(k: int) -> float:
    """Rate ``k`` of the grid on the paper's scale (requests/s): :data:`GRID_STEP` ** k, rounded to 6 digits."""
    return round(GRID_STEP ** k, 6)


def knee_search(system: str, mode: str, width: int, seed: int, *, scale: float, budget: float, start: int,
                cost=None, requests: int = REQUESTS) -> dict:
    """Find where one system's latency curve crosses ``budget``: from grid index ``start``, step
    down while the latency is over the budget and up while it is under, until two neighbouring
    grid rates straddle it (or the grid ends).

    Args:
        scale: this model's rates / the paper's (the replication's load scale).
        budget: s/token.
        start: the grid index to start at (a guess: the search ends at the same crossing from any
            start when the curve rises with the rate).

    Returns:
        {"points": [{"paper_rate", "rate", "latency"}] sorted by rate, "sustained":
        :func:`allocator.studies.sustained.sustained_rate` on the paper's scale, "index": the grid index of
        the last rate under the budget (None: none was)}.
    """
    cost = cost or paper_cost()
    lo_k, hi_k = GRID_RANGE
    # the lowest rate sharing_workload draws for this many requests (their arrivals span at most MAX_SPAN_S)
    floor = 2.0 * requests / MAX_SPAN_S / scale
    while grid_rate(lo_k) < floor:
        lo_k += 1
    seen: dict[int, float] = {}

    def at(k):
        if k not in seen:
            seen[k] = latency(system, mode, width, grid_rate(k) * scale, seed, cost, requests)
        return seen[k]

    k = min(max(start, lo_k), hi_k)
    if at(k) > budget:
        while k > lo_k and at(k - 1) > budget:
            k -= 1
        k -= 1                                       # the last under the budget (or past the grid's end)
    else:
        while k < hi_k and at(k + 1) <= budget:
            k += 1
    ks = sorted(seen)
    rates = [grid_rate(i) for i in ks]
    sus = sustained_rate(rates, [seen[i] for i in ks], budget)
    return {"points": [{"paper_rate": grid_rate(i), "rate": grid_rate(i) * scale, "latency": seen[i]} for i in ks],
            "sustained": sus, "index": k if k >= lo_k else None}


def _start_index(rate: float) -> int:
    """The grid index nearest ``rate`` (paper's scale, requests/s > 0)."""
    return round(math.log(rate) / math.log(GRID_STEP))


def width_seed_task(args: tuple) -> dict:
    """Every system's search at one width and seed (one unit of the process pool): vLLM's parallel
    sampling and beam search, then Orca (Oracle), (Pow2), (Max), each search starting from the
    previous one's crossing. ``args``: (width, seed, scale, budget, requests).

    Returns:
        {(mode or "orca", system): :func:`knee_search`'s dict}.
    """
    width, seed, scale, budget, requests = args
    cost = paper_cost()
    out = {}
    guess = _start_index(2.0 / width)                 # the paper's vLLM knee (2 requests/s) over the width
    out[("parallel", "paged")] = first = knee_search("paged", "parallel", width, seed, scale=scale, budget=budget,
                                                     start=guess, cost=cost, requests=requests)
    start = first["index"] if first["index"] is not None else guess
    # beam search shares more, so its search starts a few grid steps higher; at width 1 it is the same run
    out[("beam", "paged")] = first if width == 1 else knee_search(
        "paged", "beam", width, seed, scale=scale, budget=budget, start=start + 4, cost=cost, requests=requests)
    for system in ORCA_SYSTEMS:
        out[("orca", system)] = r = knee_search(system, "parallel", width, seed, scale=scale, budget=budget,
                                                start=start, cost=cost, requests=requests)
        start = r["index"] if r["index"] is not None else start
    return out


@dataclass
class Figure14:
    """What :func:`figure14` returns.

    Attributes:
        searches: {(mode, width, seed): {system: :func:`knee_search`'s dict}} for mode in
            :data:`MODES`; the Orca baselines' searches are shared by both modes (one run serves both).
        advantage: {mode: {width: {other: :func:`allocator.studies.paper.spread` of vLLM's sustained
            rate / ``other``'s over the seeds}}} for other in :data:`ORCA_SYSTEMS`, where every
            seed's ratio could be stated exactly (else absent, and ``unstated`` lists it).
        unstated: [(mode, width, other)] whose ratio some seed could not state exactly.
        scale, budget_s_per_token, seeds, requests, seconds, workers: as run.
    """

    scale: float
    budget_s_per_token: float
    seeds: tuple
    requests: int
    widths: tuple = FIG14_WIDTHS
    searches: dict = field(default_factory=dict)
    advantage: dict = field(default_factory=dict)
    unstated: list = field(default_factory=list)
    seconds: float = 0.0
    workers: int = 1

    def ratio(self, mode: str, width: int, other: str, seed: int) -> dict | None:
        """vLLM's sustained rate over ``other``'s at one seed: :func:`allocator.studies.sustained.rate_ratio`."""
        s = self.searches[(mode, width, seed)]
        return rate_ratio(s["paged"]["sustained"], s[other]["sustained"])

    def grows(self, mode: str, other: str = "oracle") -> bool | None:
        """Whether vLLM's mean advantage over ``other`` rises with the width (each width's mean above
        the last); None when a width's advantage could not be stated."""
        d = self.advantage.get(mode, {})
        means = [d.get(w, {}).get(other, {}).get("mean") for w in self.widths]
        if any(m is None for m in means):
            return None
        return all(b > a for a, b in zip(means, means[1:]))

    def falls(self, mode: str, other: str = "oracle") -> list[dict] | None:
        """The steps between neighbouring widths where vLLM's mean advantage over ``other`` does not rise:
        [{"from", "to" (widths), "from_mean", "to_mean", "within_sd": whether the drop is smaller than the
        larger of the two standard deviations over the seeds}]; None when a width's advantage could not be
        stated."""
        d = self.advantage.get(mode, {})
        sp = [d.get(w, {}).get(other) for w in self.widths]
        if any(v is None for v in sp):
            return None
        return [{"from": wa, "to": wb, "from_mean": a["mean"], "to_mean": b["mean"],
                 "within_sd": a["mean"] - b["mean"] < max(a["std"], b["std"])}
                for wa, wb, a, b in zip(self.widths, self.widths[1:], sp, sp[1:]) if b["mean"] <= a["mean"]]

    def beam_over_parallel(self, other: str = "oracle") -> list[bool] | None:
        """At each width, whether beam search's mean advantage over ``other`` exceeds parallel sampling's."""
        try:
            return [self.advantage["beam"][w][other]["mean"] > self.advantage["parallel"][w][other]["mean"]
                    for w in self.widths if w > 1]
        except KeyError:
            return None

    def to_dict(self) -> dict:
        """JSON-ready, the paper's statement beside ours."""
        searches = {}
        for (mode, width, seed), d in self.searches.items():
            searches.setdefault(mode, {}).setdefault(str(width), {})[str(seed)] = d
        return {"paper": PAPER_FIG14, "dataset": "ShareGPT (the paper's Figure 14: Alpaca)", "why": WHY,
                "widths": list(self.widths), "scale": self.scale, "budget_s_per_token": self.budget_s_per_token,
                "latency_factor": LATENCY_FACTOR, "seeds": list(self.seeds), "requests": self.requests,
                "grid_step": GRID_STEP, "beam_replacement": DEFAULT_REPLACEMENT,
                "labels": {s: PAPER_LABELS[s] for s in ("paged", *ORCA_SYSTEMS)},
                "modes": {m: MODE_LABELS[m] for m in MODES},
                "advantage": {m: {str(w): d for w, d in by_w.items()} for m, by_w in self.advantage.items()},
                "grows_with_width_vs_oracle": {m: self.grows(m) for m in MODES},
                "falls_vs_oracle": {m: self.falls(m) for m in MODES},
                "beam_over_parallel_vs_oracle": self.beam_over_parallel(),
                "unstated": [list(u) for u in self.unstated],
                "searches": searches, "seconds": self.seconds, "workers": self.workers}


def fig14_budget(cost=None, seed: int = 0) -> float:
    """Figure 12's latency budget (s/token): :data:`allocator.studies.paper.LATENCY_FACTOR` x the mean
    normalised latency of ShareGPT requests (600 s at 1 request/s, ``seed``) each served alone."""
    cost = cost or paper_cost()
    return LATENCY_FACTOR * unloaded_latency(sharegpt_workload(1.0, 600.0, seed=seed), cost)


def figure14(*, scale: float | None = None, budget: float | None = None, seeds=SEEDS, requests: int = REQUESTS,
             widths=FIG14_WIDTHS, workers: int = 1, progress=None) -> Figure14:
    """Figure 14 on ShareGPT (see the module docstring).

    Args:
        scale: the load scale (default :func:`allocator.studies.paper.load_scale`'s).
        budget: s/token (default :func:`fig14_budget`).
        seeds: arrival seeds (at least two: a spread needs two).
        requests: requests per run (1 .. 10,000).
        widths: sequences per request to run (each 1 .. 16; 1 is basic sampling).
        workers: processes running the (width, seed) searches (1: in this process;
            :func:`allocator.studies.paper.run_all`, which an open :func:`allocator.studies.paper.shared_pool`
            overrides); the numbers are the same for any count.
        progress: ``progress(done, total, text)`` after each (width, seed).

    Raises:
        FieldError (``seeds``): fewer than two; (``requests``, ``workers``, ``width``): out of range.
    """
    seeds = tuple(seeds)
    if len(seeds) < 2:
        raise FieldError("seeds", f" must name at least two arrival seeds for a spread, got {len(seeds)}")
    requests = whole_number("requests", requests, 1, 10_000)
    workers = whole_number("workers", workers, 1, 64)
    widths = tuple(whole_number("width", w, 1, 16) for w in widths)
    t0 = time.perf_counter()
    cost = paper_cost()
    scale = scale if scale is not None else load_scale(cost)["scale"]
    budget = budget if budget is not None else fig14_budget(cost)
    out = Figure14(scale=scale, budget_s_per_token=budget, seeds=seeds, requests=requests, widths=widths,
                   workers=workers)
    # the widest first: their searches take longest, and a pool that starts them last waits for them at the end
    tasks = [(w, sd, scale, budget, requests) for w in sorted(widths, reverse=True) for sd in seeds]
    tell = None if progress is None else (
        lambda done, total: progress(done, total, f"Figure 14: width {tasks[done - 1][0]}, seed {tasks[done - 1][1]}"))
    by_task = {(w, sd): r for (w, sd, *_), r in zip(tasks, run_all(width_seed_task, tasks, workers, tell))}
    for w in widths:                                  # in the widths' order, as given
        for sd in seeds:
            r = by_task[(w, sd)]
            for mode in MODES:
                out.searches[(mode, w, sd)] = {"paged": r[(mode, "paged")],
                                               **{o: r[("orca", o)] for o in ORCA_SYSTEMS}}
    for mode in MODES:
        out.advantage[mode] = {}
        for w in widths:
            out.advantage[mode][w] = {}
            for other in ORCA_SYSTEMS:
                ratios = [out.ratio(mode, w, other, sd) for sd in seeds]
                if all(r is not None and r["kind"] == "exact" for r in ratios):
                    out.advantage[mode][w][other] = spread([r["value"] for r in ratios])
                else:
                    out.unstated.append((mode, w, other))
    out.seconds = time.perf_counter() - t0
    return out


_MEMO: dict = {}
_LOCK = threading.Lock()


def figure14_for(scale: float, progress=None, workers: int = 1) -> Figure14:
    """:func:`figure14` at ``scale`` with the default seeds and requests, once per process (pages and tests share it)."""
    key = round(float(scale), 12)
    with _LOCK:
        if key not in _MEMO:
            _MEMO[key] = figure14(scale=scale, progress=progress, workers=workers)
        return _MEMO[key]


def is_computed(scale: float) -> bool:
    """Whether :func:`figure14_for` has the result for ``scale`` already."""
    return round(float(scale), 12) in _MEMO


__all__ = ["FIG14_WIDTHS", "GRID_STEP", "MODES", "ORCA_SYSTEMS", "PAPER_FIG14", "REQUESTS", "SEEDS", "WHY", "Figure14",
           "OrcaSequences", "SequencesClock", "fig14_budget", "figure14", "figure14_for", "is_computed",
           "grid_rate", "knee_search", "latency", "width_seed_task"]
