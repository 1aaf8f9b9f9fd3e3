"""The compiled run's way out to Python for Liquid's genetic algorithm (dlsched.sim.fastloop_liquid
`_ga_round`): a numba object-mode block, in a module of its own because it imports numba (only
fastloop_liquid.compile imports this one). The batch rounds are few (8 of the Philly replay's
151,000), and the algorithm draws from the scheduler's numpy Generator: run in Python, its draws
are the Python loop's, bit for bit, which a numba copy of the Generator could not promise.
The speed it buys: RESULTS.md block `tenancy` (`python benchmarks/bench_tenancy.py`; liquid
4.8 s compiled against 25.6 s in Python), decision 0067.
"""
from __future__ import annotations

import numba

from dlsched.sim import fastloop_liquid as _flq


def _call_py(bjobs, free, bnode, now):
    with numba.objmode(m="int64"):
        m = _flq._ga_round(bjobs, free, bnode, now)
    return m


call = numba.njit(cache=True)(_call_py)      # (not nogil: object mode takes the GIL)
