"""One colour-blind-safe palette for the whole app (no streamlit import: charts and tests share it).

Convention (DESIGN.md): orange always means "allocated, holding nothing"; grey means free;
dark grey means an unusable hole. Request colours avoid orange, red and grey so the three
state colours stay unambiguous. Sources: Okabe & Ito (2008) for orange, Paul Tol's "muted"
and "bright" schemes for the request colours.
"""

ORANGE_EMPTY = "#E69F00"   # allocated, holding nothing (Okabe-Ito orange)
GREY_FREE = "#DDDDDD"      # free
DARK_HOLE = "#4D4D4D"      # free but unusable (hole too small / remainder)
SHARED_PREFIX = "#CC79A7"  # a token in a block several sequences share (Okabe-Ito reddish purple: "pink")

#: Colours cycled over request ids for slots that hold a token (blues and greens only, so none is
#: mistaken for orange, grey or the shared-prefix pink).
REQUEST_COLOURS = (
    "#332288", "#88CCEE", "#44AA99", "#117733", "#1F78B4",
    "#4477AA", "#2166AC", "#66CCEE", "#228833", "#5AAE61",
)

#: Series colours for the two allocators in line charts.
RESERVE_MAX = "#000000"    # black: no orange anywhere but "allocated, holding nothing"
PAGED = "#0072B2"          # blue (Okabe-Ito)
ACCENT = "#009E73"         # bluish green (Okabe-Ito), for a third series
