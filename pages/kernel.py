"""Live kernel: run the paged-attention decode kernel and measure what the block table costs it.

Renders only: the kernel, the torch paths, the sweep and the recorded results all come from
``kernels``; the memory-waste curve comes from ``allocator``. Every number on the page names the
backend that produced it. Never shows a traceback: failures become ``st.error`` messages.
"""
from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go
import streamlit as st
from plotly.subplots import make_subplots

from allocator.viz.claims import sweep_basis, sweep_value
from allocator.viz.theme import ACCENT, ORANGE_EMPTY, PAGED
from pages._ui.state import current_scenario

SWEEP_KEY = "kernel_sweep_result"

st.title("Live kernel: what the block table costs")
st.markdown(
    "Paging saves memory, but the attention kernel now has to look up every block of a "
    "sequence in its **block table** before it can read that block's keys and values. "
    "Small blocks mean more lookups and more scattered reads; large blocks mean fewer. "
    "This page runs a real paged-attention decode kernel (written in Triton, in the layout "
    "vLLM uses) and times it against a **contiguous baseline**: the same tokens, the same "
    "code, but each sequence stored as one long block. The ratio of the two times is the "
    "**gather overhead** of a block size."
)


def _fmt_err(x: float) -> str:
    return "∞ (NaN in output)" if not math.isfinite(x) else f"{x:.2e}"


def _log2_axis(block_sizes: list[int]) -> dict:
    return dict(type="log", tickvals=block_sizes, ticktext=[str(b) for b in block_sizes],
                title="block size (slots per block, log scale)")


# ------------------------------------------------------------------ backend
try:
    import kernels
    from kernels.sweep import (CPU_SHAPE, CUDA_SHAPE, DEFAULT_BLOCK_SIZES, TINY_SHAPE, SweepResult,
                               format_bytes, load_recorded, sweep)
    sweep_backend = kernels.detect("sweep")
    check_backend = kernels.detect("check")
except Exception as exc:  # torch/triton missing or broken: say so, render nothing else
    st.error(f"The kernel package could not be loaded, so this page cannot run: "
             f"{type(exc).__name__}: {exc}")
    st.stop()

with st.container(border=True):
    st.markdown(f"**Backend for timing:** `{sweep_backend.name}` — {sweep_backend.device}")
    st.caption(sweep_backend.reason)
    if check_backend.name != sweep_backend.name:
        st.markdown(f"**Backend for the correctness check:** `{check_backend.name}` — {check_backend.device}")
        st.caption(check_backend.reason)
    if sweep_backend.peak_bandwidth:
        st.caption(f"Peak memory bandwidth: {sweep_backend.peak_bandwidth / 1e9:,.0f} GB/s "
                   f"({sweep_backend.peak_source}).")


# ------------------------------------------------------------------ correctness check
@st.cache_data(show_spinner=False)
def _check(backend_name: str) -> dict:
    return kernels.check_correctness(backend=backend_name)


st.subheader("Correctness check")
st.markdown(
    "A tiny batch (3 sequences of 1, 32 and 45 tokens, 8 query heads sharing 2 KV heads, block "
    "size 16, a shuffled block table) is run through the kernel and compared with a plain torch "
    "reference that gathers every token to a dense tensor first. Every slot that holds no token "
    "is filled with NaN, so a read past a sequence's end would show up as an infinite error."
)
check_names = [check_backend.name] + ([sweep_backend.name] if sweep_backend.name != check_backend.name else [])
cols = st.columns(len(check_names))
for col, name in zip(cols, check_names):
    with col:
        try:
            res = _check(name)
        except Exception as exc:
            st.error(f"Correctness check on backend `{name}` failed to run: {type(exc).__name__}: {exc}")
            continue
        what = {"triton-interpreter": "Triton kernel, Triton CPU interpreter",
                "cuda": "Triton kernel, compiled for CUDA",
                "torch-cpu": "torch gather + attention (CPU)"}[name]
        st.metric(f"Max abs error vs reference — {name}", _fmt_err(res["max_abs_error"]),
                  help=f"{what}. Tolerance {res['tolerance']:.0e}; fp32.")
        if res["passed"]:
            st.success(f"`{name}` ({what}) matches the reference "
                       f"(tolerance {res['tolerance']:.0e}, kernel call {res['seconds'] * 1e3:.0f} ms).")
        else:
            st.error(f"`{name}` ({what}) does NOT match the reference: max abs error "
                     f"{_fmt_err(res['max_abs_error'])} > {res['tolerance']:.0e}.")


# ------------------------------------------------------------------ figures
def latency_figure(res: SweepResult, title: str) -> go.Figure:
    """Median latency of paged and contiguous decode (ms) against block size."""
    df = pd.DataFrame(res.rows)
    fig = go.Figure()
    for col, name, colour, dash in (("paged_ms", "paged (through the block table)", PAGED, "solid"),
                                    ("contiguous_ms", "contiguous baseline (same tokens)", ACCENT, "dash")):
        fig.add_trace(go.Scatter(
            x=df["block_size"], y=df[col], name=name, mode="lines+markers",
            line=dict(color=colour, dash=dash),
            customdata=df[["overhead", "paged_GBps", "contiguous_GBps"]].to_numpy(),
            hovertemplate=("block size %{x} slots<br>" + name + ": %{y:.3f} ms<br>"
                           "overhead %{customdata[0]:.2f}×<br>paged %{customdata[1]:.1f} GB/s, "
                           "contiguous %{customdata[2]:.1f} GB/s<extra></extra>")))
    fig.update_layout(title=title, xaxis=_log2_axis(list(df["block_size"])),
                      yaxis=dict(title="median latency per decode step (ms)", rangemode="tozero"),
                      legend=dict(orientation="h", y=-0.25), height=380, margin=dict(t=50, b=10))
    return fig


def overhead_figure(res: SweepResult, title: str) -> go.Figure:
    """Gather overhead (paged / contiguous latency) against block size, with the 1× line."""
    df = pd.DataFrame(res.rows)
    fig = go.Figure()
    fig.add_trace(go.Scatter(
        x=df["block_size"], y=df["overhead"], name="gather overhead (paged ÷ contiguous)",
        mode="lines+markers", line=dict(color=PAGED),
        customdata=df[["paged_ms", "contiguous_ms"]].to_numpy(),
        hovertemplate=("block size %{x} slots<br>overhead %{y:.2f}×<br>paged %{customdata[0]:.3f} ms, "
                       "contiguous %{customdata[1]:.3f} ms<extra></extra>")))
    fig.add_trace(go.Scatter(x=[df["block_size"].min(), df["block_size"].max()], y=[1, 1], mode="lines",
                             name="no overhead (1×)", line=dict(color="#777777", dash="dot"),
                             hoverinfo="skip"))
    top = max(1.5, float(df["overhead"].max()) * 1.1)
    fig.update_layout(title=title, xaxis=_log2_axis(list(df["block_size"])),
                      yaxis=dict(title="paged latency ÷ contiguous latency (×)", range=[0, top]),
                      legend=dict(orientation="h", y=-0.25), height=380, margin=dict(t=50, b=10))
    return fig


def sweep_table(res: SweepResult) -> pd.DataFrame:
    """The rows as a display table (ms, ×, GB/s)."""
    df = pd.DataFrame(res.rows)
    out = pd.DataFrame({
        "block size (slots)": df["block_size"],
        "paged (ms)": df["paged_ms"].round(3),
        "contiguous (ms)": df["contiguous_ms"].round(3),
        "overhead (×)": df["overhead"].round(3),
        "paged K+V read (GB/s)": df["paged_GBps"].round(2),
        "contiguous K+V read (GB/s)": df["contiguous_GBps"].round(2),
    })
    if df["paged_peak_fraction"].notna().any():
        out["paged, % of peak"] = (100 * df["paged_peak_fraction"]).round(1)
    out["max |paged − contiguous|"] = df["max_abs_diff"].map(lambda x: f"{x:.1e}")
    return out


def describe(res: SweepResult) -> str:
    """One line: backend, device, shape, bytes, timer (and date/versions for recorded runs)."""
    m, s = res.meta, res.meta.get("shape", {})
    shape = (f"{s.get('num_seqs')} sequences × {s.get('seq_len')} tokens, {s.get('num_heads')} query / "
             f"{s.get('num_kv_heads')} KV heads, head dim {s.get('head_dim')}, {s.get('dtype')}")
    text = (f"Backend `{m.get('backend')}` on {m.get('device')}; {shape}; "
            f"K+V read per step {format_bytes(m.get('kv_bytes', 0))}. Timer: {m.get('timer')}.")
    if m.get("recorded"):
        v = m.get("versions", {})
        text = (f"**Recorded** {m.get('date')} (file `{m.get('file')}`), torch {v.get('torch')}, "
                f"triton {v.get('triton')}, CUDA {v.get('cuda')}. " + text)
    return text


def show_result(res: SweepResult, label: str) -> None:
    """Charts, table and provenance of one sweep."""
    st.markdown(describe(res))
    for w in res.meta.get("warnings", []):
        st.warning(w)
    st.plotly_chart(latency_figure(res, f"Decode latency — {label}"), width="stretch")
    st.plotly_chart(overhead_figure(res, f"Gather overhead — {label}"), width="stretch")
    st.dataframe(sweep_table(res), hide_index=True, width="stretch")


# ------------------------------------------------------------------ live sweep
st.subheader("Block-size sweep")
st.markdown(
    "For each block size from 1 to 256 slots the same tokens are scattered into a shuffled pool "
    "of blocks, and the kernel's median time per decode step is measured against the contiguous "
    "baseline. Bandwidth is the keys and values the step must read divided by its time."
)
default_shape = CUDA_SHAPE if sweep_backend.name == "cuda" else CPU_SHAPE
shape_options = {
    f"realistic — {default_shape.num_seqs} × {default_shape.seq_len:,} tokens, {default_shape.num_heads}/"
    f"{default_shape.num_kv_heads} heads, head dim {default_shape.head_dim}, {default_shape.dtype} "
    f"({format_bytes(default_shape.kv_bytes)} of K+V per step)": default_shape,
    f"tiny — {TINY_SHAPE.num_seqs} × {TINY_SHAPE.seq_len} tokens (a second; for a quick look)": TINY_SHAPE,
}
choice = st.radio("Shape", list(shape_options), key="kernel_shape")
if sweep_backend.name != "cuda":
    st.caption("On a CPU each block size takes about a second at the realistic shape, and other programs "
               "on the machine add noise. CPU numbers say how torch's block gather behaves on this "
               "machine, not how the GPU kernel behaves; recorded GPU results, where shipped, appear "
               "beside them.")

if st.button("Run sweep", type="primary", key="kernel_run_sweep"):
    bar = st.progress(0.0, text="starting…")
    try:
        result = sweep(DEFAULT_BLOCK_SIZES, shape_options[choice], sweep_backend.name,
                       progress=lambda f, msg: bar.progress(f, text=msg))
        st.session_state[SWEEP_KEY] = result
        bar.progress(1.0, text=f"done: {len(result.rows)} block sizes on `{sweep_backend.name}`")
    except Exception as exc:
        bar.empty()
        st.error(f"The sweep failed: {type(exc).__name__}: {exc}")

live: SweepResult | None = st.session_state.get(SWEEP_KEY)

try:
    recorded = load_recorded()
    recorded_error = None
except Exception as exc:
    recorded, recorded_error = [], f"{type(exc).__name__}: {exc}"

def _live_panel() -> None:
    st.markdown(f"#### Live measurement — `{sweep_backend.name}`")
    if live is None:
        st.info("Press **Run sweep** to measure. Nothing runs until you do.")
        return
    try:
        show_result(live, f"live, {live.meta['backend']}")
    except Exception as exc:
        st.error(f"Could not draw the sweep: {type(exc).__name__}: {exc}")


def _recorded_panel() -> None:
    st.markdown("#### Recorded GPU results")
    for rec in recorded:
        try:
            show_result(rec, "recorded GPU")
        except Exception as exc:
            st.error(f"Could not draw `{rec.meta.get('file')}`: {type(exc).__name__}: {exc}")


if sweep_backend.name == "cuda":
    _live_panel()                      # the live numbers are GPU numbers: no recorded panel needed
else:
    if recorded_error:
        st.error(f"A recorded GPU results file in assets/ could not be read: {recorded_error}")
    elif not recorded:
        st.info("**No recorded GPU results are shipped yet.** The live numbers below come from the CPU. "
                "On a machine with an NVIDIA GPU, `python -m kernels.sweep --out "
                "assets/kernel_gpu_results.json` times the compiled Triton kernel and writes the file "
                "that this page then shows beside the CPU measurement, labelled as recorded (GPU name, "
                "date, versions, shapes).")
    if recorded:
        left, right = st.columns(2)
        with left:
            _live_panel()
        with right:
            _recorded_panel()
    else:
        _live_panel()


# ------------------------------------------------------------------ the two costs together
@st.cache_data(show_spinner=False)
def _memory_waste(block_sizes: tuple[int, ...], scenario) -> tuple[list[dict], str]:
    """Allocator block-size sweep for the explainer's current workload: (rows, label)."""
    from allocator.scenario import block_size_sweep, build_workload
    rows = block_size_sweep(build_workload(scenario), scenario.slots, list(block_sizes))
    return rows, f"{scenario.workload} in a {scenario.slots:,}-slot pool (the explainer's settings)"


def two_costs_figure(waste_rows: list[dict], waste_label: str,
                     overheads: list[tuple[SweepResult, str]]) -> go.Figure:
    """Memory waste (allocator) and measured gather overhead (kernel, one line per source)
    against block size. ``overheads`` holds (sweep, legend label) pairs: live first, then recorded."""
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
    for (res, label), colour, dash in zip(overheads, (PAGED, ACCENT, "#777777"), ("dash", "dot", "dashdot")):
        o = pd.DataFrame(res.rows)
        sizes |= set(o["block_size"])
        top = max(top, float(o["overhead"].max()) * 1.1)
        fig.add_trace(go.Scatter(
            x=o["block_size"], y=o["overhead"], name=f"gather overhead (×) — {label}",
            mode="lines+markers", line=dict(color=colour, dash=dash),
            hovertemplate=("block size %{x} slots<br>paged kernel %{y:.2f}× the contiguous time<br>"
                           + label + "<extra></extra>")), secondary_y=True)
    if overheads:
        fig.update_yaxes(title_text="gather overhead (paged ÷ contiguous, ×)", secondary_y=True,
                         range=[0, top], tickformat=".2f", showgrid=False, tickmode="auto", nticks=6)
    fig.update_xaxes(**_log2_axis(sorted(sizes)))
    fig.update_yaxes(title_text="pool holding no token (% of slots)", secondary_y=False, rangemode="tozero")
    fig.update_layout(title="Two costs of a block size", legend=dict(orientation="h", y=-0.25), showlegend=True,
                      height=440, margin=dict(t=50, b=10))
    return fig


st.subheader("Two costs of one choice")
st.markdown(
    "Bigger blocks waste memory: the last block of every sequence is partly empty, and the bigger "
    "the block, the more of it sits empty on average. Smaller blocks cost the kernel more lookups "
    "and more scattered reads. The orange curve is the allocator's side (the workload and pool set "
    "on the *Reserve vs paged* page, paged allocation, mean over steps when requests are waiting); "
    "the dashed curves are the kernel's side, as measured above (live, and recorded on a GPU where shipped)."
)
overheads = []
if live is not None:
    overheads.append((live, f"live, {live.meta['backend']}"))
if recorded:
    overheads.append((recorded[0], f"recorded, {recorded[0].meta.get('device')}"))
try:
    waste_rows, waste_label = _memory_waste(tuple(DEFAULT_BLOCK_SIZES), current_scenario())
    st.plotly_chart(two_costs_figure(waste_rows, waste_label, overheads), width="stretch")
    sources = "; ".join(f"`{r.meta['backend']}` on {r.meta.get('device')}"
                        f"{' (recorded ' + str(r.meta.get('date')) + ')' if r.meta.get('recorded') else ' (live)'}"
                        for r, _ in overheads)
    if not overheads:
        st.caption(f"Memory side: {waste_label}. Run the sweep to add the measured gather overhead "
                   "to this chart.")
    else:
        st.caption(f"Memory side: {waste_label}. Overhead measured by backend {sources}.")
except Exception as exc:
    st.error(f"Could not draw the two-costs chart: {type(exc).__name__}: {exc}")
