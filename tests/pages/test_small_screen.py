"""At 1366 x 768 (issue 40): Plotly's hover toolbar (the modebar) covered chart titles on eight charts and the Slot accounting
legends. ``pages._ui.present.chart`` now passes every page chart through
``allocator.viz.modebar.clear_of_modebar`` (the title below a band kept for the toolbar, the top margin
large enough for it and a legend above the plot) with a short toolbar; these tests read the charts the
pages send. The Throughput page's memory bars carry upright labels so neighbours never touch."""
import json

import plotly.graph_objects as go

from allocator.viz.modebar import MODEBAR_BAND_PX, clear_of_modebar, legend_above, legend_rows
from tests.conftest import open_page


def _check_clear(spec: dict, where: str, narrowest: int = 440) -> None:
    fig = go.Figure(spec)
    layout = fig.layout
    top = layout.margin.t if layout.margin.t is not None else 100
    need = MODEBAR_BAND_PX
    if layout.title.text:
        assert layout.title.yref == "container" and layout.title.yanchor == "top", where
        assert layout.title.pad.t >= MODEBAR_BAND_PX, where
        need += 1.5 * (layout.title.font.size or 16)
    if legend_above(fig):
        need += 26 * legend_rows(fig, narrowest)
    assert top >= need, (where, top, need)


def _charts(at):
    return [(c.key, json.loads(c.proto.spec), json.loads(c.proto.config or "{}")) for c in at.get("plotly_chart")]


def test_every_chart_on_the_throughput_and_accounting_pages_keeps_clear_of_the_toolbar():
    for page in ("pages/throughput.py", "pages/accounting.py", "pages/capacity.py"):
        charts = _charts(open_page(page))
        assert charts, page
        for key, spec, config in charts:
            _check_clear(spec, f"{page} {key}")
            assert config.get("displaylogo") is False
            assert {"lasso2d", "select2d"} <= set(config.get("modeBarButtonsToRemove", [])), (page, key)


def test_clear_of_modebar_moves_a_title_and_makes_room_for_a_wrapping_legend():
    fig = go.Figure([go.Bar(x=[1], y=[1], name=f"request {i}") for i in range(1, 4)]
                    + [go.Bar(x=[1], y=[1], name="allocated, holding nothing")])
    fig.update_layout(title="A title long enough to reach the toolbar's corner of a narrow chart",
                      margin=dict(t=30, l=10, r=10), legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0))
    assert legend_above(fig) and legend_rows(fig) >= 2          # four entries wrap at 440 px
    out = clear_of_modebar(fig)
    _check_clear(out.to_plotly_json(), "made up")
    assert fig.layout.margin.t == 30                             # the original is not modified
    plain = clear_of_modebar(go.Figure(go.Scatter(x=[1], y=[1])))
    assert plain.layout.margin.t in (None, 100) or plain.layout.margin.t >= MODEBAR_BAND_PX


def test_the_memory_bars_labels_stand_upright_above_the_bars():
    from pages._ui.sweep_cache import DEFAULT_KEY, cached_sweep
    from allocator.viz.throughput import memory_figure

    sweep = cached_sweep(DEFAULT_KEY)
    fig = memory_figure(sweep, sweep.rates[len(sweep.rates) // 2])
    bars = [t for t in fig.data if t.text is not None]
    assert len(bars) == 2
    for t in bars:
        assert t.textangle == -90 and t.constraintext == "none" and t.textposition == "outside"
    assert fig.layout.yaxis.range[1] >= 120 and max(fig.layout.yaxis.tickvals) == 100


def test_the_physical_pool_table_shows_short_hashes_in_narrow_columns():
    """The Block tables page's pool table scrolled sideways at 1366 px and cut its 10-digit hashes: it
    shows 6 hex digits, in a small column, and says so in the column's help."""
    at = open_page("pages/block_tables.py")
    table = at.dataframe[0]                                   # the physical pool (the page's first table)
    assert list(table.value.columns) == ["block", "state", "refcount", "held by", "tokens", "hash"]
    hashes = [h for h in table.value["hash"] if h]
    assert hashes and all(len(h) == 6 for h in hashes), hashes
    config = json.loads(table.proto.columns)
    assert config["hash"]["width"] == "small" and "6 hex digits" in config["hash"]["help"]


def test_the_static_sites_arithmetic_figures_keep_clear_of_the_toolbar_too():
    from allocator.viz.export.site_lessons import SITE_NARROWEST_PX, lessons_data

    found = []

    def walk(x, where):
        if isinstance(x, dict):
            if "layout" in x and "data" in x:
                found.append(where)
                _check_clear(x, where, SITE_NARROWEST_PX)
                return                                   # not into its layout's template
            for k, v in x.items():
                walk(v, f"{where}/{k}")
        elif isinstance(x, list):
            for i, v in enumerate(x):
                walk(v, f"{where}/{i}")

    walk(lessons_data(), "site")
    assert len(found) >= 4, found
