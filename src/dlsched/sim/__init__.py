"""The discrete-event simulator: an event heap and SimBackend (the Backend protocol)."""
from dlsched.sim.engine import EventHeap
from dlsched.sim.backend import SimBackend

__all__ = ["EventHeap", "SimBackend"]
