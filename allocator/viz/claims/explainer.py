"""The explainer's sentences about one run, built from its results (no streamlit): the headline
cards, the details table, the guided lesson's reveals and the About page's lines.

Every number is read from the :class:`allocator.engine.summary.RunSummary` (or the metrics) of the run it
sits beside; labels and meanings come from :data:`allocator.common.metric_names.SUMMARY_METRICS`.
tests/pages/test_claims.py checks that every number quoted is one of the run's.
"""
from __future__ import annotations

from allocator.memory.buddy import ORCA_BLOCK_SIZE, ORCA_MAX_CONTEXT
from allocator.common.formats import pct, plural, seconds, seconds_difference, shown_difference
from allocator.cost.best import seconds_source
from allocator.common.metric_names import SUMMARY_METRICS
from allocator.engine.shares import SHARES


# --------------------------------------------------------------------------------------------
# The explainer's headline cards and details table
# --------------------------------------------------------------------------------------------

#: What each reservation policy sets aside per request (the left side of the explainer).
RESERVATION_RULES = {"Reserve-max": "prompt + max_new_tokens",
                     "Reserve-pow2": "prompt + the next power of two at or above the answer's length",
                     "Reserve-oracle": "prompt + exactly the answer's length"}
#: The same with the paper's buddy placement (allocator.memory.buddy): capped at the context, rounded up to
#: a power-of-two number of blocks. Each reads before "slots per request".
_BUDDY_TAIL = f", capped at {ORCA_MAX_CONTEXT:,} and rounded up to {ORCA_BLOCK_SIZE} × a power of two"
RESERVATION_RULES.update({
    "Reserve-max (buddy)": f"{ORCA_MAX_CONTEXT:,} (the paper's Orca (Max): the whole context)",
    "Reserve-pow2 (buddy)": "prompt + the next power of two at or above the answer's length" + _BUDDY_TAIL,
    "Reserve-oracle (buddy)": "prompt + exactly the answer's length" + _BUDDY_TAIL})


def peak_held(s) -> str:
    """How long a run held its peak batch, read from its summary (``peak_running_steps`` engine steps
    ran ``peak_running`` sequences; the first was ``peak_running_step``): "for a single step (step
    87)" or "for 2,005 of the run's 3,642 steps (first at step 1)". A peak is not assumed to be an
    instant: under reserve-max it is most of the run (issue 40)."""
    if s.peak_running_steps <= 1:
        return f"for a single step (step {s.peak_running_step:,})"
    return (f"for {s.peak_running_steps:,} of the run's {s.steps:,} steps "
            f"(first at step {s.peak_running_step:,})")


def reservation_name(results: dict) -> str:
    """The left side's name as texts write it: "reserve-max", "reserve-pow2" or "reserve-oracle"."""
    return results["reserve_max"].label.lower()


def reservation_rule(results: dict) -> str:
    """What the left side reserves per request, in words (see :data:`RESERVATION_RULES`)."""
    return RESERVATION_RULES.get(results["reserve_max"].label, "prompt + max_new_tokens")


def headline(results: dict, timings: dict | None = None) -> dict:
    """The three headline cards of each allocator, and a line under them (plain data).

    Cards: the **sustained** batch (mean running while requests wait -- the peak, with how long it lasted
    and is named as such in the line below), utilisation while requests wait, steps to drain.
    When nothing ever waited, the busy-step figures do not exist: the cards show the all-steps
    figures instead and say so in their label.

    With ``timings``, ``time`` says in one line how many seconds the run takes to drain and its
    throughput, and ``line`` names the GPU and model and what preemption cost in seconds
    (recompute and swap run the same steps, so only the seconds tell them apart); "" without.

    Args:
        results: {"reserve_max": SimulationResult, "paged": SimulationResult}.
        timings: {kind: :class:`allocator.cost.timing.RunTiming`} of the same runs, or None.

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
        same_work = s.finished == rm.finished and len(s.rejected) == len(rm.rejected)
        compare = key != "reserve_max" and rm.finished > 0 and s.finished > 0 and same_work
        waited = s.waited
        ran = s.finished > 0
        running, running_rm = s.sustained_running, rm.sustained_running
        util, util_rm = s.sustained_utilization, rm.sustained_utilization
        same_basis = waited == rm.waited
        shown_running, shown_running_rm = f"{running:.1f}", f"{running_rm:.1f}"
        # every delta is the difference of the two figures as displayed (68.7 s and 13.4 s differ by 55.3 s)
        running_delta = shown_difference(shown_running, shown_running_rm)
        util_delta = (shown_difference(pct(util), pct(util_rm)) if util is not None and util_rm is not None
                      else None)
        cards = [
            {"label": SUMMARY_METRICS["mean_running_busy"].label,
             "value": shown_running if ran else "—",
             "delta": (f"{running_delta:+}" if compare and same_basis and running_delta else None),
             "delta_color": "normal",
             "help": ("The sustained batch: sequences computing a token per step, averaged over the "
                      f"{plural(s.busy_steps, 'step')} when at least one request was waiting."
                      if waited else "Nothing ever waited, so this is the mean over every step.")
                     + f" The peak, {s.peak_running}, was held {peak_held(s)}."},
            {"label": SUMMARY_METRICS["mean_utilization_busy"].label,
             "value": pct(util) if ran else "—",
             "delta": (f"{util_delta:+} pts" if compare and same_basis and util_delta else None),
             "delta_color": "normal",
             "help": "Distinct tokens stored ÷ all slots (a shared prompt counts once), "
                     + ("averaged over the steps when requests were waiting." if waited else "averaged over every step.")},
            {"label": SUMMARY_METRICS["steps"].label, "value": f"{s.steps:,}" if ran else "—",
             "delta": f"{s.steps - rm.steps:+,}" if compare and s.steps != rm.steps else None,
             "delta_color": "inverse",
             "help": SUMMARY_METRICS["steps"].meaning},
        ]
        if s.finished == 0:
            line = (f"Nothing ran: all {plural(len(s.rejected), 'request')} can never fit this pool "
                    "(reasons below).")
        else:
            line = ((f"Means over the {plural(s.busy_steps, 'step')} when requests waited. " if waited else
                     "Means over every step: no request ever had to wait. ")
                    + f"Peak: {s.peak_running} running at once, held {peak_held(s)}.")
            line += empty_pool_note(res)
            if key != "reserve_max" and rm.finished and not same_work:
                line += (f" Not the same work: {reservation_name(results)} served {rm.finished:,} and rejected "
                         f"{len(rm.rejected):,}, paged served {s.finished:,} and rejected {len(s.rejected):,}, "
                         "so the cards show no differences: fewer requests drain sooner.")
        time = ""
        if timings is not None and s.finished:
            t, t_rm = timings[key].summary, timings["reserve_max"].summary
            diff = seconds_difference(seconds(t["makespan_s"]), seconds(t_rm["makespan_s"]))
            time = (f"Modelled: **{seconds(t['makespan_s'])}** to drain"
                    + (f" ({diff} against {reservation_name(results)})" if compare and diff else "")
                    + (f" · **{t['throughput_tokens_per_s']:,.0f}** output tokens/s"
                       if t["throughput_tokens_per_s"] else ""))
            line += (f" Seconds are modelled, not measured on this run (\"Checked against a real engine\" shows "
                     f"how far such figures are from a real run): {seconds_source(timings[key].cost)}"
                     + time_line(res, timings[key]))
        out[key] = {"title": res.label + (f" · blocks of {res.block_size}" if res.block_size else " · contiguous"),
                    "cards": cards, "line": line, "time": time}
    return out


def empty_pool_note(res) -> str:
    """A sentence (with a leading space) explaining the steps whose utilisation reads 0 % although
    requests wait: every running request finished in that step, its memory is freed at the step's
    end, and the queue is admitted at the start of the next (assets/reference_figures.md, R9:
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
    if res.summary.preemptions and res.summary.swapped_blocks:
        text += (f"; swapping {res.summary.swapped_blocks:,} blocks out and back cost {seconds(t['swap_s'])} of "
                 "copies over the host link")
    if res.summary.preemptions and res.summary.recomputed_tokens:
        text += (f"; recomputing {res.summary.recomputed_tokens:,} tokens cost {seconds(t['recompute_flops_s'])} "
                 "of prefill compute (their weight FLOPs at the GPU's datasheet peak, whichever model prices "
                 "the steps)")
        if res.preemption == "swap":        # a swap falls back to recompute only when the host pool is full
            text += (" — in swap mode these are the preemptions the host pool had no room for, so they "
                     "were recomputed instead")
    return text + "."


def share_cells(res) -> dict[str, str]:
    """One run's memory shares (:data:`allocator.engine.shares.SHARES`) as display strings, averaged over
    the steps when requests waited, or over every step -- and then marked "(all steps)" -- when
    none waited; "—" for every category when nothing ran. Also key "total": what they add up to."""
    s = res.summary
    shares = s.sustained_memory_shares if s.waited or s.finished else None
    mark = "" if s.waited else " (all steps)"
    if shares is None:
        return {key: "—" for key, *_ in SHARES} | {"total": "—"}
    out = {key: pct(shares[key], 1) + mark for key, *_ in SHARES}
    out["total"] = pct(sum(shares.values()), 1) + mark
    return out


def share_rows(results: dict) -> list[dict]:
    """The memory shares of both runs, one row per category plus a total (100 %): rows of
    measure, the reservation allocator (column named by :func:`reservation_name`), paged, meaning.
    The categories partition the pool (:mod:`allocator.engine.shares`), so each column adds up to 100 %."""
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

    def figure(key, fn):                       # a summary figure, named as metric_names names it
        add(SUMMARY_METRICS[key].label, fn, SUMMARY_METRICS[key].meaning)

    figure("peak_running", lambda r: (f"{r.summary.peak_running}, held {peak_held(r.summary)}"
                                      if r.summary.finished else "—"))
    figure("mean_running", lambda r: f"{r.summary.mean_running:.2f}")
    figure("mean_tokens_per_step", lambda r: f"{r.summary.mean_tokens_per_step:.2f}")
    rows.extend(share_rows(results))

    def cost(r):
        waited = r.summary.waited
        value = r.cost_per_token(metadata_cost, busy=waited)
        return "—" if value is None else f"{value:.3f}" + ("" if waited else " (all steps)")

    add(f"cost per stored token (c = {metadata_cost:g})", cost,
        "a ratio of means: (mean allocated slots + c × mean blocks or reservations) ÷ mean distinct tokens "
        "stored, while requests wait. At c = 0 it is the four allocated shares above added up, ÷ token states; "
        "1.000 means nothing wasted")
    for key in ("preemptions", "peak_logical_tokens", "used_slots_at_peak_logical", "swapped_blocks",
                "recomputed_tokens"):
        figure(key, lambda r, key=key: f"{r.summary[key]:,}")
    add("finished / rejected", lambda r: f"{r.summary.finished:,} / {len(r.rejected):,}",
        "requests served, and requests that can never fit this pool")
    if timings is not None:
        label = seconds_source(timings["paged"].cost)
        kind = f" ({timings['paged'].cost.short_name}'s seconds)"
        by = {id(results[k]): timings[k].summary for k in results}

        def timed(key, fmt=seconds):
            return lambda r: fmt(by[id(r)][key]) if by[id(r)]["finished"] else "—"

        idle = timings["paged"].summary["idle_s"] + timings["reserve_max"].summary["idle_s"]
        add("seconds to drain", timed("makespan_s"),
            f"every step priced, added up ({label})" + (
                "; a stretch with nothing to run lasts its steps at the workload's arrival clock" if idle else ""))
        add("throughput (output tokens/s)", timed("throughput_tokens_per_s", lambda v: f"{v:,.0f}"),
            "answer tokens delivered per second of the run" + kind)
        add("time to first token, median / 99th percentile",
            lambda r: (f"{seconds(by[id(r)]['ttft_p50_s'])} / {seconds(by[id(r)]['ttft_p99_s'])}"
                       if by[id(r)]["finished"] else "—"),
            "from a request's arrival to its first token: queueing plus its prefill" + kind)
        add("time per output token, median", timed("tpot_p50_s"),
            "between a request's later tokens; a preempted request's wait counts in it" + kind)
        add("normalised latency (s/token)", timed("normalized_latency_s_per_token", lambda v: f"{v:.4f}"),
            "mean over requests of end-to-end latency ÷ answer length (the PagedAttention paper's measure)" + kind)
        add("swap copies / recompute FLOPs (seconds)",
            lambda r: f"{seconds(by[id(r)]['swap_s'])} / {seconds(by[id(r)]['recompute_flops_s'])}",
            "what preemption cost: blocks copied over the host link (bytes over the datasheet's link "
            "bandwidth plus a fixed latency per copy), or the prefill of recomputed tokens (their weight "
            "FLOPs at the datasheet's peak FLOP/s); both are the datasheet roofline's terms, whichever model "
            "prices the steps")
    if any(r.summary.finished == 0 for r in results.values()):
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
        if res.summary.finished:
            steps.update((res.summary.peak_running_step, res.summary.peak_logical_step,
                          int(res.metrics["step"][0])))
    return sorted(steps)


def _sweep_row(rows, block_size):
    return next((r for r in rows if r.block_size == block_size and r.mean_utilization_busy is not None), None)


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
    if not r.finished or not p.finished:
        return "Nothing ran in this scenario: every request was rejected (see the reasons above)."
    if step == "reserve":
        held = rm.value_at("allocated_slots", r.peak_running_step)
        return (f"**{r.peak_running}.** Every reservation is its prompt plus {max_new:,} slots, so at step "
                f"{r.peak_running_step:,}, {plural(r.peak_running, 'reservation')} took {held:,} of the "
                f"{slots:,} slots and no free run was long enough for another: the other requests queued. "
                f"On average {r.sustained_running:.1f} ran while requests waited.")
    if step == "waste":
        sh = r.sustained_memory_shares
        answers = rm.requests["output_len"]
        return (f"**{pct(sh['token_states'])}** of the pool holds tokens while requests wait. Most of the orange "
                f"is never written: answers averaged {answers.mean():.0f} of the {max_new:,} answer slots reserved "
                f"for them, so {pct(sh['internal_fragmentation'])} of the pool is room past an answer's end, and "
                f"only {pct(sh['reservation'])} waits for tokens still to come. Another "
                f"{pct(sh['external_fragmentation'])} is free but in gaps too short for the next reservation "
                "(dark grey). The PagedAttention paper measured 20–40 % for the engines of the day.")
    if step == "paged":
        text = (f"**{p.sustained_running:.1f}** on average while requests wait, against "
                f"{r.sustained_running:.1f} for reserve-max, at "
                f"{pct(p.mean_utilization_busy)} utilisation; everything is done in {p.steps:,} steps "
                f"instead of {r.steps:,}. The peak, {p.peak_running}, was held {peak_held(p)}")
        if p.preemptions:
            text += (f": as answers grow the pool runs dry, and {plural(p.preemptions, 'preemption')} "
                     f"{'sends a sequence' if p.preemptions == 1 else 'send sequences'} back to the queue")
        return text + "."
    if step == "big_blocks":
        at16, here = _sweep_row(sweep_rows, 16), p.mean_utilization_busy
        direction = ("" if at16 is None or here is None else
                     "**Down**" if here < at16["mean_utilization_busy"] else
                     "**Up**" if here > at16["mean_utilization_busy"] else "**The same**")
        return (f"{direction}, to {pct(here)}" + (f" from {pct(at16['mean_utilization_busy'])} at block size 16"
                                                  if at16 else "")
                + f". A {slots:,}-slot pool holds only {plural(slots // pg.block_size, 'block')} of "
                f"{pg.block_size}, so at most {p.peak_running} sequences ever run at once, and each one's "
                "last block is on average about half empty.")
    if step == "prefix":
        at = int(pg.metrics["step"][0])          # the frame the maps open on
        dup = pg.value_at("duplicate_slots", at)
        copies = ("**Once.**" if dup == 0 else
                  f"**Once for its full blocks**, plus {plural(dup, 'duplicate slot')} for the partly filled one.")
        return (f"{copies} On the maps' first frame (step {at:,}), {pg.value_at('logical_tokens', at):,} logical "
                f"tokens are {pg.value_at('used_slots', at):,} distinct tokens: every block table points at the same "
                "full prompt blocks (refcount > 1, drawn "
                f"pink). Reserve-max must copy the prompt into every reservation: {pct(r.mean_duplicate_fraction_busy)} "
                f"of its pool held duplicate copies (brown) while requests waited, and at most {r.peak_running} "
                "requests fit at once.")
    raise KeyError(step)


def workload_outcome(results: dict, slots: int) -> str:
    """One sentence on what this run did with the workload (peaks and sustained batches), from
    ``results``; the classroom-40 defaults were chosen so that, at 2,048 slots, it echoes the
    PagedAttention paper (a few reservations at once against dozens of paged sequences)."""
    r, p = results["reserve_max"].summary, results["paged"].summary
    if not r.finished or not p.finished:
        return "In this pool at least one allocator could run none of them (see the rejections above)."

    def side(s):
        where = "while requests waited" if s.waited else "over all steps"
        return f"at most {s.peak_running} at once ({s.sustained_running:.1f} on average {where})"

    return (f"In this {slots:,}-slot pool, {reservation_name(results)} held {side(r)} and paging {side(p)}.")


def about_default_run(results: dict, slots: int) -> str:
    """The About page's line on the default scenario's run (its sources table), from ``results``:
    peaks named as peaks, the sustained batch as the mean while requests waited."""
    p = results["paged"].summary
    return (f"{p.finished + len(p.rejected):,} requests, blocks of {results['paged'].block_size}. "
            + workload_outcome(results, slots))


def classroom_tip(results: dict) -> str:
    """What the class sees when the lecturer presses Play on the default scenario (About's
    presenting tips), every number from ``results``."""
    r, p = results["reserve_max"].summary, results["paged"].summary
    if not r.finished or not p.finished:
        return "press **▶ Play** and let the class watch where the memory goes."

    return (f"press **▶ Play** and let the class watch the left side hold at most {r.peak_running} requests "
            f"at once, while the right side reaches {p.peak_running} at once (held {peak_held(p)}) and, as "
            f"answers grow and the pool fills, runs {p.sustained_running:.1f} on average while requests "
            f"wait, against {r.sustained_running:.1f} on the left.")


def window_text(results: dict) -> str:
    """What the sliding-window model's paged run did behind its window, every number read from
    that run (``SimulationResult.window``, :mod:`allocator.memory.sliding_window`): the window, the
    blocks released, the peak blocks one decoding sequence held beside the rule's bound, and the
    peak in a prefill step. "" for a full-attention run."""
    res = results["paged"]
    w = res.window
    if w is None:
        return ""
    bs = res.block_size
    groups = ("" if not w["full_groups"] else
              f" in each of its {w['window_groups']} windowed KV-cache groups (its {w['full_groups']} full-attention "
              "groups keep every block, in the same pool)")
    return (f"Sliding-window model: the paged side's model attends only to the last {w['sliding_window']:,} tokens, "
            "so a block whose tokens all lie further back is released at the sequence's next step, as vLLM v1's "
            "sliding-window manager does (vllm/v1/core/single_type_kv_cache_manager.py). Violet on the right-hand "
            f"map: blocks released behind the window that nobody has taken since. This run released "
            f"{plural(w['released_blocks'], 'block')}; a decoding sequence held at most "
            f"{plural(w['peak_decode_window_blocks'], 'block')}{groups} (the rule's bound: ceil("
            f"{w['sliding_window']} / {bs}) + 1 = {w['bound_blocks']}), and up to {w['peak_window_blocks']} in the "
            "step that prefilled its prompt (those blocks go the step after). The paged side follows vLLM v1's "
            "scheduler here, whose rule the window is; the left side still reserves every token. Seconds, where "
            "shown, price each decode's attention over its whole context, as for full attention: for the windowed "
            "layers the model's figure is an overestimate.")


def scheduler_rules_text(window: bool = False) -> str:
    """Which scheduling rules the explainer's engine runs (assets/reference_figures.md, R9) and
    which of vLLM v1's it leaves off, with v1's defaults read from :mod:`allocator.engine.simulate`, so the page
    never claims rules it does not run (issue 22). ``window``: the paged side runs a sliding-window
    model, under vLLM v1's rules (``allocator.engine.scenario.Scenario.sliding_window``)."""
    from allocator.engine.v1 import V1_DEFAULT_MAX_NUM_BATCHED_TOKENS, V1_DEFAULT_MAX_NUM_SEQS
    if window:
        return ("Scheduler rules here: the paged side (right) runs a sliding-window model under vLLM v1's rules "
                f"(at most {V1_DEFAULT_MAX_NUM_SEQS} running, a budget of {V1_DEFAULT_MAX_NUM_BATCHED_TOKENS:,} "
                "tokens per step with chunked prefill, recompute preemption, no block taken ahead for the token a "
                "prefill emits), because the window is vLLM v1's rule; the reservation side (left) keeps the "
                "classroom engine's. Set the window to 0 for the lesson's own rules on both sides.")
    return ("Scheduler rules here: the classroom engine's. Running sequences are served first, then the queue "
            "is admitted in order while memory allows; a whole prompt is prefilled in one step; no cap on "
            "running sequences; no prefix caching unless a shared prompt or a trace asks for it. vLLM v1's "
            f"own rules (at most {V1_DEFAULT_MAX_NUM_SEQS} running, a budget of "
            f"{V1_DEFAULT_MAX_NUM_BATCHED_TOKENS:,} tokens per step with chunked prefill, prefix caching of "
            "prompt and generated blocks) are off on this page; they run on \"Checked against a real engine\" "
            "and in `python -m allocator replay-vllm`.")


def window_split(results: dict, full: dict) -> dict | None:
    """How much of the paged side's gain over the reservation side is the window's, from figures as
    displayed (one decimal, sequences per step).

    Args:
        results: the windowed scenario's runs ({"reserve_max", "paged"}).
        full: :func:`allocator.engine.scenario.full_attention_figures` of the same scenario's
            full-attention paged run beside ``results["paged"]``.

    Returns:
        {"basis" ("while requests waited" or "over the run"), "window", "full", "reserve" (the
        three mean-running figures as shown), "by_window", "by_paging", "total" (their differences,
        Decimal, so ``by_window + by_paging == total``), "share" ("most", "less than half" or "none":
        the window's part of ``total``)}; None when the reservation side's figure
        is on another basis (one run waited, another did not) and the split would mix averages.
    """
    rm = results["reserve_max"].summary
    if rm.waited != full["waited"] or not rm.finished:
        return None
    reserve = rm.mean_running_busy if full["waited"] else rm.mean_running
    shown = {"window": f"{full['window_mean_running']:.1f}", "full": f"{full['mean_running']:.1f}",
             "reserve": f"{reserve:.1f}"}
    by_window, total = shown_difference(shown["window"], shown["full"]), shown_difference(shown["window"], shown["reserve"])
    return {"basis": "while requests waited" if full["waited"] else "over the run", **shown,
            "by_window": by_window, "by_paging": shown_difference(shown["full"], shown["reserve"]), "total": total,
            "share": ("most" if 2 * by_window > total > 0 else "none" if by_window <= 0 else "less than half")}


def window_comparison(results: dict, full: dict, timings: dict | None = None, full_timing=None) -> str:
    """What paging alone gives beside the windowed paged run, and how much of the paged card's gain
    is the window's (markdown, shown beside the cards); every number read from ``results``, ``full``
    (:func:`allocator.engine.scenario.full_attention_figures`) and the timings. "" without a window.

    Args:
        results: {"reserve_max", "paged"}: the scenario's runs, the paged one windowed.
        full: the full-attention paged run's figures beside ``results["paged"]``.
        timings: {kind: RunTiming} of ``results``, or None (steps only).
        full_timing: the full-attention run's RunTiming on the same cost model, or None.
    """
    pg = results["paged"]
    if pg.window is None:
        return ""
    left = reservation_name(results)
    basis = "while requests waited" if full["waited"] else "over the run"
    text = (f"**Paging alone, without the window:** the same paged run with full attention, in the same memory "
            f"under the same rules, runs **{full['mean_running']:.1f}** sequences on average {basis} (peak "
            f"{full['peak_running']}) and drains in {full['steps']:,} steps")
    if timings is not None and full_timing is not None and full_timing.summary["finished"]:
        text += f" (modelled {seconds(full_timing.summary['makespan_s'])})"
    text += (f"; with the {pg.window['sliding_window']:,}-token window it runs {full['window_mean_running']:.1f} "
             f"and drains in {full['window_steps']:,} steps")
    priced = timings is not None and full_timing is not None and timings["paged"].summary["finished"]
    if priced:
        text += (f" (modelled {seconds(timings['paged'].summary['makespan_s'])}, pricing each decode over its whole "
                 "context: for the windowed layers an overestimate)")
    text += "."
    split = window_split(results, full)
    if split is not None and split["total"]:
        text += (f" The window accounts for {split['share']} of the paged side's difference from {left}: of "
                 f"{split['total']:+} sequences ({split['window']} against {split['reserve']}), {split['by_window']:+} "
                 f"is the window's and {split['by_paging']:+} paging's.")
    return text
