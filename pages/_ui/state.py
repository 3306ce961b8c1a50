"""Session state shared between pages: the explainer's current scenario.

The explainer stores the last scenario that ran; other pages (the kernel tab's joint chart)
read it so they speak about the same workload. Defaults to classroom-40 in 2,048 slots.
"""
import streamlit as st

from allocator.engine.scenario import Scenario

_KEY = "last_good_scenario"


def remember_scenario(sc: Scenario) -> None:
    """Record ``sc`` as the scenario the explainer last ran successfully."""
    st.session_state[_KEY] = sc


def current_scenario() -> Scenario:
    """The explainer's last good scenario in this session, else the default (classroom-40, 2,048 slots)."""
    sc = st.session_state.get(_KEY)
    return sc if isinstance(sc, Scenario) else Scenario()


def set_defaults(defaults: dict) -> None:
    """Give each widget key in ``defaults`` its default value unless the session already has one
    (so a page's controls start where the page says, and keep what the user chose)."""
    for key, value in defaults.items():
        st.session_state.setdefault(key, value)


_KEPT = "kept_choice_"


def restore_choice(key: str, allowed) -> None:
    """Before drawing widget ``key``: give it back the value :func:`keep_choice` kept, if it is one
    of ``allowed``. Streamlit drops a widget's state in every run that does not draw it (any visit
    to another page), so without this a control would jump back to its default while the result it
    produced is still on screen."""
    kept = st.session_state.get(_KEPT + key)
    if key not in st.session_state and kept is not None and kept in allowed:
        st.session_state[key] = kept


def keep_choice(key: str) -> None:
    """After drawing widget ``key``: keep its value under a key Streamlit does not drop, for
    :func:`restore_choice` on the next visit to the page."""
    if key in st.session_state:
        st.session_state[_KEPT + key] = st.session_state[key]
