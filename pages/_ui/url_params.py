"""What the explainer's URL query parameters may hold, and what to say when one is wrong.

A shared link carries every sidebar setting. Streamlit ignores a value its widget cannot take
(``?block_size=7``) without a word, and writes the *display label* of a choice into the URL
(``workload=Azure+conversation+trace+%28real…``). This module (no streamlit import, so it is
tested directly) checks each parameter against the same ranges and choices the sidebar offers,
which lie inside the core's documented ranges (``allocator.common.limits.LIMITS``: the row offset uses
that table's range as it is, and every rule takes its unit from it), maps choices to short stable values (``workload=classroom-40|azure-conv|upload``,
``arrival=burst|trickle``, ``preemption=recompute|swap``, ``policy=max|pow2|oracle``, ``gpu`` and
``model`` as the cost model's preset keys; the old labels are still accepted), checks
``seconds_axis`` and ``present`` (``true|false``),
and words a message naming the parameter, the value and what is used instead. The same rules
check a number typed into a widget (:func:`refused_number`; the other pages' number inputs are in
:data:`PAGE_RULES`), and ``present`` is checked on every page (:func:`check_boolean`). A parameter
that is not a setting of the page is named on every page by one rule: the explainer's here, the
other pages', which take only ``present``, by :func:`unknown_params`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from allocator.workloads.requests import CLASSROOM_40
from allocator.accounting.models import PRESETS
from allocator.engine.scenario import DEFAULT_MAX_NEW, DEFAULT_SLOTS
from allocator.common.limits import LIMITS
from allocator.cost.roofline import DEFAULT_GPU, DEFAULT_MODEL, GPUS, TIMED_MODELS
from allocator.common.validate import Limit, show
from allocator.accounting.kv_configs import CONFIG_KEYS, KV_CACHE_DTYPES
from allocator.accounting.memory import CAPACITY_DEFAULTS
from allocator.engine.v1 import DEFAULT_ACCEPTANCE_RATE

#: Block sizes offered on the slider: the powers of two engines use, plus a few in between.
BLOCK_SIZES = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256)

#: Short stable value -> the label the sidebar shows, per choice widget.
CHOICES = {
    "workload": {"classroom-40": "classroom-40 (synthetic)",
                 "azure-conv": "Azure trace (real, 2023)",
                 "sharegpt-opt": "ShareGPT lengths (the PagedAttention paper's)",
                 "upload": "Your own trace (CSV)"},
    "arrival": {"burst": "all at step 0", "trickle": "trickle"},
    "preemption": {"recompute": "recompute", "swap": "swap to host"},
    "policy": {"max": "max: prompt + max_new_tokens", "pow2": "pow2: prompt + next power of two",
               "oracle": "oracle: prompt + exact answer"},
    "placement": {"first-fit": "first fit: one run of slots", "buddy": "buddy: power-of-two runs of blocks (the paper's)"},
    "gpu": {key: gpu.label for key, gpu in GPUS.items()},
    "model": {key: PRESETS[key].short for key in TIMED_MODELS},
}
#: Labels earlier versions wrote into shared links, still accepted.
OLD_LABELS = {"workload": {"classroom-40 (forty chat requests, all at once)": "classroom-40",
                           "Azure conversation trace (real requests, 2023)": "azure-conv",
                           "Your own trace (upload a CSV)": "upload"}}

#: Default of each choice.
CHOICE_DEFAULTS = {"workload": "classroom-40", "arrival": "burst", "preemption": "recompute", "policy": "max",
                   "placement": "first-fit",
                   "gpu": DEFAULT_GPU, "model": DEFAULT_MODEL}

WORKLOADS = tuple(CHOICES["workload"])


@dataclass(frozen=True)
class NumberRule:
    """A numeric sidebar setting: its range, step and default, read by the widget that shows it
    (``pages._ui.controls``) and by the URL check (:func:`check_params`) alike.

    Attributes:
        limit: the inclusive range and unit; the core's own (``LIMITS[field]``) where the sidebar
            offers all of it, else the sidebar's narrower range with the core's unit.
        step: a number that is not whole must lie on this grid from ``low`` (the slider's step; a
            URL value off it is refused).
        default: the widget's starting value, and what a refused URL value is replaced with.
        field: the Scenario setting it feeds (a key of ``LIMITS``).
        widget_step: how far the number input's - and + buttons move (``step`` when None).
    """

    limit: Limit
    step: float
    default: float
    field: str = ""
    widget_step: float | None = None

    low = property(lambda self: self.limit.low)
    high = property(lambda self: self.limit.high)
    unit = property(lambda self: self.limit.unit)
    integer = property(lambda self: self.limit.integer)
    button_step = property(lambda self: self.step if self.widget_step is None else self.widget_step)

    def up_to(self, high: float | None) -> "NumberRule":
        """This rule with its top end lowered to ``high`` (a trace's last row) when that is lower;
        itself when ``high`` is None or not lower."""
        if high is None or high >= self.high:
            return self
        return NumberRule(Limit(self.low, high, self.integer, self.unit), self.step, self.default, self.field,
                          self.widget_step)

    def describe(self) -> str:
        """The allowed values in words, e.g. ``"a whole number from 64 to 1,048,576"`` or
        ``"a number from 0 to 8 in steps of 0.25"`` (the unit is added by the message)."""
        words = Limit(self.low, self.high, self.integer).describe()
        return words if self.integer else f"{words} in steps of {self.step:g}"


def _sidebar(field: str, low: float, high: float, step: float, default: float,
             widget_step: float | None = None) -> NumberRule:
    """A rule for a widget whose range is narrower than the core's: the sidebar's ends, the core's
    unit and kind (whole number or not)."""
    core = LIMITS[field]
    return NumberRule(Limit(low, high, core.integer, core.unit), step, default, field, widget_step)


#: The block size the slider starts at, and what a refused ``block_size`` is replaced with.
BLOCK_SIZE_DEFAULT = 16


def number_rules(workload: str) -> dict[str, NumberRule]:
    """The numeric settings the sidebar shows for ``workload``, by URL parameter (= widget key):
    the one table of their ranges, steps and defaults (``tests/pages/test_url_params.py`` checks that
    every widget drawn has exactly its rule's range and default)."""
    rules = {
        f"slots_{workload}": _sidebar("total_slots", 64, 1 << 20, 1, DEFAULT_SLOTS.get(workload, 8192), 256),
        # the core's whole range, as the CLI takes it (allocator/common/limits.py): one range per setting
        f"max_new_{workload}": NumberRule(LIMITS["max_new_tokens"], 1, DEFAULT_MAX_NEW.get(workload, 1024),
                                          "max_new_tokens", 50),
        "shared_prefix": NumberRule(LIMITS["shared_prefix"], 1, 0, "shared_prefix", 16),
        "metadata_cost": _sidebar("metadata_cost", 0.0, 8.0, 0.25, 0.0),
        # the sliding-window model (0: full attention, every lesson's): the paged side then runs vLLM v1's rules
        "sliding_window": _sidebar("sliding_window", 0, 4096, 1, 0, 16),
    }
    if workload == "classroom-40":
        rules["seed"] = NumberRule(LIMITS["seed"], 1, CLASSROOM_40["seed"], "seed")
        rules["arrival_rate"] = _sidebar("arrival_rate", 0.01, 2.0, 0.01, 0.1)
    else:
        # the row offset: the core's whole range (the sidebar's widget then stops at the trace's last row)
        rules[f"offset_{workload}"] = NumberRule(LIMITS["offset"], 1, 0, "offset")
        rules[f"count_{workload}"] = _sidebar("count", 1, 200, 1, 40)
        rules[f"steps_per_second_{workload}"] = _sidebar("steps_per_second", 0.5, 200.0, 0.5, 20.0, 5.0)
    return rules


#: The number inputs of the other pages, by widget key (not URL parameters): their ranges, steps
#: and defaults, read by the widget (``pages._ui.controls.checked_number``) and by its check
#: (:func:`refused_number`). The Throughput page's runs: 100 to 5,000 requests, inside the core's
#: ``requests`` range, keep a 16-rate sweep within the heavy-work queue's turn. The Prefix cache
#: page's window: its first request takes the core's whole ``offset`` range here and is narrowed to
#: the shipped trace's last row by the page (``checked_number(..., high=)``, the trace is read
#: there); 10 to 2,000 requests (one replay of 2,000 takes a few seconds); the defaults are
#: ``pages._ui.prefix_data.DEFAULTS`` (a test ties them).
PAGE_RULES = {
    "tp_requests": _sidebar("requests", 100, 5000, 100, 1000),
    "pc_offset": NumberRule(LIMITS["offset"], 1, 0, "offset", 100),
    "pc_count": _sidebar("count", 10, 2000, 1, 1000, 100),
}


def refused_number(rule: NumberRule, value, label: str, high: float | None = None) -> str | None:
    """Why a number typed into the widget drawn from ``rule`` cannot be used, or None if it can.

    The widgets are drawn without Streamlit's own min/max, which refuse a value typed past them in
    the browser without a word to the page; the value reaches the server and is checked here, by
    the same test a URL's value meets (:func:`_number`: the range, whole numbers, the step grid).

    Args:
        rule: the widget's rule; ``high`` narrows its top end (a trace's last row).
        value: what the widget returned (int, float or None when the field was emptied).
        label: the widget's caption, which the sentence starts with.

    Returns:
        Plain text such as ``"Requests per run = 50,000 was not used: it must be a whole number from
        100 to 5,000 (requests per run)"`` (no closing full stop), or None.
    """
    rule = rule.up_to(high)
    allowed = rule.describe() + (f" ({rule.unit})" if rule.unit else "")
    if value is None:
        return f"{label} is empty: give {allowed}"
    if isinstance(value, float) and value.is_integer() and rule.integer:
        value = int(value)
    raw = str(value)
    if _number(raw, rule) is not None:
        return None
    shown = f"{value:,}" if isinstance(value, int) else f"{value:,g}"
    return f"{label} = {shown} was not used: it must be {allowed}"


#: Longest parameter name and value a message quotes (characters; longer ones end in "…"), and most
#: messages one link produces (the rest are counted in one more): a hostile or mangled link cannot
#: fill the page.
SHOWN_NAME, SHOWN_VALUE, MAX_MESSAGES = 40, 40, 6
#: The true/false parameters, and the value each stands for when it is absent.
BOOLEANS = {"seconds_axis": False, "present": False}


def _name(name: str) -> str:
    """A parameter name as a message shows it: as it is when it is a plain identifier (``seed``,
    ``slots_classroom-40``), else quoted and cut like a value."""
    return name if name.isascii() and name.replace("-", "_").isidentifier() and len(name) <= SHOWN_NAME \
        else show(name, SHOWN_NAME)


def _said(name: str, raw: str) -> str:
    """``name='value'`` as every message writes a parameter, both cut (``validate.show``)."""
    return f"{_name(name)}={show(raw, SHOWN_VALUE)}"


def check_boolean(name: str, raw: str) -> tuple[bool, str | None]:
    """A true/false parameter (a key of :data:`BOOLEANS`): ``(value, None)`` when ``raw`` is ``true``
    or ``false`` in any case (as Streamlit's bound toggle reads it), else ``(default, message)`` with
    the one sentence every page shows for it, naming the parameter, the values it takes and the
    default used: ``"URL parameter present='maybe' must be true or false; using false."``"""
    if raw.lower() in ("true", "false"):
        return raw.lower() == "true", None
    default = BOOLEANS[name]
    return default, f"URL parameter {_said(name, raw)} must be true or false; using {str(default).lower()}."


def _number(raw: str, rule: NumberRule):
    """The value ``raw`` stands for, or None if it is not one the widget offers. A whole number must
    be written in plain digits (``19366``, not ``1e5`` or ``19366.0``): the widget that reads the
    link takes nothing else and would silently start from its default."""
    if rule.integer and not (raw.isascii() and raw.isdigit() and len(raw) <= 20):
        return None
    try:
        value = float(raw)
    except (TypeError, ValueError, OverflowError):
        return None
    if not math.isfinite(value) or not rule.low <= value <= rule.high:
        return None
    if rule.integer:
        return int(raw)
    steps = (value - rule.low) / rule.step
    return value if abs(steps - round(steps)) < 1e-9 else None


def _choice(name: str, raw: str) -> str | None:
    """The short value a choice parameter names (its short value or its old display label), or None."""
    options = CHOICES[name]
    if raw in options:
        return raw
    for short, label in options.items():
        if raw == label:
            return short
    return OLD_LABELS.get(name, {}).get(raw)


def check_params(params: dict[str, str], list_taken: bool = False) -> tuple[dict, list[str]]:
    """Check a URL's query parameters against what the sidebar offers.

    Args:
        params: the query string as {name: value} (strings).
        list_taken: end the first message about a parameter that is not a setting of this page with
            the parameters it takes (:func:`taken_sentence`), as every page's note does; the
            explainer's :func:`pages._ui.controls.read_url` asks for it.

    Returns:
        (accepted, messages): ``accepted`` maps every good parameter to its value (choices as
        short values, numbers as int/float, ``present`` and ``seconds_axis`` as bools);
        ``messages`` has one sentence per parameter that was not used, naming it, its value (both
        cut to 40 characters) and what is used instead, at most ``MAX_MESSAGES`` of them and then
        one that counts the rest. Messages are plain text: a page shows them through
        ``allocator.common.validate.plain_markdown``, since names and values came from whoever wrote the link.
    """
    accepted, messages = {}, []
    workload = CHOICE_DEFAULTS["workload"]
    raw_workload = params.get("workload")
    if raw_workload is not None:
        short = _choice("workload", raw_workload)
        if short is None:
            messages.append(f"URL parameter {_said('workload', raw_workload)} is not a workload of this page "
                            f"(one of {', '.join(WORKLOADS)}); using {workload}.")
        else:
            accepted["workload"] = workload = short
    rules = number_rules(workload)
    for name, raw in params.items():
        if name == "workload":
            continue
        if name in BOOLEANS:
            value, message = check_boolean(name, raw)
            if message:
                messages.append(message)
            else:
                accepted[name] = value
            continue
        if name in CHOICES:
            short = _choice(name, raw)
            if short is None:
                messages.append(f"URL parameter {_said(name, raw)} is not one of {', '.join(CHOICES[name])}; "
                                f"using {CHOICE_DEFAULTS[name]}.")
            else:
                accepted[name] = short
        elif name == "block_size":
            value = _number(raw, NumberRule(Limit(BLOCK_SIZES[0], BLOCK_SIZES[-1], unit="slots per block"), 1,
                                            BLOCK_SIZE_DEFAULT, "block_size"))
            if value not in BLOCK_SIZES:
                messages.append(f"URL parameter {_said(name, raw)} is not a block size the slider offers "
                                f"({', '.join(map(str, BLOCK_SIZES))}); using {BLOCK_SIZE_DEFAULT}.")
            else:
                accepted[name] = value
        elif name in rules:
            rule = rules[name]
            value = _number(raw, rule)
            if value is None:
                default = f"{rule.default:,.0f}" if rule.integer else f"{rule.default:g}"
                digits = (" written in digits only" if rule.integer and _number_anyhow(raw, rule) else "")
                messages.append(f"URL parameter {_said(name, raw)} must be {rule.describe()}"
                                + (f" ({rule.unit})" if rule.unit else "") + digits + f"; using {default}.")
            else:
                accepted[name] = value
        else:
            message = _ignored(name, raw, workload if _other_workload(name, workload) else None)
            if list_taken:                  # the first such message lists what the page takes
                message += " " + taken_sentence(explainer_params(workload))
                list_taken = False
            messages.append(message)
    return accepted, _capped(messages)


def _capped(messages: list[str]) -> list[str]:
    """At most ``MAX_MESSAGES`` messages: the first ones, then one that counts the rest."""
    if len(messages) <= MAX_MESSAGES:
        return messages
    rest = len(messages) - MAX_MESSAGES + 1
    return messages[:MAX_MESSAGES - 1] + [f"{rest} more URL parameters were not used either; "
                                          "the page uses its defaults for them."]


def _ignored(name: str, raw: str, workload: str | None = None) -> str:
    """The sentence for a parameter that is not a setting of the page, on every page:
    ``"URL parameter colour='red' is not a setting of this page; it was ignored."`` (with ``for the
    azure-conv workload`` when it is a setting of another workload)."""
    return (f"URL parameter {_said(name, raw)} is not a setting of this page"
            + (f" for the {workload} workload" if workload else "") + "; it was ignored.")


def repeated_params(values: dict[str, list[str]]) -> list[str]:
    """The notes about parameters a link gives more than once (``/?block_size=16&block_size=32``, a
    link edited by hand): Streamlit reads only the last value, so each note names the values and the
    one used (names and values cut as every message cuts them; at most four values quoted), at most
    ``MAX_MESSAGES`` in all. Plain text, like every note here.

    Args:
        values: every value of each parameter, in the link's order (``st.query_params.get_all``).

    Example: ``{"block_size": ["16", "32"]}`` -> ``["URL parameter block_size is given 2 times ('16',
    '32'); only the last, '32', is read."]``.
    """
    messages = []
    for name, given in values.items():
        if len(given) > 1:
            quoted = ", ".join(show(v, SHOWN_VALUE) for v in given[:4]) + (", …" if len(given) > 4 else "")
            messages.append(f"URL parameter {_name(name)} is given {len(given)} times ({quoted}); only the last, "
                            f"{show(given[-1], SHOWN_VALUE)}, is read.")
    return _capped(messages)


def taken_sentence(taken) -> str:
    """``"The URL parameters this page takes: present."``: the names a page reads, in its order."""
    return f"The URL parameters this page takes: {', '.join(taken)}."


def explainer_params(workload: str) -> tuple[str, ...]:
    """The URL parameters the explainer takes with ``workload`` chosen: the ones :func:`check_params`
    accepts (the workload, the block size, the workload's numbers, the other choices, the booleans)."""
    return ("workload", "block_size", *number_rules(workload),
            *(name for name in CHOICES if name != "workload"), *BOOLEANS)


#: The URL parameters every page other than the explainer takes: only presentation mode's (the
#: Capacity page takes its own as well: :data:`CAPACITY_PARAMS`, :func:`page_params`).
PAGE_PARAMS = ("present",)

# ------------------------------------------------------------------------------ the Capacity page

#: The Capacity page's controls, by URL parameter: (widget key, default). The page starts its
#: widgets from these defaults (``pages/capacity.py``), and :func:`check_capacity_params` checks a
#: link's values against the same choices and the core's ranges (``LIMITS``).
CAPACITY_PARAMS: dict[str, tuple[str, object]] = {
    "model": ("cap_model", CAPACITY_DEFAULTS["model"]),
    "kv_cache_dtype": ("cap_kv_dtype", "auto"),
    "free_gib": ("cap_free_gib", float(CAPACITY_DEFAULTS["free_gib"])),
    "max_context": ("cap_max_context", CAPACITY_DEFAULTS["max_context"]),
    "mean_tokens": ("cap_mean_tokens", float(CAPACITY_DEFAULTS["mean_tokens"])),
    "block_size": ("cap_block_size", float(CAPACITY_DEFAULTS["block_size"])),
    "layers": ("cap_layers", 32),
    "kv_heads": ("cap_kv_heads", 8),
    "head_dim": ("cap_head_dim", 128),
    "bytes_per_element": ("cap_bytes_per_element", 2),
    "acceptance_rate": ("cap_acceptance_rate", DEFAULT_ACCEPTANCE_RATE),
}
#: "Custom shape…", the model choice whose layers, K/V heads, head size and element size are typed.
CUSTOM_MODEL = "custom"
#: The Capacity page's choices, by URL parameter: the values a link may give.
CAPACITY_CHOICES = {
    "model": (*PRESETS, *CONFIG_KEYS, CUSTOM_MODEL),
    "kv_cache_dtype": KV_CACHE_DTYPES,
    "bytes_per_element": (1, 2, 4),
}
#: The acceptance-rate slider's step (a link's value must lie on it).
ACCEPTANCE_STEP = 0.05


def page_params(url_path: str) -> tuple[str, ...]:
    """The URL parameters the page served at ``url_path`` takes, other than the explainer
    (``"capacity"``: :data:`CAPACITY_PARAMS` and ``present``; any other: ``present``)."""
    return (*CAPACITY_PARAMS, *PAGE_PARAMS) if url_path == "capacity" else PAGE_PARAMS


def _capacity_number(name: str, raw: str):
    """The value a link's ``raw`` gives the Capacity page's number ``name``, or None: a whole number in
    plain digits for a count, any finite number for the others, within the core's range
    (``LIMITS``; ``mean_tokens`` above 0), the acceptance rate on its slider's 0.05 grid."""
    limit = LIMITS[name]
    if limit.integer:
        if not (raw.isascii() and raw.isdigit() and len(raw) <= 20):
            return None
        value = int(raw)
        return value if limit.low <= value <= limit.high else None
    try:
        value = float(raw)
    except (TypeError, ValueError, OverflowError):
        return None
    if not math.isfinite(value) or not limit.low <= value <= limit.high or (limit.low_open and value == limit.low):
        return None
    if name == "acceptance_rate" and abs(value / ACCEPTANCE_STEP - round(value / ACCEPTANCE_STEP)) > 1e-9:
        return None
    return value


def _capacity_allowed(name: str) -> str:
    """What a Capacity parameter takes, in words: ``"a whole number from 1 to 4,096 (slots per block)"``."""
    limit = LIMITS[name]
    words = Limit(limit.low, limit.high, limit.integer, low_open=limit.low_open).describe()   # no unit yet
    if name == "acceptance_rate":
        words += f" in steps of {ACCEPTANCE_STEP:g}"
    return words + (f" ({limit.unit})" if limit.unit else "")


def check_capacity_params(params: dict[str, str]) -> tuple[dict, list[str]]:
    """Check a link's query parameters against the Capacity page's controls.

    Args:
        params: the query string as {name: value} (strings); ``present`` is checked by
            ``pages._ui.present`` and passed over here.

    Returns:
        (accepted, messages): ``accepted`` maps each good parameter's widget key (``cap_model``...)
        to its value (choices as given, counts as int, the rest as float); ``messages`` has one
        plain-text sentence per parameter not used -- a value the control cannot take (naming the
        parameter, the value and the default used instead) or a name that is not a setting of the
        page (the first such one ending with the parameters the page takes) -- at most
        ``MAX_MESSAGES`` of them. A value the control takes but the page's arithmetic refuses
        (``mean_tokens`` above ``max_context``) is accepted here and reported by the page beside
        the control, as a typed value is.
    """
    accepted, messages = {}, []
    listed = False
    for name, raw in params.items():
        if name in PAGE_PARAMS:
            continue
        if name not in CAPACITY_PARAMS:
            message = _ignored(name, raw)
            if not listed:
                message += " " + taken_sentence(page_params("capacity"))
                listed = True
            messages.append(message)
            continue
        key, default = CAPACITY_PARAMS[name]
        shown_default = f"{default:g}" if isinstance(default, float) else str(default)
        if name in CAPACITY_CHOICES:
            options = CAPACITY_CHOICES[name]
            value = next((o for o in options if str(o) == raw), None)
            if value is None:
                messages.append(f"URL parameter {_said(name, raw)} is not one of {', '.join(map(str, options))}; "
                                f"using {shown_default}.")
            else:
                accepted[key] = value
            continue
        value = _capacity_number(name, raw)
        if value is None:
            messages.append(f"URL parameter {_said(name, raw)} must be {_capacity_allowed(name)}; "
                            f"using {shown_default}.")
        else:
            accepted[key] = float(value) if isinstance(default, float) else value
    return accepted, _capped(messages)


def capacity_url_value(name: str, value) -> str | None:
    """How the Capacity page writes control ``name``'s current ``value`` into its URL: the short
    text :func:`check_capacity_params` reads back to the same value (``66``, ``0.7``, ``fp8``), or
    None when the link should leave it out -- it is the default, or a value the check would refuse
    (a typed value the page is reporting)."""
    key, default = CAPACITY_PARAMS[name]
    if value == default or value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        raw = str(int(value))
    else:
        raw = repr(value) if isinstance(value, float) else str(value)
    accepted, messages = check_capacity_params({name: raw})
    return raw if not messages and accepted.get(key) == value else None


def unknown_params(params: dict[str, str], taken=PAGE_PARAMS) -> list[str]:
    """The notes about a link's parameters that a page taking only ``taken`` does not read.

    The same rule as the explainer's (:func:`check_params` with ``list_taken``): one sentence per
    parameter that is not a setting of the page, naming it and its value (cut to 40 characters), the
    first one ending with the parameters the page takes, at most ``MAX_MESSAGES`` in all. A value of
    a parameter in ``taken`` is not checked here (``present``: :func:`check_boolean`). Plain text:
    a page shows it through ``allocator.common.validate.plain_markdown``.

    Example: ``{"colour": "red"}`` -> ``["URL parameter colour='red' is not a setting of this page; it
    was ignored. The URL parameters this page takes: present."]``.
    """
    messages = [_ignored(name, raw) for name, raw in params.items() if name not in taken]
    if messages:
        messages[0] += " " + taken_sentence(taken)
    return _capped(messages)


def _number_anyhow(raw: str, rule: NumberRule) -> bool:
    """True when ``raw`` is a whole number in the rule's range written some other way (``1e3``,
    ``19366.0``), so the message can say that only digits are taken."""
    try:
        value = float(raw)
    except (TypeError, ValueError, OverflowError):
        return False
    return math.isfinite(value) and value.is_integer() and rule.low <= value <= rule.high


def _other_workload(name: str, workload: str) -> bool:
    """True when ``name`` is a setting of another workload (e.g. ``seed`` on a trace)."""
    return any(name in number_rules(w) for w in WORKLOADS if w != workload)
