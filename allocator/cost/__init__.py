"""Seconds, not steps: the roofline cost model, its calibration, and runs priced with it."""
