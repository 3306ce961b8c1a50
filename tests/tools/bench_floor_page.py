"""A bare Streamlit page for ``make bench pages`` (tests/tools/bench_pages.py): what a fresh browser
costs before any of the lab's own pages is involved, measured beside them on the same machine.

Issue 24 asks for the first chart within 3 s of opening the app in a fresh browser. Part of that is
Streamlit's own start in the browser and the Plotly bundle it loads for the first chart, which every
page pays whatever it shows. This page holds a title and one chart and nothing else:

* ``/`` (or ``?chart=small``): one small heatmap (10 x 10 cells): Streamlit and Plotly alone;
* ``?chart=maps``: the explainer's own animated memory maps for the default lesson (the same figure,
  frames and all): what the lab's first chart costs on a page with nothing around it.

Run with ``python -m streamlit run tests/tools/bench_floor_page.py`` from the repository root (the
bench starts it that way); never part of the app.
"""
import plotly.graph_objects as go
import streamlit as st

st.set_page_config(page_title="Bench floor", layout="wide")      # as app.py: a wide page


@st.cache_resource(show_spinner=False)
def _maps():
    """The explainer's default maps figure, built as the app builds it (pages/_ui/cache.py)."""
    from allocator.engine.scenario import Scenario, build_workload, run_scenario
    from allocator.viz.explainer_chart import explainer_figure
    sc = Scenario()
    return explainer_figure(run_scenario(sc, build_workload(sc))).freeze()


if st.query_params.get("chart") == "maps":
    st.title("The explainer's maps on a bare page")
    st.plotly_chart(_maps(), width="stretch", config={"displaylogo": False}, key="maps")
else:
    st.title("One small heatmap on a bare page")
    st.plotly_chart(go.Figure(go.Heatmap(z=[[(r * c) % 7 for c in range(10)] for r in range(10)])),
                    width="stretch", config={"displaylogo": False}, key="small")
