"""KV Cache Paging Lab — Streamlit entry point.

Builds the navigation over ``pages/``, the shared sidebar (what the app is, data attribution)
and the page configuration. Pages only render what ``allocator/`` and ``kernels/`` return.
"""
import streamlit as st

st.set_page_config(page_title="KV Cache Paging Lab", page_icon=":material/memory:", layout="wide")

PAGES = {
    "Lesson": [
        st.Page("pages/explainer.py", title="Reserve vs paged", icon=":material/grid_view:",
                url_path="explainer", default=True),
    ],
    "Arithmetic": [
        st.Page("pages/accounting.py", title="Slot accounting", icon=":material/calculate:",
                url_path="accounting"),
        st.Page("pages/capacity.py", title="Capacity", icon=":material/storage:",
                url_path="capacity"),
    ],
    "Sharing": [
        st.Page("pages/block_tables.py", title="Block tables & sharing", icon=":material/account_tree:",
                url_path="block-tables"),
    ],
    "Live kernel": [
        st.Page("pages/kernel.py", title="Paged-attention kernel", icon=":material/speed:",
                url_path="kernel"),
    ],
    "About": [
        st.Page("pages/about.py", title="Glossary, sources, classroom", icon=":material/info:",
                url_path="about"),
    ],
}

nav = st.navigation(PAGES)

with st.sidebar:
    st.caption(
        "**KV Cache Paging Lab** — where the memory of an LLM server goes when every request's "
        "cache is reserved for the worst case, and what changes when it is paged."
    )

nav.run()
