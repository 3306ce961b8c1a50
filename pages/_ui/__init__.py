"""The pages' private streamlit helpers: caches, URL state, presentation mode, guided lesson, exports, the heavy-work queue.

Never an ``st.Page`` script and never imported by ``allocator/`` or ``kernels/``."""
