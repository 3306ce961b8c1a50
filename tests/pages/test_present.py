"""Presentation mode on every page (issue 23 item 13): app.py's shared sidebar draws the toggle,
``?present=true`` turns it on whichever page the URL opens, and every page offers the way back.

AppTest runs a page other than the default one without app.py (``switch_page`` runs the page
file alone), so the other seven pages are checked in Chromium by ``tests/browser/test_browser.py::
test_every_page_presents`` (sidebar hidden, the way back shown, no error, no console error, at
1920x1080 and 1366x768). Here: app.py itself, on the default page.
"""
from streamlit.testing.v1 import AppTest

from tests.conftest import APP_PATH


def _leave_buttons(at):
    return [b for b in at.button if b.label == "Leave presentation mode"]


def test_present_true_in_the_url_presents_and_the_button_leaves():
    at = AppTest.from_file(APP_PATH, default_timeout=120)
    at.query_params["present"] = "true"
    at.run()
    assert not at.exception, at.exception
    assert at.toggle(key="present").value is True
    assert len(_leave_buttons(at)) == 1
    caption = " ".join(c.value for c in at.caption)
    assert "Presentation mode · → / ← step the animation" in caption and "Esc leaves" in caption
    _leave_buttons(at)[0].click().run()
    assert not at.exception and at.toggle(key="present").value is False
    assert not _leave_buttons(at)


def test_the_shared_sidebar_draws_the_toggle_once():
    at = AppTest.from_file(APP_PATH, default_timeout=120)
    at.run()
    assert [t.key for t in at.toggle].count("present") == 1
    assert at.toggle(key="present").value is False
    at.toggle(key="present").set_value(True).run()
    assert not at.exception and len(_leave_buttons(at)) == 1


def _text_sizes(spec: dict) -> dict:
    """The smallest size of each kind of text a figure spec draws (px; Plotly's defaults where unset)."""
    lay = spec["layout"]
    axes = [v for k, v in lay.items() if k.startswith(("xaxis", "yaxis"))]
    return {"base": lay.get("font", {}).get("size", 12),
            "axis titles": min((a.get("title", {}).get("font", {}).get("size", 0) for a in axes), default=99),
            "ticks": min((a.get("tickfont", {}).get("size", 0) for a in axes), default=99),
            "legend": lay.get("legend", {}).get("font", {}).get("size", 0),
            "annotations": min((a.get("font", {}).get("size", 0) for a in lay.get("annotations", [])), default=99)}


def test_presenting_enlarges_every_chart_on_the_throughput_page():
    """Issue 40: presentation mode enlarged the prose and left chart axes, legends and titles at about
    10 px. Presenting, every chart the page draws has its text at the projector's sizes at least."""
    import json

    from allocator.viz.projector import PROJECTOR_FONTS as F
    from tests.conftest import open_page
    normal = open_page("pages/throughput.py")
    presenting = open_page("pages/throughput.py", {"present": True})
    small = [json.loads(c.proto.spec) for c in normal.get("plotly_chart")]
    large = [json.loads(c.proto.spec) for c in presenting.get("plotly_chart")]
    assert len(large) == len(small) >= 3
    for spec in large:
        sizes = _text_sizes(spec)
        assert sizes["base"] >= F["base"] and sizes["axis titles"] >= F["axis_title"], sizes
        assert sizes["ticks"] >= F["ticks"] and sizes["legend"] >= F["legend"] and sizes["annotations"] >= F["base"]
    assert any(_text_sizes(spec)["base"] < F["base"] for spec in small)     # it was smaller before


def test_for_the_back_row_keeps_larger_text_and_leaves_the_figure_alone():
    import plotly.graph_objects as go

    from allocator.viz.projector import PROJECTOR_HEIGHT_FACTOR, for_the_back_row
    fig = go.Figure(go.Scatter(x=[1, 2], y=[3, 4]), layout=dict(height=400, title=dict(text="t", font=dict(size=30)),
                                                             xaxis=dict(title=dict(text="x (s)"))))
    fig.add_annotation(text="note", x=1, y=3, font=dict(size=9))
    out = for_the_back_row(fig)
    assert out.layout.title.font.size == 30 and out.layout.annotations[0].font.size == 15
    assert out.layout.xaxis.title.font.size == 15 and out.layout.height == round(400 * PROJECTOR_HEIGHT_FACTOR)
    assert fig.layout.annotations[0].font.size == 9 and fig.layout.height == 400        # the original is untouched


def test_for_the_back_row_enlarges_words_drawn_on_the_plot():
    """Issue 40: the Block tables page's boxes kept their 10-12 px words in presentation mode."""
    import plotly.graph_objects as go

    from allocator.viz.projector import PROJECTOR_FONTS as F, for_the_back_row
    fig = go.Figure(go.Scatter(x=[1], y=[1], mode="text", text=["<b>11</b><br><span style='font-size:10px'>You are</span>"],
                               textfont=dict(size=12)))
    out = for_the_back_row(fig)
    assert out.data[0].textfont.size == F["base"]
    assert "font-size:14px" in out.data[0].text[0]                  # 10 px x 15/12, at least ticks + 1
    assert fig.data[0].textfont.size == 12 and "font-size:10px" in fig.data[0].text[0]


def test_presenting_draws_tables_as_html_the_back_row_can_read():
    """Issue 40: st.dataframe draws its cells on a canvas that presentation mode's larger type never
    reached. Presenting, a page's tables are HTML tables (their text grows with the prose); a
    column keeps its short label."""
    from tests.conftest import open_page
    normal = open_page("pages/block_tables.py")
    presenting = open_page("pages/block_tables.py", {"present": True})
    assert len(normal.dataframe) >= 2 and not presenting.dataframe
    assert len(presenting.table) >= len(normal.dataframe)
    pool = normal.dataframe[0].value
    assert any(list(pool.columns) == [str(c) for c in t.value.columns] for t in presenting.table)


def test_pages_draw_their_tables_through_data_table():
    """Find every place: no page script calls st.dataframe itself (pages._ui.present.data_table does)."""
    import os
    import re

    from tests.conftest import ROOT
    for f in sorted(os.listdir(os.path.join(ROOT, "pages"))):
        if f.endswith(".py"):
            text = open(os.path.join(ROOT, "pages", f), encoding="utf-8").read()
            assert not re.search(r"\bst\.dataframe\(", text), f


def test_a_presentation_table_writes_floats_without_digits_the_data_lacks():
    """Capacity's speculation table read '1.000000' and '0.300000' on the projector (pandas' default six
    decimals in an HTML table): floats keep at most four decimals, trailing zeros dropped."""
    from pages._ui.present import table_float
    assert [table_float(v) for v in (1.0, 1.7, 2.19, 0.30000000000000027, 3.14159265, 1234.5)] == \
        ["1", "1.7", "2.19", "0.3", "3.1416", "1234.5"]
    assert table_float(float("nan")) == ""
