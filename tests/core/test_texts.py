"""Explanations given in several places say the same thing, and say what the core does."""
from allocator.memory.block_manager import BlockManager
from allocator.viz import texts
from allocator.viz.lesson import CHALLENGES


def _order(text: str, *phrases: str) -> list[int]:
    return [text.index(p) for p in phrases]


def test_copy_on_write_has_one_order_everywhere():
    """assets/reference_figures.md R8 (copy-on-write's order): drop the writer's reference first, then copy, then re-point."""
    for text in (texts.COPY_ON_WRITE, texts.COPY_ON_WRITE_SHORT):
        positions = _order(text, "drops its own reference", "cop", "points its")
        assert positions == sorted(positions), text
    answer = next(a for q, a in CHALLENGES if "writes into it" in q)
    assert texts.COPY_ON_WRITE in answer


def test_the_stated_failure_of_the_other_order_is_what_the_block_manager_does():
    m = BlockManager(num_blocks=4, block_size=4)
    m.allocate("A", [1, 2, 3])
    m.fork("A", "B")
    res = m.append_token("B", 9, cow_order="decrement_after_copy")
    assert "the copy goes back to the free queue while the writer still uses it" in texts.COPY_ON_WRITE
    assert res.block_id in m.free_queue() and res.block_id in m.block_table("B")
    assert "never freed" in texts.COPY_ON_WRITE
    m.free("A")
    assert m.refcount(res.cow_from) == 1 and m.holders(res.cow_from) == []
