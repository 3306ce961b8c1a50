"""Sustained rates: where a policy's latency curve crosses its budget, and ratios of two of them.

The PagedAttention paper compares systems by the request rate each sustains before its
normalised latency (mean end-to-end latency / output length, s/token) runs away (Kwon et al.,
SOSP 2023, section 6.2, Figure 12). :func:`sustained_rate` finds that rate on a swept grid:
between two swept rates the crossing of the budget is interpolated linearly in the rate against
the logarithm of the latency (latency climbs roughly exponentially near saturation) -- but only
where the grid is fine enough: when the upper of the two rates is more than
:data:`INTERPOLATION_SPAN` (1.5) x the lower, the knee could lie anywhere between them, so the
sustained rate is reported as that bracket ("between 0.2 and 500 requests/s"), not as a number.
:func:`rate_ratio` then states a ratio only as far as the brackets support it, and
:func:`sustained_short` writes one for a terminal table. The budget itself is set by
:func:`allocator.studies.rate_sweep.rate_sweep` (a multiple of the unloaded latency).
"""
from __future__ import annotations

import math

__all__ = ["INTERPOLATION_SPAN", "RATIO_RANGE_SPAN", "rate_ratio", "sustained_rate", "sustained_short"]

#: The coarsest step between two swept rates across which a sustained rate is interpolated: the
#: upper rate at most this many times the lower. Across a wider step the crossing is reported as a
#: bracket (between the two rates). The default grid (:data:`allocator.studies.rate_sweep.RATE_GRID`) is finer above its first
#: step; the paper replication's rates (allocator.studies.paper) step by at most 1.5x where its knees lie.
INTERPOLATION_SPAN = 1.5
#: The widest range (high / low) a ratio of two bracketed sustained rates is stated as; wider, or a
#: range that includes 1 (the grid cannot tell which sustains more), and no ratio is stated.
RATIO_RANGE_SPAN = 4.0


def _interval(s: dict) -> tuple[float, float] | None:
    """The rates (low, high) a sustained rate is known to lie in; None when below the sweep."""
    if s["bound"] == "within":
        return s["rate"], s["rate"]
    if s["bound"] == "above":
        return s["rate"], math.inf
    if s["bound"] == "between":
        return s["low"], s["high"]
    return None


def rate_ratio(sa: dict, sb: dict) -> dict | None:
    """The ratio of two sustained rates (:func:`sustained_rate`'s dicts), as far as they support it.

    Returns:
        {"value": a / b, "kind": "exact"} when both crossed the budget at an interpolated rate;
        {"value", "kind": "at least"} or {"value", "kind": "at most"} when one side is a bound (``a``
        never over the budget: a / b is at least top / b's highest possible rate; ``b`` never over:
        at most); {"value": None, "kind": "between", "low", "high"} when a bracket leaves a range
        no wider than :data:`RATIO_RANGE_SPAN` that does not include 1; None when no ratio can be
        stated (either was over the budget at its lowest rate, neither crossed it, or the brackets
        leave too wide a range).
    """
    ia, ib = _interval(sa), _interval(sb)
    if ia is None or ib is None:
        return None
    if sa["bound"] == "above" and sb["bound"] == "above":
        return None
    lo = ia[0] / ib[1]
    hi = ia[1] / ib[0]
    if lo == hi:
        return {"value": lo, "kind": "exact"}
    if math.isinf(hi):
        return {"value": lo, "kind": "at least"}
    if lo == 0:
        return {"value": hi, "kind": "at most"}
    if hi / lo <= RATIO_RANGE_SPAN and not lo <= 1 <= hi:
        return {"value": None, "kind": "between", "low": lo, "high": hi}
    return None


def sustained_rate(rates, latencies, budget: float) -> dict:
    """Where a latency curve crosses ``budget`` (see the module docstring).

    Args:
        rates: ascending rates (requests/s).
        latencies: normalised latency at each rate (s/token; None counts as over budget: nothing
            finished).
        budget: s/token.

    Returns:
        {"rate": r, "bound": "within"} with r interpolated between the last rate under budget and
        the next (linear in rate, logarithmic in latency) when the next is at most
        :data:`INTERPOLATION_SPAN` x the last; {"rate": None, "bound": "between", "low": last,
        "high": next} when the step is wider (or the next rate finished nothing, so there is
        nothing to interpolate towards); {"rate": highest rate, "bound": "above"} if no rate went
        over; {"rate": None, "bound": "below"} if the lowest already did.
    """
    lat = [math.inf if v is None else v for v in latencies]
    over = [v > budget for v in lat]
    if not any(over):
        return {"rate": float(rates[-1]), "bound": "above"}
    k = over.index(True)
    if k == 0:
        return {"rate": None, "bound": "below"}
    r0, r1, l0, l1 = rates[k - 1], rates[k], lat[k - 1], lat[k]
    if r1 > INTERPOLATION_SPAN * r0 or not math.isfinite(l1) or l0 <= 0:
        return {"rate": None, "bound": "between", "low": float(r0), "high": float(r1)}
    frac = (math.log(budget) - math.log(l0)) / (math.log(l1) - math.log(l0))
    return {"rate": float(r0 + frac * (r1 - r0)), "bound": "within"}


def sustained_short(s: dict, digits: int = 2) -> str:
    """A sustained rate (:func:`sustained_rate`'s dict) for a terminal table: ``"1.81"``
    (interpolated, ``digits`` decimals), ``"4.00+"`` (never over the budget: a lower bound),
    ``"0.2-500"`` (a bracket, the two swept rates as given) or ``"below the lowest rate"``."""
    if s["bound"] == "between":
        return f"{s['low']:g}-{s['high']:g}"
    if s["rate"] is None:
        return "below the lowest rate"
    return f"{s['rate']:.{digits}f}" + ("+" if s["bound"] == "above" else "")
