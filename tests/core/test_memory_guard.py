"""MemoryGuard: a tripped guard stops the run even when its interrupt was swallowed on the way
(Python ignores an exception raised in a gc callback or a __del__: hypothesis installs gc callbacks
in the test process, and the engine's re-enabled collector ran one just as the guard tripped)."""
import time

import pytest

from allocator.cli.common import MemoryGuard


def test_a_tripped_guard_raises_even_when_its_interrupt_was_swallowed():
    guard = MemoryGuard(limit=1, interval_s=0.01)      # below any process: trips at once
    swallowed = 0
    with pytest.raises(KeyboardInterrupt):
        with guard:
            deadline = time.monotonic() + 5
            while not swallowed and time.monotonic() < deadline:
                try:
                    time.sleep(0.001)
                except KeyboardInterrupt:                # what a gc callback does to it
                    swallowed += 1
    assert guard.tripped > 1 and swallowed == 1


def test_an_untripped_guard_lets_the_block_end():
    guard = MemoryGuard(limit=1 << 60, interval_s=0.01)
    with guard:
        time.sleep(0.05)
    assert guard.tripped == 0
