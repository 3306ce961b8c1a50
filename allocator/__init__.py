"""KV Cache Paging Lab core: workloads, the two allocators, the step engine, accounting.

Pure Python + numpy; never imports streamlit. Pages and the CLI (``python -m allocator``) call
these same functions, so they print the same numbers.
"""
from .allocators import (EMPTY, FREE, HOLE, SHARED, STATE_NAMES, TOKEN, PagedAllocator,
                         ReserveMaxAllocator)
from .engine import METRICS, SimulationResult, simulate, summarize
from .scenario import Scenario, block_size_sweep, run_both, run_scenario
from .workload import (CLASSROOM_40, Request, Workload, classroom_40, generate_workload, with_shared_prefix,
                       workload_from_lengths)

__all__ = [
    "EMPTY", "FREE", "HOLE", "SHARED", "TOKEN", "STATE_NAMES", "PagedAllocator", "ReserveMaxAllocator",
    "METRICS", "SimulationResult", "simulate", "summarize", "CLASSROOM_40", "Request", "Workload",
    "classroom_40", "generate_workload", "workload_from_lengths", "Scenario", "block_size_sweep",
    "run_both", "run_scenario", "with_shared_prefix",
]
