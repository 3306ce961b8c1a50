"""The sentences the lesson says about a simulation, built from its results (no streamlit).

Every number a headline, a lesson step, a chart caption or an export quotes is computed here
from the result it sits beside, so the pages, the exports and the tests (tests/test_claims.py)
read one source and a claim can never drift from the figure next to it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:                   # pandas is imported by the one builder that makes a table
    import pandas as pd

from allocator.buddy import ORCA_BLOCK_SIZE, ORCA_MAX_CONTEXT
from allocator.shares import SHARES


def pct(fraction: float | None, digits: int = 0) -> str:
    """A fraction as a percentage with enough figures to stay true: ``0.314 -> "31 %"``,
    ``0.034 -> "3.4 %"``, ``0.0012 -> "0.12 %"``, ``0 -> "0 %"``; "—" when there is none."""
    if fraction is None:
        return "—"
    v = 100 * fraction
    if v and abs(v) < 1:
        return f"{v:.2g} %"
    if abs(v) < 10 and round(v, digits) != round(v, 1):
        return f"{v:.1f} %"
    return f"{v:.{digits}f} %"


def ratio(x: float) -> str:
    """A ratio such as a speed-up with enough figures to stay true: ``3.04 -> "3.0x"``,
    ``0.253 -> "0.25x"``, ``38.4 -> "38x"``."""
    if x >= 10:
        return f"{x:.0f}x"
    if x >= 1:
        return f"{x:.1f}x"
    return f"{x:.2g}x"


def sweep_basis(rows: list[dict], reserve: dict | None = None) -> tuple[str, str]:
    """Which average the block-size sweep compares, so every point (and the reserve-max line) is
    the same kind: ("busy", "while requests wait") when every run that ran had waiting steps,
    else ("all", "over all steps") -- averages over waiting steps would not exist for some points.

    Args:
        rows: ``allocator.scenario.block_size_sweep`` output.
        reserve: reserve-max's summary, when its line is drawn beside the sweep.
    """
    ran = [r for r in rows if r["cost_per_token"] is not None]
    waited = all(r["waited"] for r in ran) and (reserve is None or reserve["mean_running_busy"] is not None)
    return ("busy", "while requests wait") if waited else ("all", "over all steps")


def sweep_value(row: dict, key: str, basis: str):
    """A sweep row's ``key`` on ``basis`` ("busy" or "all"): e.g. mean_utilization_busy or mean_utilization."""
    return row[f"{key}_busy"] if basis == "busy" else row[key]


def sweep_summary(rows: list[dict], block_size: int, metadata_cost: float, reserve: dict | None = None) -> str:
    """What the block-size sweep shows, in numbers taken from its rows (markdown).

    Args:
        rows: ``allocator.scenario.block_size_sweep`` output, ascending block sizes.
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
    best = min(ran, key=lambda r: (sweep_value(r, "cost_per_token", basis), r["block_size"]))
    text = (f"Here utilisation ({words}) {trend} from **{pct(u_lo)}** at block size {lo['block_size']} to "
            f"**{pct(u_hi)}** at {hi['block_size']}: a sequence's last block is on average half empty, and "
            "big blocks leave few blocks to go round."
            f"\n\nWith c = **{metadata_cost:g}** slot equivalents per block, the cheapest block size per "
            f"stored token is **{best['block_size']}** ({sweep_value(best, 'cost_per_token', basis):.3f} slot "
            "equivalents per token). Raise c and tiny blocks stop looking free.")
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


# --------------------------------------------------------------------------------------------
# The explainer's headline cards and details table
# --------------------------------------------------------------------------------------------

def plural(n: int, noun: str, nouns: str | None = None) -> str:
    """``"1 token"``, ``"2 tokens"``, ``"1,024 steps"`` (counts always as integers)."""
    n = int(n)
    return f"{n:,} {noun if n == 1 else (nouns or noun + 's')}"


#: What each reservation policy sets aside per request (the left side of the explainer).
RESERVATION_RULES = {"Reserve-max": "prompt + max_new_tokens",
                     "Reserve-pow2": "prompt + the next power of two at or above the answer's length",
                     "Reserve-oracle": "prompt + exactly the answer's length"}
#: The same with the paper's buddy placement (allocator.buddy): capped at the context, rounded up to
#: a power-of-two number of blocks. Each reads before "slots per request".
_BUDDY_TAIL = f", capped at {ORCA_MAX_CONTEXT:,} and rounded up to {ORCA_BLOCK_SIZE} × a power of two"
RESERVATION_RULES.update({
    "Reserve-max (buddy)": f"{ORCA_MAX_CONTEXT:,} (the paper's Orca (Max): the whole context)",
    "Reserve-pow2 (buddy)": "prompt + the next power of two at or above the answer's length" + _BUDDY_TAIL,
    "Reserve-oracle (buddy)": "prompt + exactly the answer's length" + _BUDDY_TAIL})


def reservation_name(results: dict) -> str:
    """The left side's name as texts write it: "reserve-max", "reserve-pow2" or "reserve-oracle"."""
    return results["reserve_max"].label.lower()


def reservation_rule(results: dict) -> str:
    """What the left side reserves per request, in words (see :data:`RESERVATION_RULES`)."""
    return RESERVATION_RULES.get(results["reserve_max"].label, "prompt + max_new_tokens")


def _waited(s: dict) -> bool:
    return s["mean_running_busy"] is not None


def headline(results: dict, timings: dict | None = None) -> dict:
    """The three headline cards of each allocator, and a line under them (plain data).

    Cards: the **sustained** batch (mean running while requests wait -- the peak is one instant
    and is named as such in the line below), utilisation while requests wait, steps to drain.
    When nothing ever waited, the busy-step figures do not exist: the cards show the all-steps
    figures instead and say so in their label.

    With ``timings``, ``time`` says in one line how many seconds the run takes to drain and its
    throughput, and ``line`` names the GPU and model and what preemption cost in seconds
    (recompute and swap run the same steps, so only the seconds tell them apart); "" without.

    Args:
        results: {"reserve_max": SimulationResult, "paged": SimulationResult}.
        timings: {kind: :class:`allocator.timing.RunTiming`} of the same runs, or None.

    Returns:
        {kind: {"title": str, "cards": [{"label", "value", "delta", "delta_color", "help"}],
        "line": str, "time": str}}; ``delta`` compares paged with reserve-max (None on the
        reserve-max side).
    """
    rm = results["reserve_max"].summary
    out = {}
    for key in ("reserve_max", "paged"):
        res = results[key]
        s = res.summary
        # a difference means something only when both sides served the same requests
        same_work = s["finished"] == rm["finished"] and len(s["rejected"]) == len(rm["rejected"])
        compare = key != "reserve_max" and rm["finished"] > 0 and s["finished"] > 0 and same_work
        waited = _waited(s)
        ran = s["finished"] > 0
        running = s["mean_running_busy"] if waited else s["mean_running"]
        running_rm = rm["mean_running_busy"] if _waited(rm) else rm["mean_running"]
        util = s["mean_utilization_busy"] if waited else s["mean_utilization"]
        util_rm = rm["mean_utilization_busy"] if _waited(rm) else rm["mean_utilization"]
        same_basis = waited == _waited(rm)
        cards = [
            {"label": "Mean running",
             "value": f"{running:.1f}" if ran else "—",
             "delta": (f"{running - running_rm:+.1f}" if compare and same_basis
                       and f"{running:.1f}" != f"{running_rm:.1f}" else None), "delta_color": "normal",
             "help": ("The sustained batch: sequences computing a token per step, averaged over the "
                      f"{plural(s['busy_steps'], 'step')} when at least one request was waiting."
                      if waited else "Nothing ever waited, so this is the mean over every step.")
                     + f" The peak, {s['peak_running']}, is a single instant (step {s['peak_running_step']:,})."},
            {"label": "Mean utilisation",
             "value": pct(util) if ran else "—",
             "delta": (f"{round((util - util_rm) * 100):+d} pts" if compare and same_basis and util is not None
                       and util_rm is not None and round((util - util_rm) * 100) else None), "delta_color": "normal",
             "help": "Distinct tokens stored ÷ all slots (a shared prompt counts once), "
                     + ("averaged over the steps when requests were waiting." if waited else "averaged over every step.")},
            {"label": "Steps to drain", "value": f"{s['steps']:,}" if ran else "—",
             "delta": f"{s['steps'] - rm['steps']:+,}" if compare and s["steps"] != rm["steps"] else None,
             "delta_color": "inverse",
             "help": "Engine steps until every request has finished or been rejected."},
        ]
        if s["finished"] == 0:
            line = (f"Nothing ran: all {plural(len(s['rejected']), 'request')} can never fit this pool "
                    "(reasons below).")
        else:
            line = ((f"Means over the {plural(s['busy_steps'], 'step')} when requests waited. " if waited else
                     "Means over every step: no request ever had to wait. ")
                    + f"Peak: {s['peak_running']} running at once, at step {s['peak_running_step']:,} (one instant).")
            line += empty_pool_note(res)
            if key != "reserve_max" and rm["finished"] and not same_work:
                line += (f" Not the same work: {reservation_name(results)} served {rm['finished']:,} and rejected "
                         f"{len(rm['rejected']):,}, paged served {s['finished']:,} and rejected {len(s['rejected']):,}, "
                         "so the cards show no differences: fewer requests drain sooner.")
        time = ""
        if timings is not None and s["finished"]:
            t, t_rm = timings[key].summary, timings["reserve_max"].summary
            diff = t["makespan_s"] - t_rm["makespan_s"]
            time = (f"Modelled: **{seconds(t['makespan_s'])}** to drain"
                    + (f" ({'+' if diff > 0 else '−'}{seconds(abs(diff))} against {reservation_name(results)})"
                       if compare and abs(diff) >= 0.05 else "")
                    + (f" · **{t['throughput_tokens_per_s']:,.0f}** output tokens/s"
                       if t["throughput_tokens_per_s"] else ""))
            line += (f" Seconds are the cost model's (a roofline from datasheet peaks, not a measurement; "
                     f"\"Checked against a real engine\" shows how far such figures are from a real run) on "
                     f"{timings[key].cost.label}" + time_line(res, timings[key]))
        out[key] = {"title": res.label + (f" · blocks of {res.block_size}" if res.block_size else " · contiguous"),
                    "cards": cards, "line": line, "time": time}
    return out


def empty_pool_note(res) -> str:
    """A sentence (with a leading space) explaining the steps whose utilisation reads 0 % although
    requests wait: every running request finished in that step, its memory is freed at the step's
    end, and the queue is admitted at the start of the next (DESIGN.md, "Simulation semantics",
    admission before finish). "" when there are none."""
    m = res.metrics
    empty = (m["used_slots"] == 0) & (m["waiting"] > 0)
    if not empty.any():
        return ""
    steps = m["step"][empty]
    first = int(steps[0])
    return (f" Utilisation reads 0 % at step {first:,}" + (f" and {plural(len(steps) - 1, 'other step')}"
                                                          if len(steps) > 1 else "")
            + " although requests wait: every running request finished in that step, memory is freed at its "
            "end, and the queue is admitted at the start of the next.")


def time_line(res, timing) -> str:
    """What preemption cost in seconds, as the end of a sentence ("; swapping ... ." or ".")."""
    t = timing.summary
    text = ""
    if res.summary["preemptions"] and res.summary["swapped_blocks"]:
        text += (f"; swapping {res.summary['swapped_blocks']:,} blocks out and back cost {seconds(t['swap_s'])} of "
                 "copies over the host link")
    if res.summary["preemptions"] and res.summary["recomputed_tokens"]:
        text += (f"; recomputing {res.summary['recomputed_tokens']:,} tokens cost {seconds(t['recompute_flops_s'])} "
                 "of prefill compute (priced at the GPU's peak FLOP/s)")
    return text + "."


def share_cells(res) -> dict[str, str]:
    """One run's memory shares (:data:`allocator.shares.SHARES`) as display strings, averaged over
    the steps when requests waited, or over every step -- and then marked "(all steps)" -- when
    none waited; "—" for every category when nothing ran. Also key "total": what they add up to."""
    s = res.summary
    shares, mark = s["memory_shares_busy"], ""
    if shares is None and s["finished"]:
        shares, mark = s["memory_shares"], " (all steps)"
    if shares is None:
        return {key: "—" for key, *_ in SHARES} | {"total": "—"}
    out = {key: pct(shares[key], 1) + mark for key, *_ in SHARES}
    out["total"] = pct(sum(shares.values()), 1) + mark
    return out


def share_rows(results: dict) -> list[dict]:
    """The memory shares of both runs, one row per category plus a total (100 %): rows of
    measure, the reservation allocator (column named by :func:`reservation_name`), paged, meaning.
    The categories partition the pool (:mod:`allocator.shares`), so each column adds up to 100 %."""
    left = reservation_name(results)
    cells = {k: share_cells(results[k]) for k in ("reserve_max", "paged")}
    rows = [{"measure": f"memory: {name}", left: cells["reserve_max"][key], "paged": cells["paged"][key],
             "what it means": meaning + ", share of the pool while requests wait"}
            for key, _, name, meaning in SHARES]
    rows.append({"measure": "memory: all of the above", left: cells["reserve_max"]["total"],
                 "paged": cells["paged"]["total"],
                 "what it means": "the six shares partition the pool, so they add up to 100 %"})
    return rows


def details_rows(results: dict, metadata_cost: float, timings: dict | None = None) -> list[dict]:
    """Every other summary figure of both allocators: rows of measure, the reservation allocator (its
    column named by :func:`reservation_name`, "reserve-max" by default), paged, meaning.

    Averages "while requests wait" fall back to every step, and say so in the measure's name,
    when nothing ever waited in that run; "—" appears only where a figure does not exist (nothing
    ran), and the row's meaning says why.
    """
    rows = []
    left = reservation_name(results)

    def add(name, fn, meaning):
        rows.append({"measure": name, left: fn(results["reserve_max"]), "paged": fn(results["paged"]),
                     "what it means": meaning})

    add("peak running (one instant)", lambda r: (f"{r.summary['peak_running']} at step {r.summary['peak_running_step']:,}"
                                                  if r.summary["finished"] else "—"),
        "the most sequences that computed a token in the same step, and when")
    add("mean running, all steps", lambda r: f"{r.summary['mean_running']:.2f}",
        "sequences computing per step over the whole run (equals tokens per step)")
    add("tokens per step", lambda r: f"{r.summary['mean_tokens_per_step']:.2f}",
        "mean tokens emitted per engine step (throughput)")
    rows.extend(share_rows(results))
    def cost(r):
        waited = r.summary["mean_running_busy"] is not None
        value = r.cost_per_token(metadata_cost, busy=waited)
        return "—" if value is None else f"{value:.3f}" + ("" if waited else " (all steps)")

    add(f"cost per stored token (c = {metadata_cost:g})", cost,
        "a ratio of means: (mean allocated slots + c × mean blocks or reservations) ÷ mean distinct tokens "
        "stored, while requests wait. At c = 0 it is the four allocated shares above added up, ÷ token states; "
        "1.000 means nothing wasted")
    add("preemptions", lambda r: f"{r.summary['preemptions']:,}",
        "sequences evicted to make room (recompute or swap, as chosen in the sidebar)")
    add("logical tokens, at their peak", lambda r: f"{r.summary['peak_logical_tokens']:,}",
        "tokens the running sequences hold, each counting its own copy of a shared prompt")
    add("distinct tokens at that step", lambda r: f"{r.summary['used_slots_at_peak_logical']:,}",
        "the same tokens with a shared prompt counted once")
    add("swapped blocks", lambda r: f"{r.summary['swapped_blocks']:,}",
        "blocks copied to host memory and back (swap), out and in together")
    add("recomputed tokens", lambda r: f"{r.summary['recomputed_tokens']:,}",
        "tokens prefilled a second time after a recompute preemption")
    add("finished / rejected", lambda r: f"{r.summary['finished']:,} / {len(r.rejected):,}",
        "requests served, and requests that can never fit this pool")
    if timings is not None:
        label = timings["paged"].cost.label
        by = {id(results[k]): timings[k].summary for k in results}

        def timed(key, fmt=seconds):
            return lambda r: fmt(by[id(r)][key]) if by[id(r)]["finished"] else "—"

        idle = timings["paged"].summary["idle_s"] + timings["reserve_max"].summary["idle_s"]
        add("seconds to drain", timed("makespan_s"),
            f"every step priced on {label}, added up" + (
                "; a stretch with nothing to run lasts its steps at the workload's arrival clock" if idle else ""))
        add("throughput (output tokens/s)", timed("throughput_tokens_per_s", lambda v: f"{v:,.0f}"),
            "answer tokens delivered per second of the run")
        add("time to first token, median / 99th percentile",
            lambda r: (f"{seconds(by[id(r)]['ttft_p50_s'])} / {seconds(by[id(r)]['ttft_p99_s'])}"
                       if by[id(r)]["finished"] else "—"),
            "from a request's arrival to its first token: queueing plus its prefill")
        add("time per output token, median", timed("tpot_p50_s"),
            "between a request's later tokens; a preempted request's wait counts in it")
        add("normalised latency (s/token)", timed("normalized_latency_s_per_token", lambda v: f"{v:.4f}"),
            "mean over requests of end-to-end latency ÷ answer length (the PagedAttention paper's measure)")
        add("swap copies / recompute FLOPs (seconds)",
            lambda r: f"{seconds(by[id(r)]['swap_s'])} / {seconds(by[id(r)]['recompute_flops_s'])}",
            "what preemption cost: blocks copied over the host link, or the prefill of recomputed tokens "
            "(priced at the GPU's peak FLOP/s)")
    if any(r.summary["finished"] == 0 for r in results.values()):
        rows.append({"measure": "why “—”", left: "", "paged": "",
                     "what it means": "a dash marks a figure that does not exist because nothing ran"})
    return rows


# --------------------------------------------------------------------------------------------
# The guided lesson's reveals
# --------------------------------------------------------------------------------------------

def lesson_key_steps(results: dict) -> list[int]:
    """Steps the lesson quotes (the peaks it names, and the first frame): the animation must have a
    frame at each."""
    steps = set()
    for res in results.values():
        if res.summary["finished"]:
            steps.update((res.summary["peak_running_step"], res.summary["peak_logical_step"],
                          int(res.metrics["step"][0])))
    return sorted(steps)


def _sweep_row(rows, block_size):
    return next((r for r in rows if r["block_size"] == block_size and r["mean_utilization_busy"] is not None), None)


def reveal(step: str, results: dict, *, slots: int, max_new: int, sweep_rows: list[dict] = ()) -> str:
    """The answer a lesson step reveals, every number read from ``results`` (markdown).

    Args:
        step: "reserve", "waste", "paged", "big_blocks" or "prefix".
        results: the run on screen ({"reserve_max", "paged"}).
        slots, max_new: the scenario's pool size (slots) and max_new_tokens (tokens).
        sweep_rows: the block-size sweep of the same workload and pool (step "big_blocks"
            compares block 256 with block 16 from it).

    Raises:
        KeyError: an unknown step.
    """
    rm, pg = results["reserve_max"], results["paged"]
    r, p = rm.summary, pg.summary
    if not r["finished"] or not p["finished"]:
        return "Nothing ran in this scenario: every request was rejected (see the reasons above)."
    if step == "reserve":
        held = rm.value_at("allocated_slots", r["peak_running_step"])
        return (f"**{r['peak_running']}.** Every reservation is its prompt plus {max_new:,} slots, so at step "
                f"{r['peak_running_step']:,}, {plural(r['peak_running'], 'reservation')} took {held:,} of the "
                f"{slots:,} slots and no free run was long enough for another: the other requests queued. "
                f"On average {r['mean_running_busy'] or r['mean_running']:.1f} ran while requests waited.")
    if step == "waste":
        sh = r["memory_shares_busy"] or r["memory_shares"]
        answers = rm.requests["output_len"]
        return (f"**{pct(sh['token_states'])}** of the pool holds tokens while requests wait. Most of the orange "
                f"is never written: answers averaged {answers.mean():.0f} of the {max_new:,} answer slots reserved "
                f"for them, so {pct(sh['internal_fragmentation'])} of the pool is room past an answer's end, and "
                f"only {pct(sh['reservation'])} waits for tokens still to come. Another "
                f"{pct(sh['external_fragmentation'])} is free but in gaps too short for the next reservation "
                "(dark grey). The PagedAttention paper measured 20–40 % for the engines of the day.")
    if step == "paged":
        text = (f"**{p['mean_running_busy'] or p['mean_running']:.1f}** on average while requests wait, against "
                f"{r['mean_running_busy'] or r['mean_running']:.1f} for reserve-max, at "
                f"{pct(p['mean_utilization_busy'])} utilisation; everything is done in {p['steps']:,} steps "
                f"instead of {r['steps']:,}. The peak, {p['peak_running']} at step {p['peak_running_step']:,}, "
                "is one instant")
        if p["preemptions"]:
            text += (f": as answers grow the pool runs dry, and {plural(p['preemptions'], 'preemption')} "
                     f"{'sends a sequence' if p['preemptions'] == 1 else 'send sequences'} back to the queue")
        return text + "."
    if step == "big_blocks":
        at16, here = _sweep_row(sweep_rows, 16), p["mean_utilization_busy"]
        direction = ("" if at16 is None or here is None else
                     "**Down**" if here < at16["mean_utilization_busy"] else
                     "**Up**" if here > at16["mean_utilization_busy"] else "**The same**")
        return (f"{direction}, to {pct(here)}" + (f" from {pct(at16['mean_utilization_busy'])} at block size 16"
                                                  if at16 else "")
                + f". A {slots:,}-slot pool holds only {plural(slots // pg.block_size, 'block')} of "
                f"{pg.block_size}, so at most {p['peak_running']} sequences ever run at once, and each one's "
                "last block is on average about half empty.")
    if step == "prefix":
        at = int(pg.metrics["step"][0])          # the frame the maps open on
        dup = pg.value_at("duplicate_slots", at)
        copies = ("**Once.**" if dup == 0 else
                  f"**Once for its full blocks**, plus {plural(dup, 'duplicate slot')} for the partly filled one.")
        return (f"{copies} On the maps' first frame (step {at:,}), {pg.value_at('logical_tokens', at):,} logical "
                f"tokens are {pg.value_at('used_slots', at):,} distinct tokens: every block table points at the same "
                "full prompt blocks (refcount > 1, drawn "
                f"pink). Reserve-max must copy the prompt into every reservation: {pct(r['mean_duplicate_fraction_busy'])} "
                f"of its pool held duplicate copies (brown) while requests waited, and at most {r['peak_running']} "
                "requests fit at once.")
    raise KeyError(step)


def workload_outcome(results: dict, slots: int) -> str:
    """One sentence on what this run did with the workload (peaks and sustained batches), from
    ``results``; the classroom-40 defaults were chosen so that, at 2,048 slots, it echoes the
    PagedAttention paper (a few reservations at once against dozens of paged sequences)."""
    r, p = results["reserve_max"].summary, results["paged"].summary
    if not r["finished"] or not p["finished"]:
        return "In this pool at least one allocator could run none of them (see the rejections above)."

    def side(s):
        if s["mean_running_busy"] is not None:
            return f"at most {s['peak_running']} at once ({s['mean_running_busy']:.1f} on average while requests waited)"
        return f"at most {s['peak_running']} at once ({s['mean_running']:.1f} on average over all steps)"

    return (f"In this {slots:,}-slot pool, {reservation_name(results)} held {side(r)} and paging {side(p)}.")


def about_default_run(results: dict, slots: int) -> str:
    """The About page's line on the default scenario's run (its sources table), from ``results``:
    peaks named as peaks, the sustained batch as the mean while requests waited."""
    p = results["paged"].summary
    return (f"{p['finished'] + len(p['rejected']):,} requests, blocks of {results['paged'].block_size}. "
            + workload_outcome(results, slots))


def classroom_tip(results: dict) -> str:
    """What the class sees when the lecturer presses Play on the default scenario (About's
    presenting tips), every number from ``results``."""
    r, p = results["reserve_max"].summary, results["paged"].summary
    if not r["finished"] or not p["finished"]:
        return "press **▶ Play** and let the class watch where the memory goes."

    def sustained(s):
        return s["mean_running_busy"] if s["mean_running_busy"] is not None else s["mean_running"]

    return (f"press **▶ Play** and let the class watch the left side hold at most {r['peak_running']} requests "
            f"at once, while the right side starts {p['peak_running']} at once (step {p['peak_running_step']:,}, one "
            f"instant) and, as answers grow and the pool fills, runs {sustained(p):.1f} on average while requests "
            f"wait, against {sustained(r):.1f} on the left.")


# --------------------------------------------------------------------------------------------
# The Throughput and latency page (allocator.throughput.RateSweep)
# --------------------------------------------------------------------------------------------

def seconds(x: float | None) -> str:
    """A duration as the page prints it: ``0.0213 -> "21.3 ms"``, ``1.234 -> "1.23 s"``,
    ``0.0004 -> "0.4 ms"``, ``16_600.4 -> "16,600 s"``; "—" when there is none."""
    if x is None:
        return "—"
    if x == 0:
        return "0 s"
    if x < 1:
        return f"{x * 1000:.3g} ms"
    if x >= 100:
        return f"{x:,.0f} s"
    return f"{x:.3g} s"


def rate(x: float) -> str:
    """A request rate: two decimals (``1.8053 -> "1.81"``), requests per second."""
    return f"{x:.2f}"


def sustained_text(s: dict) -> str:
    """A sustained rate (``allocator.throughput.sustained_rate``'s dict) in words: interpolated
    ("1.81 requests/s"), a bracket across a coarse step of the grid ("between 0.2 and 500
    requests/s", the rates as typed), a lower bound, or below the sweep."""
    if s["bound"] == "between":
        return (f"between {s['low']:g} and {s['high']:g} requests/s (the two swept rates it lies between; "
                "too far apart to interpolate)")
    if s["rate"] is None:
        return "below the lowest rate swept (over the budget already there)"
    if s["bound"] == "above":
        return f"at least {rate(s['rate'])} requests/s (never over the budget)"
    return f"{rate(s['rate'])} requests/s"


def ratio_words(r: dict | None, symbols: bool = False) -> str | None:
    """A ratio of sustained rates (``allocator.throughput.rate_ratio``'s dict) as words ("at least
    2.0x", "between 1.2x and 2.5x") or, with ``symbols``, as a table cell ("≥ 2.0x"); None when no
    ratio can be stated."""
    if r is None:
        return None
    if r["kind"] == "between":
        return f"between {ratio(r['low'])} and {ratio(r['high'])}" if not symbols else \
            f"{ratio(r['low'])}–{ratio(r['high'])}"
    marks = ({"exact": "", "at least": "≥ ", "at most": "≤ "} if symbols
             else {"exact": "", "at least": "at least ", "at most": "at most "})
    return marks[r["kind"]] + ratio(r["value"])


def _ratio_phrase(r: dict, other: str) -> str:
    return f"**{ratio_words(r)}** the rate {other} sustains"


def sweep_headline(sweep) -> str:
    """The page's headline sentence, every number from ``sweep`` (markdown)."""
    from allocator.throughput import POLICY_LABELS
    c = sweep.cost
    from allocator.throughput import SWEEP_WORKLOADS
    text = (f"With {sweep.requests:,} requests of {SWEEP_WORKLOADS[sweep.workload]} on **{c.label}** (a KV pool of "
            f"{sweep.pool_slots:,} slots: this cost model's, what the GPU's memory leaves after the weights and a "
            "reserve), ")
    if "paged" not in sweep.sustained:
        return text + "the sweep did not include the paged allocator."
    text += (f"paged allocation sustains **{sustained_text(sweep.sustained['paged'])}** before its normalised latency "
             f"passes the budget of {sweep.budget_s_per_token:.3f} s/token ({sweep.latency_factor:g} × the "
             f"{sweep.unloaded_s_per_token:.4f} s/token of a request served alone).")
    others = [p for p in ("max", "oracle") if p in sweep.sustained]
    if all(s["bound"] == "above" for s in sweep.sustained.values()):
        top = rate(sweep.rates[-1])
        return text + (f" The sweep did not reach any allocator's limit: every allocator stayed within the budget "
                       f"at every rate up to {top} requests/s, so no ratio between them can be read off. Add rates "
                       f"above {top} requests/s to find where they part.")
    stated = [p for p in others if sweep.ratio("paged", p) is not None]
    unstated = [p for p in others if p not in stated]
    if stated:
        text += " That is " + " and ".join(_ratio_phrase(sweep.ratio("paged", p), POLICY_LABELS[p].lower())
                                          for p in stated) + "."
    if unstated:
        coarse = any(sweep.sustained[p]["bound"] == "between" for p in ("paged", *unstated))
        text += (" There is no ratio to " + " or ".join(POLICY_LABELS[p].lower() for p in unstated) + " to state: "
                 + ("the swept rates around the crossings are too far apart to state one (add rates between "
                    "them)." if coarse else "the two did not both cross the budget inside the sweep (see the chart)."))
    return text


def paper_comparison(sweep) -> dict:
    """The paper's reported ratios and this model's, side by side: {"paper": str, "model": str,
    "why": str} (markdown). The paper's figures are labelled as the paper's; ours as this model's."""
    from allocator.throughput import PAPER, POLICY_LABELS, SWEEP_WORKLOADS
    lo_o, hi_o = PAPER["rate_ratio_vs_oracle"]
    lo_m, hi_m = PAPER["rate_ratio_vs_max"]
    batch = PAPER["batch_ratio_opt13b"]
    paper = (f"**The paper's figures** (ShareGPT requests): at similar latency vLLM sustained {lo_o:g}–{hi_o:g}× "
             f"the request rate of Orca (Oracle) and {lo_m:g}–{hi_m:g}× that of Orca (Max) — ranges over "
             f"{PAPER['rate_ratio_models']}, not one model's. For OPT-13B on one A100 alone the paper states "
             f"that vLLM batched {ratio(batch['oracle'])} as many requests as Orca (Oracle) and "
             f"{ratio(batch['max'])} as many as Orca (Max).")
    parts = []
    for p in ("oracle", "max"):
        if p in sweep.sustained and "paged" in sweep.sustained:
            r = sweep.ratio("paged", p)
            parts.append((p, None if r is None else f"{ratio_words(r)} the rate of {POLICY_LABELS[p].lower()}"))
    stated = [text for _, text in parts if text]
    unstated = [POLICY_LABELS[p].lower() for p, text in parts if not text]
    if stated:
        model = (f"**This model's figures** ({sweep.cost.label}, {SWEEP_WORKLOADS[sweep.workload]}): paged sustained "
                 + " and ".join(stated) + " at the same latency budget."
                 + (f" No ratio to {' or '.join(unstated)} can be stated from these rates (add rates between the "
                    "two around each crossing; see the chart)." if unstated else ""))
    elif unstated:
        model = (f"**This model's figures** ({sweep.cost.label}, {SWEEP_WORKLOADS[sweep.workload]}): no ratio of "
                 f"paged to {' or '.join(unstated)} can be stated from these rates (add rates between the two "
                 "around each crossing; see the chart).")
    else:
        model = "**This model's figures**: the sweep has no paged run to compare."
    full = (sweep.mean_prompt + sweep.mean_output) / (sweep.mean_prompt + sweep.max_new_tokens)
    why = (f"A comparison, not a fit. Here prompts average {sweep.mean_prompt:,.0f} tokens and answers "
           f"{sweep.mean_output:,.0f}; reservations of prompt + {sweep.max_new_tokens:,} slots would, all together, be "
           f"{pct(full)} full once every answer is done. The longer the prompts, the more of each reservation "
           "holds tokens any allocator must store, and the less paging can win back. And once the paged batch is "
           "large, every step also reads the KV cache of every running sequence, so steps lengthen and the extra "
           "sequences buy less than their number.")
    return {"paper": paper, "model": model, "why": why}


def sustained_rows(sweep) -> list[dict]:
    """One table row per policy: our name, the paper's name, the sustained rate, and its ratio to
    paged's (as display strings; from ``sweep``)."""
    from allocator.throughput import PAPER_NAMES, POLICY_LABELS
    rows = []
    for p in sweep.policies:
        r = sweep.ratio("paged", p) if "paged" in sweep.sustained and p != "paged" else None
        rows.append({"allocator": POLICY_LABELS[p], "the paper's name": PAPER_NAMES[p],
                     "sustained rate": sustained_text(sweep.sustained[p]),
                     "paged sustains (× this rate)": ("—" if p == "paged" else "not comparable" if r is None
                                                      else ratio_words(r, symbols=True))})
    return rows


def memory_claim(sweep, at: float) -> str:
    """The share of the KV pool holding tokens at rate ``at`` for every policy, beside the paper's
    Figure 2 (markdown; numbers from ``sweep`` and ``allocator.throughput.PAPER``)."""
    from allocator.throughput import PAPER, POLICY_LABELS, memory_basis
    key, words = memory_basis(sweep, at)
    ours = ", ".join(f"{pct(sweep.points[(p, at)][key], 1)} for {POLICY_LABELS[p].lower()}" for p in sweep.policies)
    paper = ", ".join(f"{pct(PAPER['token_state_share'][p], 1)}" for p in sweep.policies)
    return (f"**This model**, at {rate(at)} requests/s, {words}: the share of the KV pool holding tokens was {ours}. "
            f"**The paper's Figure 2** (its own experiments) measured {paper} for the same four kinds of allocator.")


def latency_claim(sweep, at: float) -> str:
    """Medians and 99th percentiles of TTFT and TPOT at rate ``at``, reservation against paged
    (markdown; from ``sweep``)."""
    from allocator.throughput import POLICY_LABELS
    lines = []
    for p in sweep.policies:
        s = sweep.points[(p, at)]
        lines.append(f"- **{POLICY_LABELS[p]}**: time to first token {seconds(s['ttft_p50_s'])} median, "
                     f"{seconds(s['ttft_p99_s'])} at the 99th percentile; time per output token "
                     f"{seconds(s['tpot_p50_s'])} median, {seconds(s['tpot_p99_s'])} at the 99th; "
                     f"{s['throughput_tokens_per_s']:,.0f} output tokens/s.")
    return f"At {rate(at)} requests/s:\n\n" + "\n".join(lines)


def time_split_claim(sweep, at: float, policy: str = "paged") -> str:
    """Where one run's seconds went (markdown; from ``sweep``): memory-limited, compute-limited,
    overhead, swap and idle seconds, which add up to the run's time."""
    from allocator.throughput import POLICY_LABELS
    s = sweep.points[(policy, at)]
    return (f"The {POLICY_LABELS[policy].lower()} run at {rate(at)} requests/s took {seconds(s['makespan_s'])}: "
            f"{seconds(s['memory_limited_s'])} in steps limited by memory bandwidth, "
            f"{seconds(s['compute_limited_s'])} in compute-bound steps, {seconds(s['overhead_s'])} of fixed "
            f"per-step overhead, {seconds(s['swap_s'])} copying swapped blocks and {seconds(s['idle_s'])} idle "
            "between requests.")


def paper_replication_texts(rep) -> dict:
    """The paper replication's sentences (markdown), every number from ``rep``
    (:class:`allocator.paper.Replication`) or the paper's figures in :data:`allocator.paper.PAPER_FIGURES`,
    each labelled as the paper's or this model's.

    Returns:
        {"load": why the rates are scaled, "fig2", "fig13", "fig12": one paragraph each,
        "departures": list of one-sentence differences between this model and the paper's system}.
    """
    from allocator.paper import PAPER_FIGURES, PAPER_LABELS, SATURATION_REQUESTS, SYSTEMS
    p = PAPER_FIGURES
    sc = rep.scale
    load = (f"**Same relative load, not the same clock.** This model's roofline prices a step of OPT-13B on an "
            f"A100 from datasheet peaks, so its paged allocator's **burst saturation rate** — requests finished per "
            f"second when {SATURATION_REQUESTS:,} of the paper's requests all arrive at once — is "
            f"{sc['ours']:.2f} requests/s, where the paper's vLLM ran up to {sc['paper']:g} requests/s (the top of "
            f"the rates its artifact sweeps). Every rate of the paper is therefore run here × {sc['scale']:.2f}, and "
            "the charts label rates on the paper's scale. The burst saturation rate only sets that scale; it is not "
            "a sustained rate (Figure 12's knees are). The batch sizes and memory shares below are this model's, "
            "simulated, not fitted to the paper's, and the ratios of Figure 12 do not depend on the scale.")
    f2 = p["fig2"]
    ours_ts = ", ".join(f"{pct(rep.fig2[s]['token_states'], 1)} for {PAPER_LABELS[s]}" for s in SYSTEMS)
    paper_ts = ", ".join(f"{pct(f2['token_states'][s], 1)}" for s in SYSTEMS)
    mx = rep.fig2["max"]
    fig2 = (f"**Figure 2.** One trace of {f2['duration_s']:g} s of arrivals at {f2['rate']:g} requests/s (paper's "
            f"scale), averaged per step over its window from {f2['window_s'][0]:g} s to {f2['window_s'][1]:g} s: "
            "token states "
            f"filled {ours_ts} of the KV memory in this model; **the paper's** Figure 2 shows {paper_ts}. For "
            f"Orca (Max) this model's run gives {pct(mx['reservation'], 1)} reservation, {pct(mx['internal'], 1)} "
            f"internal and {pct(mx['external'], 1)} external fragmentation; **the paper** shows "
            f"{pct(f2['max_split']['reservation'], 1)} reservation, {pct(f2['max_split']['internal'], 1)} internal "
            f"and {pct(f2['max_split']['external'], 1)} external.")
    f13 = p["fig13"]
    parts = ", ".join(f"{PAPER_LABELS[s]} {rep.fig13[s]:.2f} (the paper: {f13['batch'][s]:.2f}, "
                      f"{100 * (rep.fig13[s] / f13['batch'][s] - 1):+.1f} %)" for s in SYSTEMS)
    fig13 = (f"**Figure 13.** Mean requests batched per step at {f13['rate']:g} requests/s (paper's scale), over "
             f"the same window of a {f2['duration_s']:g} s trace as Figure 2, this model: {parts}. The three Orca "
             "versions are overloaded there, so their batch is set by memory "
             "and placement alone; vLLM is near its knee, so its batch moves with the random draw of arrivals more "
             "than theirs does.")
    lo_o, hi_o = p["fig12"]["range_vs_oracle"]
    lo_m, hi_m = p["fig12"]["range_vs_max"]
    sus = ", ".join(f"{PAPER_LABELS[s]} {sustained_text(rep.sustained[s])}" for s in SYSTEMS)
    vk = rep.sustained["paged"]
    here = (f" On this model's own clock (× the scale) vLLM's knee is {vk['rate'] * sc['scale']:.2f} "
            "requests/s: a sustained rate under a latency budget, so not the burst "
            f"saturation rate above ({sc['ours']:.2f}), nor the sustained rate of the rate sweep further down with "
            "ShareGPT lengths (a fixed number of requests on the cost model's KV pool, not this "
            f"{p['fig12']['duration_s']:g} s trace on Table 1's)." if vk["bound"] == "within" else "")
    ro, rm = rep.ratio("oracle"), rep.ratio("max")

    def said(r):
        return "no ratio can be stated" if r is None else ratio_words(r)
    extended = [(s, [pt["paper_rate"] for pt in rep.fig12[s] if pt.get("beyond_artifact")]) for s in SYSTEMS]
    extended = [(s, r) for s, r in extended if r]
    beyond = "".join(f" {PAPER_LABELS[s]} stayed under the budget up to the artifact's highest rate, so it was also "
                     f"run at {' and '.join(f'{x:g}' for x in r)} requests/s to find its knee." for s, r in extended)
    fig12 = (f"**Figure 12.** Each system at the rates the paper's artifact sweeps it, {p['fig12']['duration_s']:g} s "
             f"of arrivals per rate.{beyond} Judged against a latency budget of "
             f"{rep.budget_s_per_token:.4f} s/token ({5:g} × the {rep.unloaded_s_per_token:.4f} s/token of a "
             f"request served alone). Each system's **knee** is its sustained rate: where its latency crosses that "
             f"budget. Knees on the paper's scale, this model: {sus}.{here} vLLM sustains {said(ro)} "
             f"Orca (Oracle)'s rate and {said(rm)} Orca (Max)'s; **the paper** states {lo_o:g}–{hi_o:g}× and "
             f"{lo_m:g}–{hi_m:g}× over OPT-13B, 66B and 175B together, and batch ratios of "
             f"{ratio(p['fig12']['batch_ratio_vs_oracle'])} and {ratio(p['fig12']['batch_ratio_vs_max'])} "
             "for OPT-13B. The paper's own curve values are not quoted here, only its stated ratios.")
    departures = [
        "Step times come from a roofline of datasheet peaks, not from the paper's measured kernels, so absolute "
        "seconds differ and the rates are scaled (above).",
        "There is no FasterTransformer baseline: the paper's Orca is itself a proxy built on vLLM's code, and "
        "that proxy is what is rebuilt here.",
        "The scheduler has no per-step token budget or sequence cap (the artifact's max_num_batched_tokens and "
        "max_num_sequences), so a step may admit more prompt tokens than the paper's could.",
        f"Figure 12 runs {p['fig12']['duration_s']:g} s of arrivals per rate (the artifact's quick mode) and "
        f"Figures 2 and 13 one {p['fig2']['duration_s']:g} s trace each (as long as the artifact's Figure 2 run), "
        "not the paper's hour; the requests are shuffled with numpy, so their order differs from the artifact's.",
        "The artifact files the rounding of a buddy run up to a power of two under 'external fragmentation and "
        "other'; here it is internal fragmentation (it sits inside an allocation), so only the token-state "
        "shares and Orca (Max)'s split (which has no rounding) compare one to one.",
        "Figure 13 is averaged over the same window as Figure 2 (300 s to 900 s of a 900 s trace); the paper "
        "averages over a longer run.",
        "The paper states Figure 13's load as 2 requests/s, while its artifact's plotting script reads runs at "
        "1.5 requests/s; the replication follows the paper's 2.",
    ]
    return {"load": load, "fig2": fig2, "fig13": fig13, "fig12": fig12, "departures": departures}


def fig12_note(rep) -> str:
    """The box inside the replication's Figure 12: the paper's stated ratios beside this model's
    (plotly HTML; numbers from ``rep`` and :data:`allocator.paper.PAPER_FIGURES`)."""
    from allocator.paper import PAPER_FIGURES
    f = PAPER_FIGURES["fig12"]
    parts = []
    for other, key, name in (("oracle", "range_vs_oracle", "Orca (Oracle)"), ("max", "range_vs_max", "Orca (Max)")):
        r = rep.ratio(other)
        ours = "no ratio" if r is None else ratio_words(r, symbols=True)
        lo, hi = f[key]
        parts.append(f"vLLM / {name}: the paper {lo:g}–{hi:g}× (OPT-13B, 66B, 175B together); this model {ours}")
    return "<br>".join(parts)


def scheduler_rules_text() -> str:
    """Which scheduling rules the explainer's engine runs (DESIGN.md "Simulation semantics") and
    which of vLLM v1's it leaves off, with v1's defaults read from :mod:`allocator.engine`, so the page
    never claims rules it does not run (issue 22)."""
    from allocator.engine import V1_DEFAULT_MAX_NUM_BATCHED_TOKENS, V1_DEFAULT_MAX_NUM_SEQS
    return ("Scheduler rules here: the classroom engine's. Running sequences are served first, then the queue "
            "is admitted in order while memory allows; a whole prompt is prefilled in one step; no cap on "
            "running sequences; no prefix caching unless a shared prompt or a trace asks for it. vLLM v1's "
            f"own rules (at most {V1_DEFAULT_MAX_NUM_SEQS} running, a budget of "
            f"{V1_DEFAULT_MAX_NUM_BATCHED_TOKENS:,} tokens per step with chunked prefill, prefix caching of "
            "prompt and generated blocks) are off on this page; they run on \"Checked against a real engine\" "
            "and in `python -m allocator replay-vllm`.")
