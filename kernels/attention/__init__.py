"""Paged-attention decode: the Triton kernels, the torch paths and reference, their inputs, checks and backend choice."""
