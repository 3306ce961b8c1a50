"""One pool range for the CLI, the core and every page (issue 24): up to 2**30 slots, with memory
that follows the blocks used; only a pool drawn slot by slot (export-html) keeps to 4,194,304."""
from __future__ import annotations

import json
import subprocess
import sys

from allocator.common.limits import MAX_POOL_SLOTS
from allocator.common.limits import LIMITS, check_pool_blocks
from allocator.common.errors import FieldError
from tests.conftest import ROOT


def _cli(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "allocator", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def test_one_range_table():
    assert MAX_POOL_SLOTS == 2 ** 30 == LIMITS["total_slots"].high == LIMITS["pool_blocks"].high
    assert check_pool_blocks(2 ** 26, 16) == 2 ** 26 and check_pool_blocks(2 ** 21, 512) == 2 ** 21
    try:
        check_pool_blocks(2 ** 21 + 1, 512)
    except FieldError as exc:
        assert exc.field == "pool_blocks" and "from 1 to 2,097,152 (blocks of 512 slots" in str(exc)
    else:
        raise AssertionError("a pool past 2**30 slots was accepted")


def test_the_cli_runs_a_pool_of_2_to_the_30_slots_and_refuses_one_more():
    out = _cli("simulate", "--workload", "classroom-40", "--slots", str(2 ** 30), "--block-size", "1", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["paged"]["total_slots"] == data["reserve_max"]["total_slots"] == 2 ** 30
    assert data["paged"]["finished"] == 40 and data["paged"]["preemptions"] == 0
    bad = _cli("simulate", "--workload", "classroom-40", "--slots", str(2 ** 30 + 1))
    assert bad.returncode == 2
    assert "--slots 1073741825 must be a whole number from 1 to 1,073,741,824 (slots)" in bad.stderr


def test_export_html_keeps_drawn_pools_to_what_a_frame_can_hold(tmp_path):
    out = _cli("export-html", "--workload", "classroom-40", "--slots", str(2 ** 22 + 1), "--out",
               str(tmp_path / "a.html"))
    assert out.returncode == 2 and not (tmp_path / "a.html").exists()
    assert ("--slots 4194305 must be a whole number from 1 to 4,194,304 (slots: a pool drawn slot by slot)"
            in out.stderr)
