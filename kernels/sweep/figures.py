"""Figures, tables and sentences of the kernel page, built from the kernels' results (no streamlit).

Every number drawn or quoted comes from a :class:`kernels.sweep.data.SweepResult` (live or
recorded), from a prediction table (:func:`kernels.sweep.predict.prediction_table`), from the compile
record (:func:`kernels.compile_check.load_report`) or from the allocator's block-size sweep; the
page (``pages/kernel.py``) only places them. A measurement whose interval includes 1.0 is drawn
as such (hollow marker, error bar) and is never drawn as a trend in the "two costs" chart.

Why here and not under ``allocator/viz/``: these figures read the kernels' result type and its
verdict vocabulary (:mod:`kernels.sweep.stats`), and the core never imports ``kernels`` (torch), so
they sit beside the results they draw. Imports stay one way: pages -> kernels -> allocator
(the palette, the waste curve's basis); nothing in ``allocator/`` imports this module.
``kernels/`` may not import streamlit (``tests/core/test_layering.py``); nothing else in ``kernels/``
imports this module, so ``python3 -m kernels.gpu_check`` still needs only torch and Triton.
"""
from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from allocator.viz.claims.sweep import sweep_basis, sweep_value
from allocator.viz.theme import ACCENT, ORANGE_EMPTY, PAGED
from kernels.sweep.stats import NO_DIFFERENCE
from kernels.sweep.data import SweepResult
from allocator.common.formats import format_bytes_decimal as format_bytes
from allocator.common.formats import seconds


def _ms(ms) -> str:
    """A time in milliseconds as the app prints durations (``allocator.common.formats.seconds``)."""
    return seconds(float(ms) / 1000)


#: Columns of the compile record shown in the page's "every compiled kernel" table, in order.
COMPILE_COLUMNS = ("kernel", "dtype", "head_dim", "group", "block_size", "paged", "tile", "num_warps", "num_stages",
                   "registers", "spill_store_bytes", "spill_load_bytes", "shared_bytes", "cp_async", "used_by", "error")


def compile_frame(report: dict) -> pd.DataFrame:
    """The compile record's rows (``report["results"]``, :func:`kernels.compile_check.load_report`)
    as a display table: the :data:`COMPILE_COLUMNS` the record has (bytes, registers per thread)."""
    rows = pd.DataFrame(report["results"])
    return rows[[c for c in COMPILE_COLUMNS if c in rows]]


#: Series colours for overhead curves: live first, then recorded sweeps.
OVERHEAD_COLOURS = (PAGED, ACCENT, "#555555", "#56B4E9")


def log2_axis(block_sizes: list[int]) -> dict:
    """A log x axis with one tick per block size swept."""
    return dict(type="log", tickvals=block_sizes, ticktext=[str(b) for b in block_sizes],
                title="block size (slots per block, log scale)")


def _markers(rows: list[dict], colour: str) -> dict:
    """Filled markers where the overhead is measurable, hollow where its interval includes 1.0."""
    return dict(size=9, color=[colour if r["verdict"] != NO_DIFFERENCE else "white" for r in rows],
                line=dict(color=colour, width=2))


def latency_figure(res: SweepResult, title: str) -> go.Figure:
    """Median latency of paged and contiguous decode (ms) against block size; bars = quartiles."""
    df = pd.DataFrame(res.rows)
    fig = go.Figure()
    for side, name, colour, dash in (("paged", "paged (through the block table)", PAGED, "solid"),
                                     ("contiguous", "contiguous baseline (same tokens, no table)", ACCENT, "dash")):
        med, q1, q3 = df[f"{side}_ms"], df[f"{side}_ms_q1"], df[f"{side}_ms_q3"]
        fig.add_trace(go.Scatter(
            x=df["block_size"], y=med, name=name, mode="lines+markers", line=dict(color=colour, dash=dash),
            error_y=dict(type="data", symmetric=False, array=(q3 - med).clip(lower=0),
                         arrayminus=(med - q1).clip(lower=0), color=colour, thickness=1),
            customdata=[[_ms(a), _ms(b), n, _ms(m)] for a, b, n, m in zip(q1, q3, df["pairs"], med)],
            hovertemplate=("block size %{x} slots<br>" + name + ": median %{customdata[3]}<br>"
                           "quartiles %{customdata[0]}–%{customdata[1]} over %{customdata[2]} "
                           "calls<extra></extra>")))
    if "sdpa_ms" in df:
        fig.add_trace(go.Scatter(
            x=df["block_size"], y=df["sdpa_ms"], name="torch SDPA on contiguous K/V (second reference)",
            mode="lines+markers", line=dict(color="#555555", dash="dot"),
            customdata=[_ms(m) for m in df["sdpa_ms"]],
            hovertemplate="block size %{x} slots<br>SDPA (no table): median %{customdata}<extra></extra>"))
    fig.update_layout(title=f"{title} (median; bars: quartiles)", xaxis=log2_axis(list(df["block_size"])),
                      yaxis=dict(title="latency per decode step (ms)", rangemode="tozero"),
                      legend=dict(orientation="h", y=-0.25), height=380, margin=dict(t=50, b=10))
    return fig


def overhead_trace(res: SweepResult, label: str, colour: str, dash: str = "solid") -> go.Scatter:
    """The overhead of one sweep with its intervals (95 % together) as error bars; hover names the verdict."""
    df = pd.DataFrame(res.rows)
    return go.Scatter(
        x=df["block_size"], y=df["overhead"], name=label, mode="lines+markers",
        line=dict(color=colour, dash=dash), marker=_markers(res.rows, colour),
        error_y=dict(type="data", symmetric=False, array=(df["overhead_ci_high"] - df["overhead"]).clip(lower=0),
                     arrayminus=(df["overhead"] - df["overhead_ci_low"]).clip(lower=0), color=colour, thickness=1),
        customdata=[[*row, _ms(row[3]), _ms(row[4])] for row in
                    df[["overhead_ci_low", "overhead_ci_high", "verdict", "paged_ms", "contiguous_ms"]].to_numpy().tolist()],
        hovertemplate=("block size %{x} slots<br>paged ÷ contiguous: %{y:.3f}×<br>interval "
                       "%{customdata[0]:.3f}–%{customdata[1]:.3f}: %{customdata[2]}<br>paged %{customdata[5]}, "
                       "contiguous %{customdata[6]}<br>" + label + "<extra></extra>"))


def overhead_figure(res: SweepResult, title: str) -> go.Figure:
    """Gather overhead (median paired ratio, with its interval) against block size, with the 1x line."""
    df = pd.DataFrame(res.rows)
    fig = go.Figure()
    fig.add_trace(overhead_trace(res, "gather overhead (paged ÷ contiguous)", PAGED))
    fig.add_trace(go.Scatter(x=[df["block_size"].min(), df["block_size"].max()], y=[1, 1], mode="lines",
                             name="no overhead (1×)", line=dict(color="#777777", dash="dot"), hoverinfo="skip"))
    fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name="interval includes 1× (no measurable difference)",
                             marker=dict(size=9, color="white", line=dict(color=PAGED, width=2))))
    top = max(1.5, float(df["overhead_ci_high"].max()) * 1.1)
    fig.update_layout(title=title, xaxis=log2_axis(list(df["block_size"])),
                      yaxis=dict(title="paged latency ÷ contiguous latency (×)", range=[0, top]),
                      legend=dict(orientation="h", y=-0.25), height=400, margin=dict(t=50, b=10))
    return fig


def sweep_table(res: SweepResult) -> pd.DataFrame:
    """The rows as a display table (ms, ×, interval, verdict, GB/s)."""
    df = pd.DataFrame(res.rows)
    def spread(side: str) -> list[str]:
        return [f"{m:.3f} ({a:.3f}–{b:.3f})"
                for m, a, b in zip(df[f"{side}_ms"], df[f"{side}_ms_q1"], df[f"{side}_ms_q3"])]
    out = pd.DataFrame({
        "block size (slots)": df["block_size"],
        "paged ms: median (quartiles)": spread("paged"),
        "contiguous ms: median (quartiles)": spread("contiguous"),
        "overhead (×)": df["overhead"].round(3),
        "interval (×)": [f"{a:.3f}–{b:.3f}" for a, b in zip(df["overhead_ci_low"], df["overhead_ci_high"])],
        "verdict": df["verdict"],
        # two decimals, or three significant figures where that keeps more: a small run on a CPU reads
        # well under 0.01 GB/s, which two decimals printed as 0
        "paged K+V read (GB/s)": df["paged_GBps"].map(
            lambda x: round(x, max(2, 2 - math.floor(math.log10(x)))) if x > 0 else x),
    })
    if df["paged_peak_fraction"].notna().any():
        out["paged, % of peak"] = (100 * df["paged_peak_fraction"]).round(1)
    out["max |paged − contiguous|"] = df["max_abs_diff"].map(lambda x: f"{x:.1e}")
    return out


def sweep_headers(res: SweepResult) -> dict[str, tuple[str, str]]:
    """Short header and tooltip for each :func:`sweep_table` column of ``res``: ``{column: (header, help)}``
    (the full headers pushed the last columns off a 1366-pixel laptop screen)."""
    level = f"{100 * res.meta.get('confidence', 0.95):.0f} %"
    peak = (f"the device's peak memory bandwidth, {res.meta['peak_GBps']:,.0f} GB/s ({res.meta.get('peak_source')})"
            if res.meta.get("peak_GBps") else "the device's peak memory bandwidth")
    out = {
        "block size (slots)": ("block size", "Slots per block of the paged side."),
        "paged ms: median (quartiles)": ("paged ms", "Time of one decode step through the block table (ms): "
                                         "median of the timed calls, quartiles in brackets."),
        "contiguous ms: median (quartiles)": ("contig. ms", "Time of one decode step of the contiguous baseline, "
                                              "the same tokens with no block table (ms): median, quartiles in brackets."),
        "overhead (×)": ("overhead ×", "Gather overhead: the median of the paired ratios paged ÷ contiguous."),
        "interval (×)": ("interval ×", f"Bootstrap interval of the overhead; the intervals of all block sizes hold "
                         f"together {level} of the time. One that includes 1 is no measurable difference."),
        "verdict": ("verdict", "What the interval says: slower, faster, or no measurable difference."),
        "paged K+V read (GB/s)": ("paged GB/s", "Keys and values one step must read, divided by the paged side's "
                                  "median time (GB/s)."),
        "paged, % of peak": ("% of peak", f"Paged bandwidth as a percentage of {peak}."),
        "max |paged − contiguous|": ("max |diff|", "Largest absolute difference between the paged and the contiguous "
                                     "outputs: both sides compute the same attention, so it should be tiny."),
    }
    return {col: out[col] for col in sweep_table(res).columns}


def describe(res: SweepResult) -> str:
    """One line: backend, device, shape, bytes, timer (and date/versions for recorded runs)."""
    m, s = res.meta, res.meta.get("shape", {})
    shape = (f"{s.get('num_seqs')} sequences × {s.get('seq_len'):,} tokens, {s.get('num_heads')} query / "
             f"{s.get('num_kv_heads')} KV heads, head dim {s.get('head_dim')}, {s.get('dtype')}")
    cache = ""
    if m.get("llc_bytes"):
        llc = format_bytes(m["llc_bytes"])
        cache = (f" ({m['kv_bytes'] / m['llc_bytes']:.1f}× this CPU's {llc} last-level cache)"
                 if m["kv_bytes"] >= m["llc_bytes"] else f" (fits in this CPU's {llc} last-level cache)")
    text = (f"Backend `{m.get('backend')}` on {m.get('device')}; {shape}; K+V read per step "
            f"{format_bytes(m.get('kv_bytes', 0))}{cache}. Timer: {m.get('timer')}.")
    launch = m.get("launch")
    if launch:
        path = "single pass" if launch["num_splits"] == 1 else f"split-KV, {launch['num_splits']} splits"
        text += (f" Launch: {path}, {launch['tile']}-token tiles, {launch['num_warps']} warps, "
                 f"{launch['num_stages']} stages.")
    if m.get("recorded"):
        v = m.get("versions", {})
        text = (f"**Recorded** {m.get('date')} on {m.get('device')} (file `{m.get('file')}`), torch "
                f"{v.get('torch')}, triton {v.get('triton')}, CUDA {v.get('cuda')}. " + text)
    return text


def two_costs_figure(waste_rows: list[dict], waste_label: str,
                     overheads: list[tuple[SweepResult, str]]) -> go.Figure:
    """Memory waste (allocator) and measured gather overhead (kernel) against block size.

    ``overheads`` holds (sweep, legend label) pairs; only sweeps that may be drawn as a trend
    belong here (:func:`drawable`), each drawn with its intervals.
    """
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    w = pd.DataFrame(waste_rows)
    basis, words = sweep_basis(waste_rows)
    waste = [None if (u := sweep_value(r, "mean_utilization", basis)) is None else 100 * (1 - u) for r in waste_rows]
    fig.add_trace(go.Scatter(
        x=w["block_size"], y=waste, name=f"memory holding no token (%) — allocator, {waste_label}",
        mode="lines+markers", line=dict(color=ORANGE_EMPTY),
        hovertemplate="block size %{x} slots<br>%{y:.1f} % of the pool holds no token "
                      f"(mean {words})<extra></extra>"), secondary_y=False)
    sizes = set(w["block_size"])
    top = 1.5
    for (res, label), colour, dash in zip(overheads, OVERHEAD_COLOURS, ("dash", "dot", "dashdot", "longdash")):
        o = pd.DataFrame(res.rows)
        sizes |= set(o["block_size"])
        top = max(top, float(o["overhead_ci_high"].max()) * 1.1)
        fig.add_trace(overhead_trace(res, f"gather overhead (×) — {label}", colour, dash), secondary_y=True)
    if overheads:
        fig.update_yaxes(title_text="gather overhead (paged ÷ contiguous, ×)", secondary_y=True,
                         range=[0, top], tickformat=".2f", showgrid=False, tickmode="auto", nticks=6)
    fig.update_xaxes(**log2_axis(sorted(sizes)))
    fig.update_yaxes(title_text="pool holding no token (% of slots)", secondary_y=False, rangemode="tozero")
    fig.update_layout(title="Two costs of a block size", legend=dict(orientation="h", y=-0.25), showlegend=True,
                      height=440, margin=dict(t=50, b=10))
    return fig


def drawable(res: SweepResult) -> tuple[bool, str]:
    """Whether a sweep's overhead may be drawn as a curve in the two-costs chart, and if not why.

    Not when no block size shows a measurable difference (that is noise), and not when the sweep
    carries a warning (e.g. its K+V fits in a cache, so it does not measure reads from memory).
    """
    if res.meta.get("warnings"):
        return False, res.meta["warnings"][0]
    if not res.measurable:
        return False, "no measurable difference at any block size"
    return True, ""


def recorded_label(res: SweepResult) -> str:
    """Legend text of a recorded sweep: device, shape and date."""
    s = res.meta.get("shape", {})
    return (f"recorded on {res.meta.get('device')}, {s.get('num_seqs')}×{s.get('seq_len')} tokens, "
            f"{str(res.meta.get('date', ''))[:10]}")


def percent_span(fractions: list[float]) -> str:
    """ "85 %" or "84–87 %": the range of fractions as whole percentages."""
    lo, hi = round(100 * min(fractions)), round(100 * max(fractions))
    return f"{lo} %" if lo == hi else f"{lo}–{hi} %"


def prediction_frame(rows: list[dict]) -> pd.DataFrame:
    """The prediction rows (:func:`kernels.sweep.predict.prediction_table`) as a display table; every
    column header says it is predicted."""
    df = pd.DataFrame(rows)
    return pd.DataFrame({
        "block size (predicted launch)": ["contiguous" if b is None or b != b else str(int(b)) for b in df["block_size"]],
        "kernel, splits": [f"{k}, {n}" for k, n in zip(df["kernel"], df["num_splits"])],
        "registers / thread (record)": df["registers"],
        "shared KiB / program (record)": df["shared_KiB"],
        "programs per SM (limit)": [f"{p} ({lim})" for p, lim in zip(df["programs_per_sm"], df["limited_by"])],
        "waves": df["waves"],
        "K/V in flight per SM (KiB)": (df["inflight_per_sm"] / 1024).round(0).astype(int),
        "predicted GB/s": df["GBps"].round(0).astype(int),
        "predicted % of data-sheet bandwidth": (100 * df["fraction_of_nominal"]).round(1),
        "predicted paged ÷ contiguous": [("—" if o is None or o != o else f"{o:.3f}")
                                         for o in df["predicted_overhead"]],
    })


def prediction_headers(gpu_name: str, sms: int, nominal_GBps: float) -> dict[str, tuple[str, str]]:
    """Short header and tooltip for each :func:`prediction_frame` column: ``{column: (header, help)}``.

    The full headers made the table wider than a 1920-pixel projector (the last column was cut to
    "predicted paged ÷ co…"); the page shows these short ones, and each tooltip says in full what the
    column is and whether it is the compile record's or the model's (``kernels/sweep/predict.py``).
    """
    tb = f"{nominal_GBps / 1000:.1f} TB/s"
    return {
        "block size (predicted launch)": ("block size", "Slots per block of the launch this row predicts; "
                                          "\"contiguous\" is the baseline kernel, which reads no block table."),
        "kernel, splits": ("kernel, splits", "The compiled kernel the launch uses, and how many pieces each "
                           "sequence's context is split into (split-KV), as the launcher would choose."),
        "registers / thread (record)": ("regs", "Registers per thread, from the compile record."),
        "shared KiB / program (record)": ("smem KiB", "Shared memory per program (KiB), from the compile record."),
        "programs per SM (limit)": ("programs / SM", "Programs one SM holds at once, and what limits them "
                                    "(registers, warps or shared memory): predicted from the compile record."),
        "waves": ("waves", f"Rounds in which the grid's programs run on the {sms} SMs of an {gpu_name} (predicted)."),
        "K/V in flight per SM (KiB)": ("KiB in flight / SM", "K/V bytes (KiB) the resident programs of one SM keep "
                                       "on their way from memory (predicted; Little's law turns them into bandwidth)."),
        "predicted GB/s": ("pred. GB/s", "Predicted bandwidth: bytes read and written per second (GB/s). "
                           "A prediction, not a measurement."),
        "predicted % of data-sheet bandwidth": (f"pred. % of {tb}", f"Predicted bandwidth as a percentage of the "
                                                f"{gpu_name} data sheet's {tb}."),
        "predicted paged ÷ contiguous": ("pred. paged ÷ contig.", "Predicted paged time over the contiguous "
                                         "kernel's time for the same tokens. The model sees only the block table's "
                                         "extra bytes, not scattered reads, so it predicts about 1."),
    }


def prediction_figure(tables: dict[str, list[dict]], nominal_GBps: float, copy_GBps: float, gpu: str) -> go.Figure:
    """Predicted bandwidth against block size, one line per shape, with the copy ceiling and the
    data-sheet figure as lines; the title and every hover say "predicted"."""
    fig = go.Figure()
    sizes: set[int] = set()
    for (label, rows), colour in zip(tables.items(), OVERHEAD_COLOURS):
        paged = [r for r in rows if r["block_size"] is not None]
        contig = next((r for r in rows if r["block_size"] is None), None)
        sizes |= {r["block_size"] for r in paged}
        fig.add_trace(go.Scatter(
            x=[r["block_size"] for r in paged], y=[r["GBps"] for r in paged], mode="lines+markers",
            name=f"paged, predicted — {label}", line=dict(color=colour),
            customdata=[[r["num_splits"], r["waves"], 100 * r["fraction_of_nominal"]] for r in paged],
            hovertemplate=("block size %{x} slots<br>predicted %{y:.0f} GB/s (%{customdata[2]:.1f} % of "
                           f"{nominal_GBps / 1000:.1f} TB/s)<br>%{{customdata[0]}} splits, %{{customdata[1]}} waves"
                           "<br>a prediction, not a measurement<extra></extra>")))
        if contig is not None:
            fig.add_trace(go.Scatter(
                x=sorted(sizes), y=[contig["GBps"]] * len(sizes), mode="lines", name=f"contiguous, predicted — {label}",
                line=dict(color=colour, dash="dash"),
                hovertemplate="contiguous kernel: predicted %{y:.0f} GB/s<br>a prediction<extra></extra>"))
    xs = sorted(sizes) or [1, 256]
    fig.add_trace(go.Scatter(x=[xs[0], xs[-1]], y=[copy_GBps] * 2, mode="lines",
                             name=f"device copy ({copy_GBps / 1000:.1f} TB/s, the model's ceiling)",
                             line=dict(color="#777777", dash="dot"), hoverinfo="skip"))
    fig.add_trace(go.Scatter(x=[xs[0], xs[-1]], y=[nominal_GBps] * 2, mode="lines",
                             name=f"{gpu} data sheet ({nominal_GBps / 1000:.1f} TB/s)",
                             line=dict(color="#000000", dash="dot", width=1), hoverinfo="skip"))
    fig.update_layout(title=f"Predicted bandwidth on an {gpu.replace('NVIDIA ', '')} (a model from the compile record "
                            "— not a measurement)",
                      xaxis=log2_axis(xs), yaxis=dict(title="predicted bytes moved per second (GB/s)", rangemode="tozero"),
                      legend=dict(orientation="h", y=-0.25), height=420, margin=dict(t=50, b=10))
    return fig
