"""Session state shared between pages: the explainer's current scenario.

The explainer stores the last scenario that ran; other pages (the kernel tab's joint chart)
read it so they speak about the same workload. Defaults to classroom-40 in 2,048 slots.
"""
import streamlit as st

from allocator.scenario import Scenario

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
