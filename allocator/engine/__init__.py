"""The serving engine: the step loop, the classroom and vLLM v1 schedulers, the result of a run, its summary and memory shares, and scenarios."""
