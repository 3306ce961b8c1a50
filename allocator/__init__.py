"""KV Cache Paging Lab core: workloads, the allocators, the step engine, the lesson's arithmetic.

Pure Python + numpy; never imports streamlit or ``pages``. Pages and the CLI
(``python -m allocator``) call these same functions, so they print the same numbers.

The names below are imported on first use (PEP 562 module ``__getattr__``), so ``import allocator``
and ``python -m allocator --help`` load only what is asked for: ``from allocator import simulate``
imports the engine, a command that reads no CSV never imports pandas.
"""
from __future__ import annotations

import importlib

#: Public name -> the submodule that defines it.
_WHERE = {
    **dict.fromkeys(("Allocator", "PagedAllocator", "ReserveMaxAllocator"), "allocators"),
    **dict.fromkeys(("DUPLICATE", "EMPTY", "FREE", "HOLE", "SHARED", "TOKEN"), "maps"),
    **dict.fromkeys(("BlockPool", "HostPool"), "block_pool"),
    **dict.fromkeys(("METRICS", "SimulationResult", "simulate", "summarize"), "engine"),
    "RunSummary": "summary",
    **dict.fromkeys(("Scenario", "block_size_sweep", "run_both", "run_scenario"), "scenario"),
    **dict.fromkeys(("FieldError", "OutOfBlocksError"), "validate"),
    **dict.fromkeys(("CLASSROOM_40", "Request", "Workload", "classroom_40", "generate_workload",
                     "with_shared_prefix", "workload_from_lengths"), "workload"),
}

__all__ = [
    "DUPLICATE", "EMPTY", "FREE", "HOLE", "SHARED", "TOKEN", "Allocator", "PagedAllocator",
    "ReserveMaxAllocator", "BlockPool", "HostPool", "METRICS", "SimulationResult", "simulate", "summarize", "RunSummary",
    "CLASSROOM_40", "Request", "Workload", "classroom_40", "generate_workload", "workload_from_lengths",
    "Scenario", "block_size_sweep", "run_both", "run_scenario", "with_shared_prefix", "FieldError",
    "OutOfBlocksError",
]


def __getattr__(name: str):
    """Import a public name's submodule the first time the name is used (then it is a plain attribute).

    Raises:
        AttributeError: ``name`` is neither a public name nor a submodule of ``allocator``.
    """
    where = _WHERE.get(name)
    if where is not None:
        value = getattr(importlib.import_module(f".{where}", __name__), name)
        globals()[name] = value
        return value
    try:
        return importlib.import_module(f".{name}", __name__)
    except ModuleNotFoundError as exc:
        if exc.name != f"{__name__}.{name}":
            raise
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
