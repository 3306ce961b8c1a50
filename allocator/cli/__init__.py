"""The command line, ``python -m allocator <command>``: one module per group of sub-commands.

Each module exposes ``register(subparsers)``, which adds its parsers; a parser's ``func(args)``
does the work and returns the exit status. The commands print the same figures the pages show,
because both call the same functions of :mod:`allocator`.

* :mod:`.simulate` -- ``simulate``: both allocators on one workload (and the block-size sweep).
* :mod:`.accounting` -- ``account`` and ``capacity``: the lesson's arithmetic.
* :mod:`.export` -- ``export-html``: the animated figure, handout and CSV as files.
* :mod:`.site` -- ``export-site``: the lesson as a static folder (every block size precomputed).
* :mod:`.serving` -- ``rate-sweep``: the paper's four allocators against request rate, in seconds.
* :mod:`.paper` -- ``paper-replication``: the PagedAttention paper's OPT-13B experiment, Figures 2, 12 and 13
  (and 15, 18b, 19); ``sharing``: requests of several sequences, memory saved by sharing blocks.
* :mod:`.replay` -- ``replay-vllm``: a measured vLLM run beside the lab's replay of it.
* :mod:`.metrics` -- ``metrics``: every summary figure's label, unit and meaning.
"""

#: Sub-command modules, in help order.
MODULES = ("simulate", "accounting", "export", "site", "serving", "paper", "replay", "metrics")
