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

#: Who says that tiny blocks cost kernel time, and what this app measures and predicts about it. The lesson,
#: the explainer, the About page, the Slot accounting page and the handout use it (or its short form) instead
#: of pointing at the kernel page as if that page showed the cost. The PagedAttention paper (Kwon et al., SOSP
#: 2023, arXiv:2309.06180), section 7.2, block size, says it for its own CUDA kernel; this app's kernel page
#: (``pages/kernel.py``) times its own Triton kernel. tests/pages/test_claims.py keeps the sentence true to
#: what ships: no GPU timing in assets/, and the H200 prediction of the compile record within 1 %.
TINY_BLOCKS_TIME = (
    "Whether tiny blocks also cost *time* is a claim this app does not demonstrate. Structurally, a block of "
    "1 slot means one block-table entry and one separate read per token. The PagedAttention paper (section "
    "7.2) reports, for its own CUDA kernel, that blocks too small leave the GPU's parallelism unused when "
    "it reads the cache. The app's Paged-attention kernel page times the app's own Triton kernel against a "
    "contiguous baseline: on a CPU it measures torch's gather, where the difference is lost in noise, and "
    "its prediction for an H200 from the compiled kernel puts paged within 1 % of contiguous at every block "
    "size; no GPU measurement ships with the app."
)

#: The same, in one sentence (the handout, the glossary).
TINY_BLOCKS_TIME_SHORT = (
    "the PagedAttention paper (section 7.2) found very small blocks slow its own kernel; this app has not "
    "measured that on a GPU, and only predicts a GPU's time for its own kernel"
)
