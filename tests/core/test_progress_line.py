"""Issue 42 (low): a long CLI run says it is alive on stderr (a 200,000-row trace on a 2**30-slot pool
with one-slot blocks ran past 90 s without a word). The engine loop reports every PROGRESS_EVERY busy
steps; the CLI writes a line when its (injected) clock says enough time has passed. No real clock
decides anything here."""
from __future__ import annotations

import io

from allocator.cli.common import engine_progress_line
from allocator.engine import loop
from allocator.engine.scenario import Scenario, run_scenario


class Tty(io.StringIO):
    def isatty(self):
        return True


def test_the_engine_loop_reports_its_progress_and_computes_the_same(monkeypatch):
    monkeypatch.setattr(loop, "PROGRESS_EVERY", 50)
    sc = Scenario(workload="azure-conv", count=200)
    plain = run_scenario(sc, record_snapshots=False)
    seen = []
    with loop.progress_reports(lambda done, total, step: seen.append((done, total, step))):
        reported = run_scenario(sc, record_snapshots=False)
    assert seen and all(total == 200 and 0 <= done <= 200 for done, total, _ in seen)
    assert all(step >= 50 for _, _, step in seen)         # at most one report per 50 busy steps
    for name in plain:
        assert plain[name].summary == reported[name].summary, name


def test_the_cli_line_is_written_on_a_terminal_only_and_at_most_every_few_seconds():
    times = iter([0.0, 1.0, 6.0, 7.0, 12.5])
    out = Tty()
    report = engine_progress_line(out, quiet=False, every_s=5.0, clock=lambda: next(times))
    report(10, 200_000, 20_000)           # 1 s: too soon
    report(50, 200_000, 40_000)           # 6 s: a line
    report(60, 200_000, 60_000)           # 7 s: too soon
    report(12_000, 200_000, 1_520_000)    # 12.5 s: a line
    assert out.getvalue() == ("simulating: 50 of 200,000 requests done, engine step 40,000 (6 s)\n"
                              "simulating: 12,000 of 200,000 requests done, engine step 1,520,000 (12 s)\n")
    assert engine_progress_line(Tty(), quiet=True) is None                   # --json
    assert engine_progress_line(io.StringIO(), quiet=False) is None          # piped or redirected
