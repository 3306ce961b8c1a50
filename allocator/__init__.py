"""KV Cache Paging Lab core: workloads, the allocators, the step engine, the lesson's arithmetic.

Pure Python + numpy; never imports streamlit or ``pages``. Pages and the CLI
(``python -m allocator``) call these same functions, so they print the same numbers.
"""
from .allocators import (DUPLICATE, EMPTY, FREE, HOLE, SHARED, STATE_NAMES, TOKEN, Allocator, PagedAllocator,
                         ReserveMaxAllocator)
from .block_pool import BlockPool, HostPool
from .engine import METRICS, SimulationResult, simulate, summarize
from .scenario import Scenario, block_size_sweep, run_both, run_scenario
from .validate import FieldError, OutOfBlocksError
from .workload import (CLASSROOM_40, Request, Workload, classroom_40, generate_workload, with_shared_prefix,
                       workload_from_lengths)

__all__ = [
    "DUPLICATE", "EMPTY", "FREE", "HOLE", "SHARED", "TOKEN", "STATE_NAMES", "Allocator", "PagedAllocator",
    "ReserveMaxAllocator", "BlockPool", "HostPool", "METRICS", "SimulationResult", "simulate", "summarize",
    "CLASSROOM_40", "Request", "Workload", "classroom_40", "generate_workload", "workload_from_lengths",
    "Scenario", "block_size_sweep", "run_both", "run_scenario", "with_shared_prefix", "FieldError",
    "OutOfBlocksError",
]
