"""Live kernel: run the paged-attention decode kernel and measure what the block table costs it.

Renders only: the kernel, the torch paths, the sweep and the recorded results all come from
``kernels``; the memory-waste curve comes from ``allocator``. Every number on the page names the
backend that produced it. Never shows a traceback: failures become ``st.error`` messages.
"""
from __future__ import annotations

import math

import pandas as pd
import streamlit as st

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


# ------------------------------------------------------------------ backend
try:
    import kernels
    from kernels import compile_check
    from kernels.sweep import CPU_SHAPE, CUDA_SHAPE, DEFAULT_BLOCK_SIZES, TINY_SHAPE, SweepResult, format_bytes, \
        load_recorded, sweep
    from pages._ui import kernel_view as kv
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


# ------------------------------------------------------------------ compiled for sm_90
@st.cache_data(show_spinner=False)
def _compile_report() -> dict | None:
    return compile_check.load_report()


with st.container(border=True):
    try:
        report = _compile_report()
    except ValueError as exc:
        report = None
        st.error(f"The compile record in assets/ could not be read: {exc}")
    if report is not None:
        st.markdown(compile_check.facts_text(report))
        st.caption("Triton compiled the kernels for the H200's architecture on a machine without a GPU "
                   "(`python -m kernels.compile_check`; a test repeats it on every run of the test suite). "
                   "A clean compile shows the code is valid for that GPU and fits its registers without "
                   "spilling to slow local memory; it does not time anything. Timing needs the GPU itself "
                   "(`make gpu-check`).")
        with st.expander("Every compiled kernel"):
            rows = pd.DataFrame(report["results"])
            cols = [c for c in ("kernel", "dtype", "head_dim", "block_size", "tile", "num_warps", "num_stages",
                                "registers", "spill_store_bytes", "spill_load_bytes", "shared_bytes", "error")
                    if c in rows]
            st.dataframe(rows[cols], hide_index=True, width="stretch")
    elif report is None:
        st.info("No record of an offline sm_90 compile is shipped (`python -m kernels.compile_check` writes it).")


# ------------------------------------------------------------------ correctness check
@st.cache_data(show_spinner=False)
def _check(backend_name: str, num_splits: int | None) -> dict:
    return kernels.check_correctness(backend=backend_name, num_splits=num_splits)


st.subheader("Correctness check")
st.markdown(
    "A tiny batch (3 sequences of 1, 32 and 45 tokens, 8 query heads sharing 2 KV heads, block "
    "size 16, a shuffled block table) is run through the kernel and compared with a plain torch "
    "reference that gathers every token to a dense tensor first. Every slot that holds no token "
    "is filled with NaN, so a read past a sequence's end would show up as an infinite error. "
    "The Triton kernel is checked twice: as one pass over each sequence, and split along the "
    "sequence into pieces that a second kernel combines (how it keeps a GPU busy when there are "
    "few sequences with long contexts)."
)
cases = []
for name in dict.fromkeys([check_backend.name, sweep_backend.name]):
    if name == "torch-cpu":
        cases.append((name, None))
    else:
        cases += [(name, 1), (name, 2)]
cols = st.columns(len(cases))
for col, (name, splits) in zip(cols, cases):
    with col:
        try:
            res = _check(name, splits)
        except Exception as exc:
            st.error(f"Correctness check on backend `{name}` failed to run: {type(exc).__name__}: {exc}")
            continue
        what = {"triton-interpreter": f"Triton kernel in Triton's CPU interpreter, {res['path']}",
                "cuda": f"Triton kernel compiled for CUDA, {res['path']}",
                "torch-cpu": "torch gather + attention on the CPU"}[name]
        st.metric(f"Max abs error vs reference — {name}, {res['path']}", _fmt_err(res["max_abs_error"]),
                  help=f"{what}. Tolerance {res['tolerance']:.0e}; fp32.")
        if res["passed"]:
            st.success(f"`{name}` ({what}) matches the reference "
                       f"(tolerance {res['tolerance']:.0e}, kernel call {res['seconds'] * 1e3:.0f} ms).")
        else:
            st.error(f"`{name}` ({what}) does NOT match the reference: max abs error "
                     f"{_fmt_err(res['max_abs_error'])} > {res['tolerance']:.0e}.")


def show_result(res: SweepResult, label: str) -> None:
    """Verdict, charts, table and provenance of one sweep."""
    st.markdown(kv.describe(res))
    for w in res.meta.get("warnings", []):
        st.warning(w)
    if res.measurable:
        st.success(res.verdict_text())
    else:
        st.info(res.verdict_text())
    st.plotly_chart(kv.latency_figure(res, f"Decode latency — {label}"), width="stretch")
    st.plotly_chart(kv.overhead_figure(res, f"Gather overhead — {label}"), width="stretch")
    st.dataframe(kv.sweep_table(res), hide_index=True, width="stretch")


# ------------------------------------------------------------------ live sweep
st.subheader("Block-size sweep")
st.markdown(
    "For each block size from 1 to 256 slots the same tokens are scattered into a shuffled pool "
    "of blocks, and the kernel's time per decode step is measured against the contiguous "
    "baseline. The two are timed in turns, paged then contiguous then contiguous then paged, so "
    "that a busy moment of the machine slows both; each pair gives one ratio. The overhead is "
    "the median ratio, with an interval from resampling the pairs (a bootstrap), wide enough that "
    "all the block sizes' intervals hold together 95 % of the time: where an interval includes 1×, "
    "the two cannot be told apart on this machine. Bandwidth is the keys and values the step must "
    "read divided by its median time."
)
default_shape = CUDA_SHAPE if sweep_backend.name == "cuda" else CPU_SHAPE
shape_options = {
    f"realistic — {default_shape.num_seqs} × {default_shape.seq_len:,} tokens, {default_shape.num_heads}/"
    f"{default_shape.num_kv_heads} heads, head dim {default_shape.head_dim}, {default_shape.dtype} "
    f"({format_bytes(default_shape.kv_bytes)} of K+V per step)": default_shape,
    f"tiny — {TINY_SHAPE.num_seqs} × {TINY_SHAPE.seq_len} tokens (a second; it fits in the CPU's cache, so it is a quick look, not a measurement of memory reads)": TINY_SHAPE,
}
choice = st.radio("Shape", list(shape_options), key="kernel_shape")
if sweep_backend.name != "cuda":
    st.caption("On a CPU the realistic shape takes about a minute (15 pairs of calls for each of 9 block "
               "sizes), and other programs on the machine add noise. CPU numbers say how torch's block "
               "gather behaves on this machine, not how the GPU kernel behaves; recorded GPU results, "
               "where shipped, appear beside them.")

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
            show_result(rec, kv.recorded_label(rec))
        except Exception as exc:
            st.error(f"Could not draw `{rec.meta.get('file')}`: {type(exc).__name__}: {exc}")


if sweep_backend.name == "cuda":
    _live_panel()                      # the live numbers are GPU numbers: no recorded panel needed
else:
    if recorded_error:
        st.error(f"A recorded GPU results file in assets/ could not be read: {recorded_error}")
    elif not recorded:
        st.info("**No recorded GPU results are shipped yet.** The live numbers below come from the CPU. "
                "On a machine with an NVIDIA GPU, `make gpu-check` checks the compiled kernel against the "
                "reference, times it and writes `assets/kernel_gpu_results.json`, which this page then "
                "shows beside the CPU measurement, labelled as recorded (GPU name, date, versions, shapes).")
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


st.subheader("Two costs of one choice")
st.markdown(
    "Bigger blocks waste memory: the last block of every sequence is partly empty, and the bigger "
    "the block, the more of it sits empty on average. Smaller blocks cost the kernel more lookups "
    "and more scattered reads. The orange curve is the allocator's side (the workload and pool set "
    "on the *Reserve vs paged* page, paged allocation, mean over steps when requests are waiting). "
    "The kernel's side is drawn only from measurements that tell paged and contiguous apart and "
    "that read from memory: a sweep whose every interval includes 1× is noise, and noise is not "
    "drawn as a trend."
)
candidates = []
if live is not None:
    candidates.append((live, f"live, {live.meta['backend']} on {live.meta.get('device')}"))
candidates += [(r, kv.recorded_label(r)) for r in recorded]
overheads = [(r, label) for r, label in candidates if kv.drawable(r)[0]]
left_out = [(label, kv.drawable(r)[1]) for r, label in candidates if not kv.drawable(r)[0]]
try:
    waste_rows, waste_label = _memory_waste(tuple(DEFAULT_BLOCK_SIZES), current_scenario())
    st.plotly_chart(kv.two_costs_figure(waste_rows, waste_label, overheads), width="stretch")
    notes = [f"Memory side: {waste_label}."]
    if overheads:
        notes.append("Overhead drawn from: " + "; ".join(label for _, label in overheads)
                     + ". Hollow markers: that block size's interval includes 1× (no measurable difference).")
    for label, why in left_out:
        notes.append(f"Not drawn: {label} — {why}.")
    if not candidates:
        notes.append("Run the sweep to add the measured gather overhead to this chart.")
    st.caption(" ".join(notes))
except Exception as exc:
    st.error(f"Could not draw the two-costs chart: {type(exc).__name__}: {exc}")
