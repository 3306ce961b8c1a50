"""Live kernel: run the paged-attention decode kernel and measure what the block table costs it.

Renders only: the kernels, the torch paths, the sweep, the prediction and the recorded results
all come from ``kernels``, and so do their figures, tables and sentences (``kernels/sweep/figures.py``);
the memory-waste curve comes from ``allocator``. Every number on the
page names the backend that produced it, and a prediction is always labelled one. Nothing heavy
runs on load (issue 24): the correctness check and the sweep run on demand, once per server
(``kernels.sweep.run.shared_check`` / ``shared_sweep``: every session reuses the result, and says so).
Never shows a traceback: failures become plain-text error messages (pages._ui.errors.show_error).
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict

import streamlit as st

from pages._ui.errors import show_error
from pages._ui.heavy import run_heavy
from pages._ui.state import current_scenario, keep_choice, restore_choice
from pages._ui.present import chart, data_table

SWEEP_KEY = "kernel_sweep_result"

st.title("Live kernel: what the block table costs")
st.markdown(
    "Paging saves memory, but the attention kernel now has to look up every block of a "
    "sequence in its **block table** before it can read that block's keys and values. "
    "Small blocks mean more lookups and more scattered reads; large blocks mean fewer. The "
    "PagedAttention paper (section 7.2) reports that very small blocks slow its own CUDA kernel; this "
    "page measures whether they slow this one. "
    "This page runs a real paged-attention decode kernel (written in Triton, in the layout "
    "vLLM uses) and times it against a **contiguous baseline**: the same tokens and the same "
    "tiles, but each sequence stored as one run of memory, so the kernel computes every address "
    "directly and never reads a table. The ratio of the two times is the **gather overhead** of a "
    "block size."
)


def stated_seconds(meta: dict) -> str:
    """The figure a sweep stated beforehand, as the page and the progress bar say it: an upper bound
    the sweep kept to, rounded up ("at most 38"), or a fixed pair count's estimate ("38")."""
    if meta.get("estimate_is_bound"):
        return f"at most {math.ceil(meta['estimate_s'])}"
    return f"{meta['estimate_s']:.0f}"


def _fmt_err(x: float) -> str:
    return "∞ (NaN in output)" if not math.isfinite(x) else f"{x:.2e}"


# ------------------------------------------------------------------ backend
#: What the page says while it loads its libraries: importing torch and Triton is the only slow part of
#: a visit (measured: 1.5 s alone on 2 cores, 3-6 s while a fresh server warms its other pages), and only
#: the first visit after the server starts pays it; Streamlit shows a spinner only after half a second.
LOADING_TEXT = ("Loading PyTorch and Triton, the libraries the kernel runs on (only the first visit after the "
                "server starts waits for them, a few seconds)…")
try:
    with st.spinner(LOADING_TEXT):
        from kernels.attention.backend import detect
        from kernels import compile_check
        from kernels import gpu_check
        from kernels.sweep import predict
        from kernels.attention.paged_attention import CHECK_CASE
        from kernels.sweep.data import CPU_SHAPE, CUDA_SHAPE, TINY_SHAPE, SweepResult, load_recorded
        from kernels.sweep.run import (DEFAULT_BLOCK_SIZES, DEFAULT_BUDGET_S, HARD_LIMIT_S, shared_check,
                                       shared_sweep)
        from allocator.common.formats import format_bytes_decimal as format_bytes
        from kernels.sweep import figures as kv
        sweep_backend = detect("sweep")
        check_backend = detect("check")
except Exception as exc:  # torch/triton missing or broken: say so, render nothing else
    show_error(f"The kernel package could not be loaded, so this page cannot run: "
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


@st.cache_data(show_spinner=False)
def _compile_report_36() -> dict | None:
    return compile_check.load_report(compile_check.TRITON36_OUT)


try:
    report = _compile_report()
    report_error = None
except ValueError as exc:
    report, report_error = None, str(exc)

with st.container(border=True):
    if report_error:
        show_error(f"The compile record in assets/ could not be read: {report_error}")
    elif report is not None:
        st.markdown(compile_check.facts_text(report))
        try:
            other = _compile_report_36()
        except ValueError:
            other = None
        if other is not None:
            st.markdown(compile_check.compat_text(report, other))
        st.caption("Triton compiled the kernels for the H200's architecture on a machine without a GPU "
                   "(`python -m kernels.compile_check`, each argument specialised as Triton specialises it at "
                   "launch; the test suite repeats a representative part on every run). A clean compile shows "
                   "the code is valid for that GPU and fits its registers without spilling to slow local memory; "
                   "it does not time anything.")
        with st.expander("Every compiled kernel"):
            data_table(kv.compile_frame(report), hide_index=True, width="stretch")
    else:
        st.info("No record of an offline sm_90 compile is shipped (`python -m kernels.compile_check` writes it).")


# ------------------------------------------------------------------ the prediction
st.subheader("Prediction for an H200, before any GPU run")
gpu = predict.H200
st.markdown(
    "How fast *should* this kernel be? Decode attention reads every cached key and value once and "
    "does little arithmetic with them, so its speed is bytes per second. From the compile record "
    "(registers, warps, shared memory, whether the loads are pipelined) and the H200's figures "
    f"({gpu.sms} SMs; {gpu.nominal_Bps / 1e12:.1f} TB/s on the data sheet; a plain device copy reached "
    f"{gpu.copy_Bps / 1e12:.1f} TB/s) a simple model predicts the bandwidth each launch reaches: "
    "how many programs fit on an SM, how many bytes they keep in flight (Little's law, with an "
    f"assumed {predict.ASSUMED_LATENCY_S * 1e6:.1f} µs memory latency under load), how the grid "
    "falls into waves. **These are predictions, not measurements.** The model cannot see what "
    "scattered blocks do to DRAM pages, TLBs and cache sectors — which is exactly what a GPU run "
    "would measure — so it predicts paged ≈ contiguous."
)
if report is None:
    st.info("No compile record, so no prediction: `python -m kernels.compile_check` writes one.")
else:
    try:
        shapes = {f"{n} × {t:,} tokens": (n, t) for n, t in gpu_check.TIMING_SHAPES}
        h, hkv, d = gpu_check.TIMING_HEADS
        tables = {label: predict.prediction_table(report, n, t, h, hkv, d, "bf16") for label, (n, t) in shapes.items()}
        tables = {k: v for k, v in tables.items() if v}
        if tables:
            chart(kv.prediction_figure(tables, gpu.nominal_Bps / 1e9, gpu.copy_Bps / 1e9, gpu.name),
                            width="stretch")
            headers = kv.prediction_headers(gpu.name, gpu.sms, gpu.nominal_Bps / 1e9)
            for label, rows in tables.items():
                span = kv.percent_span([r["fraction_of_nominal"] for r in rows])
                st.markdown(f"**Predicted, {label}** (Llama 3 8B heads: {h} query / {hkv} KV, head dim {d}, bf16): "
                            f"{span} of the data sheet's "
                            f"{gpu.nominal_Bps / 1e12:.1f} TB/s, {rows[0]['num_splits']} splits, "
                            f"{rows[0]['waves']} wave{'s' if rows[0]['waves'] != 1 else ''}.")
                # an HTML table: ten columns of a grid do not fit the page at 1366 px and its headers were
                # cut ("pred. paged ÷ conti…"); this one wraps them. What each column means, under the tables
                frame = kv.prediction_frame(rows)
                st.table(frame.rename(columns={c: headers[c][0] for c in frame.columns})
                         .style.hide(axis="index").format(
                             {headers["shared KiB / program (record)"][0]: "{:g}",
                              headers["predicted % of data-sheet bandwidth"][0]: "{:.1f}"}))
            st.markdown("**The columns.** " + " ".join(f"*{short}*: {why}" for short, why in headers.values()))
            st.caption("Source of every figure: the compile record above and `kernels/sweep/predict.py` (its docstring "
                       "states the model and its assumptions). The device-copy figure was measured on a lent H200, "
                       "not by this lab.")
        else:
            st.info("The compile record has no bf16, head-dim-128 kernels to predict from.")
    except Exception as exc:
        show_error(f"Could not compute the prediction: {type(exc).__name__}: {exc}")


# ------------------------------------------------------------------ correctness check
st.subheader("Correctness check")
c = CHECK_CASE
st.markdown(
    f"A small batch ({len(c['seq_lens'])} sequences of {', '.join(map(str, c['seq_lens']))} tokens, "
    f"{c['num_heads']} query heads sharing {c['num_kv_heads']} KV heads, head dim {c['head_dim']}, block size "
    f"{c['block_size']}, a shuffled block table) is run through the kernel and compared with a plain torch "
    "reference that gathers every token to a dense tensor first. Every slot that holds no token is filled "
    "with NaN, so a read past a sequence's end would make the error NaN, a failure, not a small number. The Triton kernel is "
    "checked twice: as one pass over each sequence, and split along the sequence into pieces that a second "
    "kernel combines (how it keeps a GPU busy when there are few sequences with long contexts)."
)
cases = []
for name in dict.fromkeys([check_backend.name, sweep_backend.name]):
    if name == "torch-cpu":
        cases.append((name, None))
    else:
        cases += [(name, 1), (name, 2)]
found = [(name, splits, *shared_check(name, splits, run=False)) for name, splits in cases]
if any(res is None for *_, res, _how, _when in found):
    st.caption("The check runs on demand (a few seconds on a CPU, in Triton's interpreter) and once per server: "
               "every visitor after the first sees its result.")
    if st.button("Run the correctness check", key="kernel_run_check"):
        with st.spinner("Running the kernel on the small batch and comparing with the reference…"):
            try:
                found = [(name, splits, *run_heavy("Running the correctness check", shared_check, name, splits,
                                                   _spinner=False)) for name, splits in cases]
            except Exception as exc:
                show_error(f"The correctness check failed to run: {type(exc).__name__}: {exc}")
cols = st.columns(len(found))
for col, (name, splits, res, how, when) in zip(cols, found):
    if res is None:
        continue
    with col:
        what = {"triton-interpreter": f"Triton kernel in Triton's CPU interpreter, {res['path']}",
                "cuda": f"Triton kernel compiled for CUDA, {res['path']}",
                "torch-cpu": "torch gather + attention on the CPU"}[name]
        st.metric(f"Max abs error vs reference — {name}, {res['path']}", _fmt_err(res["max_abs_error"]),
                  help=f"{what}. Tolerance {res['tolerance']:.0e}; fp32.")
        stamp = time.strftime("%H:%M:%S UTC", time.gmtime(when))
        source = "run just now" if how == "ran" else f"from this server's cache, run at {stamp}"
        if res["passed"]:
            st.success(f"`{name}` ({what}) matches the reference "
                       f"(tolerance {res['tolerance']:.0e}, kernel call {res['seconds'] * 1e3:.0f} ms; {source}).")
        else:
            show_error(f"{name} ({what}) does NOT match the reference: max abs error "
                     f"{_fmt_err(res['max_abs_error'])} > {res['tolerance']:.0e} ({source}).")


def show_result(res: SweepResult, label: str) -> None:
    """Verdict, charts, table and provenance of one sweep."""
    st.markdown(kv.describe(res))
    for w in res.meta.get("warnings", []):
        show_error(w, kind="warning")
    if res.measurable:
        st.success(res.verdict_text())
    else:
        st.info(res.verdict_text())
    chart(kv.latency_figure(res, f"Decode latency — {label}"), width="stretch")
    chart(kv.overhead_figure(res, f"Gather overhead — {label}"), width="stretch")
    data_table(kv.sweep_table(res), hide_index=True, width="stretch", column_config={
        col: st.column_config.Column(short, help=why) for col, (short, why) in kv.sweep_headers(res).items()})


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
restore_choice("kernel_shape", shape_options)      # the radio keeps its choice across page switches
choice = st.radio("Shape", list(shape_options), key="kernel_shape")
st.caption(f"The sweep is sized to take about {DEFAULT_BUDGET_S:.0f} s on this machine or less: it pages the first "
           "block size and times three calls of each side first, chooses how many pairs to time for each block size "
           "(3 to 15), and states the most it will take, with room for a busy moment (never more than "
           f"{HARD_LIMIT_S:.0f} s); the progress bar shows that figure and each timed pair. It keeps to it: if the "
           "machine turns out slower, it times fewer pairs, then leaves block sizes out, and names them. One sweep "
           "per server: a second visitor asking for the same sweep follows the running one, and later visitors "
           "get its result at once.")
if sweep_backend.name != "cuda":
    st.caption("On a CPU the timing backend is torch, not the Triton kernel: both sides run the same torch gather "
               "(the baseline over one block per sequence), so the ratio says how torch's block gather behaves "
               "on this machine, not how the GPU kernel behaves. Other programs on the machine add noise.")


keep_choice("kernel_shape")


def _server_sweeps(shape) -> dict[int, SweepResult]:
    """This server's kept results of the sweep **Run sweep** runs for ``shape``, by seed, without running
    anything (``kernels.sweep.run.kept_sweeps``: the cache of ``shared_sweep``)."""
    from kernels.sweep.run import kept_sweeps
    return kept_sweeps(DEFAULT_BLOCK_SIZES, shape, sweep_backend.name, None, DEFAULT_BUDGET_S)


server_sweeps = _server_sweeps(shape_options[choice])
# measuring again is a new seed (new tokens, new shuffle): the kept result stays on screen for everyone until
# the new one is done, and two visitors pressing at once share one run
next_seed = max(server_sweeps) + 1 if server_sweeps else 0
if st.button("Run sweep", type="primary", key="kernel_run_sweep"):
    bar = st.progress(0.0, text="starting…")
    try:
        # one heavy run at a time per server (pages._ui.heavy): a queued student sees how many are ahead
        result, how = run_heavy("Measuring the kernel sweep", shared_sweep, DEFAULT_BLOCK_SIZES, shape_options[choice],
                                sweep_backend.name, repeats=None, seed=next_seed, budget_s=DEFAULT_BUDGET_S,
                                progress=lambda f, msg: bar.progress(f, text=msg), _spinner=False)
        st.session_state[SWEEP_KEY] = result
        st.session_state[SWEEP_KEY + "_how"] = how
        bar.progress(1.0, text=f"done: {len(result.rows)} block sizes on `{sweep_backend.name}`")
    except Exception as exc:
        bar.empty()
        show_error(f"The sweep failed: {type(exc).__name__}: {exc}")



def _shown_sweep(shape) -> tuple[SweepResult | None, str]:
    """The sweep for the shape the radio shows, and how it came: this session's own run of that shape,
    else the latest this server kept (how "cached"), else ``(None, "")``. Never a sweep of another shape."""
    def fits(res: SweepResult | None) -> bool:
        return res is not None and res.meta.get("shape") == asdict(shape) and res.meta.get("backend") == sweep_backend.name
    own = st.session_state.get(SWEEP_KEY)
    if fits(own):
        return own, st.session_state.get(SWEEP_KEY + "_how", "ran")
    kept = [res for _, res in sorted(_server_sweeps(shape).items()) if fits(res)]
    return (kept[-1], "cached") if kept else (None, "")


live, live_how = _shown_sweep(shape_options[choice])

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
    m = live.meta
    how = live_how
    if how == "cached":
        st.info(f"**From this server's cache:** measured {str(m.get('date', ''))[:19].replace('T', ' ')} UTC on "
                f"`{m.get('backend')}` ({m.get('device')}) for an earlier visitor, with the shape selected above; "
                "nothing ran for you. Press **Run sweep** to measure again.")
    origin = {"ran": "run for this request", "joined": "run for another visitor at the same time, shared",
              "cached": "from this server's cache (the same sweep, run earlier)"}.get(how, how)
    if m.get("wall_s") is not None and m.get("estimate_s"):
        st.caption(f"Took {m['wall_s']:.0f} s against an estimate of {stated_seconds(m)} s "
                   f"(budget {m.get('budget_s', DEFAULT_BUDGET_S):.0f} s); {origin}; measured "
                   f"{str(m.get('date', ''))[:19].replace('T', ' ')} UTC.")
    try:
        show_result(live, f"live, {m['backend']}")
    except Exception as exc:
        show_error(f"Could not draw the sweep: {type(exc).__name__}: {exc}")


def _recorded_panel() -> None:
    st.markdown("#### Recorded GPU results")
    for rec in recorded:
        try:
            show_result(rec, kv.recorded_label(rec))
        except Exception as exc:
            show_error(f"Could not draw {rec.meta.get('file')}: {type(exc).__name__}: {exc}")


if sweep_backend.name == "cuda":
    _live_panel()                      # the live numbers are GPU numbers: no recorded panel needed
else:
    if recorded_error:
        show_error(f"A recorded GPU results file in assets/ could not be read: {recorded_error}")
    elif not recorded:
        st.info("**No GPU measurement is shipped yet**: the H200 figures above are the model's prediction. "
                "On a machine with an NVIDIA GPU, `python3 -m kernels.gpu_check -o assets` (README: with or "
                "without a virtualenv) checks the compiled kernels against the reference, times paged, "
                "contiguous and torch's SDPA, and writes `assets/kernel_gpu_check.json`, which this page then "
                "shows beside the CPU measurement, labelled as recorded (GPU name, driver, date, versions).")
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
    from allocator.engine.scenario import block_size_sweep, build_workload
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
    chart(kv.two_costs_figure(waste_rows, waste_label, overheads), width="stretch")
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
    show_error(f"Could not draw the two-costs chart: {type(exc).__name__}: {exc}")
