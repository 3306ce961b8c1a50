"""The guided lesson on the explainer: short steps that move the visuals and ask the class to
predict before revealing. Every revealed number is read from the simulation results on screen.

Each step sets the sidebar widgets (through ``st.session_state``, before they are drawn) and
poses one question. The last step carries the open challenges (in our words; see ``assets/reference_figures.md``, R7 and R8).
"""
from __future__ import annotations

import streamlit as st

from allocator.viz.claims.explainer import reveal
from allocator.viz.lesson import BASE, CHALLENGES, STEPS

#: Sidebar widget keys the lesson may change; their values before the lesson are restored at its end.
SCENARIO_KEYS = ("workload", "block_size", "slots_classroom-40", "max_new_classroom-40", "seed", "arrival",
                 "arrival_rate", "shared_prefix", "preemption", "metadata_cost", "policy", "seconds_axis")


def _go(i: int) -> None:
    """Callback: move to step ``i`` and set the sidebar widgets to its scenario."""
    st.session_state["lesson_step"] = i
    if i < len(STEPS):
        for key, value in {**BASE, **STEPS[i]["settings"]}.items():
            st.session_state[key] = value


def start_lesson() -> None:
    """Callback for the 'Start the guided lesson' button: remember the scenario on screen, then go
    to step 1 (the lesson's own, calibrated scenario)."""
    st.session_state["lesson_saved"] = {k: st.session_state[k] for k in SCENARIO_KEYS if k in st.session_state}
    st.session_state["lesson_on"] = True
    _go(0)


def end_lesson() -> None:
    """Callback for 'End the lesson': put back the scenario that was on screen when it started."""
    st.session_state["lesson_on"] = False
    saved = st.session_state.pop("lesson_saved", {})
    for key in SCENARIO_KEYS:
        if key in saved:
            st.session_state[key] = saved[key]
        elif key in BASE:                       # not set before the lesson: back to the widget default
            st.session_state.pop(key, None)


def lesson_heading() -> str | None:
    """The current step's title while the lesson runs (presentation mode shows it as the page's
    heading, in place of the page title, to keep the maps on a laptop's first screen), else None."""
    if not st.session_state.get("lesson_on"):
        return None
    i = st.session_state.get("lesson_step", 0)
    return STEPS[i]["title"] if i < len(STEPS) else "6 · Challenges to take away"


def hidden_sections() -> frozenset:
    """The page sections that must stay hidden right now: those that would answer the current
    step's question before the class has predicted (nothing when the lesson is off or revealed)."""
    if not st.session_state.get("lesson_on"):
        return frozenset()
    i = st.session_state.get("lesson_step", 0)
    if i >= len(STEPS) or st.session_state.get(f"lesson_reveal_{i}"):
        return frozenset()
    return frozenset(STEPS[i]["hides"])


def guided_lesson(results, scenario, sweep_rows, button_place=None, compact: bool = False) -> None:
    """Render the current lesson step (if the lesson is on) with its question and reveal.

    Args:
        results: the run on screen; every revealed number is read from it (``allocator.viz.claims.reveal``).
        scenario: the scenario on screen (pool size and max_new_tokens for the texts).
        sweep_rows: the block-size sweep of the same workload (step 4 compares with block size 16).
        button_place: where the "Start the guided lesson" button goes while the lesson is off (a
            column of the tool row); the lesson box itself always spans the page.
        compact: presentation mode: the step's words and question on the left, Reveal and the
            step buttons on the right, so the maps a step talks about stay on the first screen
            of a 1366x768 laptop.
    """
    if not st.session_state.get("lesson_on"):
        (button_place or st).button("Start the guided lesson", icon=":material/school:", on_click=start_lesson,
                  help="Six short steps that move the controls for you and ask the class to predict first. "
                       "Ending the lesson puts your own settings back.")
        return
    i = st.session_state.get("lesson_step", 0)
    n = len(STEPS) + 1
    if button_place is not None:       # the Start button's place in the tool row: say where the lesson is
        button_place.markdown(f":material/school: **Guided lesson**, step {i + 1} of {n}")   # (it left a gap)
    with st.container(border=True):
        if i < len(STEPS):
            step = STEPS[i]
            if compact:
                words, controls = st.columns([4, 1.4], vertical_alignment="center")
            else:
                words = controls = st.container()
            words.markdown(step["text"] if compact                  # the page's heading names the step
                           else f"#### {step['title']}  \n{step['text']}")
            words.radio(f"Predict: {step['question']}", step["choices"], index=None, key=f"lesson_guess_{i}",
                        horizontal=True)
            if controls.toggle("Reveal", key=f"lesson_reveal_{i}"):
                guess = st.session_state.get(f"lesson_guess_{i}")
                # blue, not green: the reveal states what the run did, not whether the class was right
                st.info(reveal(step["reveal"], results, slots=scenario.slots, max_new=scenario.max_new,
                               sweep_rows=sweep_rows)
                        + (f"\n\nThe class predicted: *{guess}*." if guess else ""), icon=":material/visibility:")
            if compact:
                _step_buttons(i, n, controls)
                return
        else:
            if not compact:                     # presenting: the page heading names the step
                st.markdown("#### 6 · Challenges to take away")
            for j, (q, a) in enumerate(CHALLENGES):
                st.markdown(f"**{j + 1}.** {q}")
                if st.toggle("Show an answer", key=f"lesson_challenge_{j}"):
                    st.info(a)
        _step_buttons(i, n)


def _step_buttons(i: int, n: int, column=None) -> None:
    """Previous / Next, the step count and End the lesson, each pair on one row and centred on it:
    all four in one row under the lesson box, or two rows in ``column`` (presentation mode's
    right-hand column: the buttons, then the count and End the lesson). The count and End the
    lesson used to sit stacked beside the buttons, top-aligned, so the row looked off-centre."""
    if column is None:
        a, b, count, end = st.columns([1, 1, 0.8, 2.2], vertical_alignment="center")
    else:
        a, b = column.columns(2, vertical_alignment="center")
        count, end = column.columns(2, vertical_alignment="center")
    a.button("◀ Previous", disabled=i == 0, on_click=_go, args=(i - 1,), key="lesson_prev", width="stretch")
    b.button("Next ▶", disabled=i >= n - 1, on_click=_go, args=(i + 1,), key="lesson_next", width="stretch")
    count.caption(f"Step {i + 1} of {n}")
    end.button("End the lesson", key="lesson_end", type="tertiary", on_click=end_lesson,
               help="Leaves the lesson and restores the settings you had before it.")
