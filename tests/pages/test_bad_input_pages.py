"""The page-side twin of issue 12's property test: the same kinds of bad value -- non-finite,
huge, negative, fractional, text, odd encodings, misshapen files -- fed through the explainer's
upload, the number inputs of the explainer, Slot accounting and Capacity pages, and the URL
parameters. Every run: no exception, and a visible message naming the input.

The explainer's sidebar numbers have bounds of their own, so Streamlit itself never hands the page
a value outside them (the browser refuses it at the widget; AppTest's ``set_value`` is reset to the
default): what reaches those widgets from outside is the URL, whose values are checked and named.
"""
from __future__ import annotations

import gzip

import pytest
from streamlit.testing.v1 import AppTest

from tests.conftest import APP_PATH, metric, seen

LENGTH_COL = "length (tokens)"


def _page(path: str | None = None, state: dict | None = None, params: dict | None = None) -> AppTest:
    at = AppTest.from_file(APP_PATH, default_timeout=60)
    for name, value in (params or {}).items():
        at.query_params[name] = value
    if path:
        at.switch_page(path)
    for key, value in (state or {}).items():
        at.session_state[key] = value
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _shown(at: AppTest) -> list[str]:
    """Every error and warning on the page, sidebar included."""
    return [seen(e.value) for e in at.error] + [seen(w.value) for w in at.warning]


# --- the upload ---------------------------------------------------------------------------------

BODY = "prompt_tokens,output_tokens\n{cell},5\n20,3\n"

#: name -> (file bytes, words the sidebar's message must contain)
UPLOADS = {
    "inf": (BODY.format(cell="inf").encode(), "row 1, column prompt_tokens: 'inf' is not a finite number"),
    "1e400": (BODY.format(cell="1e400").encode(), "row 1, column prompt_tokens: '1e400' is not a finite number"),
    "nan": (BODY.format(cell="NaN").encode(), "row 1, column prompt_tokens: 'NaN' is not a number"),
    "huge": (BODY.format(cell="1e300").encode(), "'1e300' tokens is larger than any pool could hold"),
    "negative": (BODY.format(cell="-5").encode(), "row 1, column prompt_tokens: -5 is below the minimum 1"),
    "fraction": (BODY.format(cell="2.5").encode(), "'2.5' is not a whole number of tokens"),
    "empty cell": (BODY.format(cell="").encode(), "row 1, column prompt_tokens: the cell is empty"),
    "ragged": (b"prompt_tokens,output_tokens\n10,5,99\n20,3,98\n", "row 1 has 3 fields but the header has 2"),
    "duplicate header": (b"prompt_tokens,prompt_tokens,output_tokens\n10,11,5\n",
                         "column prompt_tokens appears twice in the header"),
    "utf-16": (BODY.format(cell="10").encode("utf-16"), "the file is UTF-16 text, not UTF-8"),
    "latin-1": ("prompt_tokens,output_tokens\n10,5\n20,3\u00e9\n".encode("latin-1"), "the file is not UTF-8 text"),
    "gzip": (gzip.compress(BODY.format(cell="10").encode()), "the file is gzip-compressed, not CSV text"),
    "xlsx": (b"PK\x03\x04" + b"\x00" * 40, "the file is a zip archive or an Excel workbook (.xlsx)"),
    "mixed zones": (b"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,10,5\n2023-11-16T18:15:47Z,20,3\n",
                    "column TIMESTAMP: the timestamps mix time zones"),
    # issue 42: columns and cells are bounded before the file is parsed; a CR in a cell is no Python advice
    "wide": (b"prompt_tokens,output_tokens" + b"," * 560_000 + b"\n10,5" + b"," * 560_000 + b"\n",
             "the header has 560,002 columns; at most 256 are accepted"),
    "long cell": (b"prompt_tokens,output_tokens\n" + b"1" * 5000 + b",5\n", "line 2 has a cell longer than 1,000 characters"),
    "cr in a cell": (b"prompt_tokens,output_tokens\r\n10\r7,5\r\n20,3\r\n", "row 1 has 1 field but the header has 2"),
}


@pytest.fixture(scope="module")
def upload_page():
    at = _page()
    at.selectbox(key="workload").set_value("upload").run()
    at.file_uploader(key="trace_file").upload("good.csv", b"prompt_tokens,output_tokens\n10,5\n20,3\n",
                                              "text/csv").run()
    assert not at.exception and metric(at, "Steps to drain")
    return at


def test_a_cr_only_upload_is_read_as_lines(upload_page):
    """Excel's "CSV (Macintosh)" ends lines with CR alone: the page reads it, not Python's advice."""
    at = upload_page
    at.file_uploader(key="trace_file").upload("mac.csv", b"prompt_tokens,output_tokens\r10,5\r20,3\r30,4\r",
                                              "text/csv").run()
    assert not at.exception and not at.sidebar.error, [e.value for e in at.sidebar.error]
    assert any("mac.csv: 3 requests" in seen(s.value) for s in at.sidebar.success)


@pytest.mark.parametrize("name", list(UPLOADS))
def test_a_bad_upload_is_named_and_the_last_good_run_stays(upload_page, name):
    at = upload_page
    good = metric(at, "Steps to drain")
    data, words = UPLOADS[name]
    at.file_uploader(key="trace_file").upload(f"{name}.csv", data, "text/csv").run()
    assert not at.exception, [e.value for e in at.exception]
    assert any(words in seen(e.value) for e in at.sidebar.error), [e.value for e in at.sidebar.error]
    assert metric(at, "Steps to drain") == good
    # one error box for one bad file (issue 40: three near-identical boxes), the main area says what it shows
    assert len(at.error) == 1, [e.value for e in at.error]
    assert any(f"{name}.csv cannot run" in seen(i.value) and "Showing the last scenario that could" in seen(i.value)
               for i in at.info), [i.value for i in at.info]


# --- the number inputs --------------------------------------------------------------------------

@pytest.mark.parametrize("key, value", [("slots_classroom-40", 10), ("slots_classroom-40", 10 ** 9),
                                        ("max_new_classroom-40", 0), ("seed", -1), ("shared_prefix", 10 ** 7)])
def test_the_explainers_numbers_take_only_what_they_offer(key, value):
    """Out of its range, a sidebar number keeps a value it offers (Streamlit's own bounds) and the
    page runs on; the same value in a shared link is named (see the URL tests below)."""
    at = _page()
    widget = at.number_input(key=key)
    default = widget.value
    widget.set_value(value).run()
    assert not at.exception
    assert at.number_input(key=key).value == default and metric(at, "Steps to drain")


@pytest.mark.parametrize("state, words", [
    ({"acc_reserve": 0}, "Reserve maximum = 0 must be at least 1"),
    ({"acc_reserve": -1}, "Reserve maximum = -1 must be at least 1"),
    ({"acc_reserve": 10 ** 30}, "Reserve maximum = 1,000,000,000,000,000,000,000,000,000,000 must be at most 10,000,000"),
    ({"acc_pool": -5}, "Pool size = -5 must be at least 0"),
    ({"acc_pool": 10 ** 30}, "Pool size = 1,000,000,000,000,000,000,000,000,000,000 must be at most 1,000,000,000,000"),
    ({"acc_share_a": 10 ** 9}, "Request A length = 1,000,000,000 must be at most 10,000,000"),
    ({"acc_share_prefix": -1}, "Shared prefix = -1 must be at least 0"),
    ({"acc_share_block": 10 ** 6}, "Block size = 1,000,000 must be at most 4,096"),
    ({"acc_lengths_r1": {"edited_rows": {0: {LENGTH_COL: "nan"}}, "added_rows": [], "deleted_rows": []}},
     "Row 1: length = 'nan' is not a number"),
    ({"acc_lengths_r1": {"edited_rows": {0: {LENGTH_COL: "1e400"}}, "added_rows": [], "deleted_rows": []}},
     "Row 1: length = 1e400 is not a whole number"),
    ({"acc_lengths_r1": {"edited_rows": {1: {LENGTH_COL: "1e30"}}, "added_rows": [], "deleted_rows": []}},
     "Row 2: length = 1e30 must be at most 10,000,000"),
    ({"acc_lengths_r1": {"edited_rows": {2: {LENGTH_COL: "20000000"}}, "added_rows": [], "deleted_rows": []}},
     "Row 3: length = 20000000 must be at most 10,000,000"),
    ({"acc_lengths_r1": {"edited_rows": {0: {LENGTH_COL: "abc"}}, "added_rows": [], "deleted_rows": []}},
     "Row 1: length = 'abc' is not a number"),
])
def test_the_accounting_page_names_a_bad_number(state, words):
    """A reserve of 10**30 used to stop the page (a Python int too large for the table)."""
    at = _page("pages/accounting.py", state)
    assert any(words in m for m in _shown(at)), _shown(at)


@pytest.mark.parametrize("state, words", [
    ({"cap_free_gib": float("inf")}, "Free memory (GiB) = inf is not a finite number"),
    ({"cap_free_gib": float("nan")}, "Free memory (GiB) = nan is not a finite number"),
    ({"cap_free_gib": 1e30}, "Free memory (GiB) = 1e+30 must be at most 1,048,576"),
    ({"cap_free_gib": -1.0}, "Free memory (GiB) = -1 must not be negative"),
    ({"cap_max_context": 10 ** 12}, "Max context = 1,000,000,000,000 must be at most 10,000,000"),
    ({"cap_max_context": 0}, "Max context = 0 must be at least 1"),
    ({"cap_mean_tokens": float("nan")}, "Mean tokens used = nan is not a finite number"),
    ({"cap_mean_tokens": float("inf")}, "Mean tokens used = inf is not a finite number"),
    ({"cap_mean_tokens": 0.0}, "Mean tokens used = 0 must be more than 0"),
    ({"cap_block_size": 10 ** 6}, "Block size = 1,000,000 must be at most 4,096"),
    ({"cap_model": "custom", "cap_layers": 0}, "Layers = 0 must be at least 1"),
    ({"cap_model": "custom", "cap_head_dim": 10 ** 6}, "Head dimension = 1,000,000 must be at most 16,384"),
])
def test_the_capacity_page_names_a_bad_number(state, words):
    """1e30 GiB used to stop the page (an int too large for numpy in the fit curve)."""
    at = _page("pages/capacity.py", state)
    assert any(words in m for m in _shown(at)), _shown(at)


# --- the URL parameters -------------------------------------------------------------------------

@pytest.mark.parametrize("params, words", [
    ({"seed": "nan"}, "URL parameter seed='nan' must be a whole number from 0 to 4,294,967,295; using 25."),
    ({"seed": "1e400"}, "URL parameter seed='1e400' must be a whole number"),
    ({"slots_classroom-40": "1e400"}, "URL parameter slots_classroom-40='1e400' must be a whole number from 64 to "
                                      "1,048,576 (slots)"),
    ({"max_new_classroom-40": "-1"}, "URL parameter max_new_classroom-40='-1' must be a whole number from 1 to 4,194,304 (tokens)"),
    ({"metadata_cost": "inf"}, "URL parameter metadata_cost='inf' must be a number from 0 to 8 in steps of 0.25"),
    ({"shared_prefix": "2.5"}, "URL parameter shared_prefix='2.5' must be a whole number from 0 to 4,194,304 (tokens)"),
    ({"arrival": "trickle", "arrival_rate": "0"}, "URL parameter arrival_rate='0' must be a number from 0.01 to 2"),
    ({"block_size": "inf"}, "URL parameter block_size='inf' is not a block size the slider offers"),
    ({"workload": "azure-conv", "count_azure-conv": "0"}, "URL parameter count_azure-conv='0' must be a whole number "
                                                          "from 1 to 200 (requests)"),
    ({"workload": "azure-conv", "offset_azure-conv": "-1"}, "URL parameter offset_azure-conv='-1' must be a whole "
                                                            "number from 0 to 199,999 (trace rows, from 0)"),
    ({"workload": "azure-conv", "offset_azure-conv": "50000"}, "URL parameter offset_azure-conv='50000' is past the "
                                                               "trace's last row"),
    ({"workload": "azure-conv", "steps_per_second_azure-conv": "nan"}, "URL parameter steps_per_second_azure-conv='nan' "
                                                                       "must be a number from 0.5 to 200"),
])
def test_a_bad_url_number_is_named_and_the_page_runs(params, words):
    at = _page(params=params)
    assert any(words in w for w in _shown(at)), _shown(at)
    assert metric(at, "Steps to drain")


def test_url_ranges_lie_inside_the_cores():
    """Whatever a link may carry, the core can run: every sidebar range lies inside LIMITS, and the
    row offset is the core's range itself."""
    from allocator.common.limits import LIMITS
    from pages._ui.url_params import number_rules

    for workload in ("classroom-40", "azure-conv", "upload"):
        for name, rule in number_rules(workload).items():
            core = LIMITS[rule.field]
            assert core.low <= rule.low and rule.high <= core.high, name
            assert (rule.unit, rule.integer) == (core.unit, core.integer), name
    for workload in ("azure-conv", "upload"):
        assert number_rules(workload)[f"offset_{workload}"].limit is LIMITS["offset"]
