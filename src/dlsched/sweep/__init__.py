"""Sweeps and capacity planning on Ray (dlsched sweep, dlsched plan)."""
