"""The block-size sweep: what reading the KV cache through a block table costs the decode kernel, its statistics, prediction and figures."""
