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
    ({"seed": "-1"}, "URL parameter seed='-1' must be a whole number from 0 to 10,000; using 25."),
    ({"metadata_cost": "100"}, "URL parameter metadata_cost='100' must be a number from 0 to 8 in steps of 0.25"),
    ({"metadata_cost": "0.3"}, "in steps of 0.25"),
    ({"workload": "bogus"}, "URL parameter workload='bogus' is not a workload of this page (one of classroom-40, "
                            "azure-conv, sharegpt-opt, upload); using classroom-40."),
    ({"preemption": "evict"}, "URL parameter preemption='evict' is not one of recompute, swap; using recompute."),
    ({"shared_prefix": "99999"}, "URL parameter shared_prefix='99999' must be a whole number from 0 to 4,096"),
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
    ({"seed": "1e3"}, "URL parameter seed='1e3' must be a whole number from 0 to 10,000 written in digits only"),
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
