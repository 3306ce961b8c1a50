"""The Throughput and latency page's sentences (``allocator.studies.rate_sweep.RateSweep``), every number
from the sweep shown beside them; the paper's figures are labelled as the paper's (no streamlit)."""
from __future__ import annotations

from allocator.common.formats import pct, rate, ratio, seconds
from allocator.cost.best import seconds_source


def sustained_text(s: dict) -> str:
    """A sustained rate (``allocator.studies.rate_sweep.sustained_rate``'s dict) in words: interpolated
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
    """A ratio of sustained rates (``allocator.studies.rate_sweep.rate_ratio``'s dict) as words ("at least
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
    from allocator.studies.rate_sweep import POLICY_LABELS
    c = sweep.cost
    from allocator.workloads.poisson import SWEEP_WORKLOADS
    text = (f"With {sweep.requests:,} requests of {SWEEP_WORKLOADS[sweep.workload]} on **{c.label}** (a KV pool of "
            f"{sweep.pool_slots:,} slots: this cost model's, what the GPU's memory leaves after the weights and a "
            "reserve), ")
    if "paged" not in sweep.sustained:
        return text + "the sweep did not include the paged allocator."
    text += (f"paged allocation sustains **{sustained_text(sweep.sustained['paged'])}** before its normalised latency "
             f"passes the budget of {sweep.budget_s_per_token:.3f} s/token ({sweep.latency_factor:g} × the "
             f"{sweep.unloaded_s_per_token:.4f} s/token of a request served alone). Every second on this page "
             f"is modelled: {seconds_source(c)}.")
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
    from allocator.studies.rate_sweep import PAPER, POLICY_LABELS
    from allocator.workloads.poisson import SWEEP_WORKLOADS
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
        model = (f"**This model's figures** ({sweep.cost.label}, seconds from the {sweep.cost.short_name}, {SWEEP_WORKLOADS[sweep.workload]}): paged sustained "
                 + " and ".join(stated) + " at the same latency budget."
                 + (f" No ratio to {' or '.join(unstated)} can be stated from these rates (add rates between the "
                    "two around each crossing; see the chart)." if unstated else ""))
    elif unstated:
        model = (f"**This model's figures** ({sweep.cost.label}, seconds from the {sweep.cost.short_name}, {SWEEP_WORKLOADS[sweep.workload]}): no ratio of "
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
    from allocator.studies.rate_sweep import PAPER_NAMES, POLICY_LABELS
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
    Figure 2 (markdown; numbers from ``sweep`` and ``allocator.studies.rate_sweep.PAPER``)."""
    from allocator.studies.rate_sweep import PAPER, POLICY_LABELS, memory_basis
    key, words = memory_basis(sweep, at)
    ours = ", ".join(f"{pct(sweep.points[(p, at)][key], 1)} for {POLICY_LABELS[p].lower()}" for p in sweep.policies)
    paper = ", ".join(f"{pct(PAPER['token_state_share'][p], 1)}" for p in sweep.policies)
    return (f"**This model**, at {rate(at)} requests/s, {words}: the share of the KV pool holding tokens was {ours}. "
            f"**The paper's Figure 2** (its own experiments) measured {paper} for the same four kinds of allocator.")


def latency_claim(sweep, at: float) -> str:
    """Medians and 99th percentiles of TTFT and TPOT at rate ``at``, reservation against paged
    (markdown; from ``sweep``)."""
    from allocator.studies.rate_sweep import POLICY_LABELS
    lines = []
    for p in sweep.policies:
        s = sweep.points[(p, at)]
        lines.append(f"- **{POLICY_LABELS[p]}**: time to first token {seconds(s['ttft_p50_s'])} median, "
                     f"{seconds(s['ttft_p99_s'])} at the 99th percentile; time per output token "
                     f"{seconds(s['tpot_p50_s'])} median, {seconds(s['tpot_p99_s'])} at the 99th; "
                     f"{s['throughput_tokens_per_s']:,.0f} output tokens/s.")
    return (f"At {rate(at)} requests/s (seconds from the {sweep.cost.short_name}):\n\n" + "\n".join(lines))


def time_split_rows(sweep, at: float) -> list[dict]:
    """"Where the seconds went" at rate ``at``, one row per policy (display strings, from ``sweep``):
    under the roofline, memory-bound and compute-bound steps; under an operator profile, the
    profiled operators; then fixed overhead, swap copies, idle and the whole run (the seconds add
    up to it), and the preemptions. Each seconds column names the cost model that produced it."""
    from allocator.studies.rate_sweep import POLICY_LABELS
    kind = sweep.cost.short_name
    rows = []
    for p in sweep.policies:
        s = sweep.points[(p, at)]
        row = {"allocator": POLICY_LABELS[p]}
        if sweep.cost.kind == "profile":
            row[f"operators ({kind})"] = seconds(s["operators_s"])
        else:
            row[f"memory-bound steps ({kind})"] = seconds(s["memory_limited_s"])
            row[f"compute-bound steps ({kind})"] = seconds(s["compute_limited_s"])
        row.update({f"fixed overhead ({kind})": seconds(s["overhead_s"]),
                    "swap copies (datasheet link)": seconds(s["swap_s"]), "idle": seconds(s["idle_s"]),
                    f"whole run ({kind})": seconds(s["makespan_s"]), "preemptions": f"{s['preemptions']:,}"})
        rows.append(row)
    return rows


def time_split_claim(sweep, at: float, policy: str = "paged") -> str:
    """Where one run's seconds went (markdown; from ``sweep``): memory-limited and compute-limited
    seconds (roofline) or the profiled operators' (operator profile), overhead, swap and idle
    seconds, which add up to the run's time; the cost model named."""
    from allocator.studies.rate_sweep import POLICY_LABELS
    s = sweep.points[(policy, at)]
    if sweep.cost.kind == "profile":
        work = f"{seconds(s['operators_s'])} in the profiled operators (all layers, lm_head and the sampler), "
    else:
        work = (f"{seconds(s['memory_limited_s'])} in steps limited by memory bandwidth, "
                f"{seconds(s['compute_limited_s'])} in compute-bound steps, ")
    return (f"The {POLICY_LABELS[policy].lower()} run at {rate(at)} requests/s took {seconds(s['makespan_s'])} by "
            f"the {sweep.cost.short_name}: " + work + f"{seconds(s['overhead_s'])} of fixed "
            f"per-step overhead, {seconds(s['swap_s'])} copying swapped blocks and {seconds(s['idle_s'])} idle "
            "between requests.")


def sweep_source_note(source: str | None) -> str | None:
    """One plain line saying where a sweep already on the server came from, or None (this session
    computed it, or nothing to say): ``source`` "start-up" (the server computed the page's default
    sweep in the background when it started) or "shared" (another student ran the same settings).
    Either way the runs are the ones these settings make; only who waited for them differs."""
    if source == "start-up":
        return ("This default sweep was precomputed by the server at start-up, before anyone opened the page: "
                "the same runs these settings make, already done.")
    if source == "shared":
        return ("This sweep was already on the server, run earlier with these exact settings by another student "
                "(or by you before a reload): the same runs these settings make.")
    return None
