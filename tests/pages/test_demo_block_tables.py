"""BlockTablesDemo (the Block tables page's logic, no streamlit) driven directly.

Every action is checked against the BlockManager it holds: the numbers the log prints (block ids,
refcounts, host blocks) are read back from the manager, a refused action changes nothing but the
error message, and the dispatcher rejects an unknown action by name. The page's own AppTest
(tests/pages/test_page_block_tables.py) checks the same lesson as rendered.
"""
from __future__ import annotations

import ast
import copy
import re
import subprocess
import sys

import pytest

from allocator.memory.block_pool import BLOCK_CACHED, BLOCK_FREE
from allocator.memory.block_manager import BlockManager
from allocator.common.errors import FieldError, OutOfBlocksError
from allocator.viz.block_tables_demo import (ACTIONS, BLOCK_SIZE, NEW_QUESTIONS, NUM_BLOCKS, NUM_HOST_BLOCKS,
                                             SYSTEM, BlockTablesDemo, Notice, refusal_text, words_of)
from allocator.viz.block_tables_figure import block_table_figure
from tests.conftest import ROOT


def snapshot(demo: BlockTablesDemo) -> dict:
    """Everything an action could change: the pool, the tables, the counters and the demo's own state."""
    m = demo.mgr
    return {
        "seqs": {s: (m.is_swapped(s), m.block_table(s), m.host_table(s), m.token_ids(s)) for s in m.sequences()},
        "refcounts": [m.refcount(b) for b in range(m.num_blocks)],
        "states": [m.block_state(b) for b in range(m.num_blocks)],
        "contents": [m.block_tokens(b) for b in range(m.num_blocks)],
        "host": [m.host_block_tokens(h) for h in range(m.num_host_blocks)],
        "free_queue": m.free_queue(),
        "counters": (m.cow_copies, m.cache_hit_blocks, m.swapped_out_blocks, m.swapped_in_blocks, m.evictions),
        "meta": copy.deepcopy(demo.meta), "log": list(demo.log), "highlight": dict(demo.highlight),
        "selected": demo.selected, "settings": (demo.naive_hashing, demo.salt),
        "next_request": demo._next_request, "colours": demo._colours,
    }


def assert_consistent(demo: BlockTablesDemo) -> None:
    """Refcounts equal the number of running block tables naming each block; the manager agrees."""
    m = demo.mgr
    m.check_invariants()
    counts: dict[int, int] = {}
    for s in demo.running():
        for b in m.block_table(s):
            counts[b] = counts.get(b, 0) + 1
    assert [m.refcount(b) for b in range(NUM_BLOCKS)] == [counts.get(b, 0) for b in range(NUM_BLOCKS)]
    assert m.num_free_blocks + m.num_cached_free_blocks + m.num_in_use_blocks == NUM_BLOCKS
    assert set(demo.meta) >= set(m.sequences())


def lists_in(text: str) -> list[list[int]]:
    """Every ``[1, 2, 3]`` list of ints in a log line, in order."""
    return [ast.literal_eval(x) for x in re.findall(r"\[[\d, ]*\]", text)]


def refused(demo: BlockTablesDemo, action: str, seq_id=None) -> Notice:
    """Run an action that must be refused; assert it changed nothing and return its notice."""
    before = snapshot(demo)
    demo.do(action, before["selected"] if seq_id is None else seq_id)
    after = snapshot(demo)
    if seq_id is not None:
        after["selected"] = before["selected"]   # the caller's choice is recorded as the selection
    assert after == before, f"refused {action} changed the demo"
    assert demo.error is not None and demo.error.kind == "error", demo.error
    return demo.error


def _require_field_errors() -> None:
    """Skip unless BlockManager already raises FieldError (OutOfBlocksError for a full pool).

    allocator/memory/block_manager.py is being converted to FieldError/OutOfBlocksError; until then it
    raises plain ValueError and the demo cannot word these refusals (it never reads message text).
    """
    mgr = BlockManager(1, 2, 0)
    mgr.allocate("x", [0, 1])
    for op, wanted in ((lambda: mgr.append_token("x", 2), OutOfBlocksError),     # GPU pool full
                       (lambda: mgr.swap_out("x"), OutOfBlocksError),            # host pool full
                       (lambda: mgr.swap_in("x"), FieldError)):                  # not swapped out
        try:
            op()
        except ValueError as exc:
            if not issubclass(type(exc), wanted):
                pytest.skip(f"allocator.memory.block_manager raises {type(exc).__name__}, not {wanted.__name__} "
                            f"(its FieldError conversion has not landed): the demo words refusals from "
                            f"the exception's type and .field, never from its text")
        else:
            pytest.fail("BlockManager accepted an operation it must refuse")


# ---------------------------------------------------------------------------------- start and reset

def test_start_shares_the_system_prompt_between_a_and_b():
    demo = BlockTablesDemo()
    m = demo.mgr
    a, b = m.block_table("A"), m.block_table("B")
    assert len(a) == 4 and len(b) == 3 and a[:2] == b[:2] and a[2] != b[2]
    assert a != sorted(a)                                     # the free queue starts shuffled
    assert [m.refcount(x) for x in a] == [2, 2, 1, 1]
    assert m.token_ids("A")[:len(SYSTEM)] == m.token_ids("B")[:len(SYSTEM)]
    assert demo.selected == "A" and demo.error is None
    assert demo.log[0] == (f"New pool: {NUM_BLOCKS} blocks of {BLOCK_SIZE} slots, {NUM_HOST_BLOCKS} host blocks; "
                           "block hash chained over every earlier token; no salt.")
    # each arrival line names the table and the blocks found by hash, as the manager holds them
    assert lists_in(demo.log[1])[0] == a and "None of its full blocks was in the cache." in demo.log[1]
    assert lists_in(demo.log[2]) == [b, [0, 1], b[:2]]
    assert "(8 leading tokens served from cache)" in demo.log[2]
    assert demo.highlight == {b[0]: "from cache", b[1]: "from cache", b[2]: "new"}
    assert m.cache_hit_blocks == 2
    assert demo.colours() == {"A": demo.colour("A"), "B": demo.colour("B")} and demo.colour("A") != demo.colour("B")
    assert_consistent(demo)


def test_reset_returns_to_the_starting_picture_and_keeps_the_settings():
    fresh = snapshot(BlockTablesDemo(salt=True))
    demo = BlockTablesDemo(salt=True)
    for action in ("fork", "write_shared", "new_same", "append", "swap_out"):
        demo.do(action)
    assert snapshot(demo) != fresh
    demo.do("reset")
    assert snapshot(demo) == fresh and demo.error is None


# ---------------------------------------------------------------------------------- append

def test_append_writes_private_slots_then_opens_a_block_then_records_its_hash():
    demo = BlockTablesDemo()
    m = demo.mgr
    last = m.block_table("A")[-1]                           # A: 13 tokens, one in its last block
    demo.do("append", "A")
    assert demo.error is None and len(m.token_ids("A")) == 14
    assert demo.log[-1] == (f"**A** writes \u201cBlocks\u201d into slot 1 of block {last} "
                            "(refcount 1: nobody else sees it, so no copy).")
    assert demo.highlight == {last: "written"} and demo.meta["A"]["next"] == 1
    demo.do("append", "A")
    demo.do("append", "A")                                  # 16 tokens: the block is full
    assert demo.log[-1] == (f"Block {last} is now full, so its hash is recorded: a later request with the "
                            "same tokens before and in it can find it.")
    assert m.block_hash_of(last) is not None
    demo.do("append", "A")                                  # token 16 opens a fifth block
    new = m.block_table("A")[-1]
    assert len(m.block_table("A")) == 5 and new != last
    assert demo.log[-1] == (f"**A**'s last block was full, so \u201cdemand\u201d opens block {new} (slot 0); its "
                            f"other {BLOCK_SIZE - 1} slots are allocated but empty.")
    assert demo.highlight == {new: "new"}
    assert words_of(m.block_tokens(last)) == "? Blocks fill on" and words_of(m.block_tokens(new)) == "demand"
    assert_consistent(demo)


# ---------------------------------------------------------------------------------- fork and copy-on-write

def test_fork_shares_every_block_and_nothing_is_copied():
    demo = BlockTablesDemo()
    m = demo.mgr
    a = m.block_table("A")
    demo.do("fork", "A")
    assert demo.error is None and demo.selected == "A.1"
    assert m.block_table("A.1") == a and [m.refcount(x) for x in a] == [3, 3, 2, 2]
    assert lists_in(demo.log[-1]) == [a] and demo.log[-1].startswith("**Fork**: A.1 starts as a second sample of A.")
    assert demo.highlight == {x: "shared" for x in a}
    assert m.cow_copies == 0
    demo.do("fork", "A")                                    # a second child gets the next name
    assert demo.selected == "A.2" and m.block_table("A.2") == a
    assert_consistent(demo)


def test_write_shared_copies_on_write_and_the_log_matches_the_refcounts():
    demo = BlockTablesDemo()
    m = demo.mgr
    demo.do("fork", "A")
    shared = m.block_table("A")[-1]
    demo.do("write_shared")                                 # A.1 is selected: it writes
    assert demo.error is None and demo.selected == "A.1"
    copy_block = m.block_table("A.1")[-1]
    assert copy_block != shared and m.block_table("A.1")[:3] == m.block_table("A")[:3]
    text = demo.log[-1]
    nums = re.match(r"\*\*A\.1\*\* writes \u201c(\w+)\u201d into its last block (\d+), which is shared "
                    r"\(refcount (\d+)\)\. Copy-on-write: A\.1 drops its reference to block (\d+) "
                    r"\(refcount now (\d+)\), copies (\d+) tokens? into free block (\d+), points its table "
                    r"there, then writes \u201c\w+\u201d into slot (\d+)\.", text)
    assert nums, text
    _, cow_from, rc_before, dropped, rc_now, copied, into, slot = nums.groups()
    assert int(cow_from) == int(dropped) == shared
    assert int(rc_now) == m.refcount(shared) == 1 and int(rc_before) == 2
    assert int(into) == copy_block and m.refcount(copy_block) == 1
    assert int(copied) == len(m.block_tokens(copy_block)) - 1 == 1 and int(slot) == 1
    assert m.block_tokens(copy_block)[:1] == m.block_tokens(shared)[:1]
    assert demo.highlight == {copy_block: f"copy of {shared}", shared: "copied from"}
    assert m.cow_copies == 1
    assert_consistent(demo)


def test_write_shared_prefers_the_chosen_sequence_else_the_last_candidate():
    demo = BlockTablesDemo()
    demo.do("fork", "A")
    demo.do("write_shared", "B")                           # B's last block is private: not a candidate
    assert demo.selected == "A.1" and demo.mgr.cow_copies == 1


def test_write_shared_without_a_shared_last_block_explains_and_changes_nothing():
    demo = BlockTablesDemo()
    before = snapshot(demo)
    demo.do("write_shared")
    assert snapshot(demo) == before
    assert demo.error == Notice("info", "No sequence is about to write into a shared block: press **Fork** "
                                        "first (a fork shares the partly filled last block).")


# ---------------------------------------------------------------------------------- finish and the cache

def test_finish_lists_blocks_still_used_cached_and_free_as_the_manager_has_them():
    demo = BlockTablesDemo()
    m = demo.mgr
    a = m.block_table("A")
    demo.do("fork", "A")
    demo.do("write_shared", "A.1")
    demo.do("finish", "A")
    assert "A" not in m.sequences() and demo.selected == m.sequences()[0]
    text = demo.log[-1]
    assert text.startswith(f"**A** finishes and drops one reference to each of {a}.")
    assert f"Still used by others: {a[:3]}." in text and f"Back to plain free: {[a[3]]}." in text
    assert m.block_state(a[3]) == BLOCK_FREE and [m.refcount(x) for x in a] == [2, 2, 1, 0]
    assert demo.highlight == {x: "released" for x in a}
    a1 = m.block_table("A.1")
    demo.do("finish", "A.1")
    text = demo.log[-1]
    assert f"Refcount 0 but full, so still findable by hash until reused: {[a1[2]]}." in text
    assert f"Back to plain free: {[a1[3]]}." in text and f"Still used by others: {a1[:2]}." in text
    assert m.block_state(a1[2]) == BLOCK_CACHED and m.num_cached_free_blocks == 1
    assert_consistent(demo)


def test_finish_while_swapped_out_frees_the_host_blocks():
    demo = BlockTablesDemo()
    demo.do("swap_out", "B")
    demo.do("finish", "B")
    assert demo.log[-1] == "**B** finishes while swapped out: its 3 host blocks are free again."
    assert demo.mgr.num_host_free_blocks == NUM_HOST_BLOCKS
    assert_consistent(demo)


def test_new_same_finds_the_system_prompt_blocks_by_hash_and_cycles_the_questions():
    demo = BlockTablesDemo()
    m = demo.mgr
    a = m.block_table("A")
    demo.do("new_same")
    assert demo.error is None and demo.selected == "C"
    assert m.token_ids("C") == m.token_ids("A")[:len(SYSTEM)] + m.token_ids("C")[len(SYSTEM):]
    assert words_of(m.token_ids("C")[len(SYSTEM):]) == " ".join(NEW_QUESTIONS[0])
    c = m.block_table("C")
    assert c[:2] == a[:2] and [m.refcount(x) for x in a[:2]] == [3, 3]
    assert lists_in(demo.log[-1]) == [c, [0, 1], a[:2]]
    assert demo.highlight == {c[0]: "from cache", c[1]: "from cache", c[2]: "new", c[3]: "new"}
    assert m.cache_hit_blocks == 4
    demo.do("new_same")
    assert words_of(m.token_ids("D")[len(SYSTEM):]) == " ".join(NEW_QUESTIONS[1])
    assert_consistent(demo)


def test_new_other_is_not_confused_with_a_under_chained_hashes():
    demo = BlockTablesDemo()
    m = demo.mgr
    demo.do("new_other")
    assert demo.error is None and not m.wrong_shares()
    assert set(m.block_table("C")).isdisjoint(m.block_table("A"))
    assert demo.log[-1] == ("C's third block holds the same four words as A's third block, but its hash also "
                            "covers the eight words before it, which differ, so it is not confused with A's.")
    assert "None of its full blocks was in the cache." in demo.log[-2]


def test_naive_hashing_shares_a_block_computed_after_different_words():
    demo = BlockTablesDemo()
    demo.set_naive_hashing(True)
    m = demo.mgr
    assert demo.naive_hashing and not m.chain_hashes and len(demo.log) == 3      # restarted
    assert "block hash each block's own tokens only (flawed)" in demo.log[0]
    demo.do("new_other")
    assert m.wrong_shares() == [("C", 2, m.block_table("A")[2])]
    assert m.block_table("C")[2] == m.block_table("A")[2] and m.refcount(m.block_table("A")[2]) == 2
    assert "A reused block is not at the start of the prompt: look at the warning above." in demo.log[-1]
    assert not demo.log[-1].startswith("C's third block")                        # no "not confused" line
    demo.set_naive_hashing(False)
    assert m is not demo.mgr and demo.mgr.chain_hashes and not demo.mgr.wrong_shares()


def test_salt_keeps_tenants_apart_and_the_tenant_chooses_who_shares():
    demo = BlockTablesDemo()
    demo.set_salt(True)
    m = demo.mgr
    assert set(m.block_table("A")).isdisjoint(m.block_table("B")) and m.cache_hit_blocks == 0
    assert "one salt per tenant" in demo.log[0] and demo.log[1].startswith("**A (tenant-1)** arrives")
    demo.do("new_same", tenant="tenant-2")
    assert demo.meta["C"]["tenant"] == "tenant-2" and m.block_table("C")[:2] == m.block_table("B")[:2]
    demo.do("new_same")                                      # default tenant-1: shares with A
    assert m.block_table("D")[:2] == m.block_table("A")[:2]
    demo.set_salt(False)
    demo.do("new_same", tenant="tenant-2")                   # without the salt every request is tenant-1
    assert demo.meta["C"]["tenant"] == "tenant-1"
    assert_consistent(demo)


# ---------------------------------------------------------------------------------- swap

def test_swap_out_and_in_move_blocks_as_the_log_says():
    demo = BlockTablesDemo()
    m = demo.mgr
    b = m.block_table("B")
    demo.do("swap_out", "B")
    host = m.host_table("B")
    freed = [x for x in b if m.refcount(x) == 0]
    assert m.is_swapped("B") and lists_in(demo.log[-1]) == [b, host, freed]
    assert f"({m.num_host_free_blocks} of {NUM_HOST_BLOCKS} host blocks still free)" in demo.log[-1]
    assert m.num_host_free_blocks == NUM_HOST_BLOCKS - 3
    assert demo.highlight == {x: "to host" for x in b}
    assert [m.refcount(x) for x in b] == [1, 1, 0]            # A still holds the shared prompt
    demo.do("swap_in", "B")
    back = m.block_table("B")
    assert not m.is_swapped("B") and lists_in(demo.log[-1])[:3] == [host, back, b[:2]]   # + the prompt it shared
    assert demo.highlight == {x: "from host" for x in back}
    assert m.swapped_out_blocks == m.swapped_in_blocks == 3
    assert m.token_ids("B")[:len(SYSTEM)] == m.token_ids("A")[:len(SYSTEM)]
    assert_consistent(demo)


# ---------------------------------------------------------------------------------- refusals

def _fill_the_gpu_pool(demo: BlockTablesDemo) -> int:
    """Add same-prompt requests until one is refused; returns how many were admitted."""
    admitted = 0
    while True:
        demo.do("new_same")
        if demo.error:
            return admitted
        admitted += 1
        assert admitted < NUM_BLOCKS, "the pool never filled"


def test_refusals_change_nothing_but_the_message():
    demo = BlockTablesDemo()
    assert _fill_the_gpu_pool(demo) == 8
    question = demo._next_request
    refused(demo, "new_same")                              # out of GPU blocks
    assert demo._next_request == question                   # a refused request asks the same question again
    refused(demo, "fork", "nobody")                         # no such sequence: choose one first
    for seq in ("A", "B"):
        demo.do("swap_out", seq)
        assert demo.error is None
    refused(demo, "swap_out", "C")                          # host pool full: C holds 4 blocks, 1 host block is free
    refused(demo, "swap_in", "A")                           # 3 GPU blocks came free, A needs 4
    refused(demo, "append", "A")                            # A is swapped out
    refused(demo, "swap_in", "C")                           # C is not swapped out
    demo.do("swap_in", "B")
    assert demo.error is None                               # a success clears the message
    assert demo.mgr.num_free_blocks == 0
    demo.do("fork", "B")                                    # a fork needs no block...
    assert demo.error is None and demo.selected == "B.1"
    refused(demo, "write_shared")                           # ...but its copy-on-write does, and none is free
    assert_consistent(demo)


def test_a_sequence_action_with_no_sequence_left_asks_for_one():
    demo = BlockTablesDemo()
    demo.do("finish", "A")
    demo.do("finish", "B")
    assert demo.selected is None and demo.mgr.sequences() == []
    for action in ("append", "fork", "finish", "swap_out", "swap_in"):
        assert refused(demo, action) == Notice(
            "error", "Choose a sequence first (none is left: add a new request).")
    demo.do("write_shared")
    assert demo.error.kind == "info"
    demo.do("new_same")
    assert demo.error is None and demo.selected == "C"


def test_the_friendly_texts_for_a_full_gpu_pool_and_a_full_host_pool():
    _require_field_errors()
    demo = BlockTablesDemo()
    _fill_the_gpu_pool(demo)
    assert demo.error == Notice("error", "The GPU pool is out of blocks: 13 tokens need 1 new blocks (+3 from "
                                         "cache) but only 0 of 16 can be taken. Finish or swap out a sequence first.")
    demo.do("swap_out", "A")
    demo.do("swap_out", "B")
    demo.do("swap_out", "C")
    assert demo.error == Notice("error", "The host pool is full: sequence 'C' needs 4 host blocks but only 1 "
                                         "of 8 are free. Swap a sequence in or finish one.")
    demo.do("swap_in", "A")
    assert demo.error == Notice("error", "The GPU pool is out of blocks: sequence 'A' needs 4 GPU blocks to "
                                         "swap in but only 3 can be taken. Finish or swap out a sequence first.")


def test_sequence_refusals_read_without_the_field_name():
    _require_field_errors()
    demo = BlockTablesDemo()
    demo.do("swap_in", "A")
    assert demo.error == Notice("error", "Sequence 'A' is not swapped out.")
    demo.do("swap_out", "A")
    demo.do("fork", "A")
    assert demo.error == Notice("error", "Sequence 'A' is swapped out to host memory; swap it in first.")


def test_refusal_text_routes_by_type_and_field_never_by_the_words():
    gpu = OutOfBlocksError("num_blocks", "sequence 'A' needs a new block for token 8 and "
                                         "none of 16 is free", needed=1, available=0)
    assert str(gpu) == "num_blocks: out of blocks: sequence 'A' needs a new block for token 8 and none of 16 is free"
    assert refusal_text(gpu) == ("The GPU pool is out of blocks: sequence 'A' needs a new block for token 8 "
                                 "and none of 16 is free. Finish or swap out a sequence first.")
    host = OutOfBlocksError("num_host_blocks", "sequence 'C' needs 4 host blocks but only "
                                               "1 of 8 are free", needed=4, available=1)
    assert refusal_text(host) == ("The host pool is full: sequence 'C' needs 4 host blocks but only 1 of 8 "
                                  "are free. Swap a sequence in or finish one.")
    # other words, same type and field: still the GPU text; same words, another type: not
    reworded = OutOfBlocksError("num_blocks", "3 more needed", needed=3, available=0)
    assert refusal_text(reworded) == "The GPU pool is out of blocks: 3 more needed. Finish or swap out a sequence first."
    lookalike = FieldError("block_size", ": out of blocks: not really")
    assert refusal_text(lookalike) == "Block_size: out of blocks: not really."
    assert refusal_text(ValueError("num_blocks: out of blocks: x")) == "Num_blocks: out of blocks: x."
    assert refusal_text(FieldError("child_id", ": sequence 'A.1' already exists")) == "Sequence 'A.1' already exists."
    assert refusal_text(FieldError("seq_id", "")) == "That operation was refused."


def test_an_unknown_action_is_rejected_by_name_and_changes_nothing():
    demo = BlockTablesDemo()
    before = snapshot(demo)
    with pytest.raises(FieldError, match=r"^action = 'jump' is not an action of the demo \(one of: append, ") as info:
        demo.do("jump", "A")
    assert info.value.field == "action"
    assert snapshot(demo) == before and demo.error is None
    assert set(ACTIONS) == set(BlockTablesDemo._HANDLERS)


# ---------------------------------------------------------------------------------- the figure and layering

def test_the_figure_labels_every_pool_block_with_its_refcount():
    demo = BlockTablesDemo()
    demo.do("fork", "A")
    demo.do("swap_out", "B")
    m = demo.mgr
    fig = block_table_figure(m, demo.meta, demo.highlight, demo.colours(), demo.salt)
    labels = [t for tr in fig.data if tr.mode == "text" for t in tr.text]
    for b in range(NUM_BLOCKS):
        assert f"<b>{b}</b> / {m.refcount(b)}" in labels
    assert f"h{m.host_table('B')[0]}" in labels
    assert fig.layout.height == 330 + 95 * len(m.sequences())
    hovers = " ".join(str(tr.text) for tr in fig.data if tr.mode == "lines")
    assert "A.1, logical block 0 → physical block" in hovers and "swapped out: it must come back" in hovers


def test_demo_and_figure_import_without_streamlit():
    code = ("import sys; import allocator.viz.block_tables_demo, allocator.viz.block_tables_figure; "
            "assert 'streamlit' not in sys.modules, 'streamlit was imported'")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


@pytest.mark.parametrize("selected", ["A", "B", "A.1"])
def test_the_selected_sequences_arrows_cross_no_other_row(selected):
    """Issue 23 item 18: A's arrows ran through B's row (its labels) at 1366 px. The selected
    sequence is drawn last, next to the pool: every arrow starts below every other row."""
    demo = BlockTablesDemo()
    demo.do("fork", "A")
    m = demo.mgr
    fig = block_table_figure(m, demo.meta, demo.highlight, demo.colours(), demo.salt, selected=selected)
    arrows = [a for a in fig.layout.annotations if a.showarrow]
    rows = {a.text.split("<b>")[1].split("</b>")[0]: a.y for a in fig.layout.annotations
            if not a.showarrow and "tokens" in (a.text or "")}
    assert arrows and set(rows) == set(m.sequences())
    assert min(rows, key=rows.get) == selected                 # the lowest row
    others = [y for s, y in rows.items() if s != selected]
    assert all(a.ay < min(others) for a in arrows)


def test_the_vllm_note_quotes_numbers_the_manager_computes():
    """The page's note on vLLM (issue 41 item 4): a fully cached prompt of two blocks gets one back,
    of one block none; the recomputed block's hash names both copies; both classroom departures named."""
    from allocator.viz.block_tables_demo import last_token_hits, vllm_note
    assert last_token_hits(16) == {"one_block": (16, 0), "two_blocks": (32, 16), "copies": 2}
    ex = last_token_hits()
    assert ex == {"one_block": (BLOCK_SIZE, 0), "two_blocks": (2 * BLOCK_SIZE, BLOCK_SIZE), "copies": 2}
    note = vllm_note()
    assert f"a fully cached prompt of {2 * BLOCK_SIZE} words gets {BLOCK_SIZE} back" in note
    assert f"one of {BLOCK_SIZE} words gets 0" in note
    assert "first generated token when it admits" in note and "never caches generated tokens" in note
    assert "get_computed_blocks" in note and "BlockHashToBlockMap" in note
