"""The kernel sweep's time plan: the figure it states beforehand, and the rules that keep it to it.

A sweep sized from a time budget (``repeats=None`` in :func:`kernels.sweep.run.sweep`) first pages the
first block size, times three pairs of calls (their median) and one run of the statistics, then states the
most it will take (:meth:`SweepPlan.calibrate`). From then on it times the plan's pair count at
every block size and enforces the stated figure as an upper bound: fewer pairs where the rest
would not fit at the costs so far (:meth:`SweepPlan.pairs_for`); before each block size it checks that
the block size's paging and at least :data:`MIN_REPEATS` timed pairs still fit
(:meth:`SweepPlan.fits_block`), and after each timed pair that another still fits while leaving
room for the block sizes after it (:meth:`SweepPlan.another_pair`); what does not fit is left out,
and the sweep says so. Each check prices the work ahead above what it has cost so far
(:data:`GUARD`), because on a shared machine the next step can be slower than any so far.

Why the figure used to be missed (issue 24; measured 13 s against a stated 11 s, 39 s against
33 s): the pairs of later block sizes were re-chosen to fill the *budget* (45 s) rather than the
estimate the page had stated, the statistics after each block size (about 0.06 s on this machine)
were not counted, and nothing stopped a sweep that ran past its stated figure.

Pure Python with an injectable clock: ``tests/kernels/test_sweep_plan.py`` drives it with a fake
one.
"""
from __future__ import annotations

import time
from typing import Callable

#: Bounds on the timed pairs per block size chosen from a budget.
MIN_REPEATS, MAX_REPEATS = 3, 15
#: The stated figure is the plan's estimate times this, plus :data:`SLACK_S`: room for a shared
#: machine's slower moments, which the stop rules spend instead of overrunning.
LOAD_MARGIN = 1.2
SLACK_S = 2.0
#: Work still ahead is priced at this many times what it has cost so far (see :class:`SweepPlan`).
GUARD = 1.25


def choose_repeats(budget_s: float, elapsed_s: float, blocks: int, page_s: float, pair_s: float,
                   lo: int = MIN_REPEATS, hi: int = MAX_REPEATS) -> tuple[int, float]:
    """Timed pairs per block size that fit a budget, and the whole sweep's estimated seconds.

    Each block size costs paging the tokens (``page_s``) plus a warm-up pair and the timed pairs
    (``pair_s`` each; a caller adds the statistics' seconds to ``page_s``); ``elapsed_s`` is already
    spent. The count is clamped to [lo, hi]; with ``lo`` pairs over budget the estimate says so (it
    is never shortened to look in budget).
    """
    per_block_left = (budget_s - elapsed_s) / max(1, blocks) - page_s
    n = int(per_block_left // pair_s) - 1 if pair_s > 0 else hi
    n = max(lo, min(hi, n))
    return n, elapsed_s + blocks * (page_s + (n + 1) * pair_s)


class SweepPlan:
    """The time plan of one sweep over ``blocks`` block sizes (seconds throughout).

    Call :meth:`note` with what each step cost (kinds "page": paging one block size and its first
    call; "pair": one timed pair; "stats": the statistics of one block size), :meth:`calibrate`
    once after the first block size's paging, one pair and one statistics run, then for block
    size ``i`` (0-based): :meth:`fits_block` before paging it (``i > 0``), :meth:`pairs_for` for
    its pair count and :meth:`another_pair` after each of its timed pairs.

    Costs: work still ahead is priced at the mean pair and statistics run so far (or of the last
    three, if more: a machine that slowed down) and the dearest paging (paging differs by block
    size; pairs vary with the machine's load, and a sum of many is its mean times their number),
    times :data:`GUARD`; the very next pair at the dearest so
    far or that, whichever is more (one slow moment must not pass the stated figure).

    Args:
        blocks: block sizes to sweep (>= 1).
        budget_s: what the sweep is sized to take (its plan aims at it, or less).
        limit_s: the most any sweep may state (``kernels.sweep.run.HARD_LIMIT_S``, 60 s: issue 24).
        clock: seconds, monotonic (``time.perf_counter``; a test passes a fake one).
        enforce: False for a sweep with a fixed pair count: it states an estimate, stops nothing.
        start: the sweep's start on ``clock`` (default: now).
    """

    def __init__(self, blocks: int, budget_s: float, limit_s: float,
                 clock: Callable[[], float] = time.perf_counter, enforce: bool = True,
                 lo: int = MIN_REPEATS, hi: int = MAX_REPEATS, start: float | None = None) -> None:
        self.blocks, self.budget_s, self.limit_s = max(1, int(blocks)), float(budget_s), float(limit_s)
        self.clock, self.enforce, self.lo, self.hi = clock, enforce, lo, hi
        self.t0 = clock() if start is None else float(start)
        self.seen: dict[str, list[float]] = {"page": [], "pair": [], "stats": []}
        self.plan_s: float | None = None
        self.stated_s: float | None = None
        self.repeats: int | None = None

    def elapsed(self) -> float:
        """Seconds since the plan was made (the sweep's start)."""
        return self.clock() - self.t0

    def note(self, kind: str, seconds: float) -> None:
        """Record what one step of ``kind`` ("page", "pair" or "stats") cost."""
        self.seen[kind].append(float(seconds))

    def _cost(self, kind: str, how: str = "mean") -> float:
        xs = self.seen[kind]
        if not xs:
            return 0.0
        if how == "max" or kind == "page":
            return max(xs)
        return max(sum(xs) / len(xs), sum(xs[-3:]) / len(xs[-3:]))     # a machine that slowed: the recent

    def _block_s(self, pairs: int) -> float:
        """One block size as planned: paging, a warm-up pair, ``pairs`` timed pairs, statistics."""
        return self._cost("page") + (pairs + 1) * self._cost("pair") + self._cost("stats")

    def calibrate(self, repeats: int | None = None) -> float:
        """State the sweep's figure, after the first block size is paged and one pair and one
        statistics run are timed (the first block size's paging is already in :meth:`elapsed`).

        With ``repeats`` None (enforced): the plan is :func:`choose_repeats` on the budget, and the
        stated figure ``min(limit_s, plan x LOAD_MARGIN + SLACK_S)``, an upper bound the stop rules
        keep. With a fixed ``repeats``: the estimate of that many pairs everywhere (not enforced).

        Returns:
            the stated figure (seconds from the start).
        """
        page, now = self._cost("page"), self.elapsed()
        if repeats is None:
            self.repeats, plan = choose_repeats(self.budget_s, now, self.blocks, page + self._cost("stats"),
                                                self._cost("pair"), self.lo, self.hi)
            self.plan_s = plan - page                           # the first block size is already paged
            self.stated_s = min(self.limit_s, self.plan_s * LOAD_MARGIN + SLACK_S)
        else:
            self.repeats = repeats
            self.plan_s = self.stated_s = now + self.blocks * self._block_s(repeats) - page
        return self.stated_s

    def pairs_for(self, i: int) -> int:
        """Timed pairs for block size ``i``, already paged: the plan's count (the same for every
        block size, so that their intervals compare), fewer only where it and the block sizes after
        it would not end by the stated figure at :data:`GUARD` times the costs so far; >= lo."""
        if not self.enforce:
            return self.repeats
        page = GUARD * (self._cost("page") + self._cost("stats"))
        n, _ = choose_repeats(self.stated_s + page, self.elapsed(), self.blocks - i, page,
                              GUARD * self._cost("pair"), self.lo, self.repeats)
        return n

    def fits_block(self, i: int) -> bool:
        """Whether block size ``i`` (> 0), with :data:`MIN_REPEATS` pairs, still ends by the stated
        figure at :data:`GUARD` times the costs so far (always True when not enforced)."""
        if not self.enforce:
            return True
        return self.elapsed() + GUARD * self._block_s(self.lo) <= self.stated_s

    def another_pair(self, i: int, done: int) -> bool:
        """Whether block size ``i`` may time another pair after ``done``: always below
        :data:`MIN_REPEATS`; otherwise only if that pair (at the dearest so far, or :data:`GUARD`
        times the mean if more) and the statistics end by the stated figure with room left for the
        block sizes after it at the minimum (always True when not enforced)."""
        if not self.enforce or done < self.lo:
            return True
        pair = max(self._cost("pair", "max"), GUARD * self._cost("pair"))
        after = (self.blocks - i - 1) * GUARD * self._block_s(self.lo)
        return self.elapsed() + pair + GUARD * self._cost("stats") + after <= self.stated_s
