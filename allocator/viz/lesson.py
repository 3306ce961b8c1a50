"""The guided lesson's steps as plain data (no streamlit): the explainer page's lesson box
(``pages/_ui/guided.py``) and the exported static site (``allocator.viz.export.site``) read this one copy.

Each step names the scenario settings it applies on top of :data:`BASE` (keyed by the explainer's
sidebar widget keys), the page sections that stay hidden until the class has predicted, one
question with its choices, and the reveal (``allocator.viz.claims.reveal``) that answers it from
the results on screen. The last step carries the open challenges (in our words; the chained-hash and copy-on-write
ones are ``assets/reference_figures.md`` R8).
"""
from __future__ import annotations

from allocator.viz.texts import COPY_ON_WRITE, TINY_BLOCKS_TIME

BASE = {"workload": "classroom-40", "block_size": 16, "slots_classroom-40": 2048, "max_new_classroom-40": 600,
        "shared_prefix": 0, "preemption": "recompute", "metadata_cost": 0.0, "arrival": "burst", "seed": 25,
        "policy": "max", "seconds_axis": False}


#: Page sections that would give a step's answer away before it is revealed.
CARDS, MAPS, SWEEP = "cards", "maps", "sweep"   # cards: the headline numbers and the details table

STEPS = [
    dict(title="1 · Reserve the worst case", settings={}, reveal="reserve", hides={CARDS, MAPS},
         text="Reserve-max gives each request one unbroken run: its prompt plus another 600 slots "
              "(`max_new_tokens`) for the longest answer allowed. The maps and numbers stay hidden until "
              "the class has predicted.",
         question="In a 2,048-slot pool, how many requests can run at once?",
         choices=["3", "10", "30", "all 40"]),
    dict(title="2 · Watch the waste", settings={}, reveal="waste", hides={CARDS},
         text="Press ▶ Play and watch the left map: orange is reserved and holds no token — most of it never "
              "will, because few answers reach the cap — and dark grey is free but in gaps too short for the "
              "next reservation.",
         question="While requests are waiting, what share of the pool holds tokens?",
         choices=["under 40 %", "about 60 %", "over 90 %"]),
    dict(title="3 · Page the cache", settings={}, reveal="paged", hides={CARDS, MAPS},
         text="Same pool, same requests, but cut into blocks of 16 slots, each handed out only when a sequence "
              "fills its last one. Predict first: Reveal shows the maps.",
         question="While requests are waiting, how many run at once on average now?",
         choices=["about 3", "about 8", "about 30", "all 40"]),
    dict(title="4 · Raise the block size", settings={"block_size": 256}, reveal="big_blocks",
         hides={CARDS, MAPS, SWEEP},
         text="The block-size slider is now at 256 slots per block. The maps, numbers and sweep stay hidden "
              "until the class has predicted.",
         question="Does the paged side's utilisation go up, stay, or go down?",
         choices=["up", "stays the same", "down"]),
    dict(title="5 · Share a system prompt", settings={"shared_prefix": 256}, reveal="prefix",
         hides={CARDS, MAPS},
         text="Every request now begins with the same 256-token system prompt (blocks of 16 again).",
         question="On the paged side, how many copies of the prompt are stored?",
         choices=["one", "one per running request", "none"]),
]

CHALLENGES = [
    ("Block size 1, 16 and 256: how much of each sequence's last block is empty on average, and what goes "
     "wrong at each end?",
     "About (block − 1) / 2 slots: 0, 7.5 and 127.5. At 256 the slack and the tiny number of blocks hurt "
     "memory. At 1 memory is perfect but the block table has one entry per token. " + TINY_BLOCKS_TIME),
    ("Paging admits a request with only the blocks its prompt needs. What can go wrong halfway through its answer?",
     "It can need a block when none is free. The engine must evict someone — the preemptions counted on this "
     "page — and either recompute that sequence later or swap its blocks to host memory."),
    ("Two sequences share a block (refcount 2) and one of them writes into it. What must happen, in what order?",
     COPY_ON_WRITE),
    ("Prefix caching finds shared blocks by hashing. Why is hashing a block's own tokens not enough?",
     "Two prompts can have an identical third block after different first blocks: the cached keys and values "
     "differ because attention saw different context. The hash must chain over everything before the block "
     "(and a per-tenant salt), or one user is served another's cache — wrong and a privacy leak."),
]
