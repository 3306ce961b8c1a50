"""Home page: the same requests, the same pool, reserve-max on the left and paged on the right.

Renders only: the simulation, the frames and the sweep come from ``allocator`` (via
``allocator.viz.charts`` for layout), cached so a class on the same settings simulates once.
"""
import pandas as pd
import streamlit as st

from allocator import CLASSROOM_40
from allocator.scenario import DEFAULT_MAX_NEW, DEFAULT_SLOTS, UPLOAD_MAX_ROWS, Scenario
from allocator.trace import AZURE_ATTRIBUTION, shipped_trace
from pages._ui.cache import compute, metrics_table, sweep, sweep_chart, uploaded_rows
from pages._ui.exports_ui import exports_menu
from pages._ui.guided import guided_lesson
from pages._ui.present import keyboard_shortcuts, presentation_mode, share_link
from pages._ui.state import current_scenario, remember_scenario

#: Block sizes offered on the slider: the powers of two engines use, plus a few in between.
BLOCK_SIZES = [1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256]
WORKLOAD_LABELS = {"classroom-40": "classroom-40 (forty chat requests, all at once)",
                   "azure-conv": "Azure conversation trace (real requests, 2023)",
                   "upload": "Your own trace (upload a CSV)"}
UPLOAD_HELP = ("A CSV in the Azure schema (TIMESTAMP, ContextTokens, GeneratedTokens) or a plain one "
               f"(prompt_tokens, output_tokens, optional arrival_s in seconds); at most {UPLOAD_MAX_ROWS:,} "
               "rows and 5 MiB.")


def controls() -> Scenario:
    """Sidebar controls -> Scenario. Every widget is keyed and bound to a URL query parameter
    (``bind="query-params"``), so a copied link reproduces the scenario."""
    sb = st.sidebar
    url = dict(bind="query-params")
    sb.header("Scenario")
    workload = sb.selectbox("Workload", list(WORKLOAD_LABELS), format_func=WORKLOAD_LABELS.get, key="workload",
                            help="classroom-40 is synthetic and calibrated for the lesson; the trace replays "
                                 "real request lengths and arrival times.", **url)
    block_size = sb.select_slider("Block size (slots per block)", options=BLOCK_SIZES, value=16, key="block_size",
                                  help="Paged allocator only: how many tokens' K and V one block holds.", **url)
    total_slots = sb.number_input("Pool size (slots)", min_value=64, max_value=1 << 20,
                                  value=DEFAULT_SLOTS.get(workload, 8192), step=256, key=f"slots_{workload}",
                                  help="Slots of KV cache both allocators share; one slot holds one token.", **url)
    max_new = sb.number_input("max_new_tokens (generation cap)", min_value=1, max_value=32768,
                              value=DEFAULT_MAX_NEW.get(workload, 1024), step=50, key=f"max_new_{workload}",
                              help="Reserve-max reserves prompt + this many slots for every request.", **url)
    kw = {}
    if workload == "classroom-40":
        kw["seed"] = int(sb.number_input("Seed", min_value=0, max_value=10_000, value=CLASSROOM_40["seed"],
                                         key="seed", help="Draws a different forty requests of the same kind.",
                                         **url))
        kw["arrival"] = sb.radio("Arrivals", ["burst", "trickle"], horizontal=True, key="arrival",
                                 format_func={"burst": "all at step 0", "trickle": "trickle"}.get, **url)
        if kw["arrival"] == "trickle":
            kw["arrival_rate"] = sb.slider("Arrival rate (requests per step)", 0.01, 2.0, 0.1, 0.01,
                                           key="arrival_rate", **url)
    else:
        n_rows = None
        if workload == "upload":
            up = sb.file_uploader("Trace CSV", type=["csv"], key="trace_file", help=UPLOAD_HELP)
            if up is None:
                sb.info("Upload a CSV to replay it. " + UPLOAD_HELP)
            else:
                kw["trace_bytes"], kw["trace_name"] = up.getvalue(), up.name
                try:
                    n_rows = uploaded_rows(kw["trace_bytes"])
                    sb.success(f"{up.name}: {n_rows:,} requests")
                except ValueError as exc:
                    sb.error(f"{up.name}: {exc}")
        else:
            n_rows = len(shipped_trace())
        kw["offset"] = int(sb.number_input("First row (offset)", min_value=0, max_value=max(0, (n_rows or 1) - 1),
                                           value=0, key=f"offset_{workload}", **url))
        kw["count"] = int(sb.slider("Requests to replay", 1, 200, 40, key=f"count_{workload}", **url))
        kw["steps_per_second"] = float(sb.number_input(
            "Engine steps per second of trace time", min_value=0.5, max_value=200.0, value=20.0, step=5.0,
            key=f"steps_per_second_{workload}",
            help="One step is one decode iteration; 20 per second is 50 ms each.", **url))
    sb.subheader("Sharing and preemption")
    kw["shared_prefix"] = int(sb.number_input(
        "Shared system prompt (tokens)", min_value=0, max_value=4096, value=0, step=16, key="shared_prefix",
        help="Put the same system prompt in front of every request. Paging stores its full blocks once "
             "and points every block table at them; reserve-max must copy it into every reservation.", **url))
    kw["preemption"] = sb.radio("When paged memory runs out", ["recompute", "swap"], horizontal=True,
                                key="preemption", format_func={"recompute": "recompute", "swap": "swap to host"}.get,
                                help="Recompute drops the evicted sequence's blocks and prefills its tokens again "
                                     "later; swap copies them to host memory and back.", **url)
    cost = sb.slider("Metadata cost c (slot equivalents per block)", 0.0, 8.0, 0.0, 0.25, key="metadata_cost",
                     help="What one block-table entry costs, in slots. Raises the price of small blocks.", **url)
    return Scenario(workload=workload, total_slots=int(total_slots), block_size=int(block_size),
                    max_new_tokens=int(max_new), metadata_cost=float(cost), **kw)


def fmt_pct(x):
    return "—" if x is None else f"{x:.0%}"


def _delta(value, fmt="{:+,}"):
    """A metric delta, or None when there is no difference to show."""
    return None if value in (None, 0) else fmt.format(value)


def summary_panel(results, cost: float) -> None:
    """Three headline numbers per allocator, side by side, then every other figure in one table."""
    cols = st.columns(2, border=True)
    rm = results["reserve_max"].summary
    for col, key in zip(cols, ("reserve_max", "paged")):
        res = results[key]
        s = res.summary
        other = key != "reserve_max" and rm["finished"] > 0
        with col:
            st.subheader(res.label + (f" · blocks of {res.block_size}" if res.block_size else " · contiguous"))
            a, b, c = st.columns(3)
            a.metric("Peak running", s["peak_running"],
                     delta=_delta(s["peak_running"] - rm["peak_running"]) if other else None,
                     help="Largest batch: sequences that computed a token in the same step.")
            u, ur = s["mean_utilization_busy"], rm["mean_utilization_busy"]
            b.metric("Utilisation", fmt_pct(u),
                     delta=_delta(None if u is None or ur is None else round((u - ur) * 100), "{:+} pts")
                     if other else None,
                     help="Slots holding a token ÷ all slots, mean over the steps when requests were waiting.")
            c.metric("Steps to drain", f"{s['steps']:,}",
                     delta=_delta(s["steps"] - rm["steps"]) if other else None, delta_color="inverse",
                     help="Engine steps until every request has finished (or been rejected).")
            if s["rejected"]:
                st.warning(f"{len(s['rejected'])} request(s) can never fit and were rejected:\n\n" +
                           "\n".join(f"- r{r['id']}: {r['reason']}" for r in s["rejected"][:10]))
    st.dataframe(details_table(results, cost), hide_index=True, width="stretch")


def _fmt_cost(x):
    return "—" if x is None else f"{x:.3f}"


def details_table(results, cost: float) -> pd.DataFrame:
    """Every summary figure of both allocators as rows (measure, reserve-max, paged, what it means)."""
    rows = []

    def add(name, fn, meaning):
        rows.append({"measure": name, "reserve-max": fn(results["reserve_max"]), "paged": fn(results["paged"]),
                     "what it means": meaning})

    add("tokens per step", lambda r: f"{r.summary['mean_tokens_per_step']:.2f}",
        "mean tokens emitted per engine step (throughput)")
    add("internal fragmentation", lambda r: fmt_pct(r.summary["mean_internal_fragmentation_busy"]),
        "allocated slots holding no token, share of the pool while requests wait (orange)")
    add("external fragmentation", lambda r: fmt_pct(r.summary["mean_external_fragmentation_busy"]),
        "free slots in gaps too small for the next request, share of the pool while requests wait (dark grey)")
    add(f"cost per stored token (c = {cost:g})",
        lambda r: _fmt_cost(r.cost_per_token_busy(cost)),
        "(allocated slots + c × blocks or reservations) ÷ tokens stored; 1.000 means nothing wasted")
    add("preemptions", lambda r: f"{r.summary['preemptions']:,}",
        "sequences evicted to make room (recompute or swap, as chosen in the sidebar)")
    add("logical tokens, at their peak", lambda r: f"{r.summary['peak_logical_tokens']:,}",
        "tokens the running sequences hold, each counting its own copy of a shared prompt")
    add("distinct slots holding them (same step)", lambda r: f"{r.summary['used_slots_at_peak_logical']:,}",
        "physical slots at that same step: a shared prompt block is stored once")
    add("swapped blocks", lambda r: f"{r.summary['swapped_blocks']:,}",
        "blocks copied to host memory and back (swap), out and in together")
    add("recomputed tokens", lambda r: f"{r.summary['recomputed_tokens']:,}",
        "tokens prefilled a second time after a recompute preemption")
    add("finished / rejected", lambda r: f"{r.summary['finished']:,} / {len(r.rejected):,}",
        "requests served, and requests that can never fit this pool")
    return pd.DataFrame(rows)


NARRATIVE = {
    "Why reserve the maximum?": (
        "Nobody knows, when a request arrives, how long its answer will be. Before 2023, serving "
        "engines kept each request's keys and values in one unbroken run of memory, because their "
        "attention kernels read it that way, and a run cannot grow into memory someone else holds. So "
        "the engine reserved the longest answer it allows — the prompt plus `max_new_tokens` — the "
        "moment the request was admitted, and kept all of it until the request ended."),
    "Two kinds of waste": (
        "**Internal fragmentation** (orange) is reserved memory the request never writes: the tail "
        "of its run beyond the tokens it has produced so far. **External fragmentation** (dark grey) "
        "is memory nobody holds that is still useless: gaps between reservations shorter than the "
        "reservation the next waiting request needs. Both sit idle while requests queue."),
    "What paging changes": (
        "The paged allocator cuts the pool into blocks of a few slots. A request gets a block only "
        "when its last one fills, from anywhere in the pool, and a small **block table** records which "
        "physical block holds each stretch of its tokens. Nothing has to be contiguous, so every free "
        "block can serve anyone — external fragmentation disappears (all but a pool remainder too "
        "small to form a block) — and the only slack left is the unfilled end of each request's last "
        "block."),
    "Why bigger blocks waste more": (
        "A request's last block is, on average, about half empty, so the slack grows with the block "
        "size: under one slot per request at block size 1, up to 255 at 256. Big blocks also mean few "
        "blocks: a 2,048-slot pool has only eight blocks of 256, so at most eight requests can run. "
        "Tiny blocks have their own price, which utilisation does not show: a longer block table, and "
        "an attention kernel that has to chase more pointers (see the live kernel tab)."),
    "What preemption is": (
        "Paging admits a request with just the blocks it needs now, so memory can run out halfway "
        "through an answer. When a running sequence needs a block and none is free, the engine evicts "
        "the sequence it admitted last: its blocks return to the pool and it goes back to the head of "
        "the queue. With **recompute** its prompt and the tokens it had already produced are "
        "processed again when it returns; with **swap** its blocks are copied out to host memory "
        "and back in before it resumes. Either way a preemption costs time, not correctness."),
}


def narrative() -> None:
    cols = st.columns(len(NARRATIVE))
    for col, (title, body) in zip(cols, NARRATIVE.items()):
        with col:
            st.markdown(f"**{title}**")
            st.markdown(body)


def workload_panel(workload, sc: Scenario) -> None:
    with st.expander(f"The workload: {workload.name}, {len(workload)} requests", expanded=False):
        if sc.workload == "classroom-40":
            p = workload.params
            st.markdown(
                f"Forty synthetic chat requests drawn with seed **{p['seed']}**: prompts uniform on "
                f"**{p['prompt_len_range'][0]}–{p['prompt_len_range'][1]} tokens**; answer lengths "
                f"**{p['output_distribution']}** with mean **{p['output_mean']:.0f} tokens** (many short "
                f"replies, a few long ones), capped at **max_new_tokens = {p['max_new_tokens']}**; "
                + ("all arriving at step 0." if p["arrival"] == "burst"
                   else f"arriving as a Poisson trickle of {p['arrival_rate']:g} requests per step.")
                + " In a 2,048-slot pool these settings make reserve-max hold three requests at a time "
                  "and paging about thirty, as the PagedAttention paper's measurements lead one to expect.")
        elif sc.workload == "azure-conv":
            st.markdown(f"Rows {sc.offset + 1}–{sc.offset + len(workload)} of the shipped Azure "
                        f"LLM inference trace (conversation service), arrivals from its timestamps at "
                        f"{sc.steps_per_second:g} steps per second.")
            st.caption("Data: " + AZURE_ATTRIBUTION)
        else:
            st.markdown(f"Rows {sc.offset + 1}–{sc.offset + len(workload)} of your file "
                        f"**{sc.trace_name}**, arrivals at {sc.steps_per_second:g} steps per second.")
        for note in workload.notes:
            st.info(note)
        df = pd.DataFrame([{"request": f"r{r.id}", "prompt (tokens)": r.prompt_len,
                            "answer (tokens)": r.output_len, "arrives at step": r.arrival_step,
                            "reserve-max reservation (slots)": r.prompt_len + workload.max_new_tokens}
                           for r in workload.requests])
        st.dataframe(df, hide_index=True, height=260)


presenting = presentation_mode()
st.title("Reserve for the worst case, or page?")
st.markdown("The same requests run against the same KV-cache pool twice: **reserve-max** on the left "
            "holds a contiguous run of prompt + `max_new_tokens` slots per request; **paged** on the right "
            "hands out fixed blocks as sequences grow. Press **▶ Play**, or drag the step slider.")

scenario = controls()
try:
    workload, results, fig = compute(scenario)
    remember_scenario(scenario)
except ValueError as exc:
    if scenario.workload == "upload" and not scenario.trace_bytes:
        st.info("No trace uploaded yet: showing the last scenario that ran. Upload a CSV in the sidebar.")
    else:
        st.sidebar.error(f"These settings cannot run: {exc}")
        last = current_scenario()
        st.error(f"These settings cannot run: {exc}. Showing the last scenario that could: "
                 f"{last.workload}, {last.slots:,} slots, block size {last.block_size}.")
    scenario = current_scenario()
    workload, results, fig = compute(scenario)

keyboard_shortcuts()
tools = st.columns([3, 2, 4])
with tools[0]:
    share_link()
with tools[1]:
    exports_menu(scenario, workload, results, fig)
guided_lesson(results)
for note in workload.notes:
    st.info(f"{workload.name}: {note}.")
summary_panel(results, scenario.metadata_cost)
st.plotly_chart(fig, width="stretch", config={"displaylogo": False}, key="maps")
st.caption("Each cell is one slot (or, for large pools, a group of slots shown by what most of them hold). "
           "Colours: a request's tokens; **orange** allocated but empty; **light grey** free; **dark grey** "
           "free but unusable. The dashed line below marks the frame's step.")
if st.toggle("Show the numbers behind the animation, frame by frame", key="show_numbers"):
    st.dataframe(metrics_table(results, fig, key=scenario), hide_index=True, height=320)
narrative()

st.subheader("Which block size?")
rows = sweep(scenario)
left, right = st.columns([3, 1])
with left:
    st.plotly_chart(sweep_chart(scenario, results["reserve_max"].summary["mean_utilization_busy"]),
                    width="stretch", config={"displaylogo": False}, key="sweep")
with right:
    best = min(rows, key=lambda r: r["cost_per_token_busy"])
    here = next((r for r in rows if r["block_size"] == scenario.block_size), None)
    st.markdown(f"Utilisation falls as blocks grow: each sequence's last block is on average half empty, "
                f"and a big block leaves few blocks to go round.\n\nWith c = **{scenario.metadata_cost:g}** "
                f"slot equivalents per block, the cheapest block size per stored token is "
                f"**{best['block_size']}**. Raise c and tiny blocks stop looking free.")
    if here is None:
        st.caption(f"Block size {scenario.block_size} is not on the sweep's powers of two; the maps above use it.")
if st.toggle("Show the sweep as a table", key="show_sweep_table"):
    table = pd.DataFrame([{"block size (slots)": r["block_size"], "blocks in pool": r["blocks"],
                           "utilisation while waiting (%)": round(100 * r["mean_utilization_busy"], 1),
                           "internal frag. (% of pool)": round(100 * r["mean_internal_fragmentation_busy"], 1),
                           "peak running": r["peak_running"], "steps to drain": r["steps"],
                           "preemptions": r["preemptions"], "tokens per step": r["mean_tokens_per_step"],
                           "cost per stored token": round(r["cost_per_token_busy"], 3)} for r in rows])
    st.dataframe(table, hide_index=True)

workload_panel(workload, scenario)
