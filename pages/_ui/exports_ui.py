"""The explainer's export menu: per-step CSV, standalone animation HTML, printable handout, and the
whole lesson as a static site (zip).

The files themselves come from ``allocator.viz.export.html`` (pure functions shared with the CLI); this
module only offers them as downloads, built lazily and cached per scenario.
"""
import streamlit as st

from allocator.viz.export.html import animation_html, metrics_csv, scenario_slug
from allocator.viz.export.handout import handout_html
from allocator.viz.export.site import build_site, site_zip


@st.cache_data(max_entries=16, show_spinner="Preparing the files…")
def _files(_results, _fig, _workload, scenario) -> dict:
    """CSV, standalone HTML and handout for one scenario (``scenario`` is the cache key)."""
    return {"csv": metrics_csv(_results, scenario, _workload), "html": animation_html(scenario, _workload, _results, _fig),
            "handout": handout_html(scenario, _results, _workload)}


@st.cache_data(max_entries=4, show_spinner="Building the static site (every block size)…")
def _site(scenario) -> bytes:
    """The static site of one scenario as a zip (``allocator.viz.export.site``; ``scenario`` is the cache key)."""
    return site_zip(build_site(scenario))


def exports_menu(scenario, workload, results, fig) -> None:
    """A popover with three download buttons; nothing is built until it is opened and asked for."""
    with st.popover("Export", icon=":material/download:"):
        st.caption("Per-step numbers as CSV, the animation as one HTML file that plays with no server "
                   "(for a USB stick or a room without network), and a one-page handout. Figures as PNG: "
                   "use the camera icon on any chart.")
        if not st.toggle("Prepare the files", key="export_prepare"):
            return
        files = _files(results, fig, workload, scenario)
        name = scenario_slug(scenario)               # every file names its scenario
        st.download_button("Per-step metrics (CSV)", files["csv"], file_name=f"kv_paging_metrics_{name}.csv",
                           mime="text/csv", on_click="ignore", icon=":material/table:")
        st.download_button("Animation (standalone HTML)", files["html"],
                           file_name=f"kv_paging_animation_{name}.html",
                           mime="text/html", on_click="ignore", icon=":material/movie:")
        st.download_button("Handout (HTML, print to PDF)", files["handout"], file_name=f"kv_paging_handout_{name}.html",
                           mime="text/html", on_click="ignore", icon=":material/description:")
        st.caption("The whole lesson as a static site (every block size, the sweep, the guided lesson, the "
                   "arithmetic pages): unzip it and open index.html, or put the folder on any static host.")
        if st.toggle("Prepare the static site", key="export_site",
                     help="Builds every block size of the lesson; a spinner shows while it works."):
            st.download_button("Static site (zip)", _site(scenario.canonical()),
                               file_name=f"kv_paging_site_{name}.zip", mime="application/zip", on_click="ignore",
                               icon=":material/folder_zip:")
