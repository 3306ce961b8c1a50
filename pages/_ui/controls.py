"""The explainer's sidebar: every scenario setting as a widget, and the URL that carries them.

Numbers are bound to the URL by Streamlit (``bind="query-params"``). The three choices (workload,
arrivals, preemption) are written to the URL by this module as short stable values, because
Streamlit would write their display labels. A link is checked once, when a session opens it
(``pages._ui.url_params.check_params``): a value the sidebar does not offer is dropped with a
message that names it and says what is used instead. Every numeric widget is drawn from its rule in
``pages._ui.url_params.number_rules`` (range, step, default), the table that check reads too, so a
link and the sidebar accept the same values (``tests/pages/test_url_params.py`` ties them). A number
input has no browser range (Streamlit's refuses silently): :func:`checked_number` checks the typed
value on the server and says why it was not used.
"""
import streamlit as st

from allocator.cost.best import profiled_pairs
from allocator.engine.scenario import UPLOAD_MAX_ROWS, Scenario
from allocator.workloads.sharegpt import sharegpt_lengths
from allocator.workloads.trace import ShippedDataError, shipped_trace
from allocator.common.limits import MAX_UPLOAD_BYTES
from allocator.common.validate import one_line, plain_markdown, show
from allocator.common.formats import plural
from pages._ui.cache import uploaded_rows
from pages._ui.errors import show_error
from pages._ui.present import keep_last_values
from pages._ui.url_params import (BLOCK_SIZE_DEFAULT, BLOCK_SIZES, CHOICE_DEFAULTS, CHOICES, NumberRule,
                                  check_params, number_rules, refused_number)

UPLOAD_HELP = ("A CSV in the Azure schema (TIMESTAMP, ContextTokens, GeneratedTokens) or a plain one "
               f"(prompt_tokens, output_tokens, optional arrival_s in seconds); at most {UPLOAD_MAX_ROWS:,} "
               f"rows and {MAX_UPLOAD_BYTES // 1_000_000} MB.")
_READ = "url_checked"


#: Session key: the name of an uploaded file the sidebar refused this run (its error box is shown there).
UPLOAD_REFUSED = "_upload_refused"

def read_url() -> list[str]:
    """Once per session, before the widgets are drawn: check the URL's parameters, drop the ones the
    sidebar cannot take, and put the choices into the widgets' state. Returns the messages about
    dropped parameters on that first run (an empty list afterwards); the first about a parameter
    that is not a setting of the page lists the ones it takes, as every page's note does."""
    if st.session_state.get(_READ):
        return []
    st.session_state[_READ] = True
    params = st.query_params.to_dict()              # a repeated parameter: its last value
    accepted, messages = check_params(params, list_taken=True)
    messages = keep_last_values(params) + messages
    for name in params:
        if name not in accepted:
            del st.query_params[name]
    _seed_widgets_from_checked_url()
    for name in (*CHOICES, "seconds_axis"):
        if name in accepted:
            st.session_state[name] = accepted[name]
    return messages


def _seed_widgets_from_checked_url() -> None:
    """Make the URL-bound widgets start from the URL as checked, not as it was opened.

    Streamlit seeds a ``bind="query-params"`` widget from the query string the session opened
    with, even after the parameter was deleted, and a value such as ``seed=1e400`` or
    ``slots_classroom-40=inf`` then stops the page inside Streamlit (its int conversion raises an
    OverflowError it does not catch). Streamlit does the same reset itself after a page change
    (``QueryParams.set_initial_query_params_from_current``); this is an internal API, so if it is
    ever missing the page goes on without it.
    """
    from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx
    ctx = get_script_run_ctx()
    try:
        with ctx.session_state.query_params() as qp:
            qp.set_initial_query_params_from_current()
    except AttributeError:                       # another Streamlit: keep its own seeding
        pass


def _start(key: str, value) -> dict:
    """``value=`` for the keyed widget ``key``, or nothing when its value was just set through
    ``st.session_state`` (by the guided lesson, the end of the lesson or the URL): Streamlit then
    takes the value from session state and logs a warning with a stack trace if ``value=`` is
    given as well ("created with a default value but also had its value set via the Session State
    API"). The check uses Streamlit's session state (an internal API, as above); without it, any
    key already in session state is drawn without ``value=``."""
    try:
        from streamlit.runtime.state import get_session_state
        just_set = get_session_state().is_new_state_value(key)
    except (ImportError, AttributeError, RuntimeError):
        just_set = key in st.session_state
    return {} if just_set else {"value": value}


def _choice(container, name: str, label: str, **kwargs):
    """A choice widget whose URL value is its short value (written back after every run)."""
    options = list(CHOICES[name])
    st.session_state.setdefault(name, CHOICE_DEFAULTS[name])
    widget = container.selectbox if name in ("workload", "gpu", "model") else container.radio
    value = widget(label, options, format_func=CHOICES[name].get, key=name, **kwargs)
    st.query_params[name] = value
    return value


def _number(container, rule: NumberRule, key: str, label: str, *, slider: bool = False, high=None, **kwargs):
    """The number input (or slider) for URL parameter ``key``, drawn from its rule
    (``url_params.number_rules``): the same range, step and default the URL check applies.
    ``high`` narrows the top end to what this run can take (the trace's last row)."""
    top = rule.high if high is None else min(rule.high, high)
    if slider:
        return container.slider(label, rule.low, top, step=rule.button_step, key=key,
                                **_start(key, rule.default), **kwargs)
    return checked_number(container, rule, key, label, high=high, **_start(key, rule.default), **kwargs)


def _shown(rule: NumberRule, value) -> str:
    """A value of ``rule`` as a message writes it: ``1,000``, ``20.5``."""
    return f"{int(value):,}" if rule.integer else f"{value:g}"


def _good(key: str) -> str:
    """Session-state key of the last value of widget ``key`` that was used."""
    return f"_used_{key}"


def _refuse_out_of_range(key: str, rule: NumberRule, label: str, high) -> None:
    """on_change of a :func:`checked_number` widget: a value its rule refuses is put back to the
    last one used, and the reason is kept for the run this change starts."""
    message = refused_number(rule, st.session_state.get(key), label, high)
    if message:
        kept = st.session_state.get(_good(key), rule.default)
        st.session_state[key] = kept
        st.session_state[f"_refused_{key}"] = f"{message}; the page keeps {_shown(rule, kept)}."


def checked_number(container, rule: NumberRule, key: str, label: str, *, high=None, say_in=None, **kwargs):
    """A number input drawn from ``rule`` (``url_params.number_rules`` or ``url_params.PAGE_RULES``)
    that says why a value was not used.

    Streamlit's own ``min_value``/``max_value`` refuse a number typed past them in the browser: the
    field turns red and the page never hears of it, so the widget is drawn without them. Its value
    is checked on the server instead (``url_params.refused_number``, the test a URL's value meets):
    a refused one is put back to the last value used, and an error under the widget names the range
    and that value (:func:`pages._ui.errors.show_error`). A value put into session state some other
    way is checked too, and the last good one used in its place.

    Args:
        container: where the widget goes (``st.sidebar``, a column).
        rule, key, label: the rule, the widget key, its caption.
        high: a narrower top end for this run (the trace's last row).
        say_in: where the error goes (a container under a row of controls); ``container`` when None.
        kwargs: passed to ``number_input`` (``help``, ``value``, ``bind``).

    Returns:
        The value to use: always one the rule takes.
    """
    value = container.number_input(label, step=rule.button_step, key=key, on_change=_refuse_out_of_range,
                                   args=(key, rule, label, high), **kwargs)
    message = st.session_state.pop(f"_refused_{key}", None)
    late = refused_number(rule, value, label, high)
    if late:                                   # set without the widget (a test, a page's defaults)
        value = st.session_state.get(_good(key), rule.default)
        message = f"{late}; the page uses {_shown(rule, value)}."
    else:
        st.session_state[_good(key)] = value
    if message:
        show_error(message, say_in if say_in is not None else container, after="")
    return value


def controls() -> Scenario:
    """Sidebar controls -> Scenario. Every widget is keyed and carried by the URL, so a copied link
    reproduces the scenario (see the module docstring)."""
    sb = st.sidebar
    url = dict(bind="query-params")
    sb.header("Scenario")
    workload = _choice(sb, "workload", "Workload",
                       help="classroom-40 is synthetic and calibrated for the lesson; the trace replays "
                            "real request lengths and arrival times.")
    rules = number_rules(workload)
    block_size = sb.select_slider("Block size (slots per block)", options=list(BLOCK_SIZES),
                                  key="block_size", **_start("block_size", BLOCK_SIZE_DEFAULT),
                                  help="Paged allocator only: how many tokens' K and V one block holds.", **url)
    key = f"slots_{workload}"
    total_slots = _number(sb, rules[key], key, "Pool size (slots)",
                          help="Slots of KV cache both allocators share; one slot holds one token.", **url)
    key = f"max_new_{workload}"
    max_new = _number(sb, rules[key], key, "max_new_tokens (generation cap)",
                      help="Reserve-max reserves prompt + this many slots for every request.", **url)
    kw = {}
    if workload == "classroom-40":
        kw["seed"] = int(_number(sb, rules["seed"], "seed", "Seed",
                                 help="Draws a different forty requests of the same kind.", **url))
        kw["arrival"] = _choice(sb, "arrival", "Arrivals", horizontal=True)
        if kw["arrival"] == "trickle":
            kw["arrival_rate"] = _number(sb, rules["arrival_rate"], "arrival_rate", "Arrival rate (requests per step)",
                                         slider=True, **url)
    else:
        n_rows = None
        st.session_state.pop(UPLOAD_REFUSED, None)
        if workload == "upload":
            up = sb.file_uploader("Trace CSV", type=["csv"], key="trace_file", help=UPLOAD_HELP)
            if up is None:
                sb.info("Upload a CSV to replay it. " + UPLOAD_HELP)
            else:
                kw["trace_bytes"], kw["trace_name"] = up.getvalue(), one_line(up.name)
                try:
                    n_rows = uploaded_rows(kw["trace_bytes"])
                    sb.success(plain_markdown(f"{one_line(up.name)}: {plural(n_rows, 'request')}"))
                except ValueError as exc:
                    # the one error box of a bad file, under the uploader; the page says only that it
                    # shows the last run (UPLOAD_REFUSED), not the same words twice more
                    show_error(f"{one_line(up.name)}: {exc}", sb)
                    st.session_state[UPLOAD_REFUSED] = one_line(up.name)
        elif workload == "sharegpt-opt":
            try:
                n_rows = len(sharegpt_lengths())
            except ShippedDataError:        # the run fails too, and the page names the file and what to do
                pass
        else:
            try:
                n_rows = len(shipped_trace())
            except ShippedDataError:        # the run fails too, and the page names the file and what to do
                pass
        last_row = max(0, (n_rows or 1) - 1)
        key = f"offset_{workload}"
        if key in st.query_params and st.query_params[key].isascii() and st.query_params[key].isdigit() and int(st.query_params[key]) > last_row:
            show_error(f"URL parameter {key}={show(st.query_params[key])} is past the trace's "
                       f"last row ({last_row:,}, counting from 0); using 0.", kind="warning",
                       icon=":material/link_off:")
            del st.query_params[key]
        kw["offset"] = int(_number(sb, rules[key], key, "First row (offset)", high=last_row, **url))
        key = f"count_{workload}"
        kw["count"] = int(_number(sb, rules[key], key, "Requests to replay", slider=True, **url))
        key = f"steps_per_second_{workload}"
        kw["steps_per_second"] = float(_number(
            sb, rules[key], key, "Engine steps per second of trace time",
            help="One step is one decode iteration; 20 per second is 50 ms each.", **url))
    sb.subheader("Sharing and preemption")
    kw["shared_prefix"] = int(_number(
        sb, rules["shared_prefix"], "shared_prefix", "Shared system prompt (tokens)",
        help="Put the same system prompt in front of every request. Paging stores its full blocks once "
             "and points every block table at them; reserve-max must copy it into every reservation.", **url))
    kw["policy"] = _choice(sb, "policy", "Reservation policy (left side)",
                           help="How much the contiguous allocator reserves per request (the PagedAttention paper's "
                                "baselines): max, the worst case; pow2, the answer length rounded up to a power of "
                                "two; oracle, exactly the answer's length — which no real server knows in advance.")
    kw["placement"] = _choice(sb, "placement", "Reservation placement (left side)",
                              help="Where the contiguous allocator puts a reservation. First fit: exactly the "
                                   "reserved slots, at the lowest free run long enough (the lesson's). Buddy: as "
                                   "the PagedAttention paper's Orca baselines did — capped at 2,048 tokens, rounded "
                                   "up to a power of two of 16-slot blocks, split from and merged back into "
                                   "power-of-two free runs; the rounding shows orange, allocated and empty.")
    kw["preemption"] = _choice(sb, "preemption", "When paged memory runs out", horizontal=True,
                               help="Recompute drops the evicted sequence's blocks and prefills its tokens "
                                    "again later; swap copies them to host memory and back.")
    sb.subheader("Model (paged side)")
    window = int(_number(
        sb, rules["sliding_window"], "sliding_window", "Sliding window (tokens; 0: full attention)",
        help="A sliding-window model attends only to its last tokens, so the paged side releases every block "
             "wholly behind the window (vLLM's sliding-window manager) and runs vLLM v1's scheduler, whose rule "
             "this is. 0 keeps every token: the lesson's own model and rules.", **url))
    if window:
        kw["sliding_window"], kw["rules"] = window, "v1"
    cost = _number(sb, rules["metadata_cost"], "metadata_cost", "Metadata cost c (slot equivalents per block)",
                   slider=True,
                   help="What one block-table entry costs, in slots. Raises the price of small blocks.", **url)
    return Scenario(workload=workload, total_slots=int(total_slots), block_size=int(block_size),
                    max_new_tokens=int(max_new), metadata_cost=float(cost), **kw)


def time_controls() -> dict:
    """The sidebar's "Seconds" section: which GPU and model price the steps, and whether the
    animation's time axis is in seconds. Returns {"gpu", "model", "seconds_axis"}. Pricing never
    changes the runs, only what a step costs."""
    sb = st.sidebar
    sb.subheader("Seconds")
    gpu = _choice(sb, "gpu", "GPU", help="Each engine step is priced for this GPU: by its measured operator "
                                         "timings where the lab holds them for the chosen model (" + profiled_pairs()
                                         + "), else from its datasheet figures (a roofline; see the Throughput and "
                                         "latency page's cost model). The seconds say which.")
    model = _choice(sb, "model", "Model",
                    help="The model whose weights and KV cache each step reads and writes. The pool stays the size "
                         "set above; a model too big for one GPU is priced split over several.")
    axis = sb.toggle("Animation's time axis in seconds", key="seconds_axis", **_start("seconds_axis", False),
                     help="Off: the animation steps through engine steps, the same for both allocators. On: it "
                          "moves through seconds on this GPU, and each map shows where its own run was at that "
                          "moment (the lesson's steps are quoted in engine steps).")
    if axis:
        st.query_params["seconds_axis"] = "true"
    elif "seconds_axis" in st.query_params:
        del st.query_params["seconds_axis"]
    return {"gpu": gpu, "model": model, "seconds_axis": axis}
