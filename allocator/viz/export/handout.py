"""The one-page printable handout of a scenario: its settings, both allocators' figures and the
take-aways, every number from the results (no streamlit). The file's name, scenario line and
attribution come from :mod:`allocator.viz.export.html`, like every other export's."""
from __future__ import annotations

import datetime as _dt
import html

import numpy as np

from allocator.accounting.models import PRESETS
from allocator.common.formats import format_bytes, pct, plural, ratio
from allocator.engine.shares import SHARES
from allocator.engine.scenario import full_attention_figures, full_attention_run
from allocator.viz.claims.explainer import peak_held, reservation_name, reservation_rule, share_cells, window_split
from allocator.viz.texts import TINY_BLOCKS_TIME_SHORT
from allocator.viz.export.html import KINDS, check_results, data_name, default_attribution, scenario_summary


def _fmt(x) -> str:
    if x is None:
        return "—"
    if isinstance(x, float):
        return f"{x:,.2f}"
    return f"{x:,}"


_SHARE_PREFIX = "Pool share while requests wait: "


def handout_rows(results: dict) -> list[tuple[str, str, str]]:
    """The handout's summary table: (figure, reservation allocator's value, paged value) as display strings.

    Args:
        results: {"reserve_max": SimulationResult, "paged": SimulationResult}.

    Returns:
        Rows in display order: running while requests wait (mean sequences per step), the peak
        (with how many steps ran it and the first), the six memory shares of :data:`allocator.engine.shares.SHARES`
        while requests wait (% of pool; token states is the utilisation) and their sum (100 %),
        steps to drain, tokens per step,
        preemptions, finished, rejected (requests). "—" marks a figure that does not exist
        (nothing waited, or nothing ran); the table's last row says so when it appears.

    Raises:
        ValueError: ``results`` lacks one of the two allocators.
    """
    check_results(results)
    s = {k: results[k].summary for k in KINDS}

    def peak(x):
        return (f"{x.peak_running} for {plural(x.peak_running_steps, 'step')} (first at step {x.peak_running_step:,})"
                if x.finished else "—")

    spec = [
        ("Running while requests wait (mean sequences per step)", lambda x: _fmt(x.mean_running_busy)),
        ("Peak running (sequences, and how many steps ran it)", peak),
        ("Steps to drain (engine steps)", lambda x: _fmt(x.steps)),
        ("Tokens per step (mean over all steps)", lambda x: _fmt(x.mean_tokens_per_step)),
        ("Preemptions (sequences evicted to free memory)", lambda x: _fmt(x.preemptions)),
        ("Finished (requests)", lambda x: _fmt(x.finished)),
        ("Rejected, can never fit (requests)", lambda x: str(len(x.rejected))),
    ]
    rows = [(label, fn(s["reserve_max"]), fn(s["paged"])) for label, fn in spec]
    # where the pool went: the same six shares as the page's details table, adding up to 100 %
    cells = {k: share_cells(results[k]) for k in KINDS}
    shares = [(f"{_SHARE_PREFIX}{name} ({meaning})", cells["reserve_max"][key], cells["paged"][key])
              for key, _, name, meaning in SHARES]
    shares.append(("Pool shares above, added up", cells["reserve_max"]["total"], cells["paged"]["total"]))
    rows[2:2] = shares                     # token states first: the utilisation
    if any("—" in (a, b) for _, a, b in rows):
        rows.append(("— means", "no such figure: nothing waited (or nothing ran) in that run", ""))
    return rows


def takeaways(results: dict, full: dict | None = None) -> list[str]:
    """Three or four key points of the current run, in plain words, with its own numbers.

    Args:
        results: {"reserve_max": SimulationResult, "paged": SimulationResult}.
        full: with a sliding-window paged run, :func:`allocator.engine.scenario.full_attention_figures`
            of the same scenario's full-attention paged run: the batch-size point then says how much
            of the difference the window makes, not paging.

    Returns:
        A list of plain-text sentences (no markup). Batch sizes are the sustained ones (mean
        running while requests wait); a peak is called a peak and given its step.

    Raises:
        ValueError: ``results`` lacks one of the two allocators.
    """
    check_results(results)
    rm, pg = results["reserve_max"].summary, results["paged"].summary
    bs = results["paged"].block_size
    left = reservation_name(results)
    if not rm.finished or not pg.finished:
        return ["Nothing could run on at least one side: every request was rejected because it can never "
                "fit this pool (the reasons are listed on the page). Enlarge the pool or shorten the requests."]
    out = []
    u_rm, u_pg = rm.mean_utilization_busy, pg.mean_utilization_busy
    if u_rm is not None and u_pg is not None:
        verb = "raised" if u_pg > u_rm else "lowered" if u_pg < u_rm else "kept"
        out.append(f"Reserving {reservation_rule(results)} for every request left {pct(u_rm)} of the "
                   f"pool holding distinct tokens while requests queued; handing out blocks of {bs} slots "
                   f"on demand {verb} that {'at' if verb == 'kept' else 'to'} {pct(u_pg)}.")
    elif u_rm is None and u_pg is None:
        out.append("No request ever had to wait under either allocator: the pool was big enough for both, "
                   f"so they differ only in how full it was ({pct(rm.mean_utilization)} {left} against "
                   f"{pct(pg.mean_utilization)} paged, over all steps). Shrink the pool or add requests to see "
                   "the allocators compete.")
    else:
        waited, kept = (left, "paged") if u_rm is not None else ("paged", left)
        out.append(f"Requests had to queue under {waited} but never under {kept}: in the same pool "
                   f"{kept} admitted every request as it arrived ({pct(rm.mean_utilization)} of the pool "
                   f"held distinct tokens under {left} and {pct(pg.mean_utilization)} paged, over all steps).")
    both = rm.waited and pg.waited           # compare on one basis: busy steps only if both had some
    when = "While requests waited" if both else "Over the whole run"
    b_rm, b_pg = (rm.mean_running_busy, pg.mean_running_busy) if both else (rm.mean_running, pg.mean_running)
    out.append(f"{when}, the same memory ran {b_rm:.1f} sequences per step on average under {left} and "
               f"{b_pg:.1f} when paged" + (f" ({ratio(b_pg / b_rm)})" if b_rm else "")
               + f". The peaks: {rm.peak_running} under {left}, held {peak_held(rm)}, and "
               + f"{pg.peak_running} paged, held {peak_held(pg)}.")
    window = results["paged"].window
    if window is not None and full is not None:
        out[-1] += (f" The paged side's model attends through a {window['sliding_window']:,}-token window, and its "
                    "blocks behind the window go back to the pool: ")
        split = window_split(results, full)
        if split is not None and split["total"]:
            out[-1] += (f"the window accounts for {split['share']} of the difference ({split['window']} sequences "
                        f"{split['basis']} when paged with the window; {split['full']} paged with full attention "
                        f"in the same memory under the same rules; {split['reserve']} under {left}).")
        else:
            out[-1] += (f"paged with full attention in the same memory under the same rules, the run averaged "
                        f"{full['mean_running']:.1f} sequences {'while requests waited' if full['waited'] else 'over the run'}, against "
                        f"{full['window_mean_running']:.1f} with the window.")
    if pg.steps < rm.steps:
        out[-1] += (f" Running more at a time is why the paged run finished everything in {pg.steps:,} steps "
                    f"instead of {rm.steps:,}.")
    elif pg.steps > rm.steps:
        out[-1] += (f" Here the paged run took longer all the same ({pg.steps:,} steps against "
                    f"{rm.steps:,}).")
    out.append(f"Paging leaves one kind of slack: the unfilled end of each sequence's last block, under "
               f"{bs} slots per sequence here. Bigger blocks waste more of it; smaller blocks make the "
               f"block table longer and the attention kernel's reads more scattered ({TINY_BLOCKS_TIME_SHORT}).")
    if pg.preemptions:
        work = (f"{plural(pg.swapped_blocks, 'block')} {'was' if pg.swapped_blocks == 1 else 'were'} "
                "copied to host memory and back"
                if pg.preemption_mode == "swap" and pg.swapped_blocks
                else f"{plural(pg.recomputed_tokens, 'token')} had to be prefilled again")
        out.append(f"Admitting requests without reserving their future has a price: the paged run ran out "
                   f"of blocks and evicted a sequence {plural(pg.preemptions, 'time')}; {work}. The "
                   "answers are unaffected, but the work is done twice (recompute) or copied over the host link "
                   "(swap); the explainer's details table prices it in seconds on the GPU chosen there.")
    return out


_HANDOUT_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; color: #111; margin: 10mm;
       max-width: 190mm; font-size: 9pt; line-height: 1.2; }
h1 { font-size: 15pt; margin: 0 0 2pt 0; } h2 { font-size: 11pt; margin: 5pt 0 2pt 0; }
p { margin: 3pt 0; }
table { border-collapse: collapse; width: 100%; margin: 2pt 0; table-layout: fixed; font-size: 8.5pt; }
th, td { border: 1px solid #999; padding: 0.5pt 4pt; text-align: left; vertical-align: top; }
td.num, th.num { text-align: right; } td.num { white-space: nowrap; }
table.figures col.fig { width: 66%; }
ul.settings { columns: 2; column-gap: 8mm; margin: 2pt 0; padding-left: 12pt; font-size: 8.5pt; }
ul.settings li { break-inside: avoid; }
th { background: #eee; } .muted { color: #555; font-size: 8pt; }
ol { margin: 2pt 0; padding-left: 16pt; } ol li { margin-bottom: 2pt; }
/* one sheet on A4 (297 mm) and on US Letter (279 mm, the shorter): 10 mm margins, no forced size */
@page { margin: 10mm; }
@media print { body { margin: 0; max-width: none; } a { color: inherit; text-decoration: none; }
               table, li { break-inside: avoid; } }
"""


def handout_html(scenario, results: dict, workload) -> str:
    """A one-page printable HTML handout of one scenario: settings, both allocators' figures, takeaways.

    Args:
        scenario: the ``allocator.engine.scenario.Scenario`` that was run (its settings are listed).
        results: {"reserve_max": SimulationResult, "paged": SimulationResult} for that scenario.
        workload: the ``allocator.workloads.requests.Workload`` that was run (name, request count, lengths).

    Returns:
        A complete HTML document (print-ready CSS that fits one A4 or US Letter sheet, no scripts, no
        external resources).

    Raises:
        ValueError: ``results`` lacks one of the two allocators.
    """
    check_results(results)
    e = html.escape
    reqs = list(workload.requests)
    prompts = [r.prompt_len for r in reqs]
    outputs = [r.output_len for r in reqs]
    settings = [
        ("Workload", f"{workload.name} — {len(reqs)} requests"),
        ("Pool (slots, shared by both allocators)", f"{results['paged'].total_slots:,}"),
        ("Paged block size (slots per block)", f"{results['paged'].block_size}"),
        ("max_new_tokens (the generation cap)", f"{workload.max_new_tokens:,}"),
        ("Reservation policy (left side)", f"{reservation_name(results)}: {reservation_rule(results)}"),
    ]
    if prompts:
        settings.append(("Prompt lengths (tokens: min / mean / max)",
                         f"{min(prompts):,} / {np.mean(prompts):,.0f} / {max(prompts):,}"))
        settings.append(("Answer lengths (tokens: min / mean / max)",
                         f"{min(outputs):,} / {np.mean(outputs):,.0f} / {max(outputs):,}"))
    mode = results["paged"].summary.preemption_mode
    if mode:
        settings.append(("Paged preemption (when blocks run out)",
                         "swap to host memory" if mode == "swap" else "recompute"))
    if results["paged"].summary.shared_prefix:
        settings.append(("Shared system prompt (tokens, stored once when paged)",
                         f"{results['paged'].summary.shared_prefix:,}"))
    if getattr(scenario, "metadata_cost", 0):
        settings.append(("Metadata cost c (slot equivalents per block)", f"{scenario.metadata_cost:g}"))
    if getattr(scenario, "workload", None) == "classroom-40":
        settings.append(("Arrivals", "all at step 0" if scenario.arrival == "burst"
                         else f"trickle, {scenario.arrival_rate:g} requests per step"))
    elif scenario is not None:
        settings.append(("Trace rows replayed", f"{scenario.offset + 1:,} to {scenario.offset + len(reqs):,} "
                                                f"at {scenario.steps_per_second:g} steps per second"))
    # the settings in two columns, so that the page holds one sheet (tests/browser/test_handout_print.py)
    settings_html = "".join(f"<li><b>{e(k)}:</b> {e(v)}</li>" for k, v in settings)
    rows_html, headed = "", False
    for a, b, c in handout_rows(results):
        if a == "— means":                 # a footnote across the table, not a column-widening cell
            rows_html += f"<tr><td colspan=3 class=muted>{e(a)} {e(b)}</td></tr>"
            continue
        if a.startswith(_SHARE_PREFIX):    # the six shares under one heading row, each on one line
            if not headed:
                headed = True
                rows_html += f"<tr><td colspan=3><i>{e(_SHARE_PREFIX[:-2])} (% of pool):</i></td></tr>"
            a = "\u2003" + a[len(_SHARE_PREFIX):]
        rows_html += f"<tr><td>{e(a)}</td><td class=num>{e(b)}</td><td class=num>{e(c)}</td></tr>"
    full = None
    if results["paged"].window is not None and scenario is not None:
        full = full_attention_figures(full_attention_run(scenario, workload), results["paged"])
    points = "".join(f"<li>{e(t)}</li>" for t in takeaways(results, full))
    attribution = default_attribution(data_name(scenario) if scenario is not None else workload.name)
    today = _dt.date.today().isoformat()
    big, small = PRESETS["llama3-70b"], PRESETS["7b-fp16"]
    slot_sizes = (f"{format_bytes(big.bytes_per_token)} for Llama 3 70B in {big.dtype}, "
                  f"{format_bytes(small.bytes_per_token)} for a 7B model in {small.dtype}")
    named = e(scenario_summary(scenario, workload)) if scenario is not None else e(workload.name)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>KV cache paging — handout: {e(workload.name)}, block size {results['paged'].block_size}</title>
<style>{_HANDOUT_CSS}</style></head>
<body>
<h1>Reserve for the worst case, or page?</h1>
<p class=muted>Scenario: {named}.</p>
<p>An LLM server keeps every token's keys and values (its KV cache) until the request ends, and it
cannot know in advance how long an answer will be. The same requests ran against the same memory
twice: <b>{e(reservation_name(results))}</b> sets aside {e(reservation_rule(results))} slots in one
contiguous run per request; <b>paged</b> hands out fixed-size blocks as each sequence grows.</p>
<h2>Settings</h2>
<ul class=settings>{settings_html}</ul>
<h2>What happened</h2>
<table class=figures><col class=fig><col><col><tr><th>figure</th><th class=num>{e(reservation_name(results))}</th><th class=num>paged (block {results['paged'].block_size})</th></tr>
{rows_html}</table>
<p class=muted>"While requests wait" means averaged over the engine steps when at least one request
was queued for memory — the moments the allocator's choices matter.</p>
<h2>Take-aways</h2>
<ol>{points}</ol>
<p class=muted>One slot holds one token's keys and values across all layers ({e(slot_sizes)}, as on the
Capacity page), so real pools have hundreds of thousands of slots; the
proportions carry over, the counts do not. The PagedAttention paper measured 20–40 % of KV memory
holding tokens in earlier systems and 2–4x higher throughput with paging.</p>
<p class=muted>{attribution} Generated {today}.</p>
</body></html>
"""
