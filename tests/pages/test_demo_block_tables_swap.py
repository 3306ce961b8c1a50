"""Swap of a forked sequence: the log's sentences name exactly the blocks the manager freed, the
ones that stay in use for other sequences (with their refcount after), and on swap-in that the
sequence gets its own copies (the sharing is not restored). Every list is read back from the
sentence and compared with the manager's state.
"""
from __future__ import annotations

import ast
import re

from allocator.viz.block_tables_demo import BlockTablesDemo


def _still_in_use(text: str) -> dict[int, tuple[int, list[str]]]:
    """``{block: (refcount, holders)}`` from "Still in use by other sequences: 11 (refcount 2: A, B), ..."."""
    tail = text.split("Still in use by other sequences: ", 1)[1] if "Still in use" in text else ""
    return {int(b): (int(r), h.split(", ")) for b, r, h in re.findall(r"(\d+) \(refcount (\d+): ([^)]*)\)", tail)}


def _list_after(text: str, words: str) -> list[int]:
    return ast.literal_eval(re.search(re.escape(words) + r" (\[[\d, ]*\])", text).group(1))


def test_swap_out_of_a_fork_frees_nothing_and_names_the_holders():
    demo = BlockTablesDemo()
    m = demo.mgr
    demo.do("fork", "A")
    child = demo.selected
    table = m.block_table(child)
    assert table == m.block_table("A")
    demo.do("swap_out", child)
    text = demo.log[-1]
    assert _list_after(text, "its blocks") == table
    assert _list_after(text, "host blocks") == m.host_table(child)
    assert "No block is freed on the GPU." in text and "released" not in text
    kept = _still_in_use(text)
    assert list(kept) == table
    for b, (rc, holders) in kept.items():
        assert rc == m.refcount(b) >= 1 and holders == [str(h) for h in m.holders(b)]
        assert "A" in holders and child not in holders


def test_swap_out_of_a_private_tail_names_the_freed_block():
    demo = BlockTablesDemo()
    m = demo.mgr
    b = m.block_table("B")
    demo.do("swap_out", "B")
    text = demo.log[-1]
    freed = [x for x in b if m.refcount(x) == 0]
    assert freed and _list_after(text, "Freed on the GPU (refcount 0):") == freed
    assert sorted(_still_in_use(text)) == sorted(x for x in b if m.refcount(x) > 0)


def test_swap_in_of_a_fork_says_the_sharing_is_not_restored():
    demo = BlockTablesDemo()
    m = demo.mgr
    demo.do("fork", "A")
    child = demo.selected
    shared = m.block_table(child)
    demo.do("swap_out", child)
    demo.do("swap_in", child)
    text = demo.log[-1]
    back = m.block_table(child)
    assert _list_after(text, "were free:") == back
    assert not set(back) & set(m.block_table("A"))            # its own copies, as the sentence says
    assert all(m.refcount(x) == 1 for x in back)
    assert f"blocks {shared}, which it shared with A" in text and "not shared again" in text
    assert demo.shared_at_swap_out == {}


def test_swap_in_without_earlier_sharing_says_nothing_about_it():
    demo = BlockTablesDemo()
    demo.do("new_other")
    name = demo.selected
    demo.do("swap_out", name)
    assert demo.error is None and _still_in_use(demo.log[-1]) == {}
    demo.do("swap_in", name)
    assert demo.error is None and "not shared again" not in demo.log[-1]


def _twice(text: str) -> tuple[list[int], list[int]]:
    m = re.search(r"holds the tokens of blocks (\[[\d, ]*\]) twice \(also in (\[[\d, ]*\])\)", text)
    return (ast.literal_eval(m.group(1)), ast.literal_eval(m.group(2))) if m else ([], [])


def test_the_blocks_held_twice_after_swap_in_are_the_managers():
    demo = BlockTablesDemo()
    m = demo.mgr
    demo.do("fork", "A")
    child = demo.selected
    demo.do("swap_out", child)
    demo.do("swap_in", child)
    old, new = _twice(demo.log[-1])
    assert old == m.block_table("A") and new == m.block_table(child)
    assert [m.block_tokens(o) for o in old] == [m.block_tokens(n) for n in new]
    assert all(m.refcount(o) >= 1 for o in old)


def test_a_parent_that_finished_meanwhile_leaves_only_what_others_still_hold_twice():
    demo = BlockTablesDemo()
    m = demo.mgr
    demo.do("fork", "A")
    child = demo.selected
    a_table = m.block_table("A")
    demo.do("swap_out", child)
    demo.do("finish", "A")
    demo.do("swap_in", child)
    assert demo.error is None
    old, new = _twice(demo.log[-1])
    assert old == [b for b in a_table if m.refcount(b) > 0] == m.block_table("B")[:2]   # B still holds the prompt
    assert new == m.block_table(child)[:len(old)]
    assert "shared with A and B before the swap" in demo.log[-1]
