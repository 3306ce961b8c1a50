"""The engine's per-step pricer (``BoundCostModel.pricer``) gives exactly the floats of the cost
model's own ``step_seconds``: the loop calls the plain function, the pages and CLI quote figures
computed the long way, and the two must never drift apart."""
from hypothesis import given, settings, strategies as st

from allocator.cost.roofline import GPUS, TIMED_MODELS, cost_model
from allocator.common.errors import FieldError

import pytest

_counts = st.integers(min_value=0, max_value=10**9)


@settings(max_examples=300, deadline=None)
@given(gpu=st.sampled_from(sorted(GPUS)), model=st.sampled_from(TIMED_MODELS),
       block_size=st.sampled_from([1, 8, 16, 256]), work=st.tuples(_counts, _counts, _counts, _counts),
       swapped=st.integers(min_value=0, max_value=5000))
def test_the_pricer_gives_step_seconds_exactly(gpu, model, block_size, work, swapped):
    try:
        bound = cost_model(gpu, model).for_blocks(block_size)
    except FieldError:                 # a model no offered GPU count holds: nothing to price
        return
    assert bound.pricer()(*work, swapped) == bound.step_seconds(*work, swapped)


def test_a_swap_without_a_block_size_is_refused_by_both():
    bound = cost_model("a100-40gb", "opt-13b").for_blocks(None)
    assert bound.pricer()(10, 55, 3, 900, 0) == bound.step_seconds(10, 55, 3, 900, 0)
    for price in (bound.pricer(), bound.step_seconds):
        with pytest.raises(FieldError) as err:
            price(10, 55, 3, 900, 2)
        assert err.value.field == "block_size"
