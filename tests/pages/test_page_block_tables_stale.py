"""The Block tables page with a stale Sequence choice: after quick clicks the browser could send
back a sequence an action in between had finished. The page re-checks the choice against the
manager before drawing (falls back to one it holds, or says none is left), and a core error while
drawing goes through the one error presenter, never a traceback.
"""
from __future__ import annotations

from allocator.common.errors import FieldError
from allocator.common.validate import plain_markdown
from tests.pages.test_page_block_tables import _page

def test_a_finished_sequence_left_in_the_selection_is_replaced_before_drawing():
    at = _page()
    demo = at.session_state["bt_demo"]
    demo.mgr.free("A")                          # A finishes between the check and the draw
    at.session_state["bt_seq"] = "A"
    at.run()
    assert not at.exception, at.exception
    assert at.session_state["bt_seq"] == "B"
    assert not at.error


def test_no_sequence_left_is_said_and_nothing_breaks():
    at = _page()
    demo = at.session_state["bt_demo"]
    for s in list(demo.mgr.sequences()):
        demo.mgr.free(s)
    at.session_state["bt_seq"] = "A"
    at.run()
    assert not at.exception, at.exception
    assert any("No sequence is left" in i.value for i in at.info)


def test_a_core_error_while_drawing_is_a_message_not_a_traceback(monkeypatch):
    import allocator.viz.block_tables_figure as fig

    def broken(*_a, **_k):
        raise FieldError("seq_id", ": no sequence 'A' (known: ['B'])")

    monkeypatch.setattr(fig, "block_table_figure", broken)
    at = _page()
    assert not at.exception, at.exception
    exc = FieldError("seq_id", ": no sequence 'A' (known: ['B'])")
    words = exc.reworded("Sequence")
    assert words.startswith("Sequence") and "no sequence 'A'" in words
    assert [e.value for e in at.error] == [plain_markdown(f"The block tables cannot be drawn: {words}.")]
