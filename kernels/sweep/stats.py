"""Paired-timing statistics of the kernel sweep: overhead, bootstrap interval, verdict.

Timing is paired: the two sides (paged and contiguous) alternate -- paged, contiguous, then
contiguous, paged, ... -- so that a slow moment of a shared machine hits both, and each pair
gives one ratio. The overhead reported is the median of those ratios, with a percentile
bootstrap confidence interval over the pairs (:func:`pair_stats`); the intervals of one sweep
hold at 95 % together (each row at 1 - 0.05 / number of block sizes, Bonferroni), so a sweep of
pure noise rarely shows any block size as different. Where an interval includes 1.0 the verdict
is "no measurable difference" (:func:`verdict_text` says it in a sentence).

torch, not numpy: ``python3 -m kernels.gpu_check`` uses these on GPU machines whose python3 may
have no numpy. Source: Efron & Tibshirani, *An Introduction to the Bootstrap* (1993), ch. 13
(the percentile interval).
"""
from __future__ import annotations

import torch

from allocator.common.errors import FieldError

#: Confidence of a whole sweep's intervals (together).
CONFIDENCE = 0.95
#: Bootstrap resamples per interval.
BOOTSTRAP_RESAMPLES = 4000
#: Verdicts of one block size's comparison.
SLOWER, FASTER, NO_DIFFERENCE = "slower", "faster", "no measurable difference"


def pair_stats(a_s: list[float], b_s: list[float], seed: int = 0, resamples: int = BOOTSTRAP_RESAMPLES,
               confidence: float = CONFIDENCE) -> dict:
    """Summarise paired timings of two sides (a = paged, b = contiguous), in seconds.

    The overhead is the median of the per-pair ratios a_i / b_i; its interval is the percentile
    bootstrap of that median over pairs (``resamples`` resamples with replacement, fixed
    ``seed``). The verdict is "slower" when the interval lies above 1.0, "faster" when below, and
    "no measurable difference" when it contains 1.0. Source: Efron & Tibshirani (1993), ch. 13.

    Returns:
        dict with ``a_median``, ``a_q1``, ``a_q3``, ``b_median``, ``b_q1``, ``b_q3`` (seconds),
        ``overhead``, ``ci_low``, ``ci_high`` (ratios), ``verdict`` and ``pairs``.

    Raises:
        FieldError (``a_s`` or ``b_s``, a ValueError): the two lists differ in length or are empty,
            or a time is not > 0.
    """
    a = torch.as_tensor(list(a_s), dtype=torch.float64)
    b = torch.as_tensor(list(b_s), dtype=torch.float64)
    if a.shape != b.shape or a.numel() == 0:
        raise FieldError("b_s" if a.numel() else "a_s", f" must be two non-empty lists of equal length, got "
                         f"{a.numel()} and {b.numel()}", subject="paired timings")
    if not (bool((a > 0).all()) and bool((b > 0).all())):
        raise FieldError("a_s" if not bool((a > 0).all()) else "b_s", " must be > 0 seconds",
                         subject="every timing")
    ratios = a / b
    gen = torch.Generator().manual_seed(int(seed))
    idx = torch.randint(0, ratios.numel(), (resamples, ratios.numel()), generator=gen)
    medians = torch.quantile(ratios[idx], 0.5, dim=1)                  # the median, as numpy takes it
    tail = (1.0 - confidence) / 2
    lo, hi = (float(x) for x in torch.quantile(medians, torch.tensor([tail, 1.0 - tail], dtype=torch.float64)))
    verdict = SLOWER if lo > 1.0 else FASTER if hi < 1.0 else NO_DIFFERENCE
    q = lambda x, p: float(torch.quantile(x, p))  # noqa: E731
    return {"a_median": q(a, 0.5), "a_q1": q(a, 0.25), "a_q3": q(a, 0.75),
            "b_median": q(b, 0.5), "b_q1": q(b, 0.25), "b_q3": q(b, 0.75),
            "overhead": q(ratios, 0.5), "ci_low": lo, "ci_high": hi, "verdict": verdict,
            "pairs": int(ratios.numel())}


def verdict_text(rows: list[dict], confidence: float = CONFIDENCE, simultaneous: bool = False) -> str:
    """What a sweep's rows allow one to say, in one or two sentences (numbers from the rows).

    "No measurable difference on this machine" when every interval contains 1.0; otherwise the
    block sizes measured slower (and faster), each with its overhead and interval.
    ``simultaneous``: the intervals hold at ``confidence`` together (Bonferroni), and the text
    says so.
    """
    if not rows:
        return "No block sizes were measured."
    pct = f"{100 * confidence:.0f} %" + (" simultaneous" if simultaneous else "")
    slower = [r for r in rows if r["verdict"] == SLOWER]
    faster = [r for r in rows if r["verdict"] == FASTER]
    if not slower and not faster:
        return (f"No measurable difference on this machine: for every block size the {pct} interval of the "
                f"overhead includes 1.0×, so what the chart shows is noise, not a trend.")

    def fmt(rs: list[dict]) -> str:
        return ", ".join(f"block {r['block_size']}: {r['overhead']:.3f}× "
                         f"({r['overhead_ci_low']:.3f}–{r['overhead_ci_high']:.3f})" for r in rs)
    parts = []
    if slower:
        parts.append(f"Paged is measurably slower than contiguous at {fmt(slower)}")
    if faster:
        parts.append(f"measurably faster at {fmt(faster)}")
    rest = len(rows) - len(slower) - len(faster)
    text = "; ".join(parts) + f" ({pct} intervals)."
    if rest:
        text += (f" At the other {rest} block size{'s' if rest != 1 else ''} the interval includes 1.0×: "
                 "no measurable difference.")
    return text
