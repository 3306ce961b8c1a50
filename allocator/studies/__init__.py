"""Experiments built from many runs: rate sweeps, the paper replication, prefix caching on a real trace, the replay of a measured vLLM run."""
