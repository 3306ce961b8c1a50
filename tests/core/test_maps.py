"""Drawing in one place (issue 20, move 3): the maps module owns the slot-state codes and the
pictures; each state has one name, shared by its code in ``allocator.viz.maps`` and its colour in the
palette (``allocator.viz.theme``)."""
import numpy as np
import pytest

from allocator.viz import maps
from allocator.viz import theme


def test_every_drawn_state_has_one_name_from_code_to_colour():
    """A state's colour is found under its code's own name (a TOKEN takes its request's colour)."""
    slot_states = {"FREE", "TOKEN", "EMPTY", "HOLE", "SHARED", "DUPLICATE", "RELEASED"}
    codes = [getattr(maps, name) for name in sorted(slot_states)]
    assert sorted(codes) == list(range(7))                       # distinct heatmap codes 0..6
    assert isinstance(maps.MAP_BLOCK_CACHED, int)                # the block pictures' cached state
    coloured = {name.lower() for name in slot_states - {"TOKEN"}} | {"cached"}
    assert coloured == set(theme.STATE_COLOURS)
    assert not hasattr(theme, "DUPLICATE")                       # the colour no longer shares the state's name


def test_slot_states_draws_a_recorded_step_and_names_the_field_when_it_cannot():
    from allocator.memory.paged import PagedAllocator
    from allocator.workloads.requests import Request, Workload
    from allocator.engine.simulate import simulate
    from allocator.common.errors import FieldError

    w = Workload("two", (Request(1, 5, 3, 0), Request(2, 20, 2, 0)), max_new_tokens=10)
    res = simulate(w, PagedAllocator(40, 8))                     # 5 blocks of 8, no remainder
    owner, state = maps.slot_states(res, 0)
    # request 1: 5 prompt + 1 token in block 0; request 2: 20 + 1 in blocks 1..3 (5 slots empty)
    assert owner[:8].tolist() == [1] * 8 and (state[:6] == maps.TOKEN).all() and (state[6:8] == maps.EMPTY).all()
    assert (owner[8:32] == 2).all() and int((state[8:32] == maps.TOKEN).sum()) == 21
    assert (state[32:] == maps.FREE).all()
    empty_owner, empty_state = maps.empty_picture(res)
    assert (empty_owner == -1).all() and (empty_state == maps.FREE).all()
    with pytest.raises(FieldError) as err:
        maps.slot_states(res, res.steps)
    assert err.value.field == "step"
    with pytest.raises(FieldError) as err:
        maps.slot_states(simulate(w, PagedAllocator(40, 8), record_snapshots=False), 0)
    assert err.value.field == "snapshots"


def test_empty_picture_draws_the_remainder_as_a_hole():
    from allocator.memory.paged import PagedAllocator
    from allocator.workloads.requests import Request, Workload
    from allocator.engine.simulate import simulate

    res = simulate(Workload("one", (Request(1, 5, 1, 0),), max_new_tokens=4), PagedAllocator(42, 8))
    _, state = maps.empty_picture(res)
    assert np.flatnonzero(state == maps.HOLE).tolist() == [40, 41]  # 42 slots = 5 blocks of 8 + 2
