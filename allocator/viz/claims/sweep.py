"""What the block-size sweep shows, in sentences and a table built from its rows (no streamlit).

The rows are ``allocator.engine.scenario.block_size_sweep``'s :class:`allocator.engine.scenario.SweepRow`; every
comparison is made on one averaging basis (:func:`sweep_basis`), so no point mixes "while requests
wait" with "over all steps".
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from allocator.common.formats import and_list, pct

if TYPE_CHECKING:                   # pandas is imported by the one builder that makes a table
    import pandas as pd


def sweep_basis(rows: list[dict], reserve: dict | None = None) -> tuple[str, str]:
    """Which average the block-size sweep compares, so every point (and the reserve-max line) is
    the same kind: ("busy", "while requests wait") when every run that ran had waiting steps,
    else ("all", "over all steps") -- averages over waiting steps would not exist for some points.

    Args:
        rows: ``allocator.engine.scenario.block_size_sweep`` output.
        reserve: reserve-max's summary, when its line is drawn beside the sweep.
    """
    ran = [r for r in rows if r["cost_per_token"] is not None]
    waited = all(r["waited"] for r in ran) and (reserve is None or reserve["mean_running_busy"] is not None)
    return ("busy", "while requests wait") if waited else ("all", "over all steps")


#: Block sizes whose mean cost per stored token is within this fraction of the lowest are called a
#: tie: one simulated run's averages differ in the fourth digit between neighbours for reasons no
#: lesson can name (at c = 4 on the default lesson, 1.195560 for 64 against 1.195619 for 32).
SWEEP_TIE_TOLERANCE = 0.001


def best_words(block_sizes: list[int]) -> str:
    """The best block size as a metric shows it: ``[4] -> "4"``, ``[4, 8] -> "4 or 8 (tie)"``."""
    return str(block_sizes[0]) if len(block_sizes) == 1 else " or ".join(map(str, block_sizes)) + " (tie)"


def sweep_value(row: dict, key: str, basis: str):
    """A sweep row's ``key`` on ``basis`` ("busy" or "all"): e.g. mean_utilization_busy or mean_utilization."""
    return row[f"{key}_busy"] if basis == "busy" else row[key]


def sweep_summary(rows: list[dict], block_size: int, metadata_cost: float, reserve: dict | None = None) -> str:
    """What the block-size sweep shows, in numbers taken from its rows (markdown).

    Args:
        rows: ``allocator.engine.scenario.block_size_sweep`` output, ascending block sizes.
        block_size: the block size on the slider (slots).
        metadata_cost: c, slot equivalents per block.
        reserve: reserve-max's summary (decides the basis with the rows, see :func:`sweep_basis`).

    Returns:
        Sentences naming the utilisation at the smallest and largest block size that ran, the
        cheapest block size per stored token at this c, the averaging basis, and why a block
        size is missing.
    """
    basis, words = sweep_basis(rows, reserve)
    ran = [r for r in rows if r["cost_per_token"] is not None]
    if not ran:
        return ("No block size of the sweep could run this workload: every request was rejected at "
                "every size (see the reasons above), so there is nothing to compare.")
    lo, hi = ran[0], ran[-1]
    u_lo, u_hi = sweep_value(lo, "mean_utilization", basis), sweep_value(hi, "mean_utilization", basis)
    trend = "falls" if u_hi < u_lo else "does not change" if u_hi == u_lo else "rises"
    low = min(sweep_value(r, "cost_per_token", basis) for r in ran)
    tied = [r["block_size"] for r in ran
            if sweep_value(r, "cost_per_token", basis) <= low * (1 + SWEEP_TIE_TOLERANCE)]
    if len(tied) == 1:
        cheapest = (f"the cheapest block size per stored token is **{tied[0]}** ({low:.3f} slot equivalents "
                    "per token)")
    else:
        cheapest = (f"block sizes **{and_list(tied)}** tie for the cheapest per stored token ({low:.3f} slot "
                    f"equivalents per token, within {SWEEP_TIE_TOLERANCE:.1%} of each other: closer than "
                    "this run can tell apart)")
    text = (f"Here utilisation ({words}) {trend} from **{pct(u_lo)}** at block size {lo['block_size']} to "
            f"**{pct(u_hi)}** at {hi['block_size']}: a sequence's last block is on average half empty, and "
            "big blocks leave few blocks to go round."
            f"\n\nWith c = **{metadata_cost:g}** slot equivalents per block, {cheapest}. Raise c and tiny "
            "blocks stop looking free.")
    if basis == "all":
        text += ("\n\nAverages are over all steps: at some block sizes no request ever had to wait, so "
                 "there is no waiting-time figure to compare.")
    if not any(r["block_size"] == block_size for r in rows):
        text += (f"\n\nBlock size {block_size} is not one of the sweep's powers of two; the maps above "
                 "use it.")
    return text


def sweep_table(rows: list[dict], reserve: dict | None = None) -> pd.DataFrame:
    """The sweep as a table, on one averaging basis (see :func:`sweep_basis`); a block size that ran
    nothing shows "—" with the reason in a column."""
    import pandas as pd

    basis, words = sweep_basis(rows, reserve)

    def cell(value, scale=1.0, digits=1):
        return "—" if value is None else f"{value * scale:.{digits}f}"

    return pd.DataFrame([{
        "block size (slots)": r["block_size"], "blocks in pool": r["blocks"],
        f"utilisation {words} (%)": cell(sweep_value(r, "mean_utilization", basis), 100),
        f"internal frag. {words} (% of pool)": cell(sweep_value(r, "mean_internal_fragmentation", basis), 100),
        "peak running": r["peak_running"], "steps to drain": r["steps"], "preemptions": r["preemptions"],
        "tokens per step": cell(r["mean_tokens_per_step"], 1, 2),
        "cost per stored token": cell(sweep_value(r, "cost_per_token", basis), 1, 3),
        "note": "" if r["cost_per_token"] is not None else "every request rejected: nothing ran",
    } for r in rows])
