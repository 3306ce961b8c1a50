"""KV Cache Paging Lab — Streamlit entry point.

Builds the navigation over ``pages/``, the shared sidebar (what the app is, data attribution)
and the page configuration. Pages only render what ``allocator/`` and ``kernels/`` return.

Start the server with ``python app.py [streamlit options]`` (``make run`` does): a plain
``streamlit run app.py`` also works, except that on a freshly started server the *first* visit
to a page's own URL (say a shared link to /accounting) would meet Streamlit's legacy handling of
a ``pages/`` folder — it runs the page file alone, with every module in ``pages/`` listed as a
page — until some visitor has opened the app once. ``python app.py`` switches that legacy mode
off before the server starts.
"""
import os
import sys
import time

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from pages._ui.present import keyboard_shortcuts, presentation_mode


def serve(argv: list[str]) -> int:
    """Run the Streamlit server on this file with ``argv`` as extra ``streamlit run`` options."""
    from streamlit.runtime.pages_manager import PagesManager
    from streamlit.web import cli

    # Our pages/ folder holds st.Page scripts for st.navigation, not legacy multipage-app pages.
    PagesManager.uses_pages_directory = False
    try:  # build the default scenario before the first visitor: a class arrives all at once
        from pages._ui.cache import warm_default
        warm_default()
    except Exception as exc:  # never keep the server from starting; the page computes on demand
        print(f"warning: could not pre-build the default scenario: {exc}", file=sys.stderr)
    try:  # the Throughput page's helper process: forked now, while this process has one thread
        from pages._ui.sweep_cache import start_worker
        start_worker()
    except Exception:  # noqa: BLE001 - without it every sweep runs in the server's queue thread
        pass
    _warm_in_background()
    sys.argv = ["streamlit", "run", __file__, *argv]
    return cli.main()


def _warm_in_background() -> None:
    """Compute the Throughput page's default rate sweep and the Prefix cache page's default window
    at every block size (seconds of work each) while the server starts and serves: the first
    visitor then finds them ready, or waits for them instead of starting another. Then import the
    Kernel page's libraries (torch, ``kernels``). No page waits for any of this."""
    import importlib
    import threading

    def warm(module: str, function: str, what: str):
        try:
            getattr(importlib.import_module(module), function)()
        except Exception as exc:  # the page computes on demand
            print(f"warning: could not pre-build {what}: {exc}", file=sys.stderr)

    threads = []
    for name, module, function, what in (
            ("warm-rate-sweep", "pages._ui.sweep_cache", "warm_default_sweep", "the default rate sweep"),
            ("warm-prefix-cache", "pages._ui.prefix_data", "warm", "the prefix cache page")):
        threads.append(threading.Thread(target=warm, args=(module, function, what), name=name, daemon=True))
        threads[-1].start()

    def import_kernel_libraries() -> None:
        """After the warm-ups above, import torch and ``kernels`` (about 2 s the Kernel page's first
        visit would otherwise spend); silent on failure: the Kernel page reports its own import errors."""
        for thread in threads:
            thread.join()
        try:
            import torch  # noqa: F401
            import kernels  # noqa: F401
        except Exception:  # noqa: BLE001 - the Kernel page says what is missing when it is opened
            pass
    threading.Thread(target=import_kernel_libraries, name="warm-kernel-imports", daemon=True).start()


if __name__ == "__main__" and get_script_run_ctx(suppress_warning=True) is None:
    sys.exit(serve(sys.argv[1:]))

# The tab's icon ships with the app: a material-symbol icon is fetched from Google's font servers,
# which an offline classroom cannot reach (the browser logged a failed request on every load).
st.set_page_config(page_title="KV Cache Paging Lab",
                   page_icon=os.path.join(os.path.dirname(os.path.abspath(__file__)), "assets", "favicon.png"),
                   layout="wide")

EXPLAINER = st.Page("pages/explainer.py", title="Reserve vs paged", icon=":material/grid_view:",
                    url_path="reserve-vs-paged", default=True)


def _to_explainer() -> None:
    """/explainer, the page's name in shared links and notes: open the explainer (served at the
    root URL, as the default page) with the same query parameters."""
    st.switch_page(EXPLAINER, query_params=st.query_params.to_dict())


PAGES = {
    "Lesson": [
        EXPLAINER,
        st.Page(_to_explainer, title="Reserve vs paged", url_path="explainer", visibility="hidden"),
    ],
    "Arithmetic": [
        st.Page("pages/accounting.py", title="Slot accounting", icon=":material/calculate:",
                url_path="accounting"),
        CAPACITY := st.Page("pages/capacity.py", title="Capacity", icon=":material/storage:",
                            url_path="capacity"),
    ],
    "Serving": [
        st.Page("pages/throughput.py", title="Throughput and latency", icon=":material/timer:",
                url_path="throughput"),
        st.Page("pages/real_engine.py", title="Checked against a real engine", icon=":material/fact_check:",
                url_path="real-engine"),
    ],
    "Sharing": [
        st.Page("pages/block_tables.py", title="Block tables & sharing", icon=":material/account_tree:",
                url_path="block-tables"),
        st.Page("pages/prefix_cache.py", title="Prefix cache on a real trace", icon=":material/cached:",
                url_path="prefix-cache"),
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
# every page presents: one toggle in the shared sidebar (``?present=true`` in any page's URL), and
# the keys (Esc leaves; on the explainer's animation → ← step and space plays)
# the explainer and the Capacity page check their own URL parameters (the rest take only ``present``)
presentation_mode(animated=nav is EXPLAINER, own_url=nav in PAGES["Lesson"] or nav == CAPACITY)
keyboard_shortcuts()

_started = time.perf_counter()
try:
    nav.run()
finally:      # the load test's server-side time per script run (tests/tools/load.py sets KVLAB_RENDER_LOG)
    if os.environ.get("KVLAB_RENDER_LOG"):
        with open(os.environ["KVLAB_RENDER_LOG"], "a", encoding="utf-8") as _log:
            _log.write(f"{time.time():.3f}\t{nav.url_path or 'explainer'}\t{time.perf_counter() - _started:.4f}\n")
