"""Classroom helpers: presentation mode (every page: app.py's shared sidebar draws the toggle and
honours ``?present=true``; any other value is named in a note, ``url_params.check_boolean``),
the note about a link's parameters a page does not take (every page but the explainer, which checks
its own, ``url_params.unknown_params``), keyboard shortcuts, a copyable link.

Keyboard shortcuts (installed once per browser tab, ignored while typing in a field):
    → / ←      next / previous animation frame
    space, k   play / pause
    Esc        leave presentation mode
They drive the memory-map figure through plotly.js's own ``Plotly.animate``.
"""
from urllib.parse import urlencode

import numpy as np
import streamlit as st

from allocator.viz.modebar import MODEBAR_CONFIG, clear_of_modebar
from allocator.viz.projector import for_the_back_row
from pages._ui.errors import show_error
from pages._ui.url_params import PAGE_PARAMS, check_boolean, repeated_params, unknown_params

_KEYS_JS = """
<script>
(function () {
  const w = window.parent && window.parent.document ? window.parent : window;
  if (w.__kvlabKeys) return;
  w.__kvlabKeys = true;
  // Plotly rejects the promise of an animation that another one interrupts (Pause, a key, the
  // slider) with no reason at all; nobody awaits Plotly's own buttons' promises, so each Pause
  // logged "Uncaught (in promise) undefined". Only that reasonless rejection is quietened.
  w.addEventListener('unhandledrejection', function (ev) { if (ev.reason === undefined) ev.preventDefault(); });
  // Whether the animation is playing, as Plotly itself reports it: the Play button, the slider
  // and these keys all start and stop the same animation, so the state is read from its events.
  let playing = false;
  function maps() {
    for (const gd of w.document.querySelectorAll('.js-plotly-plot')) {
      if (gd._fullLayout && gd._fullLayout.sliders && gd._fullLayout.sliders.length) {
        if (!gd.__kvlabEvents && gd.on) {
          gd.__kvlabEvents = true;
          gd.on('plotly_animating', function () { playing = true; });
          gd.on('plotly_animated', function () { playing = false; });
          gd.on('plotly_animationinterrupted', function () { playing = false; });
        }
        return gd;
      }
    }
    return null;
  }
  // bind the events as soon as the chart exists, so a click on Play is seen before any key press
  const watcher = setInterval(function () { if (maps()) clearInterval(watcher); }, 500);
  function show(gd, i) {
    const steps = gd._fullLayout.sliders[0].steps;
    i = Math.max(0, Math.min(steps.length - 1, i));
    w.Plotly.animate(gd, [steps[i].args[0][0]],
      {frame: {duration: 0, redraw: true}, mode: 'immediate', transition: {duration: 0}}).catch(function () {});
  }
  w.document.addEventListener('keydown', function (ev) {
    const t = ev.target;
    if (t && (t.tagName === 'INPUT' || t.tagName === 'TEXTAREA' || t.isContentEditable ||
              t.getAttribute('role') === 'slider')) return;
    if (ev.key === 'Escape') {
      for (const b of w.document.querySelectorAll('button')) {
        if (b.innerText.trim().startsWith('Leave presentation mode')) { b.click(); return; }
      }
      return;
    }
    const gd = maps();
    if (!gd || !w.Plotly) return;
    const active = gd._fullLayout.sliders[0].active || 0;
    if (ev.key === 'ArrowRight') { ev.preventDefault(); playing = false; show(gd, active + 1); }
    else if (ev.key === 'ArrowLeft') { ev.preventDefault(); playing = false; show(gd, active - 1); }
    else if (ev.key === ' ' || ev.key === 'k') {
      ev.preventDefault();
      if (playing) {
        w.Plotly.animate(gd, [null], {frame: {duration: 0, redraw: false}, mode: 'immediate',
                                      transition: {duration: 0}}).catch(function () {});
        playing = false;
      } else {
        w.Plotly.animate(gd, null, {frame: {duration: 80, redraw: true}, fromcurrent: true,
                                    transition: {duration: 0}}).catch(function () {});
      }
    }
  });
})();
</script>
"""

_PRESENT_CSS = """
<style>
section[data-testid="stSidebar"], [data-testid="stSidebarCollapsedControl"],
[data-testid="stExpandSidebarButton"] { display: none !important; }
.stMainBlockContainer { max-width: 100% !important; padding: 0.6rem 2rem 2rem 2rem !important; }
header[data-testid="stHeader"] { display: none !important; }
.stMainBlockContainer p, .stMainBlockContainer li { font-size: 1.25rem; }
[data-testid="stMetricValue"] p { font-size: 2.6rem !important; line-height: 1.2; }
[data-testid="stMetricLabel"] p { font-size: 1.15rem !important; }
[data-testid="stMetricDelta"] p { font-size: 1.1rem !important; }
h1 { font-size: 2.2rem !important; padding: 0.2rem 0 0.4rem 0 !important; }
/* tables, read from the back row too: st.table is HTML, so its text grows like the prose (an
   st.dataframe draws on a canvas no font-size reaches: data_table() shows st.table instead) */
.stMainBlockContainer [data-testid="stTable"] td, .stMainBlockContainer [data-testid="stTable"] th {
  font-size: 1.2rem !important; }
/* the values a teacher changes are read from the back row too: inputs, select boxes, slider ticks */
.stMainBlockContainer input, .stMainBlockContainer textarea,
.stMainBlockContainer [data-baseweb="select"] div { font-size: 1.2rem !important; }
.stMainBlockContainer [data-testid="stSliderTickBarMin"],
.stMainBlockContainer [data-testid="stSliderTickBarMax"],
.stMainBlockContainer [data-testid="stSliderThumbValue"] { font-size: 1.1rem !important; }
</style>
"""


def keyboard_shortcuts() -> None:
    """Install the frame-stepping and play/pause keys (see the module docstring)."""
    st.html(_KEYS_JS, unsafe_allow_javascript=True)


def presentation_mode(animated: bool = False, own_url: bool = False) -> bool:
    """The shared sidebar's presentation toggle (bound to the URL as ``present``, so ``?present=true``
    opens any page presenting); when on, enlarge the type, hide the sidebar and offer a way back.
    Called once per run by app.py, before the page runs; pages ask :func:`is_presenting`.

    A link's other parameters are read by the explainer alone. On any other page each one is named
    in a note, with the parameters the page takes, and dropped from the URL (so it is said once):
    Streamlit ignored ``/capacity?colour=red`` without a word. The page renders with its defaults.

    Args:
        animated: the page has an animation the keys step (the caption names those keys).
        own_url: the page checks its own parameters (the explainer, and ``/explainer``, which
            forwards them to it; the Capacity page, ``url_params.check_capacity_params``): nothing
            is said here, so nothing is named twice.

    Returns:
        Whether presentation mode is on.
    """
    # a value the toggle cannot read (``?present=maybe``) is dropped by Streamlit without a word, on
    # every page: name it, and go on with the default
    raw = st.query_params.get("present")
    refused = check_boolean("present", raw)[1] if raw is not None else None
    if refused:
        del st.query_params["present"]
        show_error(refused, kind="warning", icon=":material/link_off:")
    # ``present`` repeated: kept to its last value here, on every page, before its toggle is drawn (a
    # page checking its own parameters cannot change it after: it is bound to the toggle)
    for message in keep_last_values([n for n in st.query_params.keys() if n in PAGE_PARAMS]):
        show_error(message, kind="warning", icon=":material/link_off:")
    if not own_url:
        params = st.query_params.to_dict()          # a repeated parameter: its last value
        for message in unknown_params(params):
            show_error(message, kind="warning", icon=":material/link_off:")
        for name in params:
            if name not in PAGE_PARAMS:
                del st.query_params[name]
    on = st.sidebar.toggle("Presentation mode", key="present", bind="query-params",
                           help="Large type and no sidebar, for a projector, on every page. Esc leaves; on "
                                "the animation, → ← step it and space plays or pauses.")
    if on:
        st.html(_PRESENT_CSS)
        left, right = st.columns([4, 1], vertical_alignment="center")
        left.caption("Presentation mode · " + ("→ / ← step the animation · space plays or pauses · "
                                               if animated else "") + "Esc leaves")
        right.button("Leave presentation mode", on_click=_leave, width="stretch")
    return on


def keep_last_values(names) -> list[str]:
    """For each of ``names`` the link gives more than once, keep only its last value in the URL (the
    one ``st.query_params`` reads; a bound widget would start from the first) and return the notes
    that say so (``url_params.repeated_params``: plain text)."""
    given = {name: st.query_params.get_all(name) for name in names}
    for name, values in given.items():
        if len(values) > 1:
            st.query_params[name] = values[-1]
    return repeated_params(given)


def chart(fig, **kwargs) -> None:
    """``st.plotly_chart(fig, **kwargs)``, with the figure's text sized for the back row of the room
    while presentation mode is on (:func:`allocator.viz.projector.for_the_back_row`). Every page's
    chart goes through here except the explainer's maps, which have their own projector form
    (``tests/core/test_layering.py`` checks it). Its title and a legend above it are kept out of
    Plotly's toolbar (:func:`allocator.viz.modebar.clear_of_modebar`), which keeps few buttons."""
    kwargs["config"] = {**MODEBAR_CONFIG, **(kwargs.get("config") or {})}
    st.plotly_chart(clear_of_modebar(for_the_back_row(fig) if is_presenting() else fig), **kwargs)


#: The longest table presentation mode draws as HTML (st.table) rather than as a scrolling grid.
PRESENT_TABLE_ROWS = 60


def data_table(data, *, container=None, column_config=None, hide_index=None, **kwargs) -> None:
    """A table on a page: ``st.dataframe`` (sortable, scrolling), but in presentation mode, for a
    table of at most :data:`PRESENT_TABLE_ROWS` rows, ``st.table``: the grid draws its cells on a
    canvas whose text no style reaches, so a projector's back row could not read it (issue 40),
    while an HTML table's text grows with the page's. The columns keep their
    ``column_config`` labels there (the tooltips are the grid's alone).

    Args:
        data: a DataFrame or a pandas Styler; container: where to draw (default: the page).
        column_config, hide_index, kwargs: ``st.dataframe``'s (height, width, key, ...).
    """
    where = container if container is not None else st
    frame = getattr(data, "data", data)                          # a Styler's frame
    if is_presenting() and len(frame) <= PRESENT_TABLE_ROWS:
        labels = {c: v.get("label") for c, v in (column_config or {}).items() if isinstance(v, dict) and v.get("label")}
        styler = data if frame is not data else frame.style
        if labels:
            styler = styler.relabel_index([labels.get(c, c) for c in frame.columns], axis="columns")
        if hide_index:
            styler = styler.hide(axis="index")
        floats = [c for c in frame.columns if frame[c].dtype.kind == "f"]
        if floats and frame is data:         # a Styler's own formats stand; a frame's floats read as the grid's
            styler = styler.format(table_float, subset=floats)
        where.table(styler)
        return
    where.dataframe(data, column_config=column_config, hide_index=hide_index, **kwargs)


def table_float(value) -> str:
    """A float cell of a presentation-mode table: at most four decimals, trailing zeros dropped
    ("1.7", "2.19", "1"), as the grid would show it -- never pandas' six ("1.000000"), whose digits
    the data does not have; a missing value stays blank."""
    if value != value:                       # NaN
        return ""
    return np.format_float_positional(float(value), precision=4, unique=True, trim="-")


def is_presenting() -> bool:
    """Whether presentation mode is on (the toggle app.py draws for every page)."""
    return bool(st.session_state.get("present"))


def _leave() -> None:
    st.session_state["present"] = False


def share_link() -> None:
    """A popover with the current page's URL, query parameters included (st.code has a copy button)."""
    base = (st.context.url or "").split("?")[0]
    params = {k: v for k, v in st.query_params.to_dict().items() if k != "present"}
    link = base + ("?" + urlencode(params) if params else "")
    with st.popover("Copy link to this scenario", icon=":material/link:"):
        st.caption("Everything in the sidebar is in this link: a student who opens it sees the same "
                   "scenario (presentation mode and an uploaded file are not part of it).")
        st.code(link or "(open the app in a browser to get its address)", language=None, wrap_lines=True)
        host = base.split("//")[-1].split("/")[0].split(":")[0]
        if host in ("localhost", "127.0.0.1", "[::1]", "::1"):
            st.warning("This address only works on this computer. For students, replace "
                       f"**{host}** with this computer's address on the classroom network "
                       "(e.g. from `hostname -I`), or open the app by that address before copying.")
