"""Exports for the classroom: per-step metrics as CSV, the animation as one self-contained HTML
file; the one-page printable handout is :mod:`allocator.viz.export.handout`, which builds on this
module. Pure functions (no streamlit import), so the explainer's download buttons, the CLI
(``python -m allocator export-html``) and the tests share them.

Every number written here comes from ``allocator`` results (``SimulationResult.metrics`` and
``.summary``); this module only formats them.
"""
from __future__ import annotations

import html
import io

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from allocator.engine.result import METRICS
from allocator.common.metric_names import STEP_UNITS
from allocator.workloads.reader import file_label
from allocator.workloads.trace import AZURE_ATTRIBUTION
from allocator.common.validate import one_line
from allocator.viz.claims.explainer import reservation_name, reservation_rule
from allocator.viz.explainer_chart import explainer_lines_figure

#: Order of the allocators in every export (left to right, as on the explainer page).
KINDS = ("reserve_max", "paged")

#: Per-step metric -> unit written into the CSV header (``allocator.engine.result.METRICS`` names; the
#: table itself is :data:`allocator.common.metric_names.STEP_UNITS`, which the glossary and CLI read too).
METRIC_UNITS = STEP_UNITS
#: Header unit for a metric the engine records but this table does not know yet.
UNKNOWN_UNIT = "units: see allocator.engine.result.METRICS"

#: Unit names that depend on the allocator: what one "unit" of allocation is.
_UNIT_OVERRIDES = {("reserve_max", "units"): "reservations in use", ("paged", "units"): "blocks in use"}

#: Where the lesson's headline figures come from (written on every exported file).
PAPER = ("Kwon et al., \"Efficient Memory Management for Large Language Model Serving with "
         "PagedAttention\", SOSP 2023 (vLLM)")
APP_CREDIT = "KV Cache Paging Lab — reserve-max versus paged KV-cache allocation, simulated step by step."


def check_results(results: dict) -> None:
    """Refuse anything but both allocators' results of one scenario, before an export formats them.

    Args:
        results: ``{"reserve_max": SimulationResult, "paged": SimulationResult}``, as
            ``allocator.engine.scenario.run_scenario`` returns it.

    Raises:
        ValueError: ``results`` is not a dict or lacks one of :data:`KINDS`, naming the keys it has.
    """
    if not isinstance(results, dict) or any(k not in results for k in KINDS):
        raise ValueError(f"results must be a dict with keys {KINDS} (from allocator.engine.scenario.run_scenario), "
                         f"got {sorted(results) if isinstance(results, dict) else type(results).__name__}")


def metrics_frame(results: dict) -> pd.DataFrame:
    """Per-step metrics of both allocators side by side, one row per record of either run.

    A row starts at engine step ``step`` and holds for ``steps covered`` steps: a busy step is one
    row, and a stretch in which neither allocator runs or holds anything (an idle gap) is one
    row, so a trace with hours between two requests stays a short table. Every value holds for
    each step the row covers (per-step flows such as tokens are per step, not per row).

    Args:
        results: {"reserve_max": SimulationResult, "paged": SimulationResult}, as returned by
            ``allocator.engine.scenario.run_scenario`` (snapshots not needed).

    Returns:
        DataFrame. Columns ``step`` (first engine step of the row, 0-based) and ``steps covered``,
        then for each allocator kind and each per-step metric the engine recorded
        (``allocator.engine.result.METRICS`` order, units from ``METRIC_UNITS``) a column named
        ``"<kind> <metric> (<unit>)"``, e.g. ``"paged used_slots (slots)"``. Integer metrics are
        nullable integers; ``utilization`` is a float fraction of the pool (0..1). The allocator
        that drains first has empty cells after its last step (nothing is invented).

    Raises:
        ValueError: ``results`` lacks one of the two allocators.
    """
    check_results(results)
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
    the paged side's scheduling rules (vLLM v1's, with their two caps), the reservation policy and
    placement of the left side, the paged side's preemption, prefix cache, speculative decoding and
    sliding window. Two exports that ran different allocators or schedulers never share a name."""
    out = []
    if sc.rules == "v1":                        # the paged side's scheduler: a token budget and a cap a step
        out.append((f"vLLM v1 rules (max_num_seqs {sc.max_num_seqs:,}, max_num_batched_tokens "
                     f"{sc.max_num_batched_tokens:,})", f"v1-seqs{sc.max_num_seqs}-tokens{sc.max_num_batched_tokens}"))
    if sc.policy != "max":
        out.append((f"reserve-{sc.policy} reservations", f"reserve-{sc.policy}"))
    if sc.placement != "first-fit":
        out.append((f"{sc.placement} placement", sc.placement))
    if sc.preemption != "recompute":
        out.append((f"{sc.preemption} preemption", sc.preemption))
    if sc.prefix_caching:
        out.append(("prefix caching", "prefixcache"))
    if sc.num_speculative_tokens:
        out.append((f"speculative decoding of {sc.num_speculative_tokens} draft tokens a step (acceptance "
                     f"{sc.acceptance_rate:g}, seed {sc.spec_seed})",
                     f"spec{sc.num_speculative_tokens}-a{sc.acceptance_rate:g}-seed{sc.spec_seed}"))
    if sc.sliding_window:                      # the paged side's model (under the v1 rules named above)
        groups = (f" ({sc.full_groups} full-attention and {sc.window_groups} windowed KV-cache groups)"
                  if sc.full_groups else "")
        out.append((f"sliding window {sc.sliding_window:,} tokens{groups}",
                    f"window{sc.sliding_window}" + (f"-groups{sc.full_groups}x{sc.window_groups}" if sc.full_groups
                                                    else "")))
    return out


def scenario_summary(scenario, workload=None) -> str:
    """The scenario in one line, as every export names it: workload, pool, block size, max_new_tokens
    and any non-default setting (seed, arrivals, trace window, shared prompt, reservation policy and
    placement, preemption, prefix caching, c)."""
    sc = scenario.canonical()
    parts = [workload.name if workload is not None else data_name(sc), f"{sc.slots:,} slots",
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


#: The metrics CSV's last column: what was run (its first row; the rest empty).
SCENARIO_COLUMN = "scenario"


def metrics_csv(results: dict, scenario=None, workload=None) -> str:
    """The per-step metrics of both allocators as one CSV text (see ``metrics_frame`` for columns).

    Args:
        results: {"reserve_max": SimulationResult, "paged": SimulationResult}.
        scenario, workload: what was run; when given, a last column ``scenario`` names it (its
            first row holds ``"KV Cache Paging Lab: <scenario_summary>"``, the others are empty),
            so the file names its run and still reads back with a plain ``pandas.read_csv(path)``
            (a comment line would need ``comment="#"``).

    Returns:
        CSV text (``\\n`` line ends, the header row (every name quoted, as :func:`csv_text_cell`
        writes text), then one row per record -- a busy step or an idle gap -- no index column).
        Utilisation is a fraction written at full precision (it reads back to the same float);
        counts are integers; cells after an allocator drained are empty.

    Raises:
        ValueError: ``results`` lacks one of the two allocators.
    """
    buf = io.StringIO()
    frame = metrics_frame(results)
    names = [str(c) for c in frame.columns]
    body = frame.to_csv(index=False, header=False, lineterminator="\n")     # numbers and empty cells only
    if scenario is not None:
        label = csv_text_cell("KV Cache Paging Lab: " + one_line(scenario_summary(scenario, workload), 400))
        lines = body.split("\n")[:-1]
        body = "".join(f"{line},{label if i == 0 else ''}\n" for i, line in enumerate(lines))
        names.append(SCENARIO_COLUMN)
    buf.write(",".join(csv_text_cell(c) for c in names) + "\n")
    buf.write(body)
    return buf.getvalue()


#: What a spreadsheet reads as the start of a formula in a cell (OWASP, "CSV Injection"): a text
#: cell starting with one of these gets a leading apostrophe, which spreadsheets show as text.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_text_cell(text: str) -> str:
    """One text cell of a CSV file, safe to open in a spreadsheet: always in double quotes (inner
    quotes doubled), so a comma in it ("8,192 slots", a file named ``a,b.csv``) never splits it, and
    with a leading apostrophe when it starts like a formula (``=HYPERLINK(...)``, ``+``, ``-``,
    ``@``), so it is never evaluated. Source: OWASP, "CSV Injection"."""
    if text.startswith(FORMULA_STARTS):
        text = "'" + text
    return '"' + text.replace('"', '""') + '"'


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


def data_name(scenario) -> str:
    """What an export calls the scenario's data (for :func:`default_attribution`): a named workload,
    a trace file by its path inside the project or its base name (never a server's absolute path),
    or an uploaded file's own name on one line ("an uploaded CSV" when it has none)."""
    if scenario.kind == "upload":
        return one_line(scenario.trace_name) or "an uploaded CSV"
    if scenario.kind in ("csv", "mooncake"):       # a path as typed: named by project path or base name
        return file_label(scenario.workload)
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

    w = results["paged"].window
    window = ("" if w is None else
              f" The right side's model attends through a {w['sliding_window']:,}-token sliding window under vLLM v1's "
              f"rules: a decoding sequence held at most {w['peak_decode_window_blocks']} blocks per windowed group "
              f"(bound {w['bound_blocks']}); {w['released_blocks']:,} blocks were released behind the window "
              "(violet while nobody has taken them again).")
    return (f"{workload.name}: {len(workload)} requests in a {scenario.slots:,}-slot pool, max_new_tokens "
            f"{workload.max_new_tokens:,}. Left: {reservation_name(results)} ({reservation_rule(results)}, contiguous): "
            f"{side(rm)}. Right: paged, blocks of {scenario.block_size} slots: {side(pg)}.{window}")


def animation_html(scenario, workload, results: dict, fig: go.Figure, *, title: str | None = None,
                   extra_figures: tuple | list = ()) -> str:
    """``standalone_html`` with the scenario's title, caption and data attribution filled in, and the
    utilisation and running batch of ``results`` (``explainer_lines_figure``) under the maps, as in the
    app, before ``extra_figures``."""
    left = reservation_name(results)                 # a pow2 or oracle export says so in its title
    title = title or (f"Reserve for the worst case, or page? ({workload.name}, block size {scenario.block_size}"
                      + ("" if left == "reserve-max" else f", left: {left}") + ")")
    return standalone_html(fig, title=title, caption=animation_caption(scenario, workload, results),
                           attribution=default_attribution(data_name(scenario)),
                           extra_figures=(explainer_lines_figure(results), *extra_figures))


def standalone_html(fig: go.Figure, *, title: str = "Reserve for the worst case, or page?",
                    caption: str = "", attribution: str | None = None,
                    extra_figures: tuple | list = ()) -> str:
    """The animated figure as one self-contained HTML page (plays from a USB stick, no server, no network).

    Uses Plotly's own writer: ``fig.to_html(include_plotlyjs=True, full_html=True, auto_play=False)``,
    so plotly.js (about 4.7 MB) is inlined and every animation frame travels in the file; the Play
    button and the step slider work exactly as in the app.

    Args:
        fig: a Plotly figure, normally ``allocator.viz.explainer_chart.explainer_figure(results)`` (with frames).
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

