"""Requests and where they come from: trace readers (Azure CSV, Mooncake JSONL, ShareGPT lengths, measured vLLM runs) and Poisson arrivals."""
