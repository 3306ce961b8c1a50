"""Issue 42: a rate so low that an arrival overflows is named as the rate, not as "arrival_s = inf"."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from allocator.__main__ import main
from allocator.common.errors import FieldError
from allocator.workloads.poisson import MAX_ARRIVAL_S, check_reach, poisson_workload


@pytest.mark.parametrize("argv", [["--rates", "5e-324"], ["--rates", "1,5e-324"], ["--rates", "1e-300"]])
def test_the_cli_names_the_rate(capsys, argv):
    assert main(["rate-sweep", *argv, "--requests", "10"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --rates ") and "requests/s is too low: request 2 would arrive more than" in err
    assert "inf" not in err and err.count("\n") == 1


def test_a_poisson_workload_names_the_rate():
    with pytest.raises(FieldError) as err:
        poisson_workload(5e-324, 10, max_context=4096)
    assert err.value.field == "rate" and "arrival_s" not in str(err.value) and "inf" not in str(err.value)


@settings(max_examples=40, deadline=None)
@given(rate=st.floats(min_value=5e-324, max_value=1e6, allow_nan=False, allow_infinity=False, exclude_min=False)
       .filter(lambda r: r > 0),
       unit=st.lists(st.floats(min_value=0, max_value=1e6), min_size=1, max_size=20).map(sorted))
def test_check_reach_passes_exactly_what_stays_on_the_clock(rate, unit):
    import numpy as np
    with np.errstate(over="ignore"):
        fits = bool(np.all(np.asarray(unit) / rate <= MAX_ARRIVAL_S))
    if fits:
        check_reach(rate, unit)
    else:
        with pytest.raises(FieldError):
            check_reach(rate, unit)
