"""The app's pages: one `st.Page` script each, widgets -> one core call -> render."""
