"""Issue 42 (low): text shown through ``plain_markdown`` reads exactly as written in Streamlit, including
the ``--``, ``->``, ``<=`` ... its renderer would otherwise turn into typographic signs (a copied
``git checkout -- file`` read ``git checkout — file`` and failed)."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from allocator.common.validate import plain_markdown
from tests.conftest import STREAMLIT_TYPOGRAPHY, rendered

PIECES = [sign for sign, _ in STREAMLIT_TYPOGRAPHY] + [" ", "  ", "git", "checkout", "-", "a_b.csv", "`", "\\", "*",
                                                         "[x](y)", "--flag", "<", ">", "~", "="]


def test_a_restore_command_reads_exactly_as_written():
    text = "restore it (git checkout -- assets/sharegpt_opt_lengths_filtered.csv.gz) or copy it back"
    assert rendered(plain_markdown(text)) == text
    assert "git checkout `--` assets" in plain_markdown(text)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=12))
def test_any_text_reads_as_written_after_streamlits_replacements(pieces):
    text = "".join(pieces)
    assert rendered(plain_markdown(text)) == text
