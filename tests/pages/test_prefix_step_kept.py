"""The Prefix cache page's step slider keeps the step a student was looking at when the pool or the
block size changes (a new user saw it jump to another step without a word); when the new run has no
picture at that step, it starts at the nearest one and says so."""
from __future__ import annotations

from tests.pages.test_page_prefix_cache import _charts, _page


def _step(at):
    return next(s for s in at.get("select_slider") if s.label == "Step")


def _pool(at):
    return next(s for s in at.get("select_slider") if s.label == "Pool for the map below")


def _blocks(label: str) -> int:
    """The pool slider's value from its label ("65,536 slots = 4,096 blocks (...)"): the blocks."""
    return int(label.split(" = ")[1].split()[0].replace(",", ""))


def test_the_step_looked_at_is_kept_when_the_pool_changes():
    """Pictures are kept every few steps, so the new run starts at its picture nearest the old step;
    a late step that a run with a larger pool (which ends sooner) never reaches is said in words."""
    at = _page({"pc_count": 60, "pc_block": 512, "pc_offset": 3000})
    pool = _pool(at)
    for label in (pool.options[0], pool.options[-1]):        # the smallest pool runs longest
        _pool(at).set_value(_blocks(label)).run()
        options = [int(s) for s in _step(at).options]
        if label == pool.options[0]:
            late = options[-1]
            middle = options[len(options) // 3]
            _step(at).set_value(middle).run()
            assert int(_step(at).value) == middle
    # now on the largest pool: the step kept is the nearest picture to the middle one
    nearest = min(options, key=lambda s: abs(s - middle))
    assert int(_step(at).value) == nearest and nearest != middle
    assert _charts(at)[1]["layout"]["title"]["text"].startswith(f"The pool at step {nearest}:")
    assert not [c.value for c in at.caption if "has no picture near step" in c.value]
    # back on the smallest pool at its last step, then the largest pool, which ends sooner
    _pool(at).set_value(_blocks(pool.options[0])).run()
    _step(at).set_value(late).run()
    _pool(at).set_value(_blocks(pool.options[-1])).run()
    assert not at.exception and int(_step(at).value) == options[-1] < late
    assert [c.value for c in at.caption if "has no picture near step" in c.value] == [
        f"This run has no picture near step {late:,} (it ends sooner); the map starts at its nearest, "
        f"step {options[-1]:,}."]
