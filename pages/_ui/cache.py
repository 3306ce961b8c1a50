"""The explainer's cached computations, shared by every session on the server.

The heavy ones (both runs and their figure, the seconds figure, the block-size sweep) go through
``pages._ui.heavy.shared``: one server-wide queue, a store bounded by memory, and one computation
per distinct scenario however many sessions ask at once.

They live in a module (not in the page script) so that ``app.py`` can warm the default
scenario before the first student connects (``warm_default``): forty students opening the app
in the same second then find the simulation, the figure and the sweep already built; and, in the
background, every block size the slider offers (``warm_block_sizes``).
"""
import dataclasses
import hashlib
import sys
import threading
import time

import streamlit as st

from allocator.engine.scenario import (SWEEP_BLOCK_SIZES, UPLOAD_MAX_ROWS, Scenario, build_workload,
                                       full_attention_figures, full_attention_run, run_scenario, scenario_sweep)
from allocator.cost.best import best_cost_model
from allocator.cost.timing import price
from allocator.workloads.trace import load_trace
from allocator.viz.frozen import FrozenFigure
from allocator.viz.explainer_chart import explainer_figure, explainer_lines_figure, for_projector
from allocator.viz.sweep_chart import sweep_figure
from allocator.viz.export.html import metrics_frame
from pages._ui.heavy import shared
from pages._ui.url_params import BLOCK_SIZES, CHOICE_DEFAULTS

DEFAULT_GPU, DEFAULT_MODEL = CHOICE_DEFAULTS["gpu"], CHOICE_DEFAULTS["model"]


#: Past these a scenario is heavy work and takes its turn in the server's queue (``pages._ui.heavy``):
#: tokens simulated (prompts, shared prompt included, plus answers), pool slots, blocks. The default
#: lesson has ~12,000 tokens in 2,048 slots and runs in about 1 s; the heaviest in-range link
#: (200 trace requests behind a 4,096-token shared prompt, 2**20 slots in blocks of 1) has ~1,050,000
#: tokens and ~1,000,000 blocks and takes about 11 s alone on the lab's 2-core machine (measured).
HEAVY_TOKENS, HEAVY_SLOTS, HEAVY_BLOCKS = 150_000, 262_144, 65_536


def is_heavy(sc: Scenario, *_args) -> bool:
    """Whether simulating ``sc`` is heavy work (see ``HEAVY_TOKENS``); a workload that cannot be
    built is light (it fails at once with its message)."""
    if sc.slots > HEAVY_SLOTS or sc.slots // max(1, sc.block_size) > HEAVY_BLOCKS:
        return True
    try:
        workload = build_workload(sc)
    except ValueError:
        return False
    return sum(r.prompt_len + r.output_len for r in workload.requests) > HEAVY_TOKENS


def compute(sc: Scenario):
    """Workload, both results and the animated figure for one scenario (shared by every session)."""
    return _compute(sc.canonical())


@shared("Simulating both allocators", max_entries=32, heavy=is_heavy)
def _compute(sc: Scenario):
    """``compute`` for a canonical scenario (the cache key)."""
    workload = build_workload(sc)
    results = run_scenario(sc, workload)
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
    cost = best_cost_model(gpu, model)
    return {k: price(r, cost, idle_step_s=1 / sc.steps_per_second) for k, r in results.items()}


def full_attention(sc: Scenario, gpu: str, model: str) -> tuple[dict, object] | None:
    """For a sliding-window scenario, the same paged run with full attention beside the windowed
    one: (``allocator.engine.scenario.full_attention_figures``, its RunTiming on ``gpu`` running
    ``model``); None for a full-attention scenario."""
    if not sc.sliding_window:
        return None
    return _full_attention(sc.canonical(), gpu, model)


@shared("Simulating the run with full attention", max_entries=16, heavy=is_heavy)
def _full_attention(sc: Scenario, gpu: str, model: str) -> tuple[dict, object]:
    workload, results, _ = compute(sc)
    full = full_attention_run(sc, workload)
    timing = price(full, best_cost_model(gpu, model), idle_step_s=1 / sc.steps_per_second)
    return full_attention_figures(full, results["paged"]), timing


def seconds_figure(sc: Scenario, gpu: str, model: str):
    """The animated figure with its time axis in seconds on ``gpu`` running ``model`` (frames are
    moments; see ``allocator.viz.explainer_chart.explainer_figure``), built once per setting."""
    return _seconds_figure(sc.canonical(), gpu, model)


@shared("Pricing every step in seconds", max_entries=16, heavy=is_heavy)
def _seconds_figure(sc: Scenario, gpu: str, model: str):
    results = run_scenario(sc)
    cost = best_cost_model(gpu, model)
    priced = {k: price(r, cost, idle_step_s=1 / sc.steps_per_second) for k, r in results.items()}
    return explainer_figure(results, timings=priced).freeze()


def uploaded_rows(data: bytes) -> int:
    """Validate an uploaded trace; its number of rows (ValueError names the row and column).

    Parsed once per distinct file for the whole server, inside the heavy-work queue (issue 42: three
    uploads parsed at once outside it took the server to 4 GB); the file is known by its SHA-256,
    so the store's key does not hold the upload's bytes. A file seen before answers at once."""
    return _uploaded_rows(hashlib.sha256(data).hexdigest(), _data=data)


@shared("Reading the uploaded trace", max_entries=8)
def _uploaded_rows(digest: str, _data: bytes) -> int:
    return len(load_trace(_data, max_rows=UPLOAD_MAX_ROWS))


def sweep(sc: Scenario) -> tuple:
    """Paged runs at every block size for the scenario's workload and pool (the same whatever the
    block-size slider says, so it is cached without it)."""
    return _sweep(dataclasses.replace(sc.canonical(), block_size=16))


@shared("Sweeping block sizes", max_entries=32,
        heavy=lambda sc: is_heavy(dataclasses.replace(sc, block_size=min(SWEEP_BLOCK_SIZES))))
def _sweep(sc: Scenario) -> tuple:
    """The cached sweep for a scenario normalised to block size 16 (shared by every session, and
    a resource cache so that ``warm_default`` can fill it before the runtime starts; read only)."""
    return tuple(scenario_sweep(sc))


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


def lines_figure(sc: Scenario, gpu: str | None = None, model: str | None = None):
    """Utilisation and running batch over the run, drawn under the maps
    (``allocator.viz.explainer_chart.explainer_lines_figure``): against engine steps, or, given ``gpu`` and
    ``model``, against seconds (the runs priced as ``timings`` prices them). Built once per setting."""
    return _lines_figure(sc.canonical(), gpu, model)


@st.cache_resource(max_entries=32, show_spinner=False)
def _lines_figure(sc: Scenario, gpu: str | None, model: str | None):
    _, results, _ = compute(sc)
    priced = timings(sc, gpu, model) if gpu is not None else None
    return explainer_lines_figure(results, timings=priced).freeze()


def presentation_figure(fig, scenario: Scenario, kind: tuple = ()):
    """An explainer figure sized for a projector (``allocator.viz.explainer_chart.for_projector``), built
    once per scenario and ``kind`` (which figure of the scenario and its clock: e.g. ``("maps",)`` or
    ``("lines", gpu, model)``) and shared by every session."""
    return _presentation_figure(fig, scenario.canonical(), tuple(kind))


@st.cache_resource(max_entries=16, show_spinner=False)
def _presentation_figure(_fig, key: Scenario, kind: tuple):
    """``presentation_figure`` cached per canonical scenario (``key``) and figure (``kind``)."""
    return for_projector(_fig)


def sweep_chart(scenario: Scenario, reserve: dict):
    """The block-size sweep figure for one scenario (built once, shared by every session);
    ``reserve`` is reserve-max's summary for the same scenario (it follows from the scenario, so the
    scenario alone is the cache key)."""
    return _sweep_chart(scenario.canonical(), reserve)


@st.cache_resource(max_entries=32, show_spinner=False)
def _sweep_chart(scenario: Scenario, _reserve: dict):
    """``sweep_chart`` for a canonical scenario."""
    from allocator.memory.reserve_max import ReserveMaxAllocator
    return FrozenFigure(sweep_figure(sweep(scenario), scenario.block_size, scenario.metadata_cost,
                                     _reserve, ReserveMaxAllocator.LABELS[scenario.policy].lower())).freeze()


def warm_default(block_sizes_in_background: bool = True) -> threading.Thread | None:
    """Build the default scenario's results, figure, table and sweep into the caches; then, unless
    told not to, start :func:`warm_block_sizes` in a daemon thread ("warm-explainer-block-sizes")
    and return it."""
    sc = Scenario()
    _, results, fig = compute(sc)
    metrics_table(results, fig, key=sc)
    sweep_chart(sc, results["reserve_max"].summary)
    timings(sc, DEFAULT_GPU, DEFAULT_MODEL)
    if not block_sizes_in_background:
        return None
    thread = threading.Thread(target=warm_block_sizes, name=WARM_THREAD, daemon=True)
    thread.start()
    return thread


#: The name of :func:`warm_default`'s background thread; it waits for app.py's other warm-ups
#: (threads whose names start with "warm-") before it starts.
WARM_THREAD = "warm-explainer-block-sizes"


def warm_block_sizes(block_sizes=BLOCK_SIZES, settle_s: float = 1.0, pause_s: float = 0.05) -> list[int]:
    """Compute the default scenario at every block size the explainer's slider offers (``BLOCK_SIZES``:
    14 positions, about 4 s of CPU in all on the lab's 2-core machine) into the caches its redraw
    reads: both runs and their figure (:func:`compute`), their seconds (:func:`timings`, the default
    GPU and model) and the sweep chart marking that block size (:func:`sweep_chart`). A drag on the
    default scenario then redraws from the caches (issue 24: a block size the server had computed
    redrew in 0.5 s median against 0.7 s).

    Runs after the other warm-ups: it waits ``settle_s`` for app.py to start them, then for every
    live thread named "warm-..." (other than itself); it pauses ``pause_s`` between block sizes so
    that a page being served gets the interpreter in between. Memory stays within the existing
    caches' bounds: :func:`compute` keeps its results in the server's store (``pages._ui.heavy``,
    bounded by bytes and 32 entries), :func:`sweep_chart` and :func:`timings` in resource caches of
    32 and 64 entries; 14 entries of the default scenario fit in each.

    Returns:
        the block sizes computed (a failure at one is printed and the rest go on: the page computes
        on demand).
    """
    me = threading.current_thread()
    time.sleep(settle_s)
    for other in threading.enumerate():
        if other is not me and other.name.startswith("warm-"):
            other.join()
    done = []
    for bs in block_sizes:
        sc = dataclasses.replace(Scenario(), block_size=int(bs))
        try:
            _, results, _ = compute(sc)
            timings(sc, DEFAULT_GPU, DEFAULT_MODEL)
            sweep_chart(sc, results["reserve_max"].summary)
            done.append(int(bs))
        except Exception as exc:  # never stop the server over a warm-up; the page computes on demand
            print(f"warning: could not pre-build the explainer at block size {bs}: {exc}", file=sys.stderr)
        time.sleep(pause_s)
    return done
