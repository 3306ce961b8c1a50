"""The standalone block manager: refcounts, copy-on-write order, chained block hashes, salts and
tagged extra keys, full-block-only caching, LRU reuse of cached blocks, swap, and the
free + cached + in-use == total invariant on random workloads (hypothesis).

Figures: assets/reference_figures.md R3 for 20 and 23 tokens sharing an 8-token prefix in blocks
of 4; R8 for the chained hash and the copy-on-write order.
"""
from __future__ import annotations

import copy
import hashlib
import json
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from allocator.accounting.sharing import prefix_sharing
from allocator.memory.block_pool import BLOCK_CACHED, BLOCK_FREE, BLOCK_IN_USE
from allocator.memory.block_manager import BlockManager
from allocator.memory.block_hash import block_hash, extra_keys, prompt_block_hashes

SYSTEM = [900, 901, 902, 903, 904, 905, 906, 907]   # an 8-token system prompt (two blocks of 4)


def pointing(m: BlockManager) -> Counter:
    """How many running block tables point at each block, from the public API only."""
    c = Counter()
    for sid in m.sequences():
        c.update(m.block_table(sid))
    return c


def assert_consistent(m: BlockManager) -> None:
    """Refcount == number of block tables pointing at the block, and the three-way invariant."""
    m.check_invariants()
    c = pointing(m)
    for b in range(m.num_blocks):
        assert m.refcount(b) == c[b], f"block {b}"
    assert m.num_free_blocks + m.num_cached_free_blocks + m.num_in_use_blocks == m.num_blocks
    states = Counter(m.block_state(b) for b in range(m.num_blocks))
    assert states[BLOCK_FREE] == m.num_free_blocks
    assert states[BLOCK_CACHED] == m.num_cached_free_blocks
    assert states[BLOCK_IN_USE] == m.num_in_use_blocks


# ---------------------------------------------------------------------------- refcounts

def test_refcounts_follow_every_operation():
    m = BlockManager(num_blocks=16, block_size=4, num_host_blocks=8)
    steps = [
        lambda: m.allocate("A", SYSTEM + [1, 2, 3]),          # 3 blocks, last one partial
        lambda: m.allocate("B", SYSTEM + [7, 7]),             # reuses A's two system blocks
        lambda: m.fork("A", "A1"),                            # shares all three of A's blocks
        lambda: m.append_token("A1", 4),                      # copy-on-write of the partial block
        lambda: m.append_token("A", 5),                       # A is alone now: writes in place
        lambda: m.append_token("A", 6),                       # A's block full: a new block
        lambda: m.swap_out("B"),
        lambda: m.swap_in("B"),
        lambda: m.free("A"),
        lambda: m.preempt_recompute("A1"),
        lambda: m.free("B"),
    ]
    for step in steps:
        step()
        assert_consistent(m)
    assert m.num_in_use_blocks == 0 and m.sequences() == []


def test_fork_shares_then_copy_on_write_splits_the_last_block():
    m = BlockManager(num_blocks=8, block_size=4)
    m.allocate("A", [1, 2, 3, 4, 5, 6])
    table = m.block_table("A")
    assert m.fork("A", "B") == table
    assert [m.refcount(b) for b in table] == [2, 2]
    res = m.append_token("B", 70)
    assert res.cow_from == table[1] and res.block_id not in table and res.slot == 2
    assert m.block_table("B") == [table[0], res.block_id]
    assert m.refcount(table[0]) == 2 and m.refcount(table[1]) == 1 and m.refcount(res.block_id) == 1
    assert m.block_tokens(res.block_id) == [5, 6, 70] and m.block_tokens(table[1]) == [5, 6]
    # the last holder writes in place: no second copy
    res_a = m.append_token("A", 80)
    assert res_a.cow_from is None and res_a.block_id == table[1]
    assert m.token_ids("A") == [1, 2, 3, 4, 5, 6, 80] and m.token_ids("B") == [1, 2, 3, 4, 5, 6, 70]
    assert m.cow_copies == 1
    assert_consistent(m)


# ---------------------------------------------------------------------------- copy-on-write order

def test_safe_cow_order_frees_everything_at_the_end():
    m = BlockManager(num_blocks=6, block_size=4)
    m.allocate("A", [1, 2, 3])
    m.fork("A", "B")
    m.append_token("B", 9, cow_order="safe")
    assert_consistent(m)
    m.free("A")
    m.free("B")
    assert_consistent(m)
    # B's copy filled up (1, 2, 3, 9) and stays cached; everything else is plain free
    assert m.num_in_use_blocks == 0 and m.num_free_blocks == 5 and m.num_cached_free_blocks == 1


def test_decrementing_after_the_copy_breaks_the_refcounts():
    """R8 (copy-on-write order): re-point the table, then release -> the wrong block is released.

    The shared original keeps a reference nobody holds (a leak), and the copy B is writing into
    goes back to the free queue, so the next request is handed B's block while B still uses it.
    """
    m = BlockManager(num_blocks=6, block_size=4)
    m.allocate("A", [1, 2, 3])
    shared = m.block_table("A")[0]
    m.fork("A", "B")
    res = m.append_token("B", 9, cow_order="decrement_after_copy")
    copy_b = res.block_id
    # The shared block still counts B although B no longer points at it; the copy counts nobody.
    assert m.refcount(shared) == 2 and m.holders(shared) == ["A"]
    assert m.refcount(copy_b) == 0 and m.holders(copy_b) == ["B"]
    assert copy_b in m.free_queue() and m.block_tokens(copy_b) == [1, 2, 3, 9]
    with pytest.raises(AssertionError, match="refcount"):
        m.check_invariants()
    # The free queue hands B's block to the next request: two sequences now write into one block.
    queue = m.free_queue()
    m.allocate("C", list(range(100, 100 + 4 * (queue.index(copy_b) + 1))))
    assert copy_b in m.block_table("C") and copy_b in m.block_table("B")
    assert m.block_tokens(copy_b) != [1, 2, 3, 9]          # B's tokens were overwritten
    # A finishes, and the shared block's refcount never reaches zero although nobody holds it.
    m.free("A")
    assert m.refcount(shared) == 1 and m.holders(shared) == [] and m.block_state(shared) == "in use"
    # The safe order on the same steps leaves nothing behind.
    safe = BlockManager(num_blocks=6, block_size=4)
    safe.allocate("A", [1, 2, 3])
    safe.fork("A", "B")
    safe.append_token("B", 9)
    safe.check_invariants()
    safe.free("A")
    safe.free("B")
    assert safe.num_in_use_blocks == 0
    safe.check_invariants()


def test_cow_refused_when_no_block_is_free_changes_nothing():
    m = BlockManager(num_blocks=1, block_size=4)
    m.allocate("A", [1, 2])
    m.fork("A", "B")
    before = copy.deepcopy(m.__dict__)
    with pytest.raises(ValueError, match="^num_blocks"):
        m.append_token("B", 3)
    assert m.__dict__ == before
    assert_consistent(m)


# ---------------------------------------------------------------------------- block hashes

def test_block_hash_is_stable_sha256_over_a_tagged_encoding():
    h = block_hash(None, [1, 2, 3, 4], (("salt", "t"),))
    text = json.dumps(["kv-block", None, [1, 2, 3, 4], [["salt", "t"]]], separators=(",", ":"))
    assert h == hashlib.sha256(text.encode()).digest()
    assert h.hex() == "af97fea9d9c2dc0ac2a072ad055744adac2cbed9332fb86d77e7c71ed4513f3e"
    # tags keep kinds apart: a LoRA named like a salt is a different key
    assert block_hash(None, [1, 2, 3, 4], (("lora", "t"),)) != h
    assert block_hash(None, [1, 2, 3, 4]) != h
    # chaining: same tokens under a different parent hash differ
    assert block_hash(b"\x00" * 32, [1, 2, 3, 4]) != block_hash(b"\x01" * 32, [1, 2, 3, 4])
    with pytest.raises(ValueError, match="^extra"):
        block_hash(None, [1], (("tenant", "x"),))
    with pytest.raises(ValueError, match=r"^token_ids\[1\]"):
        block_hash(None, [1, -2])


def test_salt_goes_into_the_first_block_and_lora_into_every_block():
    assert extra_keys(0, "s", "l") == (("salt", "s"), ("lora", "l"))
    assert extra_keys(3, "s", "l") == (("lora", "l"),)
    assert extra_keys(2) == ()
    # the salt still separates later blocks through the chain
    a = prompt_block_hashes(list(range(12)), 4, cache_salt="x")
    b = prompt_block_hashes(list(range(12)), 4, cache_salt="y")
    assert all(x != y for x, y in zip(a, b)) and len(a) == 3


def test_chained_hash_shares_only_when_every_earlier_token_matches():
    m = BlockManager(num_blocks=32, block_size=4)
    base = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]
    m.allocate("A", base)
    # identical first two blocks, third differs -> two blocks shared
    r = m.allocate("B", base[:8] + [99, 10, 11, 12, 13])
    assert r.reused == (0, 1) and r.num_cached_tokens == 8
    # first block differs, second and third identical in content -> nothing shared
    r = m.allocate("C", [0, 2, 3, 4] + base[4:])
    assert r.reused == () and r.num_cached_tokens == 0
    # one token differs in the very first block -> nothing
    assert m.num_cached_tokens([1, 2, 3, 5] + base[4:]) == 0
    assert m.num_cached_tokens(base) == 12
    assert m.wrong_shares() == []
    assert_consistent(m)


def test_hashing_a_block_alone_shares_a_block_computed_after_other_tokens():
    """R8 (chained hashes): two prompts whose third block is identical but earlier ones differ."""
    third = [50, 51, 52, 53]
    p = [1, 2, 3, 4, 5, 6, 7, 8] + third + [60]     # (a 13th token: the prompt's last token is
    q = [9, 9, 9, 9, 8, 8, 8, 8] + third + [61]     # always computed, so block 2 can be a hit)
    for chained in (True, False):
        m = BlockManager(num_blocks=16, block_size=4, chain_hashes=chained)
        m.allocate("P", p)
        r = m.allocate("Q", q)
        if chained:
            assert r.reused == () and m.wrong_shares() == []
        else:
            # the own-tokens-only hash matches block 2 although everything before it differs
            assert r.reused == (2,) and r.num_cached_tokens == 0
            shared = m.block_table("P")[2]
            assert m.block_table("Q")[2] == shared and m.refcount(shared) == 2
            assert m.wrong_shares() == [("Q", 2, shared)]
        assert_consistent(m)


def test_salt_keeps_tenants_apart_and_lora_named_like_a_salt_does_not_match():
    m = BlockManager(num_blocks=32, block_size=4)
    m.allocate("A", SYSTEM + [1], cache_salt="tenant-a")
    assert m.num_cached_tokens(SYSTEM + [2], cache_salt="tenant-a") == 8
    assert m.num_cached_tokens(SYSTEM + [2], cache_salt="tenant-b") == 0
    assert m.num_cached_tokens(SYSTEM + [2]) == 0
    assert m.num_cached_tokens(SYSTEM + [2], lora="tenant-a") == 0
    r = m.allocate("B", SYSTEM + [2], cache_salt="tenant-b")
    assert r.reused == () and set(m.block_table("A")).isdisjoint(m.block_table("B"))
    m.allocate("L", SYSTEM + [3], lora="tenant-a")
    r = m.allocate("L2", SYSTEM + [4], lora="tenant-a")
    assert r.reused == (0, 1)
    assert m.wrong_shares() == []
    assert_consistent(m)


def test_unchained_hash_also_leaks_across_tenants():
    """Without the chain, the salt in block 0 no longer reaches later blocks: a privacy bug too."""
    m = BlockManager(num_blocks=16, block_size=4, chain_hashes=False)
    m.allocate("A", SYSTEM + [1], cache_salt="tenant-a")
    r = m.allocate("B", SYSTEM + [2], cache_salt="tenant-b")
    assert r.reused == (1,)
    assert [(s, i) for s, i, _ in m.wrong_shares()] == [("B", 1)]


# ---------------------------------------------------------------------------- full blocks only

@pytest.mark.parametrize("block_size, prompt, cached, recompute", [(16, 100, 96, 4), (528, 552, 528, 24)])
def test_only_full_blocks_are_cached(block_size, prompt, cached, recompute):
    tokens = list(range(prompt))
    m = BlockManager(num_blocks=8, block_size=block_size)
    m.allocate("first", tokens)
    assert m.num_cached_blocks == prompt // block_size
    m.free("first")
    assert m.num_cached_tokens(tokens) == cached
    r = m.allocate("again", tokens)
    assert r.num_cached_tokens == cached and len(tokens) - r.num_cached_tokens == recompute
    assert len(r.new_blocks) == 1          # only the partial tail is computed again
    assert_consistent(m)


def test_a_block_is_cached_once_it_fills_during_decode():
    m = BlockManager(num_blocks=8, block_size=4)
    m.allocate("A", [1, 2, 3])
    assert m.num_cached_blocks == 0 and m.num_cached_tokens([1, 2, 3, 4]) == 0
    m.append_token("A", 4)
    assert m.num_cached_blocks == 1 and m.num_cached_tokens([1, 2, 3, 4, 5]) == 4


# ---------------------------------------------------------------------------- sharing = accounting

def test_shared_prefix_agrees_with_the_accounting_function():
    """R3: 20 and 23 tokens sharing an 8-token prefix in blocks of 4."""
    acc = prefix_sharing(20, 23, 8, 4)
    m = BlockManager(num_blocks=20, block_size=4)
    m.allocate("A", SYSTEM + list(range(12)))
    r = m.allocate("B", SYSTEM + list(range(100, 115)))
    assert r.num_cached_tokens == 8
    counts = m.slot_counts()
    assert (counts.logical_tokens, counts.slots_unshared, counts.physical_slots) == (43, 44, 36)
    assert counts.logical_tokens == acc.logical_tokens
    assert counts.slots_unshared == acc.slots_unshared
    assert counts.physical_slots == acc.slots_shared
    assert counts.shared_blocks == acc.shared_blocks == 2
    assert counts.saved_slots == acc.saved_slots == 8
    # a prefix that does not fill a whole block shares only its full blocks
    acc10 = prefix_sharing(20, 23, 10, 4)
    m2 = BlockManager(num_blocks=20, block_size=4)
    m2.allocate("A", SYSTEM + [1, 2] + list(range(10)))
    m2.allocate("B", SYSTEM + [1, 2] + list(range(100, 113)))
    assert m2.slot_counts().physical_slots == acc10.slots_shared == 36


def test_two_sequences_share_a_system_prompt_in_blocks_of_16():
    """R8: two sequences, sixteen tokens to a block, begin with the same 32-token system prompt:
    its two blocks are stored once, with refcount 2, and both block tables point at them."""
    prompt = list(range(1000, 1032))
    m = BlockManager(num_blocks=16, block_size=16)
    m.allocate("A", prompt + [1, 2, 3])
    r = m.allocate("B", prompt + [7, 8])
    assert r.num_cached_tokens == 32
    shared = m.block_table("A")[:2]
    assert m.block_table("B")[:2] == shared
    assert [m.refcount(b) for b in shared] == [2, 2]
    assert m.block_table("A")[2] != m.block_table("B")[2]
    assert m.num_in_use_blocks == 4                  # 2 shared + one private last block each
    m.check_invariants()


# ---------------------------------------------------------------------------- cache reuse order

def test_freed_cached_blocks_stay_findable_until_reused_lru_first():
    m = BlockManager(num_blocks=4, block_size=2)
    m.allocate("A", [1, 2, 3, 4])       # blocks 0, 1
    m.free("A")                         # queue: 2, 3, 1, 0 (tail first)
    assert m.free_queue() == [2, 3, 1, 0]
    assert m.num_cached_free_blocks == 2 and m.num_free_blocks == 2
    assert m.num_cached_tokens([1, 2, 3, 4, 0]) == 4
    assert m.num_cached_tokens([1, 2, 3, 4]) == 2       # its last token is always computed (vLLM)
    m.allocate("B", [7, 8, 9, 10])      # takes the never-cached 2, 3
    assert m.num_cached_tokens([1, 2, 3, 4, 0]) == 4
    r = m.allocate("C", [5, 6])         # the least recently used cached block is the tail (1)
    assert r.new_blocks == (1,) and r.evicted == (1,)
    assert m.num_cached_tokens([1, 2, 3, 4, 0]) == 2 and m.evictions == 1
    # a hit pulls a cached block out of the queue, so a later allocation cannot evict it
    m.free("B")
    r = m.allocate("D", [1, 2, 11])
    assert r.reused == (0,) and m.refcount(0) == 1
    assert_consistent(m)


def test_allocation_refused_when_out_of_blocks_changes_nothing():
    m = BlockManager(num_blocks=3, block_size=4)
    m.allocate("A", list(range(8)))
    before = copy.deepcopy(m.__dict__)
    with pytest.raises(ValueError, match="^num_blocks: out of blocks"):
        m.allocate("B", list(range(100, 109)))
    assert m.__dict__ == before
    # a prompt whose blocks are cached needs fewer new blocks and fits
    r = m.allocate("B", list(range(8)) + [5])
    assert r.reused == (0, 1) and len(r.new_blocks) == 1


# ---------------------------------------------------------------------------- swap

def test_swap_out_and_in_with_a_bounded_host_pool():
    m = BlockManager(num_blocks=8, block_size=4, num_host_blocks=3)
    m.allocate("A", list(range(10)))              # 3 blocks
    m.allocate("B", list(range(50, 55)))          # 2 blocks
    old = m.block_table("A")
    mapping = m.swap_out("A")
    assert [g for g, _ in mapping] == old and m.block_table("A") == [] and m.is_swapped("A")
    assert m.num_host_free_blocks == 0 and m.swapped_out_blocks == 3
    assert [m.host_block_tokens(h) for _, h in mapping] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert_consistent(m)
    with pytest.raises(ValueError, match="^num_host_blocks: host pool is full"):
        m.swap_out("B")
    with pytest.raises(ValueError, match="^seq_id: .*swapped out"):
        m.append_token("A", 1)
    back = m.swap_in("A")
    assert len(back) == 3 and m.swapped_in_blocks == 3 and not m.is_swapped("A")
    assert m.token_ids("A") == list(range(10)) and m.num_host_free_blocks == 3
    assert m.append_token("A", 10).slot == 2
    assert_consistent(m)
    with pytest.raises(ValueError, match="^seq_id: .*not swapped out"):
        m.swap_in("A")


def test_swap_out_of_a_forked_sequence_keeps_the_shared_blocks_for_the_other():
    m = BlockManager(num_blocks=6, block_size=4, num_host_blocks=4)
    m.allocate("A", list(range(6)))
    m.fork("A", "B")
    m.swap_out("B")
    assert [m.refcount(b) for b in m.block_table("A")] == [1, 1]
    assert m.swap_preemptions == 1
    m.append_token("A", 6)                       # no copy needed: B is in host memory
    assert m.cow_copies == 0
    m.swap_in("B")
    assert m.token_ids("B") == list(range(6))
    assert_consistent(m)
    m.free("B")                                  # freeing a swapped sequence returns host blocks
    m.free("A")
    assert_consistent(m)


def test_swap_in_refused_when_gpu_is_full():
    m = BlockManager(num_blocks=2, block_size=2, num_host_blocks=2, enable_prefix_caching=False)
    m.allocate("A", [1, 2, 3])
    m.swap_out("A")
    m.allocate("B", [4, 5, 6])
    with pytest.raises(ValueError, match="^num_blocks"):
        m.swap_in("A")
    m.free("B")
    m.swap_in("A")
    assert_consistent(m)


# ---------------------------------------------------------------------------- errors

@pytest.mark.parametrize("kwargs, field", [
    ({"num_blocks": 4, "block_size": 0}, "block_size"),
    ({"num_blocks": 4, "block_size": 5000}, "block_size"),
    ({"num_blocks": 4, "block_size": 2.5}, "block_size"),
    ({"num_blocks": 0, "block_size": 4}, "num_blocks"),
    ({"num_blocks": 4, "block_size": 4, "num_host_blocks": -1}, "num_host_blocks"),
    ({"num_blocks": 3, "block_size": 4, "free_order": [0, 0, 1]}, "free_order"),
])
def test_bad_configuration_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=f"^{field}"):
        BlockManager(**kwargs)


def test_bad_operations_name_the_field():
    m = BlockManager(num_blocks=4, block_size=4)
    m.allocate("A", [1, 2])
    cases = [
        (lambda: m.append_token("nobody", 1), "seq_id"),
        (lambda: m.free("nobody"), "seq_id"),
        (lambda: m.block_table("nobody"), "seq_id"),
        (lambda: m.allocate("A", [1]), "seq_id"),
        (lambda: m.allocate(True, [1]), "seq_id"),
        (lambda: m.allocate("C", []), "token_ids"),
        (lambda: m.allocate("C", "abc"), "token_ids"),
        (lambda: m.allocate("C", [1, -1]), r"token_ids\[1\]"),
        (lambda: m.allocate("C", [1], cache_salt=3), "cache_salt"),
        (lambda: m.allocate("C", [1], lora=3), "lora"),
        (lambda: m.allocate("C", list(range(40))), "num_blocks"),
        (lambda: m.append_token("A", 1.5), "token_id"),
        (lambda: m.append_token("A", 1, cow_order="sometimes"), "cow_order"),
        (lambda: m.fork("nobody", "C"), "parent_id"),
        (lambda: m.fork("A", "A"), "child_id"),
        (lambda: m.swap_out("A"), "num_host_blocks"),
        (lambda: m.refcount(4), "block_id"),
        (lambda: m.refcount(-1), "block_id"),
    ]
    for call, field in cases:
        with pytest.raises(ValueError, match=f"^{field}"):
            call()
    assert_consistent(m)


# ---------------------------------------------------------------------------- random workloads

PROMPTS = [SYSTEM[:4], SYSTEM, SYSTEM + [1, 2, 3], [5, 6, 7, 8, 9], SYSTEM[:4] + [9, 9, 9, 9, 1]]

allocate_op = st.tuples(st.just("allocate"), st.integers(0, 99),
                        st.sampled_from(range(len(PROMPTS))),
                        st.lists(st.integers(0, 3), max_size=6), st.sampled_from([None, "x", "y"]))
op = st.one_of(
    allocate_op,
    st.tuples(st.just("append"), st.integers(0, 99), st.integers(0, 3)),
    st.tuples(st.just("append"), st.integers(0, 99), st.integers(0, 3)),
    st.tuples(st.just("fork"), st.integers(0, 99)),
    st.tuples(st.just("free"), st.integers(0, 99)),
    st.tuples(st.just("swap_out"), st.integers(0, 99)),
    st.tuples(st.just("swap_in"), st.integers(0, 99)),
    st.tuples(st.just("recompute"), st.integers(0, 99)),
)


def _apply(m: BlockManager, o, fresh: list) -> None:
    """Apply one random operation; ``o[1]`` picks among the sequences that exist (if any)."""
    kind, pick = o[0], o[1]
    running = [s for s in m.sequences() if not m.is_swapped(s)]
    swapped = [s for s in m.sequences() if m.is_swapped(s)]
    pool = swapped if kind == "swap_in" else running
    sid = pool[pick % len(pool)] if pool else "nobody"
    if kind == "allocate":
        fresh[0] += 1
        m.allocate(fresh[0], PROMPTS[o[2]] + o[3], cache_salt=o[4])
    elif kind == "append":
        m.append_token(sid, o[2])
    elif kind == "fork":
        fresh[0] += 1
        m.fork(sid, fresh[0])
    elif kind == "free":
        m.free(sid)
    elif kind == "swap_out":
        m.swap_out(sid)
    elif kind == "swap_in":
        m.swap_in(sid)
    else:
        m.preempt_recompute(sid)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(starts=st.lists(allocate_op, min_size=1, max_size=3), ops=st.lists(op, max_size=40),
       num_blocks=st.integers(6, 24), block_size=st.sampled_from([1, 2, 4]),
       host=st.integers(0, 12),
       chained=st.booleans(), caching=st.booleans())
def test_invariant_on_random_workloads(starts, ops, num_blocks, block_size, host, chained,
                                      caching):
    """Random allocate / append / fork / free / swap / recompute: refused operations change
    nothing, refcounts always match the block tables, free + cached + in use == total."""
    m = BlockManager(num_blocks, block_size, host, enable_prefix_caching=caching,
                     chain_hashes=chained)
    _run_checked(m, starts + ops, chained, host)
    assert m.num_free_blocks + m.num_cached_free_blocks == num_blocks


def _run_checked(m, ops, chained, host):
    """Apply ``ops`` one by one: a refused one must change nothing, and the invariants (plus, with
    chained hashes, no wrong share) must hold after each; then free everything and check again."""
    fresh = [0]
    for o in ops:
        before = copy.deepcopy(m.__dict__)
        try:
            _apply(m, o, fresh)
        except ValueError:
            assert m.__dict__ == before, f"refused {o} but changed state"
        assert_consistent(m)
        if chained:
            assert m.wrong_shares() == []
    for sid in m.sequences():
        m.free(sid)
    assert_consistent(m)
    assert m.num_in_use_blocks == 0 and m.num_host_free_blocks == host


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rnd=st.randoms(use_true_random=False), num_blocks=st.integers(6, 24),
       block_size=st.sampled_from([1, 2, 4]), host=st.integers(0, 12), chained=st.booleans())
def test_invariant_on_long_random_runs(rnd, num_blocks, block_size, host, chained):
    """Long runs (120 operations, weighted towards append and fork so that copy-on-write,
    eviction and swap all happen) keep the invariants after every operation."""
    m = BlockManager(num_blocks, block_size, host, chain_hashes=chained)
    kinds = ["allocate"] * 3 + ["append"] * 6 + ["fork"] * 2 + ["free", "swap_out", "swap_in",
                                                                 "recompute"]
    ops = []
    for _ in range(120):
        kind = rnd.choice(kinds)
        o = (kind, rnd.randrange(100), rnd.randrange(len(PROMPTS)),
             [rnd.randrange(4) for _ in range(rnd.randrange(5))], rnd.choice([None, "x"]))
        if kind == "append":
            o = (kind, o[1], rnd.randrange(4))
        ops.append(o)
    _run_checked(m, ops, chained, host)
