"""AppTest of the Accounting and Capacity pages: default and changed inputs read back as real
values (metrics, tables), and bad input reported next to its control while the page renders.

Figures come from the lesson's reference figures, ``assets/reference_figures.md`` (R1-R5).
"""
from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from tests.conftest import open_page, seen
LENGTH_COL = "length (tokens)"


def _page(path: str, state: dict | None = None) -> AppTest:
    return open_page(path, state, timeout=60)


def _metrics(at: AppTest) -> dict[str, tuple[str, str]]:
    """label -> (value, delta) for every metric on the page."""
    return {m.label: (m.value, m.proto.delta) for m in at.metric}


def _column_holding(at: AppTest, kind: str, key: str):
    """The innermost column that holds the widget of type ``kind`` with ``key``."""
    found = [c for c in at.columns if any(w.key == key for w in getattr(c, kind))]
    assert found, f"no column holds {kind} {key}"
    return found[-1]


def _table(at: AppTest, column: str):
    """The value of the first read-only table on the page that has ``column``."""
    for frame in at.dataframe:
        if frame.editing_mode == "read_only" and column in frame.value.columns:
            return frame.value
    raise AssertionError(f"no table with column {column!r}")


def _errors(block) -> list[str]:
    return [seen(e.value) for e in block.error]          # plain text (issue 19)


def _edit(rows: dict | None = None, added: list | None = None, deleted: list | None = None):
    """Edit state for the keyed data editor (what a user's cell edits produce)."""
    return {"edited_rows": rows or {}, "added_rows": added or [], "deleted_rows": deleted or []}


# ---------------------------------------------------------------------------------------------
# Accounting page
# ---------------------------------------------------------------------------------------------

def test_accounting_defaults_show_the_r1_figures():
    """assets/reference_figures.md R1, R2: 96 slots / 65 unused; page 4 -> 40 / 9; best page 4 at c = 1
    (cost 50); 43 logical tokens, 44 unshared, 36 shared."""
    at = _page("pages/accounting.py")
    assert not at.error
    m = _metrics(at)
    assert m["Tokens stored"][0] == "31"
    assert m["Reserve-max slots"] == ("96", "65 unused · 67.7 %")
    assert m["Paged slots"] == ("40", "9 unused · 22.5 %")
    assert m["Best block size (slots)"] == ("4", "total cost 50")
    assert m["Logical tokens"][0] == "43"
    assert m["Slots without sharing"][0] == "44"
    assert m["Distinct physical slots (shared)"] == ("36", "8 slots saved")

    editor = at.data_editor(key="acc_lengths_r1")
    assert editor.value[LENGTH_COL].tolist() == ["5", "9", "17"]
    cost = _table(at, "total cost")
    assert cost["block size"].tolist() == [1, 2, 4, 8, 16, 32]
    assert cost["slots"].tolist() == [31, 34, 40, 48, 64, 96]
    assert cost["unused"].tolist() == [0, 3, 9, 17, 33, 65]
    assert cost["total cost"].tolist() == [62, 51, 50, 54, 68, 99]
    assert cost.loc[cost["best"] != "", "block size"].tolist() == [4]
    breakdown = _table(at, "blocks")
    assert breakdown["blocks"].tolist() == [2, 3, 5]
    assert breakdown["empty (reserved)"].tolist() == [27, 23, 15]


@pytest.mark.parametrize("c, best, cost", [(0.0, "1", "total cost 31"),
                                           (0.25, "2", "total cost 38.25"),
                                           (4.0, "8", "total cost 72")])
def test_accounting_metadata_cost_moves_best_page(c, best, cost):
    """assets/reference_figures.md R1, R2: best 1 / 2 / 8 at c = 0 / 0.25 / 4 (31, 38.25, 72)."""
    at = _page("pages/accounting.py")
    at.slider(key="acc_metadata_cost").set_value(c).run()
    assert not at.exception
    assert _metrics(at)["Best block size (slots)"] == (best, cost)
    table = _table(at, "total cost")
    assert table.loc[table["best"] != "", "block size"].tolist() == [int(best)]


@pytest.mark.parametrize("block, slots, unused", [(8, "48", "17"), (16, "64", "33")])
def test_accounting_block_size_slider(block, slots, unused):
    """assets/reference_figures.md R1: blocks of 8 and 16 -> 48 / 17 and 64 / 33."""
    at = _page("pages/accounting.py")
    at.slider(key="acc_block_size").set_value(block).run()
    value, delta = _metrics(at)["Paged slots"]
    assert value == slots and delta.startswith(f"{unused} unused")


def test_accounting_r4_preset():
    """002_abdc40c8c116312c.txt: 10,240 reserved, 74.8 % waste; 2,608 paged at 16, 1.0 %;
    a 40,960-slot pool fits 20 vs 78 (3.9x)."""
    at = _page("pages/accounting.py")
    at.selectbox(key="acc_example").set_value("r4").run()
    assert not at.exception and not at.error
    assert at.number_input(key="acc_reserve").value == 2048
    assert at.slider(key="acc_block_size").value == 16
    m = _metrics(at)
    assert m["Tokens stored"][0] == "2,581"
    assert m["Reserve-max slots"] == ("10,240", "7,659 unused · 74.8 %")
    assert m["Paged slots"] == ("2,608", "27 unused · 1.0 %")
    assert m["Fit, reserve-max"][0] == "20"
    assert m["Fit, paged"] == ("78", "3.9x reserve-max")
    assert at.data_editor(key="acc_lengths_r4").value[LENGTH_COL].tolist() == [
        "512", "37", "1900", "128", "4"]
    breakdown = _table(at, "blocks")
    assert breakdown["paged slots"].tolist() == [512, 48, 1904, 128, 16]
    assert breakdown["empty (last block)"].tolist() == [0, 11, 4, 0, 12]


def test_accounting_edited_table_recomputes():
    at = _page("pages/accounting.py", {"acc_lengths_r1": _edit(
        rows={2: {LENGTH_COL: 32}}, added=[{LENGTH_COL: 1}])})
    assert not at.error
    m = _metrics(at)
    assert m["Tokens stored"][0] == "47"                       # 5 + 9 + 32 + 1
    assert m["Reserve-max slots"][0] == "128"                  # 4 x 32
    assert m["Paged slots"][0] == "56"                         # 8 + 12 + 32 + 4


@pytest.mark.parametrize("edit, needle", [
    (_edit(deleted=[0, 1, 2]), "The table is empty"),
    (_edit(rows={1: {LENGTH_COL: -3}}), "Row 2: length = -3 must be at least 1"),
    (_edit(rows={0: {LENGTH_COL: 2.5}}), "Row 1: length = 2.5 is not a whole number"),
])
def test_accounting_bad_table_is_reported_by_the_table(edit, needle):
    at = _page("pages/accounting.py", {"acc_lengths_r1": edit})
    column = _column_holding(at, "number_input", "acc_reserve")    # the inputs column
    assert any(needle in e for e in _errors(column)), _errors(column)
    # the rest of the page still renders: headers and the prefix-sharing panel
    assert len(at.header) == 3
    m = _metrics(at)
    assert m["Logical tokens"][0] == "43" and m["Distinct physical slots (shared)"][0] == "36"
    assert "Reserve-max slots" not in m


def _before(column, key: str) -> list[str]:
    """The error texts in ``column`` that come before the widget with ``key`` (page order)."""
    texts = []
    for node in column:
        if getattr(node, "key", None) == key:
            return texts
        if node.type == "error":
            texts.append(seen(node.value))          # plain text (issue 19)
    raise AssertionError(f"no widget {key} in the column")


def test_accounting_length_above_maximum_is_reported_by_the_table():
    """The error is about lengths[2] (FieldError field "lengths", index 2): it is shown under
    the table, naming row 3, and the reserve-max figures are left out."""
    at = _page("pages/accounting.py", {"acc_lengths_r1": _edit(rows={2: {LENGTH_COL: 40}})})
    column = _column_holding(at, "number_input", "acc_reserve")
    assert any("Row 3: length = 40 is above the reserve maximum (32 slots): raise the reserve "
               "maximum or shorten the request." in e
               for e in _before(column, "acc_reserve")), _errors(column)
    m = _metrics(at)
    assert m["Reserve-max slots"][0] == "—"
    assert m["Paged slots"][0] == "60"                 # 8 + 12 + 40: paging still computed
    assert m["Best block size (slots)"][0] == "8"       # 64 slots + 8 blocks = 72 beats 75


def test_accounting_core_error_names_the_table_row_past_blank_rows():
    """Blank rows are skipped before the core sees the lengths, so lengths[1] is table row 3."""
    at = _page("pages/accounting.py", {"acc_lengths_r1": _edit(
        rows={1: {LENGTH_COL: None}, 2: {LENGTH_COL: 40}})})
    column = _column_holding(at, "number_input", "acc_reserve")
    assert any(e.startswith("Row 3: length = 40 is above the reserve maximum")
               for e in _before(column, "acc_reserve")), _errors(column)
    assert not any(e.startswith("Row 2") for e in _errors(column))
    assert any("1 blank row ignored." in c.value for c in column.caption)


def test_accounting_prefix_panel_changed_and_bad():
    at = _page("pages/accounting.py")
    at.number_input(key="acc_share_prefix").set_value(12).run()
    m = _metrics(at)
    assert (m["Slots without sharing"][0], m["Distinct physical slots (shared)"][0]) == ("44", "32")
    at.number_input(key="acc_share_block").set_value(0).run()
    assert not at.exception
    column = _column_holding(at, "number_input", "acc_share_block")
    assert any("Block size = 0 must be at least 1" in e for e in _errors(column))
    m = _metrics(at)
    assert "Logical tokens" not in m
    assert m["Reserve-max slots"][0] == "96"                     # section 1 unaffected
    at.number_input(key="acc_share_block").set_value(4).run()
    at.number_input(key="acc_share_prefix").set_value(30).run()
    column = _column_holding(at, "number_input", "acc_share_prefix")
    assert any("Shared prefix = 30 is longer than the shorter request" in e
               for e in _errors(column))


# ---------------------------------------------------------------------------------------------
# Capacity page
# ---------------------------------------------------------------------------------------------

def test_capacity_defaults_show_the_r5_figures():
    """003_49f236d33f1525f6.txt: 512 KiB/token, 1 GiB per 2048-token reservation, 175 MiB used,
    83 % waste, 66 sequences; paged 22 blocks = 352 slots, 2 empty, 384 sequences; twice the
    memory 132."""
    at = _page("pages/capacity.py")
    assert not at.error
    m = _metrics(at)
    assert m["KV cache per token"][0] == "512 KiB"
    assert m["Reserved per sequence"] == ("1 GiB", "175 MiB used")
    assert m["Reserved but empty"][0] == "82.9 %"              # R5 rounds to 83 %
    assert m["Sequences, reserve-max"][0] == "66"
    assert m["Blocks per sequence"] == ("22", "= 352 slots, 2 empty")
    assert m["Allocated per sequence"] == ("176 MiB", "0.6 % empty")
    assert m["Sequences, paged"][0] == "384"
    assert m["Sequences in 132 GiB, reserve-max"][0] == "132"
    assert m["Sequences in 66 GiB, paged"][0] == "384"
    assert any("524,288 bytes" in c.value for c in at.caption)


@pytest.mark.parametrize("model, per_token, reserved", [
    ("llama3-70b", "320 KiB", "640 MiB"),     # 000_b2d5125a0ea162ff.txt
    ("opt-13b", "800 KiB", "1.56 GiB"),       # Kwon et al. 2023: "800 KB" = 819,200 bytes
])
def test_capacity_presets(model, per_token, reserved):
    at = _page("pages/capacity.py")
    at.selectbox(key="cap_model").set_value(model).run()
    m = _metrics(at)
    assert m["KV cache per token"][0] == per_token
    assert m["Reserved per sequence"][0] == reserved


def test_capacity_custom_model_and_doubled_memory():
    at = _page("pages/capacity.py")
    at.selectbox(key="cap_model").set_value("custom").run()
    at.number_input(key="cap_layers").set_value(32)
    at.number_input(key="cap_kv_heads").set_value(32)
    at.number_input(key="cap_head_dim").set_value(128)
    at.number_input(key="cap_free_gib").set_value(132.0).run()
    assert not at.error
    m = _metrics(at)
    assert m["KV cache per token"][0] == "512 KiB"
    assert m["Sequences, reserve-max"][0] == "132"
    assert m["Sequences, paged"][0] == "768"


def test_capacity_block_size_zero_reported_by_control():
    at = _page("pages/capacity.py")
    at.number_input(key="cap_block_size").set_value(0).run()
    assert not at.exception
    column = _column_holding(at, "number_input", "cap_block_size")
    assert any("Block size = 0 must be at least 1" in e for e in _errors(column)), _errors(column)
    m = _metrics(at)
    assert m["Sequences, reserve-max"][0] == "66"               # reserve side still renders
    assert m["Reserved per sequence"][0] == "1 GiB"
    assert "Sequences, paged" not in m


def test_capacity_mean_above_maximum_reported_by_control():
    at = _page("pages/capacity.py")
    at.number_input(key="cap_mean_tokens").set_value(3000.0).run()
    column = _column_holding(at, "number_input", "cap_mean_tokens")
    assert any("Mean tokens used = 3,000 is above max context (2,048 tokens)" in e
               for e in _errors(column)), _errors(column)
    m = _metrics(at)
    assert m["KV cache per token"][0] == "512 KiB"
    assert m["Sequences, reserve-max"][0] == "66"


def test_capacity_block_size_changes_paged_figures():
    at = _page("pages/capacity.py")
    at.number_input(key="cap_block_size").set_value(256).run()
    m = _metrics(at)
    # ceil(350 / 256) = 2 blocks = 512 slots x 512 KiB = 256 MiB; 66 GiB / 256 MiB = 264
    assert m["Blocks per sequence"] == ("2", "= 512 slots, 162 empty")
    assert m["Allocated per sequence"][0] == "256 MiB"
    assert m["Sequences, paged"][0] == "264"


# ---------------------------------------------------------------------------------------------
# Charts: axis titles, legends, hover text (the project's conventions, README)
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("path, count", [("pages/accounting.py", 3), ("pages/capacity.py", 3)])  # capacity: + speculation
def test_charts_have_axis_titles_legend_and_hover(path, count):
    import json

    at = _page(path)
    charts = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    assert len(charts) == count
    for spec in charts:
        layout = spec["layout"]
        assert layout["xaxis"]["title"]["text"] and layout["yaxis"]["title"]["text"]
        named = [t for t in spec["data"] if t.get("name")]
        assert len({t["name"] for t in named}) >= 2                 # a legend with 2+ series
        assert all(t.get("hovertemplate") or t.get("hoverinfo") == "text" or
                   (t.get("x") == [None]) for t in spec["data"])      # legend-only keys excepted


def test_cost_chart_follows_metadata_cost():
    """assets/reference_figures.md R1, R2: the plotted totals at c = 4 are 155, 102, 80, 72, 80, 108."""
    import json

    at = _page("pages/accounting.py")
    at.slider(key="acc_metadata_cost").set_value(4.0).run()
    spec = next(json.loads(c.proto.spec) for c in at.get("plotly_chart")
                if "block size" in json.loads(c.proto.spec)["layout"]["xaxis"]["title"]["text"])
    total = next(t for t in spec["data"] if t.get("name") == "total cost")
    assert total["y"] == [155, 102, 80, 72, 80, 108]
    best = next(t for t in spec["data"] if t.get("name", "").startswith("best:"))
    assert best["name"] == "best: block size 8, cost 72"


# ---------------------------------------------------------------------------------------------
# An invalid input replaces what depends on it; nothing stale stays on screen
# ---------------------------------------------------------------------------------------------

def test_an_invalid_request_length_replaces_the_sharing_figures():
    """Request A = 0 used to keep showing "43 logical tokens" from A = 20 beside a red field."""
    at = _page("pages/accounting.py", {"acc_share_a": 0})
    assert "Logical tokens" not in _metrics(at)
    column = _column_holding(at, "number_input", "acc_share_a")
    assert any("Request A length = 0 must be at least 1" in e for e in _errors(column)), _errors(column)
    assert any("Fix the value marked above" in i.value for i in at.info)


def test_a_word_in_a_length_cell_is_named_not_read_as_zero():
    at = _page("pages/accounting.py", {"acc_lengths_r1": _edit(rows={0: {LENGTH_COL: "abc"}})})
    assert any("Row 1: length = 'abc' is not a number" in seen(e.value) for e in at.error), [e.value for e in at.error]
    assert "Tokens stored" not in _metrics(at) or _metrics(at)["Tokens stored"][0] != "26"


def test_an_invalid_capacity_input_replaces_the_capacity_figures():
    at = _page("pages/capacity.py", {"cap_max_context": 0})
    assert not [k for k in _metrics(at) if k.startswith("Sequences")]
    assert any("Max context = 0 must be at least 1" in seen(e.value) for e in at.error), [e.value for e in at.error]


def test_an_exact_tie_is_called_a_tie_on_the_accounting_page():
    """Issue 40: 5, 9, 17 tokens at c = 2 cost 40 + 2 x 10 = 60 in blocks of 4 and 48 + 2 x 6 = 60 in
    blocks of 8. The page names both as a tie (metric, caption, table, chart), not 4 as the winner."""
    from allocator.accounting.block_size import block_size_table, tied_best
    assert tied_best(block_size_table([5, 9, 17], 2, (1, 2, 4, 8, 16, 32))) == [4, 8]
    assert tied_best(block_size_table([5, 9, 17], 4, (1, 2, 4, 8, 16, 32))) == [8]   # R2: no tie
    at = _page("pages/accounting.py")
    at.slider(key="acc_metadata_cost").set_value(2.0).run()
    assert not at.exception
    assert _metrics(at)["Best block size (slots)"] == ("4 or 8 (tie)", "total cost 60")
    assert any("Block sizes 4 and 8 cost exactly the same: a tie." in c.value for c in at.caption)
    table = _table(at, "total cost")
    assert table.loc[table["best"] != "", "block size"].tolist() == [4, 8]
    assert set(table.loc[table["best"] != "", "best"]) == {"◀ best (tie)"}


def test_the_sweep_calls_costs_within_its_tolerance_a_tie():
    """Issue 40: at c = 4 the default lesson's 32 and 64 differ in the fifth digit (1.195619 vs
    1.195560); the sweep's sentence names both as tied, with the tolerance it uses."""
    from allocator.viz.claims.sweep import SWEEP_TIE_TOLERANCE, sweep_summary

    def row(bs, cost):
        return {"block_size": bs, "cost_per_token": cost, "cost_per_token_busy": cost,
                "mean_utilization": 0.9, "mean_utilization_busy": 0.9, "waited": True}
    rows = [row(16, 1.2100), row(32, 1.195619), row(64, 1.195560)]
    text = sweep_summary(rows, 16, 4.0)
    assert SWEEP_TIE_TOLERANCE == 0.001
    assert ("block sizes **32 and 64** tie for the cheapest per stored token (1.196 slot equivalents per "
            "token, within 0.1% of each other") in text
    alone = sweep_summary([row(16, 1.2100), row(64, 1.195560)], 16, 4.0)
    assert "the cheapest block size per stored token is **64** (1.196 slot equivalents per token)" in alone


def test_the_default_lesson_at_c_4_reads_as_a_tie_of_32_and_64(capsys):
    """The real run behind the issue: the sweep that ``simulate --sweep --metadata-cost 4`` prints
    gives 32 and 64 within the tolerance, and the explainer's sentence names both."""
    import json

    from allocator.__main__ import main
    from allocator.viz.claims.sweep import sweep_summary
    assert main(["simulate", "--workload", "classroom-40", "--sweep", "--metadata-cost", "4", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    rows = data["paged_block_size_sweep"]
    costs = {r["block_size"]: r["cost_per_token_busy"] for r in rows}
    assert round(costs[32], 6) == 1.195619 and round(costs[64], 6) == 1.19556
    assert "block sizes **32 and 64** tie for the cheapest" in sweep_summary(rows, 16, 4.0, data["reserve_max"])


def test_the_r2_worked_answer_shows_only_beside_r2s_own_case():
    """Issue 40: R2's worked answer (best 1 / 2 / 4 / 8 at c = 0 / 0.25 / 1 / 4) stayed under R4's
    table after the example changed; it is shown only while the table holds R2's lengths and sizes."""
    at = _page("pages/accounting.py")
    r2 = "These are reference figure R2's lengths and sizes; its worked answer: best 1 at c = 0"
    assert any(c.value.startswith(r2) for c in at.caption)
    at.selectbox(key="acc_example").set_value("r4").run()
    assert not at.exception
    assert not any("worked answer" in c.value for c in at.caption)
    assert any(c.value.startswith("c is an abstract charge") for c in at.caption)
