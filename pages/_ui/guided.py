"""The guided lesson on the explainer: short steps that move the visuals and ask the class to
predict before revealing. Every revealed number is read from the simulation results on screen.

Each step sets the sidebar widgets (through ``st.session_state``, before they are drawn) and
poses one question. The last step carries the open challenges (after seed 003's, in our words).
"""
from __future__ import annotations

import streamlit as st

from pages._ui.texts import COPY_ON_WRITE

BASE = {"workload": "classroom-40", "block_size": 16, "slots_classroom-40": 2048, "max_new_classroom-40": 600,
        "shared_prefix": 0, "preemption": "recompute", "metadata_cost": 0.0, "arrival": "burst", "seed": 25}


def _pct(x):
    return "—" if x is None else f"{x:.0%}"


def _reveal_reserve(res):
    s = res["reserve_max"].summary
    return (f"**{s['peak_running']}.** Every reservation is the prompt plus 600 slots, so three runs fill most of "
            f"the 2,048 slots and the leftover gap is too short for a fourth — the other requests queue.")


def _reveal_waste(res):
    s = res["reserve_max"].summary
    return (f"**{_pct(s['mean_utilization_busy'])}** of the pool holds tokens while requests wait. "
            f"{_pct(s['mean_internal_fragmentation_busy'])} is reserved but not yet written (orange), and "
            f"{_pct(s['mean_external_fragmentation_busy'])} is free yet in gaps too short to use (dark grey). "
            "The PagedAttention paper measured 20–40 % for the engines of the day.")


def _reveal_paged(res):
    s, r = res["paged"].summary, res["reserve_max"].summary
    return (f"**{s['peak_running']}** at once, at {_pct(s['mean_utilization_busy'])} utilisation while requests "
            f"wait, and everything is done in {s['steps']:,} steps instead of {r['steps']:,}. The price: "
            f"{s['preemptions']} preemptions, when growing sequences ran the pool dry.")


def _reveal_big_blocks(res):
    s = res["paged"].summary
    return (f"**Down**, to {_pct(s['mean_utilization_busy'])}. A 2,048-slot pool holds only eight blocks of 256, "
            f"so at most {s['peak_running']} sequences ever run, and each one's last block is mostly empty.")


def _reveal_prefix(res):
    s = res["paged"].summary
    return (f"**Once.** At step {s['peak_logical_step']:,}, {s['peak_logical_tokens']:,} logical tokens sat in "
            f"{s['used_slots_at_peak_logical']:,} distinct slots: every block table points at the same full "
            "prompt blocks (refcount > 1, drawn pink). "
            "Reserve-max must copy the prompt into every reservation, so it now fits even fewer requests.")


STEPS = [
    dict(title="1 · Reserve the worst case", settings={},
         text="Reserve-max gives each request one unbroken run: its prompt plus another 600 slots "
              "(`max_new_tokens`) for the longest answer allowed.",
         question="In a 2,048-slot pool, how many requests can run at once?",
         choices=["3", "10", "30", "all 40"], reveal=_reveal_reserve),
    dict(title="2 · Watch the waste", settings={},
         text="Press ▶ Play and watch the left map: orange is reserved and empty, dark grey is free but useless.",
         question="While requests are waiting, what share of the pool holds tokens?",
         choices=["under 40 %", "about 60 %", "over 90 %"], reveal=_reveal_waste),
    dict(title="3 · Page the cache", settings={},
         text="Now look right: blocks of 16 slots, handed out only when a sequence fills its last one.",
         question="Same pool, same requests. How many run at once now?",
         choices=["3", "about 10", "about 30", "all 40"], reveal=_reveal_paged),
    dict(title="4 · Raise the block size", settings={"block_size": 256},
         text="The block-size slider is now at 256 slots per block.",
         question="Does the paged side's utilisation go up, stay, or go down?",
         choices=["up", "stays the same", "down"], reveal=_reveal_big_blocks),
    dict(title="5 · Share a system prompt", settings={"shared_prefix": 256},
         text="Every request now begins with the same 256-token system prompt (blocks of 16 again).",
         question="On the paged side, how many copies of the prompt are stored?",
         choices=["one", "one per running request", "none"], reveal=_reveal_prefix),
]

CHALLENGES = [
    ("Block size 1, 16 and 256: how much of each sequence's last block is empty on average, and what goes "
     "wrong at each end?",
     "About (block − 1) / 2 slots: 0, 7.5 and 127.5. At 256 the slack and the tiny number of blocks hurt "
     "memory. At 1 memory is perfect but the block table has one entry per token and the attention kernel "
     "chases one pointer per token — a cost in time, not memory (see the live kernel tab)."),
    ("Paging admits a request with a single block's worth of room. What can go wrong halfway through its answer?",
     "It can need a block when none is free. The engine must evict someone — the preemptions counted on this "
     "page — and either recompute that sequence later or swap its blocks to host memory."),
    ("Two sequences share a block (refcount 2) and one of them writes into it. What must happen, in what order?",
     COPY_ON_WRITE + " Try both orders on the Block tables page."),
    ("Prefix caching finds shared blocks by hashing. Why is hashing a block's own tokens not enough?",
     "Two prompts can have an identical third block after different first blocks: the cached keys and values "
     "differ because attention saw different context. The hash must chain over everything before the block "
     "(and a per-tenant salt), or one user is served another's cache — wrong and a privacy leak."),
]


def _go(i: int) -> None:
    """Callback: move to step ``i`` and set the sidebar widgets to its scenario."""
    st.session_state["lesson_step"] = i
    if i < len(STEPS):
        for key, value in {**BASE, **STEPS[i]["settings"]}.items():
            st.session_state[key] = value


def start_lesson() -> None:
    """Callback for the 'Start the guided lesson' button."""
    st.session_state["lesson_on"] = True
    _go(0)


def guided_lesson(results) -> None:
    """Render the current lesson step (if the lesson is on) with its question and reveal."""
    if not st.session_state.get("lesson_on"):
        st.button("Start the guided lesson", icon=":material/school:", on_click=start_lesson,
                  help="Six short steps that move the controls for you and ask the class to predict first.")
        return
    i = st.session_state.get("lesson_step", 0)
    n = len(STEPS) + 1
    with st.container(border=True):
        if i < len(STEPS):
            step = STEPS[i]
            st.markdown(f"#### {step['title']}  \n{step['text']}")
            st.radio(f"Predict: {step['question']}", step["choices"], index=None, key=f"lesson_guess_{i}",
                     horizontal=True)
            if st.toggle("Reveal", key=f"lesson_reveal_{i}"):
                guess = st.session_state.get(f"lesson_guess_{i}")
                st.success(step["reveal"](results) + (f"\n\nThe class predicted: *{guess}*." if guess else ""))
        else:
            st.markdown("#### 6 · Challenges to take away")
            for j, (q, a) in enumerate(CHALLENGES):
                st.markdown(f"**{j + 1}.** {q}")
                if st.toggle("Show an answer", key=f"lesson_challenge_{j}"):
                    st.info(a)
        a, b, c = st.columns([1, 1, 4])
        a.button("◀ Previous", disabled=i == 0, on_click=_go, args=(i - 1,), key="lesson_prev", width="stretch")
        b.button("Next ▶", disabled=i >= n - 1, on_click=_go, args=(i + 1,), key="lesson_next", width="stretch")
        c.caption(f"Step {i + 1} of {n}")
        if c.button("End the lesson", key="lesson_end", type="tertiary"):
            st.session_state["lesson_on"] = False
            st.rerun()
