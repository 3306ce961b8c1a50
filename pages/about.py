"""About: the words the app uses, where every figure comes from, and how to run it for a class.

Renders text and tables; its sentences about the default run are built by
``allocator.viz.claims`` from that run (cached: the explainer's own), never typed in.
"""
import pandas as pd
import streamlit as st

from allocator.cost.best import profiled_pairs
from allocator.accounting.kv_configs import model_kv
from allocator.accounting.models import PRESETS
from allocator.common.formats import format_bytes
from allocator.common.metric_names import glossary_rows
from allocator.studies.sharing import PAPER_FIG15
from allocator.studies.sampling_latency import PAPER_FIG14
from allocator.workloads.mooncake import MOONCAKE_ATTRIBUTION
from allocator.workloads.sharegpt import SHAREGPT_ATTRIBUTION
from allocator.workloads.trace import AZURE_ATTRIBUTION
from allocator.engine.scenario import Scenario
from allocator.viz.claims.explainer import about_default_run, classroom_tip
from allocator.viz.texts import TINY_BLOCKS_TIME_SHORT
from pages._ui.cache import compute
from allocator.viz.texts import COPY_ON_WRITE_SHORT


def _fig14_improvement(case: str) -> str:
    """The paper's stated Figure 14 improvement of vLLM over Orca (Oracle) for ``case``, e.g. "2.3×"."""
    return f"{PAPER_FIG14['oracle_improvement'][case]:g}×"


def _fig15_range(dataset: str, mode: str) -> str:
    """The paper's Figure 15 range for ``dataset`` and ``mode`` as written on this page ("16.2–30.5 %"),
    from :data:`allocator.studies.sharing.PAPER_FIG15`."""
    lo, hi = PAPER_FIG15[dataset][mode]
    return f"{100 * lo:.1f}–{100 * hi:.1f} %"


def _fig15_widths() -> str:
    """The paper's Figure 15 output counts in words ("2, 4 and 6")."""
    w = [str(x) for x in PAPER_FIG15["widths"]]
    return ", ".join(w[:-1]) + f" and {w[-1]}"


#: The calibration in one paragraph; tests/pages/test_replay_page.py checks every figure against the replay.
CALIBRATION_SOURCE = (
    "casys-kaist/LLMServingSim, bench/examples/RTXPRO6000/Llama-3.1-8B/vllm, MIT licence (assets/vllm_runs/). "
    "The step model (allocator/cost/calibration.py) sums the weight GEMMs, attention arithmetic, KV traffic and a "
    "fixed overhead; three parameters were fitted by least squares to the run's per-request time per output "
    "token: 0.585 of the datasheet's bf16 FLOP/s, 0.825 of its memory bandwidth, 3.35 ms per step. Replayed "
    "under vLLM v1's rules, the mean time to first token is off by +5.9 %, the time per output token by +1.7 % "
    "and the end-to-end latency by +2.8 % (python -m allocator replay-vllm "
    "assets/vllm_runs/rtxpro6000_llama-3.1-8b). Priced instead from the GPU's measured operator latencies "
    "(allocator/cost/profile.py: vLLM 0.19 microbenchmarks from the same repository, nothing fitted on this run), "
    "the same means are off by −0.9 %, +0.2 % and −0.1 % (the command's default where a profile exists). The "
    "roofline with its efficiencies taken from those microbenchmarks instead of this run (0.7854 of the FLOP/s, "
    "0.825 of the bandwidth, 1.36 ms per step: the command's roofline where a profile exists) is off by "
    "−27.7 %, −11.3 % and −15.4 %: it is too fast, because small attention kernels and element-wise work that "
    "grows with a step's tokens take longer than a roofline allows. Only one run ships, so the error on runs it "
    "has not seen is not measured (Checked against a real engine).")

#: (term, meaning in the app's own words, where the app shows it). Keep in step with the README's vocabulary.
GLOSSARY = [
    ("slot", "Room for the keys and values of one token, across every layer and head of the model. "
     "The app counts memory in slots so the arithmetic does not depend on the model; one slot is "
     f"{format_bytes(PRESETS['7b-fp16'].bytes_per_token)} for a 7B model in {PRESETS['7b-fp16'].dtype} and "
     f"{format_bytes(PRESETS['llama3-70b'].bytes_per_token)} for Llama 3 70B in {PRESETS['llama3-70b'].dtype} "
     "(the Capacity page's presets).",
     "every page"),
    ("block (page)", "A fixed group of consecutive slots that the paged allocator hands out as one unit. "
     "The paper and vLLM say block; operating-system texts say page. They are the same idea here.",
     "Reserve vs paged, Slot accounting"),
    ("block size", "How many slots one block holds (vLLM's default is 16). Small blocks waste less at the "
     "end of each sequence but need longer block tables and more scattered reads; whether that costs time: "
     + TINY_BLOCKS_TIME_SHORT + ".",
     "Reserve vs paged (slider), Paged-attention kernel"),
    ("block table", "A sequence's list of physical block numbers, one entry per logical block: entry i "
     "says where tokens i·B to i·B + B − 1 live. The attention kernel looks it up to find the keys and values.",
     "Block tables & sharing, Paged-attention kernel"),
    ("reserve-max", "The pre-2023 policy: when a request is admitted, reserve one unbroken run of "
     "prompt + max_new_tokens slots for it, and keep it all until the request ends.",
     "Reserve vs paged, Capacity"),
    ("internal fragmentation", "Memory a request holds and will never write: the part of a reservation "
     "past the end of the answer it actually gives, or the end of a sequence's last block past its final "
     "token. Drawn in orange, like the reservation still to be filled (the map cannot know the future; the "
     "tables split the two).",
     "Reserve vs paged, Slot accounting"),
    ("reservation (for tokens to come)", "Memory a request holds for tokens it has not written yet but will: "
     "the PagedAttention paper's Figure 2 counts it apart from fragmentation. Orange on the maps.",
     "Reserve vs paged (details table), handout"),
    ("external fragmentation", "Memory nobody holds that still cannot serve the next waiting request "
     "although there is enough of it in total: free gaps between reservations, each too short. When the "
     "request needs more than all free memory together, that free memory is counted as free, not as "
     "fragmentation. Paging has none (any free block will do) but a pool remainder too small to form a "
     "block. Drawn in dark grey.",
     "Reserve vs paged"),
    ("memory shares", "Where the pool goes, as six shares that add up to 100 % for both allocators at every "
     "step: token states, duplicate copies of a shared prompt, reservation for tokens to come, internal "
     "fragmentation, external fragmentation, and free memory that is no fragmentation.",
     "Reserve vs paged (details table), handout, `python -m allocator simulate`"),
    ("prefill", "The first step of a request: the whole prompt is processed at once and its keys and values "
     "are written to the cache, and the first answer token comes out.",
     "Reserve vs paged"),
    ("decode", "Every later step: the model produces one more token per running sequence, reading the whole "
     "cache of that sequence and appending one slot to it.",
     "Reserve vs paged, Paged-attention kernel"),
    ("preemption", "Evicting a running sequence because another needs memory that is not there. Paging admits "
     "requests without reserving their future, so this can happen halfway through an answer.",
     "Reserve vs paged"),
    ("recompute", "One way to bring a preempted sequence back: throw its cache away and, when it is re-admitted, "
     "process its prompt and the tokens it had already produced again. Costs compute, not memory. "
     "The explainer's default.",
     "Reserve vs paged (sidebar: when paged memory runs out)"),
    ("swap", "The other way: copy the evicted sequence's blocks to host (CPU) memory and copy them back when "
     "it resumes. Costs transfers over the bus instead of recomputation, and host memory to hold them.",
     "Reserve vs paged (sidebar), Block tables & sharing"),
    ("refcount", "A count kept per physical block of how many sequences' block tables point at it. A block is "
     "free again only when its count drops to zero.",
     "Block tables & sharing"),
    ("copy-on-write", COPY_ON_WRITE_SHORT, "Block tables & sharing"),
    ("prefix caching", "Reusing the cached keys and values of a prompt beginning that an earlier request already "
     "computed (a system prompt, a shared document), instead of computing and storing it again.",
     "Block tables & sharing, Prefix cache on a real trace, Slot accounting (shared prefix)"),
    ("prefix-cache hit rate", "The share of prompt tokens whose keys and values were found in the cache instead "
     "of being computed by prefill. Each prompt counts once, when it is first admitted.",
     "Prefix cache on a real trace"),
    ("eviction (of a cached block)", "A block that no request holds but the prefix cache still kept is handed "
     "out for other data; its hash is forgotten and a later prompt can no longer find it. The least recently "
     "used go first.", "Prefix cache on a real trace"),
    ("block hash", "How an engine finds a reusable full block: a hash of the block's tokens together with the "
     "hash of everything before it, so two blocks match only when their whole preceding text matches too. "
     "One hash may name several cached blocks (an identical block computed again); a lookup finds one, and "
     "a prompt's last token is never a cache hit.",
     "Block tables & sharing"),
    ("speculative decoding (lookahead slots)", "A small proposer guesses the next k tokens (draft tokens) "
     "and the model checks them all in one step, keeping the ones it accepts up to the first it rejects, plus "
     "one token of its own. Each running sequence reserves k lookahead slots for the guesses every step; "
     "rejected guesses give their slots back for the next step.",
     "Capacity (speculative decoding), simulate --num-speculative-tokens"),
    ("acceptance rate", "The probability that the model accepts one draft token. The lab's model accepts each "
     "independently until the first rejection, so a step of k drafts yields (1 - a^(k+1)) / (1 - a) tokens "
     "on average; the memory reserved does not depend on it.",
     "Capacity (speculative decoding), simulate --acceptance-rate"),
    ("metadata cost", "A price c, in slot equivalents, charged for every block (or reservation) to stand for "
     "block-table entries and bookkeeping. With c > 0, one-slot blocks stop looking free and a middle block "
     "size wins.",
     "Reserve vs paged (sweep), Slot accounting"),
    ("utilisation", "Slots holding a token divided by all slots in the pool. The explainer averages it over the "
     "steps when requests were waiting, the moments when unused memory actually hurts.",
     "Reserve vs paged"),
    ("TTFT (time to first token)", "Seconds from a request's arrival to its first answer token: the time it "
     "queued plus its prefill. What a chat user feels as the pause before the answer starts.",
     "Throughput and latency, Reserve vs paged (details)"),
    ("TPOT (time per output token)", "Seconds between a request's later tokens, averaged over its answer: how "
     "fast the answer streams. A batch that grows makes every step, and so every token, a little slower; a "
     "preempted request's wait counts in it too.",
     "Throughput and latency, Reserve vs paged (details)"),
    ("normalised latency", "The PagedAttention paper's yardstick: each request's end-to-end latency divided by "
     "its answer length, averaged over requests (seconds per token). It stays flat while a server keeps up and "
     "climbs without limit once requests arrive faster than they finish.",
     "Throughput and latency"),
    ("sustained rate", "The highest request rate at which an allocator keeps its normalised latency under a "
     "budget (here a multiple of a request served alone on the same GPU). Comparing allocators at the same "
     "latency is how the paper reports throughput.",
     "Throughput and latency"),
    ("roofline", "A step is limited either by arithmetic (its FLOPs over the GPU's peak FLOP/s) or by memory "
     "traffic (its bytes over the memory bandwidth), whichever takes longer. Decode steps read every weight "
     "for a handful of tokens, so they are usually memory-bound; long prefills are compute-bound.",
     "Throughput and latency (the cost model), Reserve vs paged (seconds)"),
    ("Max, Pow2, Oracle", "The paper's three reservation baselines (after Orca): reserve prompt + the generation "
     "cap, prompt + the next power of two of the answer length, or prompt + the exact answer length (which "
     "no real server knows in advance).",
     "Throughput and latency"),
    ("gather overhead", "How much longer the attention kernel takes when it reads keys and values through a "
     "block table than when each sequence lies in one contiguous run (paged time ÷ contiguous time).",
     "Paged-attention kernel"),
    ("GQA (grouped-query attention)", "Several query heads share one key/value head, so each layer caches "
     "K and V for its K/V heads only (num_key_value_heads in a config.json), not for every query head. "
     "Llama 3.1 and Qwen3 share one K/V head among 4 to 8 query heads; MHA, the older layout, has one per query head.",
     "Capacity (a model's config.json, the MHA row)"),
    ("MLA (multi-head latent attention)", "DeepSeek-V2 and V3 cache one compressed vector per token per layer "
     "(kv_lora_rank numbers) plus one rotary key shared by all heads (qk_rope_head_dim numbers), and rebuild "
     "every head's keys and values from it when attending: no factor 2 for K and V, and no head count in the "
     f"cache. DeepSeek-V3: {model_kv('deepseek-v3').kv_lora_rank} + {model_kv('deepseek-v3').qk_rope_head_dim} "
     "numbers per layer.",
     "Capacity (DeepSeek-V3)"),
    ("sliding window", "A layer that attends only to the last W tokens keeps only those: for a sequence of n "
     "tokens it holds min(n, W), so its memory stops growing at the window. Models mix such layers with "
     f"full ones (the larger of OpenAI's gpt-oss models: {model_kv('gpt-oss-120b').window_layers} of its "
     f"{model_kv('gpt-oss-120b').layers} layers, W = {model_kv('gpt-oss-120b').sliding_window}); vLLM's hybrid KV-cache manager frees a windowed "
     "layer's blocks once they fall outside the window.",
     "Capacity (gpt-oss), Reserve vs paged (sliding window)"),
    ("released behind the window (null block)", "The paged engine's rule for a windowed layer: once a "
     "sequence has computed c tokens, the next token no longer reads the first c - W + 1 of them, so every block "
     "lying wholly among those goes back to the free queue and its block-table entry becomes a null block. A "
     "decoding sequence then holds at most ceil(W / block size) + 1 blocks per windowed layer group; a prefill "
     "step holds its whole chunk until the next step releases it. Violet on the explainer's map.",
     "Reserve vs paged (sliding window), simulate --sliding-window"),
    ("hybrid KV-cache manager", "vLLM's way of paging a model that mixes full-attention and sliding-window "
     "layers: the layers are split into KV-cache groups with equally many layers, every group of one kind, "
     "each with its own block table per request; all groups take blocks from one pool, and every block has "
     "the same page size (block size x one group's layers), so a block a window released can serve any group.",
     "simulate --sliding-window --full-attention-groups"),
    ("FP8 KV cache", "Keys and values stored as 8-bit floats, 1 byte per number instead of bf16's 2 (vLLM's "
     "kv_cache_dtype=fp8). vLLM scales per tensor: one float32 scale for K and one for V in each layer, 8 bytes "
     "per layer for the whole model, nothing per token.",
     "Capacity (KV cache dtype)"),
]
#: The figures the lesson names by a term, worded as the cards and tables word them (allocator.common.metric_names).
GLOSSARY += glossary_rows({term for term, _, _ in GLOSSARY})

#: (figure, where it comes from). The sources of every headline number the app shows or quotes.
SOURCES = [
    ("20–40 % of KV-cache memory actually holding tokens in pre-paging systems; 60–80 % of it wasted",
     "Kwon et al., PagedAttention (SOSP 2023), their measurement of existing serving systems."),
    ("2–4× higher throughput than FasterTransformer and Orca at the same latency",
     "Kwon et al., PagedAttention (SOSP 2023), end-to-end evaluation of vLLM."),
    ("Block size 16 as the usual choice; block tables, copy-on-write, prefix caching by block hash, "
     "recompute and swap preemption",
     "The vLLM engine (github.com/vllm-project/vllm) and its documentation."),
    ("5, 9 and 17 tokens reserved 32 each: 96 slots, 65 unused; pages of 4/8/16: 40/48/64 slots",
     "Arithmetic of the lesson's reference explainers, recomputed by the app (Slot accounting)."),
    ("Best block size for a metadata cost c: 1, 2, 4, 8 at c = 0, 0.25, 1, 4",
     "Reference explainer's cost model (allocated slots + c × blocks), recomputed (Slot accounting)."),
    ("Lengths 20 and 23 sharing 8 tokens at page 4: 44 slots apart, 36 shared",
     "Reference explainer, recomputed (Slot accounting, shared prefix)."),
    ("512, 37, 1900, 128, 4 tokens with max 2048: 74.8 % waste reserved, 1.0 % paged, 20 vs 78 requests",
     "Reference explainer, recomputed (Slot accounting)."),
    ("7B fp16: 512 KiB per token, 66 sequences in 66 GiB reserved vs about 384 paged; Llama 3 70B: 320 KiB per slot",
     "Reference explainers, recomputed from the model configuration (Capacity)."),
    ("KV bytes per token of the models the Capacity page reads from their config.json (Llama 3.1, Qwen3, "
     "DeepSeek-V3, gpt-oss)",
     "Each model's published config.json on Hugging Face (the URL and the date read are on the Capacity page "
     "and in assets/model_configs/README.md, with the values that could not be confirmed), multiplied out by "
     "the app."),
    ("MLA caches kv_lora_rank + qk_rope_head_dim numbers per token per layer",
     "DeepSeek-AI, DeepSeek-V2 (arXiv:2405.04434), section 2.1; DeepSeek-V3 (arXiv:2412.19437), section 2.1.1."),
    ("FP8 KV cache: 1 byte per element, one float32 K scale and one V scale per layer",
     "vLLM: vllm/model_executor/layers/quantization/kv_cache.py (per-tensor scaling only) and "
     "vllm/attention/layer.py (the _k_scale and _v_scale buffers)."),
    ("Prefix caching as vLLM v1 does it: a prompt's last token never a cache hit; one block hash naming every "
     "cached block that holds it; a recomputed block hashed too",
     "vLLM v1: vllm/v1/core/kv_cache_manager.py (get_computed_blocks) and vllm/v1/core/block_pool.py "
     "(BlockHashToBlockMap, cache_full_blocks, _maybe_evict_cached_block) (Block tables & sharing; the "
     "classroom loop's two departures are listed on that page)."),
    ("Speculative decoding reserves k lookahead slots per decode step; rejected drafts give theirs back",
     "vLLM v1: vllm/v1/core/kv_cache_manager.py (allocate_slots: computed + new + num_lookahead_tokens slots) "
     "and vllm/v1/core/sched/scheduler.py (the k draft tokens scheduled with each decode)."),
    ("Draft tokens accepted independently with rate a until the first rejection; (1 - a^(k+1)) / (1 - a) "
     "tokens a step",
     "Leviathan, Kalman and Matias, Fast Inference from Transformers via Speculative Decoding, ICML 2023 "
     "(arXiv:2211.17192), section 3.1 and equation (1). The lab's default rate, 0.7, is a lesson's value."),
    ("A sliding-window layer frees blocks that fall wholly outside its window (skipped tokens = computed - "
     "window + 1, released at the start of each allocation, replaced by the null block), so a decoding sequence "
     "holds at most ceil(window / block size) + 1 blocks; a hybrid model's full and windowed KV-cache groups "
     "share one block pool with one page size",
     "vLLM v1: vllm/v1/core/single_type_kv_cache_manager.py (SlidingWindowManager: get_num_skipped_tokens, "
     "remove_skipped_blocks), vllm/v1/core/kv_cache_manager.py (allocate_slots), "
     "vllm/v1/core/kv_cache_coordinator.py (HybridKVCacheCoordinator) and vllm/v1/core/kv_cache_utils.py "
     "(the grouping into equally large groups, unify_kv_cache_spec_page_size); the engine's version is "
     "allocator/memory/sliding_window.py (Reserve vs paged with a sliding window, simulate --sliding-window)."),
    ("{default_run}",
     "The app's own simulation of the explainer's default scenario (classroom-40, calibrated to land in the "
     "paper's measured range); the numbers are computed by the simulation, not typed in."),
    ("Orca (Max) 20.4 %, Orca (Pow2) 26.8 %, Orca (Oracle) 38.2 %, vLLM 96.3 % of KV memory holding token "
     "states (OPT-13B, one A100, ShareGPT); vLLM sustaining 1.7–2.7× Orca (Oracle)'s and 2.7–8× Orca (Max)'s "
     "request rate over OPT-13B, 66B and 175B together, and batching 2.2× and 4.3× as many requests for "
     "OPT-13B alone (ShareGPT)",
     "Kwon et al., PagedAttention (SOSP 2023), Figure 2 and section 6.2; quoted beside the app's own figures, "
     "never fitted to them (Throughput and latency)."),
    ("Figure 2's full split of the Orca bars (reservation, internal, external and other) in the artifact's "
     "categories, where the buddy allocator's rounding counts as external; Figure 13's mean batched requests "
     "(7.00, 9.81, 13.62, 30.42 at 2 requests/s); Figure 12's OPT-13B curves; the 2023 server's per-step caps "
     "(2,560 batched tokens, 256 sequences)",
     "Kwon et al., PagedAttention (SOSP 2023), section 6.2, Figures 2, 12 and 13, and its artifact "
     "(sosp-ae-39/sosp-ae-astra: plot/plot_fig2.py, experiments/fig2.sh, fig12-13b-sharegpt.sh, fig13.sh); "
     "quoted beside the app's own figures, never fitted to them (Throughput and latency, the paper replication)."),
    ("Block sizes 16 to 128 best on ShareGPT; swap slow with small blocks, recompute's cost independent of the "
     "block size, the two comparable for blocks of 16 to 64",
     "Kwon et al., PagedAttention (SOSP 2023), section 7.2 (Figure 18b) and section 7.3 (Figure 19), and its "
     "artifact's experiments/fig18-b.sh, fig19-a.sh, fig19-b.sh and benchmark/benchmark_swap.py; run again on "
     "this app's model (Throughput and latency, section 7 ablations), with the kernel's cost per block size "
     "from this lab's kernel prediction (assets/kernel_block_cost.json)."),
    (f"Memory saved by sharing on ShareGPT: {_fig15_range('sharegpt', 'parallel')} for parallel sampling and "
     f"{_fig15_range('sharegpt', 'beam')} for beam search ({_fig15_widths()} outputs; "
     f"{_fig15_range('alpaca', 'parallel')} and {_fig15_range('alpaca', 'beam')} on Alpaca, not run here); "
     "samples sharing the prompt's blocks by refcount, beams forked and freed step by step, copy-on-write of a partly filled block",
     "Kwon et al., PagedAttention (SOSP 2023), section 4.4 (parallel sampling, beam search) and section 6.3 "
     "(Figures 14 and 15); run again on this app's engine (Throughput and latency, sharing), where which beams "
     "survive comes from a stated model with one parameter (allocator/engine/sampling.py), not from a language "
     "model."),
    (f"vLLM's advantage over the Orca baselines growing with the number of sampled sequences and more with beam "
     f"search: over Orca (Oracle), {_fig14_improvement('basic sampling')} in basic sampling to "
     f"{_fig14_improvement('beam search, width 6')} in beam search of width 6 (OPT-13B, "
     f"{PAPER_FIG14['dataset']})",
     "Kwon et al., PagedAttention (SOSP 2023), section 6.3 (Figure 14) and its artifact's "
     "experiments/fig14-parallel.sh and fig14-beam.sh; run again on ShareGPT, not Alpaca, on this app's engine "
     "(Throughput and latency, Figure 14), every Orca sequence holding its own reservation "
     "(allocator/studies/sampling_latency.py); quoted beside the app's own ratios, never fitted to them."),
    ("GPU memory, memory bandwidth, dense fp16/bf16 tensor FLOP/s, PCIe bandwidth (A100 40GB, H100 SXM, H200, "
     "L4, RTX 4090)",
     "NVIDIA's datasheets (and the Ada Lovelace whitepaper for the RTX 4090), named in each preset "
     "(allocator/cost/timing.py)."),
    ("Model shapes and parameter counts (OPT-13B, Llama 2 7B's shape, Llama 3 8B and 70B)",
     "The models' published configurations (OPT paper, Llama model cards and config.json)."),
    ("Seconds per step", "Where the lab holds an operator profile of the chosen GPU and model (" + profiled_pairs()
                         + "): the latencies of each operator measured with vLLM 0.19 (casys-kaist/LLMServingSim "
                         "profiles, MIT licence, assets/llm_profiles/), as Vidur (Agrawal et al., MLSys 2024) and "
                         "LLMServingSim price a step, plus an assumed 1 ms per step. Everywhere else: the app's "
                         "roofline cost model with two stated assumptions (2 ms of overhead per step, 5 µs per "
                         "host copy). Every seconds figure names which one produced it."),
    ("Real request lengths and arrival times",
     "Azure LLM inference trace 2023 (conversation), all 19,366 requests, CC-BY 4.0: " + AZURE_ATTRIBUTION),
    ("Repeated prompt prefixes in real chat traffic (36.6 % of the conversation trace's 512-token blocks "
     "start with a chain an earlier request had)",
     "Mooncake conversation trace, all 12,031 requests, Apache-2.0: " + MOONCAKE_ATTRIBUTION
     + " The percentage is the app's own count over the whole trace's block ids (tests/core/test_prefix_trace.py "
       "recomputes it); the Prefix cache page counts a window of up to 2,000 requests the same way, so it shows "
       "that window's share, not this one."),
    ("The PagedAttention paper's request lengths (ShareGPT first rounds, OPT tokenizer; 79,725 pairs with "
     "prompt + output under 2,048 tokens, means 161.2 and 338.0)",
     "The paper's artifact repository (sosp-ae-39/sosp-ae-astra), which publishes lengths only and carries no "
     "licence file; cited as: " + SHAREGPT_ATTRIBUTION),
    ("The paper's Orca baselines (estimators, buddy allocator) and how its figures were measured",
     "The paper's artifact repository: orca/cacheflow/master/block_manager.py and scheduler.py, "
     "experiments/fig2.sh and fig12-13b-sharegpt.sh, plot/plot_fig2.py and plot_fig13.py (Throughput and "
     "latency, the paper replication)."),
    ("Kernel timings", "Measured live on the machine serving the app (labelled with its backend), or recorded on "
                       "a GPU and labelled with the device, date and versions."),
    ("A real vLLM run (300 requests, Llama-3.1-8B on one RTX PRO 6000 Blackwell) and the calibrated step model",
     CALIBRATION_SOURCE),
]


# the default scenario's run (cached and warmed at start-up: the explainer shows the same one)
_, DEFAULT_RESULTS, _ = compute(Scenario())
DEFAULT_SLOTS = Scenario().checked().slots

st.title("About this lab")
st.markdown(
    "This lab simulates one question: what happens to an LLM server's memory when every request's "
    "KV cache is reserved for the worst case, and what changes when it is handed out in blocks instead. "
    "Everything on the pages is computed by the app from its inputs; the figures it quotes from "
    "elsewhere are listed below with their sources."
)

st.header("Glossary")
st.markdown("The app uses the field's standard words. Here is what each one means on these pages, and where "
            "the app shows it.")
# st.table, not st.dataframe: its cells wrap, so no meaning or source is cut off at 1366 px
st.table(pd.DataFrame(GLOSSARY, columns=["term", "meaning", "where in the app"]).set_index("term"))

st.header("Where the figures come from")
sources = [(figure.format(default_run=about_default_run(DEFAULT_RESULTS, DEFAULT_SLOTS)), source)
           for figure, source in SOURCES]
st.table(pd.DataFrame(sources, columns=["figure", "source"]).set_index("figure"))
st.markdown(
    "- Woosuk Kwon, Zhuohan Li, Siyuan Zhuang, Ying Sheng, Lianmin Zheng, Cody Hao Yu, Joseph E. Gonzalez, "
    "Hao Zhang, Ion Stoica. *Efficient Memory Management for Large Language Model Serving with "
    "PagedAttention.* SOSP 2023.\n"
    "- vLLM, the serving engine built on that paper: https://github.com/vllm-project/vllm\n"
    f"- Trace data: {AZURE_ATTRIBUTION} Licensed CC-BY 4.0; the app ships the whole "
    "conversation trace (19,366 requests) unchanged.\n"
    f"- Trace data: {MOONCAKE_ATTRIBUTION} Licensed under the Apache License 2.0 "
    "(assets/mooncake_LICENSE-APACHE.txt); the app ships the whole conversation trace (12,031 requests), "
    "gzip-compressed and otherwise unchanged.\n"
    f"- Request lengths of the paper replication: {SHAREGPT_ATTRIBUTION} The app ships the 79,725 pairs the "
    "artifact keeps (prompt + output under 2,048 tokens), gzip-compressed.\n"
    "- The lesson's worked examples come from four reference explainers on the same idea; the app "
    "recomputes their arithmetic and writes every explanation afresh."
)

st.header("Running it for a class")
st.markdown(
    """
**On the teacher's machine.** In the project folder run `make run`. It creates a virtual environment,
installs what is needed and serves the app on port 8501. Open http://localhost:8501 to check it.

**For students on the same network.** Find the teacher machine's address (`hostname -I` on Linux,
`ipconfig` on Windows) and share `http://<teacher-ip>:8501`. Every student gets their own session:
their sliders move only their own view. Simulations are cached per setting, so a class on the same
settings costs the server one simulation, but drawing the page still costs the server a fraction of a
second per student, so forty students opening the page in the same second wait longer than one does,
and a class that joins over a minute or so waits less. `make load` measures the wait on your own
machine; run it before class. The network must allow port 8501 from the students' machines.

**Without a network.** Export the animation as one HTML file and give it out on a USB stick or by
mail; it plays in any browser with no server and no internet, because plotly.js and every frame are
inside the file. On *Reserve vs paged*, open **Export** above the figures (CSV, the animation, a
printable handout), or from the command line:

```
.venv/bin/python -m allocator export-html --workload classroom-40 --block-size 16 -o lesson.html \\
    --sweep --handout handout.html --csv metrics.csv
```

`--handout` also writes a one-page printable summary of the run (settings, both allocators' figures,
the take-aways); `--csv` writes the numbers behind the animation for a spreadsheet exercise: one row per busy step, and
one row for each idle stretch (its "steps covered" column says how long), so weight averages by it. Any option of
`python -m allocator simulate` works here too (`--block-size`, `--slots`, `--workload azure-conv`, …).

**Presenting.**
- Turn on **Presentation mode** in the sidebar for a projector: large type, no sidebar, and the
  keyboard steps the animation (→ / ←, space to play or pause, Esc to leave). Otherwise zoom the
  browser to 125–150 %.
- **Start the guided lesson** on *Reserve vs paged* walks the class through the argument in short
  steps that move the visuals for you.
- Start on *Reserve vs paged* with the defaults: {tip}
- Then drag the block size to 256 and back to 1: utilisation and the batch change, and the sweep chart
  below shows the whole curve. Raise the metadata cost to see why nobody uses one-slot blocks.
- *Slot accounting* and *Capacity* redo the same argument with pencil-and-paper numbers;
  *Block tables & sharing* shows block tables, refcounts, copy-on-write, prefix caching and swap one
  click at a time; the *Paged-attention kernel* page times the app's own kernel paged against contiguous
  (press **Run sweep**; the tiny shape takes seconds). It does not show tiny blocks costing time: on a
  CPU the difference is lost in noise, its H200 figures are a prediction, and that tiny blocks slow a
  kernel is the PagedAttention paper's finding for its own kernel (section 7.2).
- *Prefix cache on a real trace* replays up to 2,000 requests of a production chat trace several times
  over, and every new window, block size or GPU choice replays it again (the page shows progress while
  it works). Results are cached for everyone, so open the page with the settings you will show before
  the class arrives.
- A copied link (**Copy link to this scenario**) reopens the same settings on every student's machine.
""".replace("{tip}", classroom_tip(DEFAULT_RESULTS))
)
