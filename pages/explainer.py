"""Home page: the same requests, the same pool, reserve-max on the left and paged on the right.

Renders only: the simulation, the frames and the sweep come from ``allocator`` (via
``allocator.viz.explainer_chart`` for layout), cached so a class on the same settings simulates once.
"""
import pandas as pd
import streamlit as st

from allocator.memory.reserve_max import ReserveMaxAllocator
from allocator.engine.scenario import Scenario
from allocator.workloads.sharegpt import SHAREGPT_ATTRIBUTION
from allocator.workloads.trace import AZURE_ATTRIBUTION
from allocator.common.validate import plain_markdown
from allocator.common.formats import plural
from allocator.viz.claims.explainer import (details_rows, headline, reservation_name, reservation_rule,
                                            scheduler_rules_text, window_comparison, window_text,
                                            workload_outcome)
from allocator.viz.claims.sweep import sweep_summary, sweep_table
from pages._ui.cache import (compute, full_attention, lines_figure, metrics_table, presentation_figure, seconds_figure, sweep,
                             sweep_chart, timings)
from pages._ui.controls import UPLOAD_REFUSED, controls, read_url, time_controls
from pages._ui.errors import show_error
from pages._ui.exports_ui import exports_menu
from allocator.viz.lesson import CARDS, MAPS, SWEEP
from allocator.viz.texts import TINY_BLOCKS_TIME
from pages._ui.guided import guided_lesson, hidden_sections, lesson_heading
from pages._ui.present import chart, is_presenting, share_link, data_table
from pages._ui.state import current_scenario, remember_scenario

def cards_panel(results, priced, full=None) -> None:
    """The headline numbers per allocator, side by side (built by ``allocator.viz.claims.headline``);
    with ``full`` (a sliding-window scenario: ``pages._ui.cache.full_attention``), what paging alone
    gives under the same rules, and how much of the paged card's gain is the window's."""
    cols = st.columns(2, border=True)
    panels = headline(results, priced)
    for col, key in zip(cols, ("reserve_max", "paged")):
        panel = panels[key]
        s = results[key].summary
        with col:
            st.markdown(f"**{panel['title']}**")
            for slot, card in zip(st.columns(len(panel["cards"])), panel["cards"]):
                slot.metric(card["label"], card["value"], delta=card["delta"], delta_color=card["delta_color"],
                            help=card["help"])
            if panel["time"]:
                st.markdown(f":material/timer: {panel['time']}")
            st.caption(panel["line"])
            if s.rejected:
                st.warning(f"{plural(len(s.rejected), 'request')} can never fit and "
                           f"{'was' if len(s.rejected) == 1 else 'were'} rejected:\n\n" +
                           "\n".join(f"- r{r['id']}: {r['reason']}" for r in s.rejected[:10]))
    if full is not None:
        figures, full_timing = full
        st.info(window_comparison(results, figures, priced, full_timing), icon=":material/compare_arrows:")


def details_panel(results, cost: float, priced) -> None:
    """Every other figure of both allocators in one table (``allocator.viz.claims.details_rows``): a
    plain table, so every row shows, long meanings wrap instead of being cut, and on a projector
    its text follows the page's large type."""
    st.table(pd.DataFrame(details_rows(results, cost, priced)).set_index("measure"))


NARRATIVE = {
    "Why reserve the maximum?": (
        "Nobody knows, when a request arrives, how long its answer will be. Before 2023, serving "
        "engines kept each request's keys and values in one unbroken run of memory, because their "
        "attention kernels read it that way, and a run cannot grow into memory someone else holds. So "
        "the engine reserved the longest answer it allows — the prompt plus `max_new_tokens` — the "
        "moment the request was admitted, and kept all of it until the request ended."),
    "Where idle memory goes": (
        "Orange is memory a request holds that holds no token yet. Part of it is a **reservation** for "
        "tokens the answer will still write; the rest, past the end of the answer it actually gives, is "
        "**internal fragmentation**: never written. The map cannot know which slots will be written, so "
        "both are orange. **External fragmentation** (dark grey) is memory nobody holds that is still "
        "useless: gaps between reservations, each shorter than the next waiting request needs, although "
        "together they would hold it. Orange and dark grey sit idle while requests queue. With a shared "
        "system prompt the maps show one more colour of wasted memory: **duplicate copies** (brown) of a "
        "prompt that is the same in every request — each reservation stores its own. Light grey is free "
        "memory that is no fragmentation. The details table above splits the pool into six shares — token "
        "states, duplicate copies, reservation, internal and external fragmentation, free — that add up "
        "to 100 %."),
    "What paging changes": (
        "The paged allocator cuts the pool into blocks of a few slots. A request gets a block only "
        "when its last one fills, from anywhere in the pool, and a small **block table** records which "
        "physical block holds each stretch of its tokens. Nothing has to be contiguous, so every free "
        "block can serve anyone — external fragmentation disappears (all but a pool remainder too "
        "small to form a block) — and the only slack left is the unfilled end of each request's last "
        "block."),
    "Why bigger blocks waste more": (
        "A request's last block is, on average, about half empty, so the slack grows with the block "
        "size: none at block size 1, up to 255 slots at 256. Big blocks also mean few blocks: this "
        "{slots:,}-slot pool has only {blocks_256} of 256 slots, so at most {blocks_256_n} requests could run. "
        "Tiny blocks make the block table longer, which utilisation does not show. " + TINY_BLOCKS_TIME),
    "What preemption is": (
        "Paging admits a request with just the blocks it needs now, so memory can run out halfway "
        "through an answer. When a running sequence needs a block and none is free, the engine evicts "
        "the sequence it admitted last: its blocks return to the pool and it goes back to the head of "
        "the queue. With **recompute** its prompt and the tokens it had already produced are "
        "processed again when it returns; with **swap** its blocks are copied out to host memory "
        "and back in before it resumes. Either way the answer is unaffected but work is repeated or "
        "copied: the table above counts it (recomputed tokens, swapped blocks), and prices it in seconds "
        "on the GPU chosen in the sidebar: recompute pays the prefill again, swap pays its copies over the "
        "host link, one per layer for K and for V of every block, so small blocks swap slowly."),
}


def narrative(sc: Scenario) -> None:
    """The five short explanations under the maps (the pool-size example uses the scenario's pool)."""
    blocks = sc.slots // 256
    fill = {"slots": sc.slots, "blocks_256": plural(blocks, "block"), "blocks_256_n": f"{blocks:,}"}
    items = list(NARRATIVE.items())
    for start in range(0, len(items), 3):     # three to a row: five columns were a word wide at 1366 px
        for col, (title, body) in zip(st.columns(3), items[start:start + 3]):
            with col:
                st.markdown(f"**{title}**")
                st.markdown(body.format(**fill) if "{" in body else body)


def map_caption(shared: bool, in_seconds: bool = False) -> str:
    """What the map colours mean (the legend in words), with the shared-prompt colours when they appear."""
    text = ("Each cell is one slot (or, for large pools, a group of slots shown by what most of them hold). "
            "Colours: a request's tokens (blues and greens); **orange** allocated, holding no token (some for "
            "tokens still to come, the rest never written); **light grey** free; **dark grey** free but in gaps "
            "too short for the next request.")
    if shared:
        text += (" **Pink**: a shared system-prompt block, stored once for many block tables; **brown**: a "
                 "duplicate copy of the shared prompt.")
    text += (" The charts under the maps show the whole run, step by step: the share of slots holding a "
             "token, and the sequences running; the readout above each map names the frame's step")
    if in_seconds:
        return text + (" and moment. At a moment each map shows where its own run was then (the two runs take "
                       "different seconds per step).")
    return text + "."


def workload_panel(workload, sc: Scenario, results) -> None:
    """The workload's parameters and requests, and what this run did with them (from ``results``).

    Built only while the expander is open (``on_change="rerun"``: opening it reruns the page, which
    then fills it). Closed, its request table would still be sent and mounted with the page, and a
    fresh browser would load the data-grid code for it before drawing the first chart (issue 24).
    The expander's label names the workload, so changing the workload closes it, as it did before."""
    with st.expander(plain_markdown(f"The workload: {workload.name}, {plural(len(workload), 'request')}"),
                     expanded=False, key="workload_open", on_change="rerun") as panel:
        if not panel.open:
            return
        if sc.workload == "classroom-40":
            p = workload.params
            st.markdown(
                f"Forty synthetic chat requests drawn with seed **{p['seed']}**: prompts uniform on "
                f"**{p['prompt_len_range'][0]}–{p['prompt_len_range'][1]} tokens**; answer lengths "
                f"**{p['output_distribution']}** with mean **{p['output_mean']:.0f} tokens** (many short "
                f"replies, a few long ones), capped at **max_new_tokens = {p['max_new_tokens']}**; "
                + ("all arriving at step 0." if p["arrival"] == "burst"
                   else f"arriving as a Poisson trickle of {p['arrival_rate']:g} requests per step.")
                + " " + workload_outcome(results, sc.slots))
        elif sc.workload == "azure-conv":
            st.markdown(f"Rows {sc.offset + 1}–{sc.offset + len(workload)} of the shipped Azure "
                        f"LLM inference trace (conversation service), arrivals from its timestamps at "
                        f"{sc.steps_per_second:g} steps per second.")
            st.caption("Data: " + AZURE_ATTRIBUTION)
        elif sc.workload == "sharegpt-opt":
            st.markdown(f"Rows {sc.offset + 1}–{sc.offset + len(workload)} of the PagedAttention paper's ShareGPT "
                        "length pairs (prompt + answer under 2,048 tokens, OPT tokenizer), arriving as a Poisson "
                        f"stream of 2 requests/s counted per 10 ms, at {sc.steps_per_second:g} steps per second.")
            st.caption("Data: " + SHAREGPT_ATTRIBUTION)
        else:
            st.markdown(f"Rows {sc.offset + 1}–{sc.offset + len(workload)} of your file "
                        f"**{plain_markdown(sc.trace_name, 80)}**, arrivals at {sc.steps_per_second:g} steps per second.")
        for note in workload.notes:
            st.info(plain_markdown(note))
        st.caption(scheduler_rules_text(window=results["paged"].window is not None))
        reserve = ReserveMaxAllocator(max(sc.slots, 1), workload.max_new_tokens, sc.policy, placement=sc.placement)
        df = pd.DataFrame([{"request": f"r{r.id}", "prompt (tokens)": r.prompt_len,
                            "answer (tokens)": r.output_len, "arrives at step": r.arrival_step,
                            f"{reservation_name(results)} reservation (slots)": reserve.reservation(r.prompt_len,
                                                                                                  r.output_len)}
                           for r in workload.requests])
        data_table(df, hide_index=True, height=260)


presenting = is_presenting()           # the toggle is app.py's, on every page
# presenting a lesson: the step's title is the heading (the maps then stay on a laptop's first screen)
st.title((presenting and lesson_heading()) or "Reserve for the worst case, or page?")
if not presenting:
    intro = st.empty()        # filled once the runs are known: it names the left side's policy

url_messages = read_url()
for message in url_messages:
    show_error(message, kind="warning", icon=":material/link_off:")
# a value refused in the sidebar is named under its field, which at 1920x1080 can be below the fold
# (the field then seemed to jump back for no reason): say it at the top of the page as well
for refused_key in [k for k in st.session_state if str(k).startswith("_refused_")]:
    show_error(st.session_state[refused_key], after="")
scenario = controls()
st.sidebar.caption("Why blocks of 16? The PagedAttention paper (section 7, Figure 18b) and this lab's own run of it "
                   "are on the Throughput page, under the paper replication (section 7: block size).")
st.sidebar.page_link("pages/throughput.py", label="Why 16? Block size end to end", icon=":material/timer:")
clock = time_controls()
try:
    workload, results, fig = compute(scenario)
    remember_scenario(scenario)
except ValueError as exc:
    if scenario.workload == "upload" and not scenario.trace_bytes:
        st.info("No trace uploaded yet: showing the last scenario that ran. Upload a CSV in the sidebar.")
    elif scenario.workload == "upload" and st.session_state.get(UPLOAD_REFUSED):
        last = current_scenario()          # the file's error is in the sidebar, under the uploader: once
        st.info(plain_markdown(f"{st.session_state[UPLOAD_REFUSED]} cannot run (why: in the sidebar, under the "
                               f"upload). Showing the last scenario that could: {last.workload}, {last.slots:,} "
                               f"slots, block size {last.block_size}."), icon=":material/history:")
    else:
        show_error(exc, st.sidebar, before="These settings cannot run: ", after="")
        last = current_scenario()
        show_error(exc, before="These settings cannot run: ", after=f". Showing the last scenario that could: "
                   f"{last.workload}, {last.slots:,} slots, block size {last.block_size}.")
    scenario = current_scenario()
    workload, results, fig = compute(scenario)

if not presenting:
    intro.markdown(f"The same requests run against the same KV-cache pool twice: **{reservation_name(results)}** on "
                   f"the left holds a contiguous run of {reservation_rule(results).replace('max_new_tokens', '`max_new_tokens`')} "
                   "slots per request; **paged** on the right hands out fixed blocks as sequences grow. Press "
                   "**▶ Play**, or drag the step slider.")
priced = timings(scenario, clock["gpu"], clock["model"])
step_fig = fig                    # exports and the frame table keep the engine-step animation
if clock["seconds_axis"]:
    fig = seconds_figure(scenario, clock["gpu"], clock["model"])
rows = sweep(scenario)
if presenting:                 # a projector: the lesson box, then straight to the maps
    guided_lesson(results, scenario, rows, compact=True)
else:
    tools = st.columns([2, 2, 1, 3], vertical_alignment="center")
    with tools[0]:
        share_link()
    with tools[2]:
        exports_menu(scenario, workload, results, step_fig)
    guided_lesson(results, scenario, rows, button_place=tools[1])
hidden = hidden_sections()
HIDDEN_NOTE = "Hidden until the class has predicted: press **Reveal** in the lesson box above."
for note in workload.notes:
    st.info(plain_markdown(f"{workload.name}: {note}."))


def maps_section() -> None:
    if MAPS in hidden:
        st.info(f"The memory maps: {HIDDEN_NOTE}", icon=":material/visibility_off:")
        return
    clock_key = (clock["gpu"], clock["model"]) if clock["seconds_axis"] else ()
    lines = lines_figure(scenario, *clock_key)
    if presenting:                     # cached per figure and clock: () for engine steps, else (gpu, model)
        maps = presentation_figure(fig, scenario, ("maps", *clock_key))
        lines = presentation_figure(lines, scenario, ("lines", *clock_key))
    else:
        maps = fig
    st.plotly_chart(maps, width="stretch", config={"displaylogo": False}, key="maps")
    st.plotly_chart(lines, width="stretch", config={"displaylogo": False}, key="maps_lines")
    # the legend's test (explainer_figure): the run shares a prompt, whichever scenario set it
    st.caption(map_caption(bool(results["paged"].shared_prefix), clock["seconds_axis"]))
    if results["paged"].window is not None:
        st.info(window_text(results), icon=":material/filter_center_focus:")


if presenting:
    maps_section()
if CARDS in hidden:
    st.info(f"The headline numbers: {HIDDEN_NOTE}", icon=":material/visibility_off:")
else:
    cards_panel(results, priced, full_attention(scenario, clock["gpu"], clock["model"]))
if not presenting:
    maps_section()
if CARDS not in hidden:
    details_panel(results, scenario.metadata_cost, priced)
if MAPS not in hidden and st.toggle("Show the numbers behind the animation, frame by frame", key="show_numbers"):
    data_table(metrics_table(results, step_fig, key=scenario), hide_index=True, height=320)
narrative(scenario)

st.subheader("Which block size?")
if SWEEP in hidden:
    st.info(f"The block-size sweep: {HIDDEN_NOTE}", icon=":material/visibility_off:")
else:
    left, right = st.columns([3, 1])
    with left:
        chart(sweep_chart(scenario, results["reserve_max"].summary),
                        width="stretch", config={"displaylogo": False}, key="sweep")
    with right:
        st.markdown(sweep_summary(rows, scenario.block_size, scenario.metadata_cost,
                                  results["reserve_max"].summary))
    if st.toggle("Show the sweep as a table", key="show_sweep_table"):
        data_table(sweep_table(rows, results["reserve_max"].summary), hide_index=True)

workload_panel(workload, scenario, results)
