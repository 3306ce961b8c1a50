"""The rate sweep's workloads: requests with a trace's lengths arriving as a Poisson process.

:func:`poisson_workload` draws ``n`` (prompt, output) length pairs, with a seed, from a trace's
rows that fit the model's context window, and lets them arrive as a Poisson process of ``rate``
requests per second (exponential gaps). The draws depend only on the seed and ``n``, never on
the rate, so the rates of a sweep differ only in their clock (common random numbers). The lengths
come from the shipped Azure conversation trace or the PagedAttention paper's ShareGPT pairs
(:data:`SWEEP_WORKLOADS`). Used by :mod:`allocator.studies.rate_sweep` (and through it :mod:`allocator.studies.paper`).
Source: Kwon et al., PagedAttention, SOSP 2023, section 6.1 (Poisson arrivals at a set rate).
"""
from __future__ import annotations

import numpy as np

from allocator.common.limits import check
from allocator.workloads.trace import shipped_trace
from allocator.common.errors import FieldError
from allocator.common.validate import one_of, show
from allocator.workloads.requests import Request, Workload

__all__ = ["DEFAULT_MAX_NEW", "DEFAULT_REQUESTS", "DEFAULT_SEED", "SWEEP_MAX_NEW", "SWEEP_WORKLOADS",
           "poisson_workload", "workload_trace", "check_reach", "MAX_ARRIVAL_S"]

#: Defaults of a sweep's workload (the ``rate-sweep`` command and the page): requests per run, the
#: generation cap (tokens) and the seed of the draws.
DEFAULT_REQUESTS = 1000
DEFAULT_MAX_NEW = 1024
DEFAULT_SEED = 0
#: Named workloads a sweep draws its lengths from, and how texts name them.
SWEEP_WORKLOADS = {"azure-conv": "Azure conversation lengths",
                   "sharegpt-opt": "ShareGPT lengths (the PagedAttention paper's)"}
#: The generation cap of a sweep on each workload (tokens): the paper's ShareGPT lengths run up to
#: OPT's 2,048-token context and are never clipped.
SWEEP_MAX_NEW = {"azure-conv": DEFAULT_MAX_NEW, "sharegpt-opt": 2048}


def workload_trace(workload: str):
    """The lengths a sweep draws from: the shipped Azure trace or the paper's ShareGPT pairs.

    Raises:
        FieldError (``workload``): not a key of :data:`SWEEP_WORKLOADS`.
    """
    one_of("workload", workload, tuple(SWEEP_WORKLOADS))
    if workload == "sharegpt-opt":
        from allocator.workloads.sharegpt import sharegpt_lengths
        return sharegpt_lengths()
    return shipped_trace()


#: Latest arrival a Poisson workload may draw (seconds after the first request, some 30,000 years):
#: a rate of 5e-324 requests/s put the second request at infinity.
MAX_ARRIVAL_S = 1e12


def check_reach(rate: float, unit_arrivals, *, field: str = "rate", index: int | None = None) -> None:
    """Refuse a rate so low that unit-rate arrival times divided by it pass :data:`MAX_ARRIVAL_S`
    (5e-324 requests/s put the second request at infinity, reported as "arrival_s = inf").

    Args:
        rate: requests per second (> 0, already checked against ``LIMITS["rates"]``).
        unit_arrivals: arrival times of the same requests at 1 request/s (seconds, ascending).
        field, index: the FieldError's field and index (``"rates"`` and the entry for a sweep).

    Raises:
        FieldError: naming the rate and the first request that would arrive too late.
    """
    unit = np.asarray(unit_arrivals, dtype=float)
    with np.errstate(over="ignore"):                     # an overflow is named below, in the rate's terms
        late = np.flatnonzero(~(unit / rate <= MAX_ARRIVAL_S))
    if len(late):
        raise FieldError(field, f" = {show(rate)} requests/s is too low: request {int(late[0]) + 1} would arrive more "
                                f"than {MAX_ARRIVAL_S:.0e} s after the first; give a higher rate", index=index)


def poisson_workload(rate: float, n: int = DEFAULT_REQUESTS, *, seed: int = DEFAULT_SEED, max_context: int,
                     max_new_tokens: int = DEFAULT_MAX_NEW, trace=None, name: str | None = None) -> Workload:
    """``n`` requests with trace lengths arriving as a Poisson process of ``rate`` requests/s.

    Args:
        rate: mean arrivals per second (``LIMITS["rates"]``: more than 0, at most 1,000,000).
        n: number of requests (``LIMITS["requests"]``: 1 .. 20,000).
        seed: the draws (which rows, which gaps) depend only on it and ``n``, not on ``rate``.
        max_context: the model's context window (tokens): only rows with prompt + output <= it
            are drawn (a longer request could not run on the model at all).
        max_new_tokens: the generation cap (tokens); outputs above it are clipped to it.
        trace: a DataFrame from :func:`allocator.workloads.trace.load_trace` (default: the shipped Azure
            conversation trace).
        name: the workload's label (default ``"poisson <rate>/s"``).

    Returns:
        Workload: request i arrives at ``arrival_s`` = (sum of the first i - 1 unit exponential
        gaps) / rate, the first at 0 s.

    Raises:
        FieldError: a bad ``rate``, ``n``, ``seed``, ``max_context`` or ``max_new_tokens``, a rate
            so low that an arrival falls past :data:`MAX_ARRIVAL_S` (``rate``), or no trace row
            that fits the context window (``max_context``).
    """
    rate = check("rates", rate, subject="rate")
    n = check("requests", n)
    seed = check("seed", seed)
    max_context = check("max_context", max_context)
    max_new_tokens = check("max_new_tokens", max_new_tokens)
    prompts, outputs, unit = _draws(n, seed, max_context, max_new_tokens, trace)
    check_reach(rate, unit)
    arrivals = unit / rate
    reqs = tuple(Request(i + 1, int(p), int(o), 0, float(a))
                 for i, (p, o, a) in enumerate(zip(prompts.tolist(), outputs.tolist(), arrivals.tolist())))
    return Workload(name or f"poisson {rate:g}/s", reqs, max_new_tokens,
                    params=dict(rate=rate, requests=n, seed=seed, max_context=max_context,
                                max_new_tokens=max_new_tokens))


def _draws(n, seed, max_context, max_new_tokens, trace):
    """(prompts, outputs, unit-rate arrival times) for :func:`poisson_workload`."""
    df = shipped_trace() if trace is None else trace
    p_all = df["prompt_tokens"].to_numpy()
    o_all = np.minimum(df["output_tokens"].to_numpy(), max_new_tokens)
    fits = np.flatnonzero(p_all + o_all <= max_context)
    if not len(fits):
        raise FieldError("max_context", f" = {max_context}: no trace row fits the model's context window")
    rng = np.random.default_rng(seed)
    rows = fits[rng.integers(0, len(fits), size=n)]
    gaps = rng.exponential(1.0, size=n)
    unit = np.cumsum(gaps) - gaps[0]
    return p_all[rows], o_all[rows], unit
