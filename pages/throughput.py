"""Throughput and latency: the PagedAttention paper's rate sweep, in seconds on a chosen GPU.

Renders only. The sweep comes from ``allocator.studies.rate_sweep`` (through a shared cache with a
progress bar, ``pages._ui.sweep_cache``), the figures from ``allocator.viz.throughput``, every
sentence from ``allocator.viz.claims`` and the cost model's table from ``allocator.cost.timing``.
"""
from __future__ import annotations

import pandas as pd
import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from allocator.accounting.models import PRESETS
from allocator.studies.paper import (PAPER_POOL_SLOTS, is_computed, replication_for, spread_for,
                                     spread_is_computed)
from allocator.studies.ablations import ablations_for
from allocator.studies.sharing import figure15_for
from allocator.studies.sampling_latency import figure14_for
from allocator.cost.kernel_block import kernel_block_factors
from allocator.workloads.sharegpt import SHAREGPT_ATTRIBUTION
from allocator.studies.sustained import INTERPOLATION_SPAN
from allocator.studies.rate_sweep import default_rate, parse_rates, with_latency_factor
from allocator.workloads.poisson import SWEEP_WORKLOADS
from allocator.cost.best import best_cost_model, profiled_pairs, seconds_source
from allocator.cost.roofline import GPU_COUNTS, GPUS, TIMED_MODELS, describe
from allocator.workloads.trace import AZURE_ATTRIBUTION
from allocator.common.errors import FieldError
from allocator.viz.claims.throughput import (latency_claim, memory_claim, paper_comparison, sustained_rows,
                                             sweep_headline, time_split_claim, time_split_rows)
from allocator.viz.claims.paper import ablation_texts, paper_replication_texts
from allocator.viz.claims.sharing import sharing_rows, sharing_texts
from allocator.viz.claims.sampling_latency import fig14_rows, fig14_texts
from allocator.viz.claims.throughput import sweep_source_note
from allocator.viz.paper import fig2_figure, fig12_figure, fig13_figure, fig18b_figure, fig19a_figure, targets_rows
from allocator.viz.sharing import beam_sweep_figure, fig15_figure
from allocator.viz.sampling_latency import fig14_advantage_figure, fig14_latency_figure
from allocator.viz.throughput import cdf_figure, latency_figure, memory_figure, throughput_figure
from pages._ui.controls import checked_number
from pages._ui.errors import show_error
from pages._ui.sweep_cache import STARTUP, cached_sweep, is_cached, origin, sweep_key
from pages._ui.state import set_defaults
from pages._ui.url_params import PAGE_RULES
from pages._ui.present import chart

BLOCK_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
PROFILED = profiled_pairs()
GPU_CHOICES = ["auto", *GPU_COUNTS]
DEFAULTS = {"tp_gpu": "a100-40gb", "tp_model": "opt-13b", "tp_gpus": "auto",
            "tp_requests": PAGE_RULES["tp_requests"].default, "tp_rates": "",
            "tp_factor": 5, "tp_block": 16, "tp_workload": "azure-conv"}
set_defaults(DEFAULTS)

st.title("Throughput and latency: paging in seconds")
st.markdown(
    "The other pages count slots and steps. The people using a server count seconds: how long before the "
    "first word appears (**time to first token**, TTFT), how fast the rest streams (**time per output token**, "
    "TPOT), and how many tokens a GPU serves each second. Here every engine step is priced for a real GPU: by "
    "the operator timings measured on it where the lab holds them (its operator profile), else from its "
    "datasheet figures (the roofline); every figure below names which. And the PagedAttention paper's experiment is run again: requests arrive at random "
    "(a Poisson stream) at a rising rate, under the paper's three reservation baselines and under paging, and "
    "each allocator's **sustained rate** is where its latency runs away.")




def run_on_click(label: str, key: str, icon: str, flag: str, running: str, failure: str, compute):
    """A study behind a button: once clicked (``st.session_state[flag]`` stays set for the session), run
    ``compute(progress)`` under a progress bar reading ``running`` and return its result; a FieldError
    (the ShareGPT lengths missing or damaged) is shown after ``failure`` and gives None, as does a study
    not yet asked for. ``progress(done, total, text)`` moves the bar ("Simulating <text> (<done> of
    <total>)…"); the studies memoise their results, so a rerun returns at once."""
    if st.button(label, key=key, icon=icon):
        st.session_state[flag] = True
    if not st.session_state.get(flag):
        return None
    bar = st.progress(0.0, text=running)
    try:
        return compute(lambda done, total, text: bar.progress(
            done / total, text=f"Simulating {text} ({done} of {total})…"))
    except FieldError as exc:
        show_error(exc, before=failure)
        return None
    finally:
        bar.empty()


with st.container(border=True):
    st.markdown("**The paper's own experiment, one click.** OPT-13B on one A100-40GB with the KV pool of the "
                f"paper's Table 1 ({PAPER_POOL_SLOTS:,} slots: 12 GiB at 800 KiB per token; the sweep under \"Your own "
                "sweep\" sizes its pool from this lab's cost model instead, so its pool differs), ShareGPT request "
                "lengths, vLLM with blocks of 16 and recompute against the paper's three Orca baselines placed by "
                "its buddy allocator — and the paper's Figures 2, 13 and 12 drawn beside this model's.")
    if st.button("Run the paper replication", key="tp_paper_run", icon=":material/science:", type="primary"):
        st.session_state["tp_paper"] = True
rep21 = None
if st.session_state.get("tp_paper"):
    bar21 = None
    try:
        if is_computed():
            rep21 = replication_for()
        else:
            bar21 = st.progress(0.0, text="Running the paper's configuration…")
            rep21 = replication_for(progress=lambda done, total, text: bar21.progress(
                done / total, text=f"Simulating {text} ({done} of {total} runs)…"))
        if not spread_is_computed():     # Figures 13 and 12 over seeds: computed once, cached
            bar21 = bar21 or st.progress(0.0)
            rep21 = spread_for(progress=lambda done, total, text: bar21.progress(
                done / total, text=f"Simulating {text} ({done} of {total})…"))
        rep21 = spread_for()
    except FieldError as exc:               # the ShareGPT lengths missing or damaged: named, the page goes on
        show_error(exc, before="The paper replication cannot run: ")
    finally:
        if bar21 is not None:
            bar21.empty()
if rep21 is not None:
    texts21 = paper_replication_texts(rep21)
    st.subheader("The paper replication: its figures and this model's")
    st.info(texts21["load"], icon=":material/speed:")
    st.markdown("**Targets: the paper's value, this model's, the error.** Token-state shares are % of the KV "
                "memory; the Figure 12 rows compare ratios of sustained rates.")
    st.table(pd.DataFrame(targets_rows(rep21)).set_index("measure"))
    chart(fig2_figure(rep21), key="tp_paper_fig2", config={"displaylogo": False})
    st.markdown(texts21["fig2"])
    chart(fig13_figure(rep21), key="tp_paper_fig13", config={"displaylogo": False})
    st.markdown(texts21["fig13"])
    chart(fig12_figure(rep21), key="tp_paper_fig12", config={"displaylogo": False})
    st.markdown(texts21["fig12"])
    st.markdown("**Where this model departs from the paper's system**\n\n"
                + "\n".join(f"- {d}" for d in texts21["departures"]))
    st.subheader("Section 7: block size, and recompute against swap", anchor="paper-block-size")
    st.markdown("Why blocks of 16? The paper answers in its section 7 (Figures 18b and 19): small blocks waste the "
                "GPU's parallelism in the attention kernel, large ones waste memory, and swapping small blocks costs a "
                "fixed latency per copy. The same runs on this model, the paper's statements beside.")
    abl21 = run_on_click("Run the block-size and swap ablations", "tp_paper_abl", ":material/tune:",
                         "tp_paper_ablations", "Running the ablations…", "The ablations cannot run: ",
                         lambda progress: ablations_for(kernel_block_factors(), progress=progress))
    if abl21 is not None:
        texts_abl = ablation_texts(abl21)
        st.info(texts_abl["kernel"], icon=":material/memory:")
        chart(fig19a_figure(abl21), key="tp_paper_fig19a", config={"displaylogo": False})
        st.markdown(texts_abl["fig19a"])
        chart(fig18b_figure(abl21), key="tp_paper_fig18b", config={"displaylogo": False})
        st.markdown(texts_abl["fig18b"])
        st.markdown(texts_abl["fig19b"])
    st.subheader("Section 6.3: sharing blocks — parallel sampling and beam search", anchor="paper-sharing")
    st.markdown("A request may ask for several outputs: several samples of one prompt, or a beam search. Paging lets "
                "their sequences point at the same blocks, counted by refcount: the prompt's blocks for every sample, "
                "and for beams all the history they have in common; a partly filled block is copied only when a "
                "sequence writes into it (copy-on-write). Figure 15 of the paper measures how much memory that "
                "saves; the same runs on this model's engine, the paper's ShareGPT values beside.")
    fig15_21 = run_on_click("Run Figure 15 (memory saved by sharing)", "tp_paper_fig15", ":material/share:",
                            "tp_paper_sharing", "Running parallel sampling and beam search…",
                            "Figure 15 cannot run: ",
                            lambda progress: figure15_for(rep21.scale["scale"], progress=progress))
    if fig15_21 is not None:
        texts15 = sharing_texts(fig15_21)
        st.markdown(texts15["setup"])
        st.table(pd.DataFrame(sharing_rows(fig15_21)).set_index("measure"))
        chart(fig15_figure(fig15_21), key="tp_paper_fig15_chart", config={"displaylogo": False})
        st.markdown(texts15["fig15"])
        chart(beam_sweep_figure(fig15_21), key="tp_paper_beam_sweep", config={"displaylogo": False})
        st.markdown(texts15["beam_model"])
        st.markdown("**Why they differ**\n\n" + "\n".join(f"- {t}" for t in texts15["why"].values()))
    st.markdown("**Figure 14: what sharing does to latency.** The same requests of several sequences, now against "
                "Orca, whose every sequence reserves its own memory: how fast can requests arrive before latency "
                "runs away, and how does vLLM's lead change with the number of samples and the beam width?")
    fig14_21 = run_on_click("Run Figure 14 (latency with several sequences)", "tp_paper_fig14",
                            ":material/timeline:", "tp_paper_fig14_on",
                            "Running vLLM and Orca with several sequences a request…", "Figure 14 cannot run: ",
                            lambda progress: figure14_for(rep21.scale["scale"], progress=progress))
    if fig14_21 is not None:
        texts14 = fig14_texts(fig14_21)
        st.markdown(texts14["setup"])
        st.table(pd.DataFrame(fig14_rows(fig14_21)).set_index("measure"))
        chart(fig14_advantage_figure(fig14_21), key="tp_paper_fig14_adv", config={"displaylogo": False})
        p_col14, m_col14 = st.columns(2, border=True)
        p_col14.markdown(texts14["paper"])
        m_col14.markdown(texts14["fig14"])
        st.markdown(f"**Why they differ.** {texts14['why']}")
        chart(fig14_latency_figure(fig14_21), key="tp_paper_fig14_curves", config={"displaylogo": False})
    st.caption("Request lengths: " + SHAREGPT_ATTRIBUTION)
    st.divider()
    st.subheader("Your own sweep")

c = st.columns([1.4, 1.2, 0.7, 1.2])
c[0].selectbox("GPU", list(GPUS), key="tp_gpu", format_func=lambda k: GPUS[k].label,
               help="Datasheet figures: memory, memory bandwidth, dense fp16/bf16 tensor FLOP/s, PCIe link. Where the "
                    "lab holds an operator profile of this GPU with the chosen model (" + PROFILED + "), its "
                    "measured operator timings price the steps instead.")
c[1].selectbox("Model", list(TIMED_MODELS), key="tp_model", format_func=lambda k: PRESETS[k].short,
               help="Shapes and parameter counts from the models' published configurations.")
c[2].selectbox("GPUs", GPU_CHOICES, key="tp_gpus",
               help="Tensor parallelism: the model split over this many GPUs (their memory, bandwidth and "
                    "FLOP/s add up; the traffic between them is not priced). auto: the fewest that hold the "
                    "weights with room for one full context of KV cache.")
c[3].select_slider("Block size (slots)", BLOCK_SIZES, key="tp_block",
                   help="The paged allocator's block size.")
c = st.columns([1.2, 0.9, 1.4, 1.2])
# under the controls, full width: a refused setting, a core error. Drawn through st.empty() so a
# run clears the last run's message at once (a container kept it, faded, through a long sweep)
errors = st.empty().container()
c[0].text_input("Request rates (requests/s)", key="tp_rates", placeholder="auto",
                help="Comma-separated, e.g. 0.5, 1, 2, 4. Empty or auto: eight rates around the rate the paged "
                     "allocator finishes requests at when they all arrive at once. A sustained rate is "
                     f"interpolated only between two rates at most {INTERPOLATION_SPAN:g}× apart; across a wider "
                     "step it is reported as the two rates it lies between.")
requests = checked_number(c[1], PAGE_RULES["tp_requests"], "tp_requests", "Requests per run", say_in=errors,
                          help=f"Allowed: {PAGE_RULES['tp_requests'].describe()}. Drawn with a fixed seed from the "
                               "chosen lengths' rows that fit the model's context window; the same requests at "
                               "every rate.")
c[2].selectbox("Lengths", list(SWEEP_WORKLOADS), key="tp_workload", format_func=SWEEP_WORKLOADS.get,
               help="Request lengths: the shipped Azure conversation trace (prompts about three times the answers) "
                    "or the PagedAttention paper's ShareGPT pairs (short prompts, long answers; generation cap "
                    "2,048).")
c[3].slider("Latency budget (× a request served alone)", 2, 20, key="tp_factor",
            help="A rate is sustained while the normalised latency stays under this many times the latency of "
                 "a request served alone on the same GPU.")



def fail(exc: Exception) -> None:
    """Show a core error in the page's words (never a traceback); keep the last result that ran on
    screen beside it when there is one, else stop. A sweep the server's heavy-work queue did not
    reach in time (``TimeoutError``) is named as a busy server, not as bad settings."""
    text, lead = str(exc), "These settings cannot run"
    if isinstance(exc, FieldError) and exc.field == "rates":
        text = exc.reworded("Request rates" + (f" (entry {exc.index + 1})" if exc.index is not None else ""))
    if isinstance(exc, TimeoutError):
        lead = "The server is too busy to run this sweep now"
        text += " (the class's heavy runs take turns); change a setting or reload the page in a few minutes to try again"
    last = st.session_state.get("tp_last_good")
    if last is not None and is_cached(last["key"]):
        show_error(f"{lead}: {text}. The charts below still show the last settings that ran.", errors)
        return last
    show_error(f"{lead}: {text}.", errors)
    st.stop()


ctx = get_script_run_ctx(suppress_warning=True)
me = ctx.session_id if ctx is not None else None   # who runs a sweep: says later whose runs are shown
fallback = None
try:
    typed = st.session_state["tp_rates"].strip()
    # empty or the placeholder's own word: the model's default rates
    rates = parse_rates(typed) if typed and typed.lower() != "auto" else None
    gpus = st.session_state["tp_gpus"]
    cost = best_cost_model(st.session_state["tp_gpu"], st.session_state["tp_model"], gpus)
    pool = cost.pool_slots()
except (FieldError, ValueError) as exc:
    fallback = fail(exc)
if fallback is not None:
    key, gpus, cost = fallback["key"], fallback["gpus"], fallback["cost"]
else:
    key = sweep_key(st.session_state["tp_gpu"], st.session_state["tp_model"], gpus, requests,
                    rates, st.session_state["tp_block"], st.session_state["tp_workload"])
bar = None
try:
    if is_cached(key):
        sweep = cached_sweep(key)
    else:
        bar = st.progress(0.0, text="Starting the sweep…")

        def report(done: int, total: int, text: str) -> None:
            bar.progress(done / total, text=f"Simulating {text} ({done} of {total} runs)…")

        sweep = cached_sweep(key, report, by=me)
        bar.empty()
except (FieldError, ValueError, TimeoutError) as exc:
    if bar is not None:
        bar.empty()                        # no progress left to show
    last = fail(exc)                       # returns only when an earlier result can stay on screen
    key, gpus, cost = last["key"], last["gpus"], last["cost"]
    sweep = cached_sweep(key)
st.session_state["tp_last_good"] = {"key": key, "gpus": gpus, "cost": cost}
sweep = with_latency_factor(sweep, st.session_state["tp_factor"])
made_by = origin(key)
note = sweep_source_note("start-up" if made_by == STARTUP else "shared" if made_by not in (None, me) else None)
if note:
    st.caption(note)
if gpus == "auto":
    st.caption(f"{cost.label}: {cost.gpus} GPU{'s' if cost.gpus > 1 else ''} chosen automatically.")
st.caption(f"Seconds on this page: {seconds_source(cost)}.")

with st.container(border=True):
    st.markdown(sweep_headline(sweep))
    st.table(pd.DataFrame(sustained_rows(sweep)).set_index("allocator"))

left, right = st.columns(2)
with left:
    chart(latency_figure(sweep), key="tp_latency", config={"displaylogo": False})
with right:
    chart(throughput_figure(sweep), key="tp_throughput", config={"displaylogo": False})
st.caption("Normalised latency is the PagedAttention paper's measure: each request's end-to-end latency divided "
           "by its output length, averaged over the requests. Past the sustained rate, requests queue faster than "
           "they finish and latency climbs without limit; throughput stops following the demand.")

st.subheader("The paper's figures and this model's")
comparison = paper_comparison(sweep)
p_col, m_col = st.columns(2, border=True)
p_col.markdown(comparison["paper"])
m_col.markdown(comparison["model"])
st.markdown(comparison["why"])

st.subheader("One rate up close")
at = st.select_slider("Request rate (requests/s)", options=list(sweep.rates), value=default_rate(sweep),
                      key="tp_at", format_func=lambda r: f"{r:g}",
                      help="The memory, latency and time figures below are for this rate.")
st.markdown("**Memory holding tokens.**")
mem_l, mem_r = st.columns([3, 2])
with mem_l:
    chart(memory_figure(sweep, at), key="tp_memory", config={"displaylogo": False})
with mem_r:
    st.markdown(memory_claim(sweep, at))
st.markdown("**How long users wait.**")
ttft_col, tpot_col = st.columns(2)
with ttft_col:
    chart(cdf_figure(sweep, at, "ttft_s"), key="tp_ttft", config={"displaylogo": False})
with tpot_col:
    chart(cdf_figure(sweep, at, "tpot_s"), key="tp_tpot", config={"displaylogo": False})
st.markdown(latency_claim(sweep, at))

st.markdown("**Where the seconds went.**")
split = pd.DataFrame(time_split_rows(sweep, at)).set_index("allocator")
st.table(split)
if "paged" in sweep.policies:
    st.markdown(time_split_claim(sweep, at))

with st.expander("The cost model: what one engine step costs, and what it assumes"):
    if cost.kind == "profile":
        st.markdown(
            f"**This sweep's steps are priced by {cost.priced_by}.** A step's time is the sum of the measured "
            "latencies of the operators it runs at its size — every layer's projections, norms and feed-forward "
            "at the step's token count, attention at its prefill chunk and its decodes' context, lm_head and the "
            "sampler per sequence — plus a fixed engine overhead per step (an assumption, 1 ms). Swap copies are "
            "priced as the roofline below prices them (the profile holds none). The real-engine page replays a "
            "real vLLM run with this model and shows its error. The roofline below still sizes the KV pool.")
        st.table(pd.DataFrame([{"quantity": k.replace("_", " "), "value": str(v)}
                               for k, v in cost.profile.terms().items()]).set_index("quantity"))
    st.markdown(
        ("**The roofline** (it prices this GPU and model where no profile exists). " if cost.kind == "profile"
         else "") + "A step's time is a **roofline**: the larger of its arithmetic time (FLOPs ÷ the GPU's peak FLOP/s) and "
        "its memory time (bytes moved ÷ memory bandwidth), plus a fixed overhead, plus any swap copies.\n\n"
        "- **FLOPs**: 2 per parameter for every token through the model (each prefilled prompt token, each "
        "decoded token), plus 4 × layers × heads × head size for every query-key pair that attention compares.\n"
        "- **Bytes**: all the weights once per step, the K and V of every token each decoding sequence attends "
        "to, and the K and V of every new token.\n"
        "- **Recompute** pays the prefill of the evicted sequence's tokens again; **swap** pays their blocks over "
        "PCIe, one copy per layer for K and for V, each with a fixed latency — so small blocks swap slowly.\n"
        "- **Not modelled**: kernels reaching less than the datasheet peak, traffic between GPUs under tensor "
        "parallelism, and overlap of swap copies with computation. Absolute seconds are optimistic; the "
        "comparison between allocators, which share every term, is the point.")
    st.table(pd.DataFrame(describe(cost)).set_index("quantity"))

st.caption("Sources: Kwon et al., \"Efficient Memory Management for Large Language Model Serving with "
           "PagedAttention\", SOSP 2023 (the baselines, the normalised latency, Figure 2 and the sustained-rate "
           "ratios, quoted as the paper's); NVIDIA datasheets for the GPUs; Agrawal et al., \"Vidur: A "
           "Large-Scale Simulation Framework for LLM Inference\", MLSys 2024 (the idea of pricing each step). "
           "Request lengths: " + AZURE_ATTRIBUTION + " The paper replication's lengths: " + SHAREGPT_ATTRIBUTION)
