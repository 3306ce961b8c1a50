"""The pages' private streamlit helpers (caches, URL state, presentation mode, guided lesson,
export menu, the block-tables demo); never an ``st.Page`` script and never imported by ``allocator/``
or ``kernels/``."""
