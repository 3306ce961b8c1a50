"""KV Cache Paging Lab core: pure Python + numpy, never imports streamlit or ``pages``.

The packages, in layer order (a package imports only those before it; ``tests/core/test_layering.py``):

==============  =====================================================================================
``common``      the one error type, input validation and limits, number formats, metric names, paths
``workloads``   requests and trace readers (Azure CSV, Mooncake JSONL, ShareGPT lengths, vLLM runs)
``memory``      block hashes, the block pool, the host pool, the allocators (reserve-max, buddy, paged)
``accounting``  the lesson's arithmetic: slots, block-size slack, metadata cost, capacity
``engine``      the step loop, the classroom and vLLM v1 schedulers, results, summaries, scenarios
``cost``        seconds: the roofline cost model, its calibration, priced runs
``studies``     many runs: rate sweeps, the paper replication, prefix caching, vLLM run replay
``viz``         figures, on-screen sentences (claims) and exports (``viz/export``)
``cli``         ``python -m allocator <command>``: one module per group of sub-commands
==============  =====================================================================================

Pages and the CLI call these same functions, so they print the same numbers. The readable engine
to start from is ``allocator/engine/reference.py``.
"""
