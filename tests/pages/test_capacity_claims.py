"""The Capacity page's note on a block larger than the max context: every number it quotes comes
from the capacity result shown beside it, and the page shows it exactly when the block is larger."""
from __future__ import annotations

import pytest

from allocator import accounting as acc
from allocator.viz.claims.capacity import oversized_block_note
from tests.conftest import open_page
from tests.pages.test_claims import NUMBER, _forms

KIB = 1024
GRID = [  # (bytes per token, free bytes, max context, mean tokens, block size)
    (512 * KIB, 66 << 30, 2048, 350, 4096),       # R5's 7B model, a block twice its context
    (512 * KIB, 66 << 30, 2048, 350, 2049),       # one slot past the context
    (512 * KIB, 66 << 30, 2048, 2048, 4096),      # sequences that fill the context
    (800 * KIB, 12 << 30, 100, 37.5, 128),        # a mean that is not whole
    (1, 40_960, 1, 1, 2),                         # the smallest case
]


def _allowed(cap: acc.Capacity) -> set[str]:
    nums = set()
    for name in ("block_size", "max_context", "paged_unused_slots", "paged_slots", "mean_tokens",
                 "reserved_slots", "fit_paged", "fit_reserve", "waste_fraction_paged"):
        nums |= _forms(getattr(cap, name))
    return nums


@pytest.mark.parametrize("bpt, free, max_context, mean, block", GRID)
def test_every_number_of_the_note_comes_from_the_result(bpt, free, max_context, mean, block):
    cap = acc.capacity(bpt, free, max_context, mean, block)
    note = oversized_block_note(cap)
    assert note is not None
    quoted = NUMBER.findall(note)
    assert len(quoted) == 9, quoted
    assert set(quoted) <= _allowed(cap), set(quoted) - _allowed(cap)
    # and they are the right ones, in order: not merely numbers that occur somewhere in the result
    assert quoted[:2] == [f"{cap.block_size:,}", f"{cap.max_context:,}"]
    assert quoted[2:4] == [f"{cap.paged_unused_slots:,g}", f"{cap.paged_slots:,g}"]
    assert cap.paged_slots == cap.block_size and cap.paged_blocks == 1     # one whole block per sequence
    assert quoted[-2:] == [f"{cap.fit_paged:,}", f"{cap.fit_reserve:,}"]
    assert f"{100 * cap.waste_fraction_paged:.1f} %" in note
    assert "more than the" in note                                         # the block is larger than the context


@pytest.mark.parametrize("block", [1, 16, 2048])
def test_no_note_while_the_block_fits_in_the_context(block):
    assert oversized_block_note(acc.capacity(512 * KIB, 66 << 30, 2048, 350, block)) is None


def test_the_page_shows_the_note_beside_the_paged_figures_exactly_when_the_block_is_larger():
    at = open_page("pages/capacity.py", timeout=60)
    assert not [i for i in at.info if "larger than the max context" in i.value]
    at.number_input(key="cap_block_size").set_value(4096).run()
    assert not at.exception and not at.error
    notes = [i.value for i in at.info if "larger than the max context" in i.value]
    assert notes == [oversized_block_note(acc.capacity(512 * KIB, 66 << 30, 2048, 350, 4096))]
    assert notes[0].startswith("A block of 4,096 slots is larger than the max context (2,048 tokens)")
    assert "3,746 of its 4,096 slots sit empty" in notes[0] and "(91.5 %)" in notes[0]
    metrics = {m.label: (m.value, m.proto.delta) for m in at.metric}
    assert metrics["Blocks per sequence"] == ("1", "= 4,096 slots, 3,746 empty")     # the figures it explains
    assert metrics["Allocated per sequence"][1] == "91.5 % empty"
    assert metrics["Sequences, paged"][0] == "33" and metrics["Sequences, reserve-max"][0] == "66"
    assert any("now holds 1 block instead of" in m.value for m in at.markdown)
    at.number_input(key="cap_block_size").set_value(2048).run()                  # equal: no note
    assert not [i for i in at.info if "larger than the max context" in i.value]


# ------------------------------------------------------------------ speculative decoding (issue 41)

@pytest.mark.parametrize("bpt, free, max_context, mean, block", GRID[:4] + [(512 * KIB, 66 << 30, 2048, 350, 16),
                                                                           (512 * KIB, 66 << 30, 2048, 344, 16),
                                                                           (512 * KIB, 0, 2048, 350, 16),
                                                                           (512 * KIB, 240 << 20, 2048, 350, 16)])
@pytest.mark.parametrize("rate", [0.0, 0.7, 1.0])
def test_the_speculation_sentence_quotes_its_rows_in_order(bpt, free, max_context, mean, block, rate):
    from allocator.accounting.speculation import speculation_capacity
    from allocator.viz.claims.capacity import speculation_text
    cap = acc.capacity(bpt, free, max_context, mean, block)
    rows = speculation_capacity(cap, rate)
    text = speculation_text(cap, rows, rate)
    top, base = rows[-1], rows[0]
    want = [f"{top.k}", f"{top.lookahead_slots}", f"{cap.mean_tokens:,g}", f"{top.blocks:,}", f"{cap.block_size}",
            f"{base.blocks:,}", f"{top.fit:,}", f"{base.fit:,}"] + ([f"{top.fewer:,}"] if top.fewer else []) + \
        [f"{rate:g}", f"{top.tokens_per_step:.2f}", "1", f"{top.rejected_per_step:.2f}", f"{top.k}"]
    assert NUMBER.findall(text) == want
    assert ("fewer)" in text) == (top.fewer > 0) and top.fewer == base.fit - top.fit
    if not top.fewer:       # the reason given is the one that holds
        none_fit = base.fit == 0
        capped = not none_fit and cap.mean_tokens + top.k > cap.max_context
        tail = not none_fit and not capped and top.blocks == base.blocks
        assert ("no sequence fits either way" in text) == none_fit
        assert ("caps the lookahead" in text) == capped and ("empty tail" in text) == tail
        assert ("also holds the extra blocks" in text) == (not none_fit and not capped and not tail)
    assert "not a measurement" in text


def test_when_nothing_fits_the_speculation_sentence_does_not_blame_the_empty_tail():
    """Hunt F9: ``capacity --model 7b-fp16 --free-gib 0 --max-context 2048 --mean-tokens 350
    --acceptance-rate 0.7`` needs a 23rd block for the lookahead yet fits 0 sequences either way: the
    sentence says none fit, not that the lookahead fits the last block's empty tail."""
    from allocator.accounting.speculation import speculation_capacity
    from allocator.viz.claims.capacity import speculation_text
    cap = acc.capacity(512 * KIB, 0, 2048, 350, 16)
    rows = speculation_capacity(cap, 0.7)
    text = speculation_text(cap, rows, 0.7)
    assert rows[-1].blocks == 23 and rows[0].blocks == 22 and rows[-1].fit == rows[0].fit == 0
    assert ("that is 23 blocks of 16 slots instead of 22, and 0 sequences fit instead of 0 (no sequence fits "
            "either way: the free memory holds fewer blocks than one sequence needs even without the "
            "lookahead).") in text
    assert "empty tail" not in text and "none fewer" not in text


def test_the_capacity_command_and_page_say_none_fit_at_zero_free_memory(capsys):
    """Hunt F9, on the CLI and on the Capacity page (free memory 0 GiB, the 7B model's defaults)."""
    from allocator.__main__ import main
    main(["capacity", "--model", "7b-fp16", "--free-gib", "0", "--max-context", "2048", "--mean-tokens", "350",
          "--acceptance-rate", "0.7"])
    out = capsys.readouterr().out
    assert "0 sequences fit instead of 0 (no sequence fits either way" in out and "empty tail" not in out
    at = open_page("pages/capacity.py", {"cap_free_gib": 0.0}, timeout=60)
    said = [c.value for c in at.caption if "sequences fit instead of" in c.value]
    assert said and "no sequence fits either way" in said[0] and "empty tail" not in said[0]


def test_the_page_draws_the_speculation_rows_it_quotes():
    from allocator.accounting.speculation import speculation_capacity
    at = open_page("pages/capacity.py", timeout=60)
    cap = acc.capacity(512 * KIB, 66 << 30, 2048, 350, 16)
    rows = speculation_capacity(cap, 0.7)
    table = next(d.value for d in at.dataframe if "lookahead slots" in d.value.columns)
    assert table["sequences fit"].tolist() == [r.fit for r in rows]
    assert table["blocks/seq"].tolist() == [r.blocks for r in rows]
    assert table["fewer"].tolist() == [r.fewer for r in rows]
    # R5's 384 at k = 0 (the paged card above), 367 once 3 or more lookahead slots need a 23rd block
    assert rows[0].fit == 384 and rows[8].fit == 367
    assert any(f"{rows[8].fit:,} sequences fit instead of {rows[0].fit:,}" in c.value for c in at.caption)
    # the command it points to runs a simulation: the caption says simulated, not measured
    pointer = next(c.value for c in at.caption if "--num-speculative-tokens 4" in c.value)
    assert pointer.startswith("Simulated step by step on the engine") and "Measured" not in pointer
