"""Shared links: every URL parameter is checked, a bad one is named, choices travel as short values."""
import pytest
from streamlit.testing.v1 import AppTest

from pages._ui.url_params import check_params
from tests.conftest import APP_PATH, seen


@pytest.mark.parametrize("params, message", [
    ({"block_size": "7"}, "URL parameter block_size='7' is not a block size the slider offers"),
    ({"block_size": "0"}, "URL parameter block_size='0' is not a block size the slider offers"),
    ({"slots_classroom-40": "abc"}, "URL parameter slots_classroom-40='abc' must be a whole number from 64 to "
                                    "1,048,576 (slots); using 2,048."),
    ({"seed": "-1"}, "URL parameter seed='-1' must be a whole number from 0 to 4,294,967,295; using 25."),
    ({"metadata_cost": "100"}, "URL parameter metadata_cost='100' must be a number from 0 to 8 in steps of 0.25"),
    ({"metadata_cost": "0.3"}, "in steps of 0.25"),
    ({"workload": "bogus"}, "URL parameter workload='bogus' is not a workload of this page (one of classroom-40, "
                            "azure-conv, sharegpt-opt, upload); using classroom-40."),
    ({"preemption": "evict"}, "URL parameter preemption='evict' is not one of recompute, swap; using recompute."),
    ({"shared_prefix": "9999999"}, "URL parameter shared_prefix='9999999' must be a whole number from 0 to 4,194,304 (tokens)"),
    ({"colour": "red"}, "URL parameter colour='red' is not a setting of this page; it was ignored."),
    ({"seed": "3", "workload": "azure-conv"}, "URL parameter seed='3' is not a setting of this page for the "
                                              "azure-conv workload; it was ignored."),
])
def test_a_bad_parameter_is_named_with_what_is_used_instead(params, message):
    accepted, messages = check_params(params)
    assert len(messages) == 1 and message in messages[0], messages
    assert not (set(params) - {"workload"}) & set(accepted)


def test_good_parameters_and_old_labels_are_accepted():
    accepted, messages = check_params({
        "workload": "Azure conversation trace (real requests, 2023)", "preemption": "swap to host",
        "block_size": "64", "metadata_cost": "1.25", "count_azure-conv": "12", "present": "true"})
    assert messages == []
    assert accepted == {"workload": "azure-conv", "preemption": "swap", "block_size": 64, "metadata_cost": 1.25,
                        "count_azure-conv": 12, "present": True}


def test_the_page_shows_the_message_and_keeps_short_values_in_the_url():
    at = AppTest.from_file(APP_PATH, default_timeout=60)
    at.query_params["block_size"] = "7"
    at.query_params["workload"] = "azure-conv"
    at.query_params["preemption"] = "swap to host"
    at.run()
    assert not at.exception
    assert any("block_size='7'" in seen(w.value) and "using 16" in seen(w.value) for w in at.warning)
    assert at.select_slider(key="block_size").value == 16
    assert at.selectbox(key="workload").value == "azure-conv"
    assert at.radio(key="preemption").value == "swap"
    assert at.query_params["workload"] == "azure-conv" and at.query_params["preemption"] == "swap"
    assert "block_size" not in at.query_params


@pytest.mark.parametrize("params, message", [
    ({"policy": "greedy"}, "URL parameter policy='greedy' is not one of max, pow2, oracle; using max."),
    ({"gpu": "tpu-v5"}, "URL parameter gpu='tpu-v5' is not one of a100-40gb"),
    ({"model": "gpt-9"}, "URL parameter model='gpt-9' is not one of 7b-fp16"),
    ({"seconds_axis": "yes"}, "URL parameter seconds_axis='yes' must be true or false; using false."),
])
def test_a_bad_time_or_policy_parameter_is_named(params, message):
    accepted, messages = check_params(params)
    assert len(messages) == 1 and message in messages[0], messages
    assert not set(params) & set(accepted)


def test_a_link_carries_the_policy_the_gpu_and_the_seconds_axis():
    at = AppTest.from_file(APP_PATH, default_timeout=60)
    for key, value in {"policy": "oracle", "gpu": "h200", "model": "llama3-8b", "seconds_axis": "true"}.items():
        at.query_params[key] = value
    at.run()
    assert not at.exception and not at.warning
    assert at.radio(key="policy").value == "oracle"
    assert at.selectbox(key="gpu").value == "h200" and at.selectbox(key="model").value == "llama3-8b"
    assert at.toggle(key="seconds_axis").value is True
    assert at.query_params["policy"] == "oracle" and at.query_params["seconds_axis"] == "true"
    assert any("Reserve-oracle" in m.value for m in at.markdown)


@pytest.mark.parametrize("params, message", [
    ({"workload": "azure-conv", "offset_azure-conv": "1e5"},
     "URL parameter offset_azure-conv='1e5' must be a whole number from 0 to 199,999 (trace rows, from 0) "
     "written in digits only; using 0."),
    ({"workload": "azure-conv", "offset_azure-conv": "19366.0"}, "offset_azure-conv='19366.0' must be a whole number"),
    ({"seed": "1e3"}, "URL parameter seed='1e3' must be a whole number from 0 to 4,294,967,295 written in digits only"),
    ({"present": "1"}, "URL parameter present='1' must be true or false; using false."),
    ({"present": "yes"}, "URL parameter present='yes' must be true or false; using false."),
])
def test_a_number_the_widget_would_misread_and_a_bad_boolean_are_named(params, message):
    """Streamlit's number widget reads only digits from a link: ``1e5`` used to become row 0 silently;
    ``present`` was the one parameter taken without a check."""
    accepted, messages = check_params(params)
    assert len(messages) == 1 and message in messages[0], messages
    assert not (set(params) - {"workload"}) & set(accepted)


def test_present_true_is_taken_as_the_other_booleans_are():
    assert check_params({"present": "True", "seconds_axis": "false"}) == ({"present": True, "seconds_axis": False}, [])


# --- the sidebar and the URL check read one table (url_params.number_rules) ----------------------

@pytest.mark.parametrize("workload, extra", [("classroom-40", {"arrival": "trickle"}), ("azure-conv", {})])
def test_every_sidebar_number_has_the_range_step_and_default_of_its_url_rule(workload, extra):
    """Each numeric widget the sidebar draws has exactly the range, step and starting value of the
    rule the URL check applies to its parameter, and no numeric widget goes unchecked: a widget
    whose range were written apart from the rule (a slider to 4 when a link may say 8) fails here.
    The row offset's top end is the trace's last row, inside the rule's range.

    A number input is set to its top (taken), one step past it (refused with a message) and back to
    its default, one widget at a time, every other widget at its default: each step sets the widget
    of the latest run, not of the first one (setting a widget of the first run's tree would send that
    tree's values of the widgets checked before it too, their tops included, and run every top at
    once: 200 s on a loaded machine instead of 20)."""
    from allocator.workloads.trace import shipped_trace
    from pages._ui.url_params import BLOCK_SIZE_DEFAULT, BLOCK_SIZES, number_rules

    at = AppTest.from_file(APP_PATH, default_timeout=120)
    for key, value in {"workload": workload, **extra}.items():
        at.query_params[key] = value
    at.run()
    assert not at.exception and not at.warning, [w.value for w in at.warning]
    rules = number_rules(workload)
    drawn = {w.key: w for w in [*at.sidebar.number_input, *at.sidebar.slider]}
    assert set(drawn) == set(rules)
    for key, rule in rules.items():
        widget = drawn[key]
        top = min(rule.high, len(shipped_trace()) - 1) if key.startswith("offset_") else rule.high
        if key in [w.key for w in at.sidebar.slider]:
            assert (widget.proto.min, widget.proto.max) == (rule.low, top), key
        else:   # a number input has no browser range (it refused silently); the server checks the rule's
            assert not widget.proto.has_min and not widget.proto.has_max, key
            for typed, taken in ((top, True), (top + (1 if rule.integer else rule.step), False)):
                at.sidebar.number_input(key=key).set_value(typed).run()
                widget = at.sidebar.number_input(key=key)
                said = f"{typed:,}" if rule.integer else f"{typed:g}"
                refused = [seen(e.value) for e in at.sidebar.error if f" = {said} was not used" in seen(e.value)]
                assert widget.value == (typed if taken else top) and bool(refused) != taken, (key, typed, refused)
            widget.set_value(rule.default).run()
            widget = at.sidebar.number_input(key=key)
            assert not at.sidebar.error, [e.value for e in at.sidebar.error]
        assert widget.proto.step == rule.button_step, key
        assert widget.value == rule.default, key
    block = at.sidebar.select_slider(key="block_size")
    assert [int(o) for o in block.options] == list(BLOCK_SIZES) and block.value == BLOCK_SIZE_DEFAULT


@pytest.mark.parametrize("workload", ["classroom-40", "azure-conv"])
def test_the_url_check_takes_each_rules_ends_and_refuses_a_step_past_them(workload):
    """The other half of the tie: a link may carry each rule's own ends (the widget's, checked
    above), and one step beyond either end is named and replaced with the rule's default."""
    from pages._ui.url_params import number_rules

    for key, rule in number_rules(workload).items():
        fmt = (lambda v: str(int(v))) if rule.integer else (lambda v: f"{v:g}")
        for edge in (rule.low, rule.high):
            accepted, messages = check_params({"workload": workload, key: fmt(edge)})
            assert messages == [] and accepted[key] == edge, (key, edge, messages)
        beyond = rule.high + (1 if rule.integer else rule.step)
        accepted, messages = check_params({"workload": workload, key: fmt(beyond)})
        assert key not in accepted and len(messages) == 1 and key in messages[0], (key, messages)
        default = f"{rule.default:,.0f}" if rule.integer else f"{rule.default:g}"
        assert messages[0].endswith(f"using {default}."), messages
        if rule.low > 0:
            below = rule.low - (1 if rule.integer else rule.step)
            assert key not in check_params({"workload": workload, key: fmt(below)})[0], (key, below)


@pytest.mark.parametrize("workload", ["classroom-40", "azure-conv", "sharegpt-opt", "upload"])
def test_every_sidebar_rule_lies_inside_the_cores_range(workload):
    """The sidebar may offer less than the core takes (``allocator.common.limits.LIMITS``), never more, and
    speaks of the same unit and kind of number: a value the sidebar accepts always runs."""
    from allocator.common.limits import LIMITS
    from pages._ui.url_params import BLOCK_SIZES, number_rules

    for key, rule in number_rules(workload).items():
        core = LIMITS[rule.field]
        assert core.contains(rule.low) and core.contains(rule.high) and rule.low <= rule.default <= rule.high, key
        assert (rule.unit, rule.integer) == (core.unit, core.integer), key
    assert all(LIMITS["block_size"].contains(b) for b in BLOCK_SIZES)


@pytest.mark.parametrize("workload", ["classroom-40", "azure-conv"])
def test_the_page_takes_the_clis_range_for_seed_max_new_tokens_and_shared_prefix(workload):
    """Issue 40: one range per setting, the core's (allocator/common/limits.py), in the URL, the
    sidebar and the CLI alike."""
    from allocator.common.limits import LIMITS
    from pages._ui.url_params import number_rules
    rules = number_rules(workload)
    same = {f"max_new_{workload}": "max_new_tokens", "shared_prefix": "shared_prefix"}
    if workload == "classroom-40":
        same["seed"] = "seed"
    for key, field in same.items():
        assert rules[key].limit == LIMITS[field] and rules[key].field == field, key
