"""Issue 19: text that came from a user -- a URL parameter's name or value, an uploaded file's name,
a CSV header or cell -- is never rendered as Markdown or HTML, and is never echoed at length.

Every path is fed the same payloads: a Markdown link, a Markdown image, Streamlit's colour
directive, raw HTML, bare addresses GitHub-flavoured Markdown links by itself, and a 100,000-character
value. Every element a page shows that renders Markdown (alerts, markdown, captions, expander and
metric labels) is inspected: with its escaped characters removed, no link, image, style or tag
syntax may remain, no bare address may survive the escapes, and no body may be longer than a few
lines. The exports (CSV, animation HTML, handout) are checked for the raw tags and the long value.
The browser twin (``test_injection_browser.py``) checks the rendered DOM.
"""
from __future__ import annotations

import re

import pytest
from streamlit.testing.v1 import AppTest

from allocator.engine.scenario import Scenario, run_scenario
from allocator.common.validate import plain_markdown
from allocator.viz.explainer_chart import explainer_figure
from allocator.viz.export.handout import handout_html
from allocator.viz.export.html import animation_html, metrics_csv
from pages._ui.url_params import BOOLEANS, CHOICES, WORKLOADS, check_params, number_rules
from tests.conftest import APP_PATH, seen

LONG = "[long](https://evil.example/long)" + "y" * 100_000
PAYLOADS = {
    "link": "[Teacher: download the new version here](https://evil.example/x)",
    "image": "![x](https://evil.example/b.png)",
    "style": ":red-background[ALARM] **bold** # heading $x^2$ :material/warning:",
    "html": '<a href="https://evil.example/h">h</a><img src="https://evil.example/i.png"><b>b</b>',
    "bare": "see www.evil.example or https://evil.example/y or me@evil.example",
    "long": LONG,
}
#: What must not be left once the escaped characters are taken out of a body.
ACTIVE = ("](", "![", "[Teacher", "[long]", "[ALARM", ":red-background", "<a", "<img", "<b>", "**bold", "$x",
          ":material/warning")
#: What Streamlit's renderer would turn into a link on the text it shows (escapes undone).
AUTOLINK = re.compile(r"https?://|www\.|\w@\w", re.IGNORECASE)
#: Longest body a page may show that quotes user text (characters of Markdown source).
MAX_BODY = 2_000


def problems(body: str) -> list[str]:
    """What in one Markdown body would render as something other than plain text, or is too long."""
    found = []
    unescaped = re.sub(r"\\.", "", body)
    found += [f"active {m!r}" for m in ACTIVE if m in unescaped]
    rendered = re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", body)        # escapes undone, zero-width spaces kept
    found += [f"autolink {m.group()!r}" for m in AUTOLINK.finditer(rendered) if "evil" in rendered]
    if len(body) > MAX_BODY:
        found.append(f"{len(body):,} characters")
    return found


def bodies(at: AppTest) -> list[str]:
    """Every Markdown-rendering text of an AppTest run: alerts, markdown, captions, titles, labels."""
    out = []
    for kind in ("warning", "error", "info", "success", "markdown", "caption", "toast", "title", "header",
                 "subheader"):
        out += [e.value for e in getattr(at, kind)]
    out += [e.label for e in at.expander] + [m.label for m in at.metric]
    return [b for b in out if isinstance(b, str)]


def assert_plain(at: AppTest) -> list[str]:
    assert not at.exception, [e.value for e in at.exception]
    shown = bodies(at)
    bad = {b[:120]: problems(b) for b in shown if problems(b)}
    assert not bad, bad
    return shown


def _all_param_names() -> list[str]:
    names = {"workload", "block_size", *CHOICES, *BOOLEANS, "not_a_setting"}
    for workload in WORKLOADS:
        names |= set(number_rules(workload))
    return sorted(names)


# --- the URL: every parameter's message, then the page ----------------------------------------

@pytest.mark.parametrize("payload", list(PAYLOADS))
def test_every_url_message_is_short_and_plain_once_escaped(payload):
    text = PAYLOADS[payload]
    for workload in WORKLOADS:
        for name in _all_param_names():
            for params in ({"workload": workload, name: text}, {"workload": workload, text: "1"}):
                _, messages = check_params(params)
                assert messages, params if name != "workload" else None
                for m in messages:
                    assert len(m) < 400, m[:200]
                    assert not problems(plain_markdown(m)), (m[:200], problems(plain_markdown(m)))


def test_a_hostile_link_can_fill_no_more_than_a_few_messages():
    _, messages = check_params({f"p{i}": LONG for i in range(1000)})
    assert len(messages) == 6 and "995 more URL parameters" in messages[-1]
    assert sum(map(len, messages)) < 1_000


@pytest.mark.parametrize("payload", list(PAYLOADS))
def test_the_explainer_shows_hostile_values_and_names_as_plain_text(payload):
    text = PAYLOADS[payload]
    at = AppTest.from_file(APP_PATH, default_timeout=60)
    names = ("workload", "gpu", "block_size", "seed", "present", "seconds_axis", "slots_classroom-40")
    for name in names[:2] if payload == "long" else names:      # Streamlit drops a query over 512 KiB
        at.query_params[name] = text
    at.query_params[text] = "1"
    at.run()
    shown = assert_plain(at)
    warnings = [seen(w.value) for w in at.warning]
    assert any("URL parameter workload=" in w for w in warnings), warnings      # named, not dropped silently
    assert any(text[:20] in w for w in warnings), warnings                      # the value is quoted, cut
    assert not any(text[:2000] in seen(b) for b in shown if len(text) > 2000)


# --- the upload: file name, header, cell --------------------------------------------------------

@pytest.fixture(scope="module")
def upload_page():
    at = AppTest.from_file(APP_PATH, default_timeout=60)
    at.run()
    at.selectbox(key="workload").set_value("upload").run()
    return at


@pytest.mark.parametrize("payload", list(PAYLOADS))
def test_an_uploads_name_header_and_cells_are_plain_text(upload_page, payload):
    at, text = upload_page, PAYLOADS[payload]
    one_line = text.replace("\n", " ")
    files = {
        f"{one_line}.csv": b"prompt_tokens,output_tokens\n10,5\n20,3\n",                 # good file, hostile name
        "header.csv": f"prompt_tokens,{one_line.replace(',', ' ')}\n10,5\n".encode(),    # hostile header
        "cell.csv": f"prompt_tokens,output_tokens\n{one_line.replace(',', ' ')},5\n".encode(),   # hostile cell
    }
    for name, data in files.items():
        at.file_uploader(key="trace_file").upload(name, data, "text/csv").run()
        at.session_state["workload_open"] = True       # open the workload panel, which names the file
        at.run()
        shown = assert_plain(at)
        said = " ".join(seen(b) for b in shown)
        if name.startswith(one_line[:10]):
            assert one_line[:30] in said               # the good upload is named (cut, escaped) ...
            assert at.expander and any("upload: " in seen(e.label) for e in at.expander)
            assert any("of your file" in seen(m.value) for m in at.markdown)     # the panel's text, checked
        else:
            assert at.sidebar.error, name              # ... and a bad one's message quotes it plainly


# --- the exports -------------------------------------------------------------------------------

@pytest.mark.parametrize("payload", ["html", "link", "long"])
def test_exports_carry_an_uploads_name_as_escaped_bounded_text(payload):
    name = PAYLOADS[payload] + "\n=HYPERLINK(\"https://evil.example\")"
    sc = Scenario(workload="upload", trace_bytes=b"prompt_tokens,output_tokens\n10,5\n20,3\n", trace_name=name,
                  total_slots=512, max_new_tokens=64)
    results = run_scenario(sc)
    from allocator.engine.scenario import build_workload
    workload = build_workload(sc)
    csv_text = metrics_csv(results, sc, workload)
    assert ',"KV Cache Paging Lab: upload: ' in csv_text.splitlines()[1]      # the scenario cell, quoted
    assert not any(line.startswith("=") or ",=" in line for line in csv_text.splitlines())   # no formula cell
    fig = explainer_figure(results)
    for html in (animation_html(sc, workload, results, fig), handout_html(sc, results, workload)):
        assert '<a href="https://evil' not in html and '<img src="https://evil' not in html
        assert "y" * 1_000 not in html
        assert "&lt;a href=" in html or payload != "html"             # shown, escaped
    assert "evil" not in fig.to_json()                                   # no user text inside a Plotly figure


# --- a typed table cell (Slot accounting) -----------------------------------------------------

@pytest.mark.parametrize("payload", ["link", "html", "long"])
def test_a_typed_table_cell_is_quoted_as_plain_text(payload):
    from tests.conftest import open_page
    edit = {"edited_rows": {0: {"length (tokens)": PAYLOADS[payload]}}, "added_rows": [], "deleted_rows": []}
    at = open_page("pages/accounting.py", {"acc_lengths_r1": edit}, timeout=60)
    assert_plain(at)
    assert any("Row 1: length = " in seen(e.value) for e in at.error), [e.value for e in at.error]
