"""Start-up imports only what a command needs (issue 24): ``import allocator`` loads no submodule
until a name is used, and the CLI never imports pandas unless it reads a CSV or JSONL trace. The
speed itself is measured by ``make bench`` (tests/tools/bench.py, section ``cli``), not asserted here."""
from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import ROOT

_PROBE = """
import json, sys
from allocator.__main__ import main
import contextlib, io
with contextlib.redirect_stdout(io.StringIO()):
    try:
        code = main({argv!r})
    except SystemExit as exc:
        code = exc.code
print(json.dumps({{"code": code, "pandas": "pandas" in sys.modules, "plotly": "plotly" in sys.modules,
                   "streamlit": "streamlit" in sys.modules}}))
"""


def _probe(argv: list[str]) -> dict:
    out = subprocess.run([sys.executable, "-c", _PROBE.format(argv=argv)], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_allocator_loads_nothing_until_used():
    code = ("import sys, allocator; before = sorted(m for m in sys.modules if m.startswith('allocator.'));"
            "from allocator.engine.simulate import simulate; from allocator.workloads.requests import classroom_40;"
            "from allocator.memory.paged import PagedAllocator;"
            "print(before, simulate(classroom_40(), PagedAllocator(2048, 16)).summary['steps'], 'numpy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["[]", "1558", "True"]


def test_help_and_a_builtin_workload_never_import_pandas():
    for argv in (["--help"], ["simulate", "--workload", "classroom-40", "--json"]):
        seen = _probe(argv)
        assert seen["code"] == 0 and not seen["pandas"] and not seen["streamlit"], (argv, seen)


def test_a_csv_trace_still_reads_with_pandas():
    seen = _probe(["simulate", "--trace", "assets/azure_llm_conv_2023.csv", "--count", "5", "--json"])
    assert seen["code"] == 0 and seen["pandas"]
