"""Exports for the classroom: per-step metrics as CSV, the animation as one self-contained HTML
file, and a one-page printable handout. Pure functions (no streamlit import), so the explainer's
download buttons, the CLI (``python -m allocator export-html``) and the tests share them.

Every number written here comes from ``allocator`` results (``SimulationResult.metrics`` and
``.summary``); this module only formats them.
"""
from __future__ import annotations

import datetime as _dt
import html
import io

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from allocator.engine import METRICS
from allocator.accounting import PRESETS
from allocator.formats import format_bytes, pct, plural, ratio
from allocator.metric_names import STEP_UNITS
from allocator.trace import AZURE_ATTRIBUTION
from allocator.validate import one_line
from allocator.shares import SHARES
from allocator.viz.claims import reservation_name, reservation_rule, share_cells

#: Order of the allocators in every export (left to right, as on the explainer page).
KINDS = ("reserve_max", "paged")

#: Per-step metric -> unit written into the CSV header (``allocator.engine.METRICS`` names; the
#: table itself is :data:`allocator.metric_names.STEP_UNITS`, which the glossary and CLI read too).
METRIC_UNITS = STEP_UNITS
#: Header unit for a metric the engine records but this table does not know yet.
UNKNOWN_UNIT = "units: see allocator.engine.METRICS"

#: Unit names that depend on the allocator: what one "unit" of allocation is.
_UNIT_OVERRIDES = {("reserve_max", "units"): "reservations in use", ("paged", "units"): "blocks in use"}

#: Where the lesson's headline figures come from (written on every exported file).
PAPER = ("Kwon et al., \"Efficient Memory Management for Large Language Model Serving with "
         "PagedAttention\", SOSP 2023 (vLLM)")
APP_CREDIT = "KV Cache Paging Lab — reserve-max versus paged KV-cache allocation, simulated step by step."


def _check_results(results: dict) -> None:
    if not isinstance(results, dict) or any(k not in results for k in KINDS):
        raise ValueError(f"results must be a dict with keys {KINDS} (from allocator.scenario.run_both), "
                         f"got {sorted(results) if isinstance(results, dict) else type(results).__name__}")


def metrics_frame(results: dict) -> pd.DataFrame:
    """Per-step metrics of both allocators side by side, one row per record of either run.

    A row starts at engine step ``step`` and holds for ``steps covered`` steps: a busy step is one
    row, and a stretch in which neither allocator runs or holds anything (an idle gap) is one
    row, so a trace with hours between two requests stays a short table. Every value holds for
    each step the row covers (per-step flows such as tokens are per step, not per row).

    Args:
        results: {"reserve_max": SimulationResult, "paged": SimulationResult}, as returned by
            ``allocator.scenario.run_both`` (snapshots not needed).

    Returns:
        DataFrame. Columns ``step`` (first engine step of the row, 0-based) and ``steps covered``,
        then for each allocator kind and each per-step metric the engine recorded
        (``allocator.engine.METRICS`` order, units from ``METRIC_UNITS``) a column named
        ``"<kind> <metric> (<unit>)"``, e.g. ``"paged used_slots (slots)"``. Integer metrics are
        nullable integers; ``utilization`` is a float fraction of the pool (0..1). The allocator
        that drains first has empty cells after its last step (nothing is invented).

    Raises:
        ValueError: ``results`` lacks one of the two allocators.
    """
    _check_results(results)
    starts = np.unique(np.concatenate([np.asarray(results[k].metrics["step"], dtype=np.int64) for k in KINDS]))
    end = max(results[k].steps for k in KINDS)
    cols = {"step": pd.array(starts, dtype="Int64"),
            "steps covered": pd.array(np.diff(np.append(starts, end)), dtype="Int64")}
    for kind in KINDS:
        res = results[kind]
        at = np.searchsorted(res.metrics["step"], starts, side="right") - 1
        inside = (at >= 0) & (starts < res.steps)
        at = np.maximum(at, 0)
        names = [n for n in METRICS if n in res.metrics]
        for name in names:
            unit = _UNIT_OVERRIDES.get((kind, name), METRIC_UNITS.get(name, UNKNOWN_UNIT))
            values = np.asarray(res.metrics[name])
            picked = values[at] if len(values) else np.zeros(len(starts), dtype=values.dtype)
            if name == "utilization":
                cols[f"{kind} {name} ({unit})"] = np.where(inside, picked.astype(float), np.nan)
            else:
                col = pd.array(picked.astype(np.int64), dtype="Int64")
                col[~inside] = pd.NA
                cols[f"{kind} {name} ({unit})"] = col
    return pd.DataFrame(cols)


def _allocator_settings(sc) -> list[tuple[str, str]]:
    """The non-default allocator settings of a (canonical) scenario as (words, file-name part):
    the reservation policy and placement of the left side, the paged side's preemption and
    prefix cache. Two exports that ran different allocators never share a name."""
    out = []
    if sc.policy != "max":
        out.append((f"reserve-{sc.policy} reservations", f"reserve-{sc.policy}"))
    if sc.placement != "first-fit":
        out.append((f"{sc.placement} placement", sc.placement))
    if sc.preemption != "recompute":
        out.append((f"{sc.preemption} preemption", sc.preemption))
    if sc.prefix_caching:
        out.append(("prefix caching", "prefixcache"))
    return out


def scenario_summary(scenario, workload=None) -> str:
    """The scenario in one line, as every export names it: workload, pool, block size, max_new_tokens
    and any non-default setting (seed, arrivals, trace window, shared prompt, reservation policy and
    placement, preemption, prefix caching, c)."""
    sc = scenario.canonical()
    parts = [workload.name if workload is not None else sc.workload, f"{sc.slots:,} slots",
             f"block size {sc.block_size}", f"max_new_tokens {sc.max_new:,}"]
    if sc.kind == "classroom":
        parts.append(f"seed {sc.seed}")
        if sc.arrival == "trickle":
            parts.append(f"trickle {sc.arrival_rate:g} requests/step")
    else:
        parts.append(f"rows {sc.offset + 1:,}-{sc.offset + sc.count:,} at {sc.steps_per_second:g} steps/s")
    if sc.shared_prefix:
        parts.append(f"shared prompt {sc.shared_prefix:,} tokens")
    parts += [words for words, _ in _allocator_settings(sc)]
    if sc.metadata_cost:
        parts.append(f"c = {sc.metadata_cost:g}")
    return ", ".join(parts)


def scenario_slug(scenario) -> str:
    """A file-name-safe name of the scenario, e.g. ``classroom-40_2048slots_block16_seed25``."""
    sc = scenario.canonical()
    name = sc.workload if sc.workload in ("classroom-40", "azure-conv") else "trace"
    parts = [name, f"{sc.slots}slots", f"block{sc.block_size}", f"maxnew{sc.max_new}"]
    if sc.kind == "classroom":
        parts.append(f"seed{sc.seed}")
        if sc.arrival == "trickle":
            parts.append(f"trickle{sc.arrival_rate:g}")
    else:
        parts.append(f"rows{sc.offset + 1}-{sc.offset + sc.count}")
    if sc.shared_prefix:
        parts.append(f"prefix{sc.shared_prefix}")
    parts += [name for _, name in _allocator_settings(sc)]
    if sc.metadata_cost:
        parts.append(f"c{sc.metadata_cost:g}")
    return "_".join(parts).replace(".", "p")


def metrics_csv(results: dict, scenario=None, workload=None) -> str:
    """The per-step metrics of both allocators as one CSV text (see ``metrics_frame`` for columns).

    Args:
        results: {"reserve_max": SimulationResult, "paged": SimulationResult}.
        scenario, workload: what was run; when given, the file opens with one comment line naming
            it (``# KV Cache Paging Lab: <scenario_summary>``). Read it back with
            ``pandas.read_csv(..., comment="#")``.

    Returns:
        CSV text (``\\n`` line ends, the comment line, the header row, then one row per record --
        a busy step or an idle gap -- no index column). Utilisation is a fraction written at full
        precision (it reads back to the same float); counts are integers; cells after an
        allocator drained are empty.

    Raises:
        ValueError: ``results`` lacks one of the two allocators.
    """
    buf = io.StringIO()
    if scenario is not None:
        buf.write(f"# KV Cache Paging Lab: {one_line(scenario_summary(scenario, workload), 400)}\n")
    metrics_frame(results).to_csv(buf, index=False, lineterminator="\n")
    return buf.getvalue()


def _header_block(title: str, caption: str) -> str:
    return (
        "<header style=\"font-family: system-ui, sans-serif; margin: 12px 16px 0 16px;\">"
        f"<h1 style=\"font-size: 1.6em; margin: 0 0 6px 0;\">{html.escape(title)}</h1>"
        f"<p style=\"margin: 0 0 4px 0; color: #333; max-width: 70em;\">{html.escape(caption)}</p>"
        "<p style=\"margin: 0; color: #555; font-size: 0.9em;\">Press <b>▶ Play</b> above the maps, or drag "
        "the step slider. This file works offline: plotly.js is inside it, nothing is fetched.</p>"
        "</header>"
    )


def _footer_block(attribution: str) -> str:
    return (
        "<footer style=\"font-family: system-ui, sans-serif; margin: 8px 16px 16px 16px; color: #555; "
        f"font-size: 0.85em; max-width: 80em;\">{attribution}</footer>"
    )


def _data_name(scenario) -> str:
    """What an export calls the scenario's data: a named workload, or an uploaded file's own name."""
    if scenario.kind == "upload":
        return one_line(scenario.trace_name) or "an uploaded CSV"
    return scenario.workload


def default_attribution(workload_name: str | None = None) -> str:
    """HTML attribution line for an export: the app, the paper and, for the Azure trace, its citation.

    Args:
        workload_name: the workload shown ("classroom-40", "azure-conv", a file path or None).

    Returns:
        An HTML fragment (already escaped) naming the sources of the figures.
    """
    parts = [html.escape(APP_CREDIT), "Figures and terms follow " + html.escape(PAPER) + "."]
    if workload_name and workload_name != "classroom-40":
        parts.append("Data: " + html.escape(AZURE_ATTRIBUTION) if workload_name == "azure-conv"
                     else "Data: trace file " + html.escape(str(workload_name)) + ".")
    else:
        parts.append("Workload: classroom-40, forty synthetic chat requests (no external data).")
    return " ".join(parts)


def animation_caption(scenario, workload, results: dict) -> str:
    """One-paragraph caption of an exported animation: workload, pool and both allocators' headline
    figures (plain text), shared by the CLI's export-html and the explainer's Export menu."""
    rm, pg = results["reserve_max"].summary, results["paged"].summary

    def side(s):
        if not s.finished:
            return "nothing ran (every request rejected)"
        running = f"{s.sustained_running:.1f} running on average" + (" while requests waited" if s.waited else "")
        return f"{running} (peak {s.peak_running} at step {s.peak_running_step:,}), {s.steps:,} steps"

    return (f"{workload.name}: {len(workload)} requests in a {scenario.slots:,}-slot pool, max_new_tokens "
            f"{workload.max_new_tokens:,}. Left: {reservation_name(results)} ({reservation_rule(results)}, contiguous): "
            f"{side(rm)}. Right: paged, blocks of {scenario.block_size} slots: {side(pg)}.")


def animation_html(scenario, workload, results: dict, fig: go.Figure, *, title: str | None = None,
                   extra_figures: tuple | list = ()) -> str:
    """``standalone_html`` with the scenario's title, caption and data attribution filled in."""
    left = reservation_name(results)                 # a pow2 or oracle export says so in its title
    title = title or (f"Reserve for the worst case, or page? ({workload.name}, block size {scenario.block_size}"
                      + ("" if left == "reserve-max" else f", left: {left}") + ")")
    return standalone_html(fig, title=title, caption=animation_caption(scenario, workload, results),
                           attribution=default_attribution(_data_name(scenario)), extra_figures=extra_figures)


def standalone_html(fig: go.Figure, *, title: str = "Reserve for the worst case, or page?",
                    caption: str = "", attribution: str | None = None,
                    extra_figures: tuple | list = ()) -> str:
    """The animated figure as one self-contained HTML page (plays from a USB stick, no server, no network).

    Uses Plotly's own writer: ``fig.to_html(include_plotlyjs=True, full_html=True, auto_play=False)``,
    so plotly.js (about 4.7 MB) is inlined and every animation frame travels in the file; the Play
    button and the step slider work exactly as in the app.

    Args:
        fig: a Plotly figure, normally ``allocator.viz.charts.explainer_figure(results)`` (with frames).
        title: page title and heading (plain text; escaped).
        caption: one or two sentences under the heading (plain text; escaped).
        attribution: HTML fragment for the footer (trusted; default: ``default_attribution()``).
        extra_figures: more figures (e.g. the block-size sweep) appended below the first, sharing
            its inlined plotly.js.

    Returns:
        The HTML document as a string (typically 5-8 MB for the explainer figure).

    Raises:
        ValueError: ``fig`` is not a Plotly figure.
    """
    if not isinstance(fig, go.Figure):
        raise ValueError(f"fig must be a plotly.graph_objects.Figure, got {type(fig).__name__}")
    doc = fig.to_html(include_plotlyjs=True, full_html=True, auto_play=False)
    extras = "".join(f.to_html(include_plotlyjs=False, full_html=False) for f in extra_figures)
    foot = _footer_block(attribution if attribution is not None else default_attribution())
    # Plotly rejects an interrupted animation's promise with no reason (Pause during Play): quieten
    # only that, so the file's console stays clean (pages/_ui/present.py does the same in the app)
    head_extra = (f"<title>{html.escape(title)}</title>"
                  "<script>window.addEventListener('unhandledrejection', function (e) "
                  "{ if (e.reason === undefined) e.preventDefault(); });</script>")
    charset = '<meta charset="utf-8" />'
    if charset in doc:
        doc = doc.replace(charset, charset + "\n    " + head_extra, 1)
    else:
        doc = doc.replace("<head>", "<head>" + head_extra, 1)
    body_at = doc.index("<body>") + len("<body>")
    doc = doc[:body_at] + _header_block(title, caption) + doc[body_at:]
    end = doc.rindex("</body>")
    return doc[:end] + extras + foot + doc[end:]


# ----------------------------------------------------------------------------------- handout

def _fmt(x) -> str:
    if x is None:
        return "—"
    if isinstance(x, float):
        return f"{x:,.2f}"
    return f"{x:,}"


def handout_rows(results: dict) -> list[tuple[str, str, str]]:
    """The handout's summary table: (figure, reservation allocator's value, paged value) as display strings.

    Args:
        results: {"reserve_max": SimulationResult, "paged": SimulationResult}.

    Returns:
        Rows in display order: running while requests wait (mean sequences per step), the peak
        (one instant, with its step), the six memory shares of :data:`allocator.shares.SHARES`
        while requests wait (% of pool; token states is the utilisation) and their sum (100 %),
        steps to drain, tokens per step,
        preemptions, finished, rejected (requests). "—" marks a figure that does not exist
        (nothing waited, or nothing ran); the table's last row says so when it appears.

    Raises:
        ValueError: ``results`` lacks one of the two allocators.
    """
    _check_results(results)
    s = {k: results[k].summary for k in KINDS}

    def peak(x):
        return f"{x['peak_running']} at step {x['peak_running_step']:,}" if x["finished"] else "—"

    spec = [
        ("Running while requests wait (mean sequences per step)", lambda x: _fmt(x["mean_running_busy"])),
        ("Peak running (one instant)", peak),
        ("Steps to drain (engine steps)", lambda x: _fmt(x["steps"])),
        ("Tokens per step (mean over all steps)", lambda x: _fmt(x["mean_tokens_per_step"])),
        ("Preemptions (sequences evicted to free memory)", lambda x: _fmt(x["preemptions"])),
        ("Finished (requests)", lambda x: _fmt(x["finished"])),
        ("Rejected, can never fit (requests)", lambda x: str(len(x["rejected"]))),
    ]
    rows = [(label, fn(s["reserve_max"]), fn(s["paged"])) for label, fn in spec]
    # where the pool went: the same six shares as the page's details table, adding up to 100 %
    cells = {k: share_cells(results[k]) for k in KINDS}
    shares = [(f"Pool share while requests wait: {name} ({meaning})", cells["reserve_max"][key], cells["paged"][key])
              for key, _, name, meaning in SHARES]
    shares.append(("Pool shares above, added up", cells["reserve_max"]["total"], cells["paged"]["total"]))
    rows[2:2] = shares                     # token states first: the utilisation
    if any("—" in (a, b) for _, a, b in rows):
        rows.append(("— means", "no such figure: nothing waited (or nothing ran) in that run", ""))
    return rows


def takeaways(results: dict) -> list[str]:
    """Three or four key points of the current run, in plain words, with its own numbers.

    Args:
        results: {"reserve_max": SimulationResult, "paged": SimulationResult}.

    Returns:
        A list of plain-text sentences (no markup). Batch sizes are the sustained ones (mean
        running while requests wait); a peak is called a peak and given its step.

    Raises:
        ValueError: ``results`` lacks one of the two allocators.
    """
    _check_results(results)
    rm, pg = results["reserve_max"].summary, results["paged"].summary
    bs = results["paged"].block_size
    left = reservation_name(results)
    if not rm["finished"] or not pg["finished"]:
        return ["Nothing could run on at least one side: every request was rejected because it can never "
                "fit this pool (the reasons are listed on the page). Enlarge the pool or shorten the requests."]
    out = []
    u_rm, u_pg = rm["mean_utilization_busy"], pg["mean_utilization_busy"]
    if u_rm is not None and u_pg is not None:
        verb = "raised" if u_pg > u_rm else "lowered" if u_pg < u_rm else "kept"
        out.append(f"Reserving {reservation_rule(results)} for every request left {pct(u_rm)} of the "
                   f"pool holding distinct tokens while requests queued; handing out blocks of {bs} slots "
                   f"on demand {verb} that {'at' if verb == 'kept' else 'to'} {pct(u_pg)}.")
    elif u_rm is None and u_pg is None:
        out.append("No request ever had to wait under either allocator: the pool was big enough for both, "
                   f"so they differ only in how full it was ({pct(rm['mean_utilization'])} {left} against "
                   f"{pct(pg['mean_utilization'])} paged, over all steps). Shrink the pool or add requests to see "
                   "the allocators compete.")
    else:
        waited, kept = (left, "paged") if u_rm is not None else ("paged", left)
        out.append(f"Requests had to queue under {waited} but never under {kept}: in the same pool "
                   f"{kept} admitted every request as it arrived ({pct(rm['mean_utilization'])} of the pool "
                   f"held distinct tokens under {left} and {pct(pg['mean_utilization'])} paged, over all steps).")
    both = rm.waited and pg.waited           # compare on one basis: busy steps only if both had some
    when = "While requests waited" if both else "Over the whole run"
    b_rm, b_pg = (rm.mean_running_busy, pg.mean_running_busy) if both else (rm.mean_running, pg.mean_running)
    out.append(f"{when}, the same memory ran {b_rm:.1f} sequences per step on average under {left} and "
               f"{b_pg:.1f} when paged" + (f" ({ratio(b_pg / b_rm)})" if b_rm else "")
               + f". The peaks, {rm['peak_running']} and {pg['peak_running']}, were single instants ("
               + (f"both at step {rm['peak_running_step']:,}" if rm["peak_running_step"] == pg["peak_running_step"]
                  else f"steps {rm['peak_running_step']:,} and {pg['peak_running_step']:,}") + ").")
    if pg["steps"] < rm["steps"]:
        out[-1] += (f" Running more at a time is why the paged run finished everything in {pg['steps']:,} steps "
                    f"instead of {rm['steps']:,}.")
    elif pg["steps"] > rm["steps"]:
        out[-1] += (f" Here the paged run took longer all the same ({pg['steps']:,} steps against "
                    f"{rm['steps']:,}).")
    out.append(f"Paging leaves one kind of slack: the unfilled end of each sequence's last block, under "
               f"{bs} slots per sequence here. Bigger blocks waste more of it; smaller blocks make the "
               f"block table longer and the attention kernel's reads more scattered.")
    if pg["preemptions"]:
        work = (f"{plural(pg['swapped_blocks'], 'block')} {'was' if pg['swapped_blocks'] == 1 else 'were'} "
                "copied to host memory and back"
                if pg.get("preemption_mode") == "swap" and pg["swapped_blocks"]
                else f"{plural(pg['recomputed_tokens'], 'token')} had to be prefilled again")
        out.append(f"Admitting requests without reserving their future has a price: the paged run ran out "
                   f"of blocks and evicted a sequence {plural(pg['preemptions'], 'time')}; {work}. The "
                   "answers are unaffected, but the work is done twice (recompute) or copied over the host link "
                   "(swap); the explainer's details table prices it in seconds on the GPU chosen there.")
    return out


_HANDOUT_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; color: #111; margin: 18mm;
       max-width: 190mm; font-size: 11pt; line-height: 1.35; }
h1 { font-size: 17pt; margin: 0 0 4pt 0; } h2 { font-size: 12.5pt; margin: 12pt 0 4pt 0; }
table { border-collapse: collapse; width: 100%; margin: 4pt 0; }
th, td { border: 1px solid #999; padding: 3pt 6pt; text-align: left; vertical-align: top; }
td.num, th.num { text-align: right; white-space: nowrap; }
th { background: #eee; } .muted { color: #555; font-size: 9pt; }
ol li { margin-bottom: 4pt; }
@page { size: A4; margin: 14mm; }
@media print { body { margin: 0; } a { color: inherit; text-decoration: none; } }
"""


def handout_html(scenario, results: dict, workload) -> str:
    """A one-page printable HTML handout of one scenario: settings, both allocators' figures, takeaways.

    Args:
        scenario: the ``allocator.scenario.Scenario`` that was run (its settings are listed).
        results: {"reserve_max": SimulationResult, "paged": SimulationResult} for that scenario.
        workload: the ``allocator.workload.Workload`` that was run (name, request count, lengths).

    Returns:
        A complete HTML document (A4, print-ready CSS, no scripts, no external resources).

    Raises:
        ValueError: ``results`` lacks one of the two allocators.
    """
    _check_results(results)
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
    mode = results["paged"].summary.get("preemption_mode")
    if mode:
        settings.append(("Paged preemption (when blocks run out)",
                         "swap to host memory" if mode == "swap" else "recompute"))
    if results["paged"].summary.get("shared_prefix"):
        settings.append(("Shared system prompt (tokens, stored once when paged)",
                         f"{results['paged'].summary['shared_prefix']:,}"))
    if getattr(scenario, "metadata_cost", 0):
        settings.append(("Metadata cost c (slot equivalents per block)", f"{scenario.metadata_cost:g}"))
    if getattr(scenario, "workload", None) == "classroom-40":
        settings.append(("Arrivals", "all at step 0" if scenario.arrival == "burst"
                         else f"trickle, {scenario.arrival_rate:g} requests per step"))
    elif scenario is not None:
        settings.append(("Trace rows replayed", f"{scenario.offset + 1:,} to {scenario.offset + len(reqs):,} "
                                                f"at {scenario.steps_per_second:g} steps per second"))
    settings_html = "".join(f"<tr><th>{e(k)}</th><td>{e(v)}</td></tr>" for k, v in settings)
    rows_html = "".join(f"<tr><td>{e(a)}</td><td class=num>{e(b)}</td><td class=num>{e(c)}</td></tr>"
                        for a, b, c in handout_rows(results))
    points = "".join(f"<li>{e(t)}</li>" for t in takeaways(results))
    attribution = default_attribution(_data_name(scenario) if scenario is not None else workload.name)
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
<table>{settings_html}</table>
<h2>What happened</h2>
<table><tr><th>figure</th><th class=num>{e(reservation_name(results))}</th><th class=num>paged (block {results['paged'].block_size})</th></tr>
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
