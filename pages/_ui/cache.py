"""The explainer's cached computations, shared by every session on the server.

They live in a module (not in the page script) so that ``app.py`` can warm the default
scenario before the first student connects (``warm_default``): forty students opening the app
in the same second then find the simulation, the figure and the sweep already built.
"""
import dataclasses

import streamlit as st

from allocator.scenario import (SWEEP_BLOCK_SIZES, UPLOAD_MAX_ROWS, Scenario, block_size_sweep, build_workload,
                                run_both)
from allocator.timing import cost_model, price
from allocator.trace import load_trace
from allocator.viz.charts import FrozenFigure, explainer_figure, for_projector, sweep_figure
from allocator.viz.exports import metrics_frame


def compute(sc: Scenario):
    """Workload, both results and the animated figure for one scenario (shared by every session)."""
    return _compute(sc.canonical())


@st.cache_resource(max_entries=32, show_spinner="Simulating both allocators…")
def _compute(sc: Scenario):
    """``compute`` for a canonical scenario (the cache key)."""
    workload = build_workload(sc)
    results = run_both(workload, sc.slots, sc.block_size, preemption=sc.preemption, policy=sc.policy,
                       placement=sc.placement)
    fig = explainer_figure(results).freeze()     # serialised once, not on every rerun
    for res in results.values():      # the figure holds the frames now: keep the cache small
        res.snapshots = None
    return workload, results, fig


def timings(sc: Scenario, gpu: str, model: str) -> dict:
    """The scenario's two runs priced in seconds on ``gpu`` running ``model`` ({kind: RunTiming});
    an idle gap lasts its steps at the workload's arrival clock (1 / steps_per_second each).
    Pricing does not change the runs, so it is cached apart from them."""
    return _timings(sc.canonical(), gpu, model)


@st.cache_resource(max_entries=64, show_spinner=False)
def _timings(sc: Scenario, gpu: str, model: str) -> dict:
    _, results, _ = compute(sc)
    cost = cost_model(gpu, model)
    return {k: price(r, cost, idle_step_s=1 / sc.steps_per_second) for k, r in results.items()}


def seconds_figure(sc: Scenario, gpu: str, model: str):
    """The animated figure with its time axis in seconds on ``gpu`` running ``model`` (frames are
    moments; see ``allocator.viz.charts.explainer_figure``), built once per setting."""
    return _seconds_figure(sc.canonical(), gpu, model)


@st.cache_resource(max_entries=16, show_spinner="Pricing every step in seconds…")
def _seconds_figure(sc: Scenario, gpu: str, model: str):
    results = run_both(build_workload(sc), sc.slots, sc.block_size, preemption=sc.preemption, policy=sc.policy,
                       placement=sc.placement)
    cost = cost_model(gpu, model)
    priced = {k: price(r, cost, idle_step_s=1 / sc.steps_per_second) for k, r in results.items()}
    return explainer_figure(results, timings=priced).freeze()


@st.cache_data(max_entries=8, show_spinner=False)
def uploaded_rows(data: bytes) -> int:
    """Validate an uploaded trace; its number of rows (ValueError names the row and column)."""
    return len(load_trace(data, max_rows=UPLOAD_MAX_ROWS))


def sweep(sc: Scenario) -> tuple:
    """Paged runs at every block size for the scenario's workload and pool (the same whatever the
    block-size slider says, so it is cached without it)."""
    return _sweep(dataclasses.replace(sc.canonical(), block_size=16))


@st.cache_resource(max_entries=32, show_spinner="Sweeping block sizes…")
def _sweep(sc: Scenario) -> tuple:
    """The cached sweep for a scenario normalised to block size 16 (shared by every session, and
    a resource cache so that ``warm_default`` can fill it before the runtime starts; read only)."""
    return tuple(block_size_sweep(build_workload(sc), sc.slots, SWEEP_BLOCK_SIZES, sc.metadata_cost,
                                  sc.preemption))


def metrics_table(results, fig, key: Scenario):
    """The metrics at the animation's frames (see ``_metrics_table``), cached per scenario."""
    return _metrics_table(results, fig, key.canonical())


@st.cache_resource(max_entries=32, show_spinner=False)
def _metrics_table(_results, _fig, key=None):
    """The metrics at the animation's frames, both allocators side by side (the chart's numbers as a
    table; the Export menu's CSV has every step). Cached per scenario (``key``)."""
    frames = [int(f.name) for f in _fig.frames]
    table = metrics_frame(_results)
    table = table[table["step"].isin(frames)]          # every frame starts a row (see frame_steps)
    return table.drop(columns=[c for c in table.columns if "next_need" in c or " units " in c])


def presentation_figure(fig, scenario: Scenario):
    """The explainer figure sized for a projector (``allocator.viz.charts.for_projector``), built
    once per scenario and shared by every session."""
    return _presentation_figure(fig, scenario.canonical())


@st.cache_resource(max_entries=8, show_spinner=False)
def _presentation_figure(_fig, key: Scenario):
    """``presentation_figure`` cached per canonical scenario (``key``)."""
    return for_projector(_fig)


def sweep_chart(scenario: Scenario, reserve: dict):
    """The block-size sweep figure for one scenario (built once, shared by every session);
    ``reserve`` is reserve-max's summary for the same scenario (it follows from the scenario, so the
    scenario alone is the cache key)."""
    return _sweep_chart(scenario.canonical(), reserve)


@st.cache_resource(max_entries=32, show_spinner=False)
def _sweep_chart(scenario: Scenario, _reserve: dict):
    """``sweep_chart`` for a canonical scenario."""
    from allocator.allocators import ReserveMaxAllocator
    return FrozenFigure(sweep_figure(sweep(scenario), scenario.block_size, scenario.metadata_cost,
                                     _reserve, ReserveMaxAllocator.LABELS[scenario.policy].lower())).freeze()


def warm_default() -> None:
    """Build the default scenario's results, figure, table and sweep into the caches."""
    sc = Scenario()
    _, results, fig = compute(sc)
    metrics_table(results, fig, key=sc)
    sweep_chart(sc, results["reserve_max"].summary)
