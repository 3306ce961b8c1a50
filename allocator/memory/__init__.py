"""The KV-cache memory: block hashes, the block pool (refcounts, free block queue, block-hash map), the host pool, and the allocators (reserve-max, buddy, paged)."""
