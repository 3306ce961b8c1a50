"""AppTest of the Block tables page: a full fork / copy-on-write / finish / cached-prefix sequence
read back as real values (refcounts in the pool table, block tables, metrics), the flawed hash and
the salt toggles, and refusals (out of blocks, host pool full) shown as messages, never tracebacks.
"""
from __future__ import annotations

import ast

from streamlit.testing.v1 import AppTest

from tests.conftest import APP_PATH

PAGE = "pages/block_tables.py"


def _page() -> AppTest:
    at = AppTest.from_file(APP_PATH, default_timeout=60)
    at.switch_page(PAGE)
    at.run()
    assert not at.exception, at.exception
    return at


def _click(at: AppTest, key: str) -> AppTest:
    at.button(key=key).click().run()
    assert not at.exception, at.exception
    return at


def _metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def _tables(at: AppTest, where: str = "GPU") -> dict[str, list[int]]:
    """Block tables shown on the page (``where="GPU"``) or host tables of swapped sequences."""
    df = next(d.value for d in at.dataframe if "block table" in d.value.columns)
    return {row["sequence"]: ast.literal_eval(row["block table"]) for _, row in df.iterrows()
            if row["where"].startswith(where)}


def _refcounts(at: AppTest) -> dict[int, int]:
    pool = next(d.value for d in at.dataframe if "refcount" in d.value.columns)
    return dict(zip(pool["block"], pool["refcount"]))


def _states(at: AppTest) -> dict[int, str]:
    pool = next(d.value for d in at.dataframe if "refcount" in d.value.columns)
    return dict(zip(pool["block"], pool["state"]))


def _invariant_line(at: AppTest) -> str:
    return next(m.value for m in at.markdown if m.value.startswith("**free + cached + in use"))


def _assert_refcounts_match_tables(at: AppTest) -> None:
    counts: dict[int, int] = {}
    for table in _tables(at).values():
        for b in table:
            counts[b] = counts.get(b, 0) + 1
    rc = _refcounts(at)
    assert len(rc) == 16
    for b, n in rc.items():
        assert n == counts.get(b, 0), f"block {b}"
    assert _invariant_line(at).endswith("= 16 ✓")


def test_fork_write_finish_and_reuse_a_cached_prefix():
    at = _page()
    m = _metrics(at)
    # A (13 tokens, 4 blocks) and B (11 tokens, 3 blocks) share the 8-token system prompt
    assert (m["Free blocks"], m["Cached blocks"], m["In-use blocks"], m["Total blocks"]) == ("11", "0", "5", "16")
    assert (m["Logical tokens"], m["Slots without sharing"], m["Distinct physical slots"]) == ("24", "28", "20")
    assert m["Blocks found in cache"] == "2"
    tables = _tables(at)
    a, b = tables["A"], tables["B"]
    assert len(a) == 4 and len(b) == 3 and a[:2] == b[:2] and a[2] != b[2]
    assert a != sorted(a)                     # physical order is not the logical order
    rc = _refcounts(at)
    assert [rc[x] for x in a] == [2, 2, 1, 1] and rc[b[2]] == 1
    _assert_refcounts_match_tables(at)

    # Fork: A.1 shares all four of A's blocks
    _click(at, "bt_fork")
    tables = _tables(at)
    assert tables["A.1"] == a
    rc = _refcounts(at)
    assert [rc[x] for x in a] == [3, 3, 2, 2]
    m = _metrics(at)
    assert m["In-use blocks"] == "5" and m["Logical tokens"] == "37" and m["Distinct physical slots"] == "20"
    assert at.session_state["bt_seq"] == "A.1"
    _assert_refcounts_match_tables(at)

    # Write into the shared last block: copy-on-write
    _click(at, "bt_write")
    tables = _tables(at)
    copy = tables["A.1"][3]
    assert tables["A.1"][:3] == a[:3] and copy not in a
    rc = _refcounts(at)
    assert rc[a[3]] == 1 and rc[copy] == 1 and [rc[x] for x in a[:3]] == [3, 3, 2]
    m = _metrics(at)
    assert m["Copy-on-write copies"] == "1" and m["In-use blocks"] == "6" and m["Logical tokens"] == "38"
    assert "Copy-on-write" in at.markdown[-2].value or any("Copy-on-write" in x.value for x in at.markdown)
    _assert_refcounts_match_tables(at)

    # Finish A: its private last block goes back to free; shared ones stay in use
    at.selectbox(key="bt_seq").set_value("A").run()
    _click(at, "bt_finish")
    assert "A" not in _tables(at)
    rc, states = _refcounts(at), _states(at)
    assert [rc[x] for x in a] == [2, 2, 1, 0] and states[a[3]] == "free"
    assert _metrics(at)["In-use blocks"] == "5"
    _assert_refcounts_match_tables(at)

    # Finish A.1: its full third block stays cached (findable by hash) at refcount 0
    at.selectbox(key="bt_seq").set_value("A.1").run()
    _click(at, "bt_finish")
    rc, states = _refcounts(at), _states(at)
    assert rc[a[2]] == 0 and states[a[2]] == "cached" and states[copy] == "free"
    assert [rc[x] for x in a[:2]] == [1, 1]
    m = _metrics(at)
    assert (m["Free blocks"], m["Cached blocks"], m["In-use blocks"]) == ("12", "1", "3")   # B only
    _assert_refcounts_match_tables(at)

    # A new request with the same system prompt finds its two blocks by hash
    _click(at, "bt_new_same")
    tables = _tables(at)
    assert tables["C"][:2] == a[:2]
    rc = _refcounts(at)
    assert [rc[x] for x in a[:2]] == [2, 2]
    assert _metrics(at)["Blocks found in cache"] == "4"
    _assert_refcounts_match_tables(at)

    # Reset returns to the starting picture
    _click(at, "bt_reset")
    assert _tables(at) == {"A": a, "B": b}
    assert _metrics(at)["Copy-on-write copies"] == "0"


def test_write_without_a_shared_block_explains_instead():
    at = _page()
    _click(at, "bt_write")
    assert any("Fork" in i.value for i in at.info)
    assert _metrics(at)["Copy-on-write copies"] == "0"


def test_flawed_hash_shows_the_wrong_share_and_chained_does_not():
    at = _page()
    _click(at, "bt_new_other")
    assert not [e for e in at.error if "Wrong share" in e.value]
    assert _metrics(at)["Blocks found in cache"] == "2"     # only B's system prompt
    at.toggle(key="bt_naive").set_value(True).run()
    assert not at.exception
    _click(at, "bt_new_other")
    errors = [e.value for e in at.error if "Wrong share" in e.value]
    assert errors and "C's logical block 2" in errors[0]
    tables = _tables(at)
    assert tables["C"][2] == tables["A"][2] and tables["C"][:2] != tables["A"][:2]
    assert _refcounts(at)[tables["A"][2]] == 2


def test_salt_keeps_tenants_apart():
    at = _page()
    at.toggle(key="bt_salt").set_value(True).run()
    assert not at.exception
    m = _metrics(at)
    assert m["Blocks found in cache"] == "0" and m["Distinct physical slots"] == "28"
    tables = _tables(at)
    assert set(tables["A"]).isdisjoint(tables["B"])
    at.radio(key="bt_new_tenant").set_value("tenant-2").run()
    _click(at, "bt_new_same")
    assert _tables(at)["C"][:2] == tables["B"][:2]     # same tenant as B: shared
    _assert_refcounts_match_tables(at)


def test_refusals_are_messages_not_tracebacks():
    at = _page()
    for _ in range(9):     # 11 free blocks: 2 fresh for each of the first 3 questions, then 1
        _click(at, "bt_new_same")
    assert any("out of blocks" in e.value for e in at.error)
    _assert_refcounts_match_tables(at)
    # swap: A (4 blocks) and B (3) fit in the 8-block host pool, C (4) does not
    for seq in ("A", "B", "C"):
        at.selectbox(key="bt_seq").set_value(seq).run()
        _click(at, "bt_swap_out")
    assert any("host pool is full" in e.value for e in at.error)
    assert _metrics(at)["Blocks swapped out / in"] == "7 / 0"
    # only 3 GPU blocks came free (A's and B's private ones): A (4) cannot return, B (3) can
    at.selectbox(key="bt_seq").set_value("A").run()
    _click(at, "bt_swap_in")
    assert any("out of blocks" in e.value for e in at.error)
    at.selectbox(key="bt_seq").set_value("B").run()
    _click(at, "bt_swap_in")
    assert not at.error
    assert _metrics(at)["Blocks swapped out / in"] == "7 / 3"
    assert len(_tables(at)["B"]) == 3 and _metrics(at)["Free blocks"] == "0"
    assert list(_tables(at, "host")) == ["A"] and len(_tables(at, "host")["A"]) == 4
    _assert_refcounts_match_tables(at)


def test_the_page_says_where_the_classroom_loop_departs_from_vllm():
    from allocator.viz.block_tables_demo import BLOCK_SIZE
    at = _page()
    text = "\n".join(m.value for m in at.markdown)
    assert "Where the classroom loop departs from vLLM" in text
    assert f"a fully cached prompt of {2 * BLOCK_SIZE} words gets {BLOCK_SIZE} back from the cache" in text
