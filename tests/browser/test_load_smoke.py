"""A short classroom load in the suite (issue 19): three students at once over Streamlit's own wire
protocol against a real server, found by the explainer's widget and chart keys. It fails when the
page stops answering, raises, or loses the block-size slider or the maps chart -- which the full
``make load`` (40 sessions, ``tests/tools/load.py``) would then report as 40 errors. The time bound is
loose on purpose: the suite runs on a shared machine; ``make load`` holds the real target."""
from __future__ import annotations

import json

from tests.tools import load


def test_three_students_load_change_the_block_size_and_see_new_maps(tmp_path):
    out = tmp_path / "load.json"
    code = load.main(["--sessions", "3", "--browsers", "0", "--time-limit", "150", "--hold", "0.5",
                      "--target-p95", "60", "--json", str(out)])
    data = json.loads(out.read_text())
    assert [s["errors"] for s in data["sessions"]] == [[], [], []], data["sessions"]
    assert code == 0, data["summary"]
    assert all(s["load_s"] and s["change_s"] for s in data["sessions"])
    assert data["summary"]["server_runs"] >= 6          # every load and change ran on the server, and was logged
