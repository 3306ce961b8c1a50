"""MemoryGuard: the bound holds even when the interrupt is lost (issue 42).

Nothing here races the clock: the guard's memory reader, interrupt and hard stop are injected, and
every trip is decided by the count of checks (a fake reader that says "over the limit" at the Nth
check), not by how long something takes. Threads are waited for through events they set; the
timeouts on those waits only keep a broken build from hanging the suite.
"""
import os
import subprocess
import sys
import textwrap
import threading

import pytest

from allocator.cli.common import GRACE_CHECKS, MemoryGuard

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: Only a failsafe: each wait below ends on an event long before this.
FAILSAFE_S = 60


class FakeMemory:
    """Reports ``low`` bytes until check ``trip_at`` (1-based), then ``high`` for every check."""

    def __init__(self, trip_at: int, low: int = 100, high: int = 10_000):
        self.trip_at, self.low, self.high, self.calls = trip_at, low, high, 0

    def __call__(self) -> int:
        self.calls += 1
        return self.high if self.calls >= self.trip_at else self.low


def _guard(trip_at: int, **kw):
    calls = {"interrupt": 0, "stop": []}
    guard = MemoryGuard(1000, 0.0, read_memory=FakeMemory(trip_at),
                        interrupt=lambda: calls.__setitem__("interrupt", calls["interrupt"] + 1),
                        hard_stop=calls["stop"].append, **kw)
    return guard, calls


@pytest.mark.parametrize("trip_at", [1, 2, 7])
def test_the_guard_interrupts_once_at_the_first_check_over_the_limit(trip_at):
    guard, calls = _guard(trip_at)
    for n in range(1, trip_at):
        assert guard.check() and calls["interrupt"] == 0 and guard.tripped == 0, n
    assert guard.check() and calls["interrupt"] == 1 and guard.tripped == 10_000
    assert calls["stop"] == []


@pytest.mark.parametrize("grace", [1, 2, GRACE_CHECKS])
def test_a_lost_interrupt_is_followed_by_a_hard_stop_after_the_grace_checks(grace):
    """The run went on past the interrupt (lost in a gc callback, or deferred by a long C call): the
    guard ends it itself after ``grace`` more checks over the limit, with its message -- once."""
    guard, calls = _guard(3, grace_checks=grace)
    for _ in range(3):
        assert guard.check()
    assert calls["interrupt"] == 1
    for _ in range(grace - 1):
        assert guard.check() and calls["stop"] == []
    assert guard.check() is False and guard.stopped
    assert calls["stop"] == [guard.message()] and calls["interrupt"] == 1
    assert guard.check() is False and len(calls["stop"]) == 1        # never twice
    assert guard.message().startswith("error: stopped: this run passed ")


def test_memory_falling_back_under_the_limit_does_not_count_toward_the_stop():
    readings = iter([5_000, 100, 100, 100, 5_000, 5_000])
    calls = []
    guard = MemoryGuard(1000, 0.0, read_memory=lambda: next(readings), interrupt=lambda: None,
                        hard_stop=calls.append, grace_checks=2)
    assert [guard.check() for _ in range(5)] == [True] * 5 and calls == []
    assert guard.check() is False and len(calls) == 1


def test_no_check_runs_after_the_block_has_ended():
    guard, calls = _guard(1)
    guard.__exit__(ValueError, None, None)          # the block ended (here: with an error of its own)
    assert guard.check() is False and calls == {"interrupt": 0, "stop": []} and guard.checks == 0


def test_the_watcher_thread_interrupts_then_stops_when_the_interrupt_is_lost():
    """The thread end to end: it checks until the fake reader trips (check 3), interrupts (here the
    interrupt is lost: the hook only records it), and ends the 'process' after the grace checks."""
    stopped = threading.Event()
    seen = []

    def hard_stop(message):
        seen.append(message)
        stopped.set()
    guard = MemoryGuard(1000, 0.0, read_memory=FakeMemory(3), interrupt=lambda: seen.append("interrupt"),
                        hard_stop=hard_stop, grace_checks=2)
    with pytest.raises(KeyboardInterrupt):          # tripped and the block ended normally: raised at its end
        with guard:
            assert stopped.wait(FAILSAFE_S)
    assert seen == ["interrupt", guard.message()] and guard.checks == 5


def test_an_untripped_guard_lets_the_block_end():
    guard, calls = _guard(10 ** 9)
    with guard:
        for _ in range(3):
            guard.check()
    assert guard.tripped == 0 and calls == {"interrupt": 0, "stop": []}


def test_the_hard_stop_ends_a_run_that_ignores_its_interrupt(tmp_path):
    """A real process that swallows every KeyboardInterrupt and never ends by itself: the guard
    (whose fake reader reports "over" from the first check after the run entered its block) ends it
    after its grace checks with the message, exit status 2, and the temporary output file it was
    writing is gone."""
    part = tmp_path / ".out.html.123.part"
    script = textwrap.dedent(f"""
        import threading
        from allocator.cli import common
        common.add_pending({str(part)!r})
        open({str(part)!r}, "w").write("half a file")
        inside = threading.Event()         # the reader trips only once the run is inside its block
        guard = common.MemoryGuard(1000, 0.0, read_memory=lambda: 10_000 if inside.is_set() else 100)
        guard.__enter__()

        def run():                         # the guard's one interrupt can only land in here, in the try
            inside.set()
            while True:
                pass
        while True:                        # a run that never ends and swallows its interrupt
            try:
                run()
            except KeyboardInterrupt:
                pass
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True,
                          timeout=FAILSAFE_S)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.startswith("error: stopped: this run passed 0.0 GiB of memory"), proc.stderr
    assert "Traceback" not in proc.stderr and not part.exists()


def test_the_guard_no_longer_advises_a_larger_pool():
    """A pool's own size costs memory: ``export-site --slots 1073741824`` was told to give a larger --slots."""
    assert "--slots" not in MemoryGuard(1).message()
