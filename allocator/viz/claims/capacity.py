"""What the Capacity page says about a result beyond its metrics (no streamlit).

Every number is read from the :class:`allocator.accounting.Capacity` shown beside the sentence
(``tests/pages/test_capacity_claims.py`` checks each one against it).
"""
from __future__ import annotations

import re

from allocator.accounting.memory import Capacity
from allocator.common.formats import pct_fixed


def oversized_block_note(cap: Capacity) -> str | None:
    """The note for a block larger than the maximum context, else None.

    Such a block holds any sequence the page admits whole, so paging gives each sequence exactly one
    block and allocates all of it: the page's "empty" slots and percentage are the rest of that one
    block, and paging then sets aside more per sequence than reserve-max does. The formulas are R5's
    (``assets/reference_figures.md``); on a block too large bringing internal fragmentation back, see
    the PagedAttention paper (Kwon et al., SOSP 2023, arXiv:2309.06180), section 7.2, block size.

    Args:
        cap: the capacity result on screen (one mean length, as the Capacity page computes it).

    Returns:
        One paragraph of plain text (digits only: no Markdown in it), or None when
        ``cap.block_size <= cap.max_context``.
    """
    if cap.block_size <= cap.max_context:
        return None
    more = "more than" if cap.paged_slots > cap.reserved_slots else "as much as"
    return (f"A block of {cap.block_size:,} slots is larger than the max context ({cap.max_context:,} tokens): "
            f"every sequence fits in one block, and the whole block is allocated to it. So the slack above is "
            f"the rest of that block: {cap.paged_unused_slots:,g} of its {cap.paged_slots:,g} slots sit empty "
            f"at the mean of {cap.mean_tokens:,g} tokens used ({pct_fixed(cap.waste_fraction_paged)}), {more} "
            f"the {cap.reserved_slots:,} slots reserve-max sets aside, and paging fits {cap.fit_paged:,} "
            f"sequences against reserve-max's {cap.fit_reserve:,}.")


def paged_card_heading(cap: Capacity) -> str:
    """The heading of the paged card beside "Buy twice the memory", from the result it shows.

    It claims a fix only when paging fits more sequences than reserve-max in the same memory
    (``cap.fit_paged > cap.fit_reserve``); equal or fewer (a block larger than the max context,
    :func:`oversized_block_note`) is said as such.

    Args:
        cap: the capacity result on screen.

    Returns:
        Markdown with one bold phrase; its numbers are ``cap.fit_paged`` and ``cap.fit_reserve``.
    """
    if cap.fit_paged > cap.fit_reserve:
        return "**Fix the allocator** (page the cache, same memory)"
    if cap.fit_paged == cap.fit_reserve:
        return (f"**Page the cache** (same memory): no gain at this block size, "
                f"{cap.fit_paged:,} sequences either way")
    return (f"**Page the cache** (same memory): worse at this block size, "
            f"{cap.fit_paged:,} sequences against reserve-max's {cap.fit_reserve:,}")


#: A number in a message: not part of a word, a longer number or an already grouped one.
_NUMBER = re.compile(r"(?<![\w.,+])(-?)(\d+)(?:\.(\d+))?(?![\w,]|\.\d)")


def even_numbers(text: str) -> str:
    """``text`` (a message about a refused value) with every number written as the page writes
    figures: thousands separators and no spurious ``.0``; the digits themselves are kept.

    Examples: ``"Block size = 1000000"`` -> ``"Block size = 1,000,000"``; ``"= -1.0"`` -> ``"= -1"``;
    ``"5000.0 is above max context (2048 tokens)"`` -> ``"5,000 is above max context (2,048 tokens)"``;
    ``2.5``, ``4,096`` and ``fp16`` stay as they are.
    """
    def one(m: re.Match) -> str:
        sign, whole, frac = m.group(1), m.group(2), (m.group(3) or "").rstrip("0")
        return f"{sign}{int(whole):,}" + (f".{frac}" if frac else "")
    return _NUMBER.sub(one, text)
