"""One colour-blind-safe palette for the whole app (no streamlit import: charts and tests share it).

One meaning per colour, on every page:

* **State colours** (memory maps, block pools, accounting bars): light grey = free; dark grey =
  free but unusable (a hole, or a pool remainder that forms no block); orange = allocated,
  holding nothing; deep pink = a token in a block several block tables share (refcount > 1);
  dark brown = a duplicate copy of a shared-prompt token (stored again although it is the same);
  violet = a block a sliding window released (free again, nobody has taken it since).
* **Request colours**: the tokens of one request, cycled over request ids (blues and greens
  only, so a request is never mistaken for a state).
* **Series colours** in line charts: black = reserve-max, blue = paged, green = a third series.

Chosen by computation, not by eye: tests/core/test_palette.py checks, in the CAM02-UCS colour space
(colorspacious), that the state colours stay apart from each other and from every request colour
for normal vision and under simulated deuteranopia, protanopia and tritanopia, and that the
request colours stay apart from each other for normal vision. Sources: Okabe & Ito (2008) for
the orange, blue and green; Paul Tol's schemes for the request colours; ColorBrewer PiYG and
BrBG for the pink and the brown, PuOr for the purple of cached blocks.
"""

ORANGE_EMPTY = "#E69F00"   # allocated, holding nothing (Okabe-Ito orange)
GREY_FREE = "#DDDDDD"      # free
DARK_HOLE = "#4D4D4D"      # free but unusable (hole too small / remainder)
SHARED_PREFIX = "#C51B7D"  # a token in a block several sequences share (ColorBrewer PiYG pink)
BROWN_DUPLICATE = "#7F3B08"  # a duplicate copy of a shared-prompt token (ColorBrewer BrBG brown)
CACHED = "#8073AC"         # a block no sequence holds, kept findable by the prefix cache (ColorBrewer PuOr purple)
RELEASED = "#AA00EE"       # a block released behind a sliding window, free again (chosen by the palette test's
                           # distances: the only light-enough colour >= 15 from every state, >= 12 from requests)

#: State name -> colour, for tests and legends. One name per state: each key is the name of a
#: state code of ``allocator.viz.maps`` in lower case (FREE, HOLE, EMPTY, SHARED, DUPLICATE, BLOCK_CACHED,
#: RELEASED).
STATE_COLOURS = {"free": GREY_FREE, "hole": DARK_HOLE, "empty": ORANGE_EMPTY,
                 "shared": SHARED_PREFIX, "duplicate": BROWN_DUPLICATE, "cached": CACHED, "released": RELEASED}

#: Colours cycled over request ids for slots that hold a token (blues and greens only). Five, so
#: that every pair is clearly different for normal vision; neighbouring ids never share one.
REQUEST_COLOURS = ("#77AADD", "#332288", "#74C476", "#228833", "#44AA99")

#: Outline of a block shared by mistake (the flawed block hash of the Block tables page).
WRONG_SHARE = "#CC3311"    # Paul Tol "vibrant" red

#: Series colours for the two allocators in line charts.
RESERVE_MAX = "#000000"    # black: no orange anywhere but "allocated, holding nothing"
PAGED = "#0072B2"          # blue (Okabe-Ito)
ACCENT = "#009E73"         # bluish green (Okabe-Ito), for a third series

#: Series name -> colour, for tests.
SERIES_COLOURS = {"reserve-max": RESERVE_MAX, "paged": PAGED, "third series": ACCENT}

#: Highlight colours (outlines only), each with one meaning.
HIGHLIGHT_COLOURS = {"wrong share": WRONG_SHARE}
