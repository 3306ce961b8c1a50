"""Explanations the app gives in more than one place, written once so they cannot disagree.

No streamlit import: pages and the exported site render these strings, tests compare them with the core's behaviour.
"""

#: Copy-on-write, in the block manager's order (``allocator.memory.block_manager.BlockManager.append_token``,
#: ``cow_order="safe"``; PagedAttention paper section 4.4;
#: assets/reference_figures.md, R8).
COPY_ON_WRITE = (
    "Full blocks are never written again, so only a shared *last* block (after a fork) needs care. "
    "The writer (1) makes sure a free block exists, (2) drops its own reference to the shared block "
    "while its block table still names it, (3) takes the free block and copies the shared tokens into "
    "it, and (4) points its table at the copy and writes the new token there. Done the other way "
    "round -- re-point the table first, drop the reference afterwards -- the drop lands on the copy: "
    "the copy goes back to the free queue while the writer still uses it, so the next request is "
    "handed that block and overwrites it, and the shared original keeps a reference nobody holds, "
    "so it is never freed."
)

#: The glossary's one-line version of the same order.
COPY_ON_WRITE_SHORT = (
    "Sequences may share a block only while none of them changes it. The first one to write into a "
    "shared block drops its own reference to it, then copies it into a free block of its own, points "
    "its block table at the copy and writes there; the others keep the original."
)
