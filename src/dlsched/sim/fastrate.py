"""Re-rating the jobs a re-share moved, compiled: SimBackend._rerate's loop for the jobs whose
only change is their link share, on arrays, in one numba call per re-share.

Why: on a busy 1,500-node cluster each re-share moves the rates of about 40 jobs (a flow that
comes or goes changes its neighbours' shares, and theirs), and re-rating them in Python (bring
the work done up to now, the new rate, a new or deferred finish) was the largest cost after the
region solve (docs/decisions/0037 and docs/simulator.md).

How. A job whose rate was last computed with link shares (`JobRun.factor` set) and that has a
flow in the compiled shares' keeper (netfast.FastNetShares) may be *in array mode*: its progress
state (remaining work, rate, time of the last update, version, NIC and cross-rack bytes, first
progress, its finish entry's time, a deferred finish) and the constants of its rate formula live
in row `slot` of two arrays (the flow's slot in FastNetShares), and `JobRun.slot` says so. Its
`JobRun` fields are stale then. SimBackend takes a job out of array mode (`FlowRuns.own`: the
row copied back to the fields) before anything else reads or changes it: an event of its own, a
decision, `job_stats`, a touch in `_refresh`; it enters again (`enter`) when its rate is next
computed in Python with link shares.

The kernel does, for each job a re-share moved, what `_rerate` does in Python, the same float
operations in the same order (so the same event log):
- a job not in array mode, or one whose rate is or becomes 0 (its effective GPUs change: the
  Python path keeps that sum in order), goes back to Python with its share;
- otherwise: the work done at the old rate up to now, the new rate, the version, the finish time;
  a finish at or after the job's live entry waits (deferred, as SimBackend._push_finish), any
  other is written out for Python to push into the heap (with the job's `Finish` record);
- sequence numbers are `seq0 + rank` (the job's place among all job ids in sorted order): the
  same relative order as the position in the sorted list of re-rated jobs, without a sort.
"""
from __future__ import annotations

import math

import numpy as np

# float fields of a row
REM, RATE, LAST, NIC_B, CROSS_B, FIRST, FIN_AT, DEF_T = range(8)
C_LOCAL, C_MOST, C_COMP, C_OVL, C_NUM, C_PER, C_NIC, C_CROSS, C_FACTOR = range(8, 17)
NF = 17
# int fields of a row
AMODE, VERSION, HAS_FIN, HAS_DEF, DEF_SEQ, DEF_VER, RANK = range(7)
NI = 7

_kernel = None


def available() -> bool:
    """numba imported (netfast's test) and the kernel wrapped (compiled at its first call)."""
    global _kernel
    if _kernel is None:
        from dlsched.sim import netfast
        if not netfast.available():
            return False
        import numba
        _kernel = numba.njit(cache=True, nogil=True)(_rerate_py)
    return True


def _rerate_py(slots, shares, fs, is_, now, seq0, defer, record, ghost, py_slot, py_share,
               push_slot, push_t, rec_slot, rec_rate, counts):
    """Re-rate the flows `slots` at their new `shares` (see the module's docstring). Flows for
    Python go to py_slot/py_share, finishes to push to push_slot/push_t, rate records (when
    `record`) to rec_slot/rec_rate; counts gets how many of each. ghost[0]: the latest deferred
    finish given up (SimBackend._ghost_t), in and out."""
    npy = 0
    npush = 0
    nrec = 0
    g = ghost[0]
    for i in range(slots.shape[0]):
        s = slots[i]
        share = shares[i]
        if is_[s, AMODE] == 0:
            py_slot[npy] = s
            py_share[npy] = share
            npy += 1
            continue
        # JobComm.rate_at(share) * factor
        comm = fs[s, C_LOCAL] + fs[s, C_MOST] / share
        c = fs[s, C_COMP]
        t = c + comm - fs[s, C_OVL] * (c if c <= comm else comm)
        rate = fs[s, C_NUM] / t * fs[s, C_FACTOR]
        old = fs[s, RATE]
        if not (rate > 0.0 and old > 0.0):     # its effective GPUs change: Python's path
            py_slot[npy] = s
            py_share[npy] = share
            npy += 1
            continue
        if rate == old:
            continue
        dt = now - fs[s, LAST]                 # _advance
        if dt > 0:
            done = old * dt
            rem = fs[s, REM]
            if rem < done:                      # min(old * dt, remaining)
                done = rem
            fs[s, REM] = rem - done
            per = fs[s, C_PER]
            fs[s, NIC_B] += done * per * fs[s, C_NIC]
            fs[s, CROSS_B] += done * per * fs[s, C_CROSS]
        fs[s, LAST] = now
        fs[s, RATE] = rate
        version = is_[s, VERSION] + 1
        is_[s, VERSION] = version
        if math.isnan(fs[s, FIRST]):
            fs[s, FIRST] = now
        rem = fs[s, REM]
        tf = now + (0.0 if 0.0 > rem else rem) / rate     # max(remaining, 0.0) / rate
        if is_[s, HAS_DEF] != 0:              # _push_finish: a waiting finish is given up
            is_[s, HAS_DEF] = 0
            if fs[s, DEF_T] > g:
                g = fs[s, DEF_T]
        if defer and is_[s, HAS_FIN] != 0 and fs[s, FIN_AT] <= tf:
            is_[s, HAS_DEF] = 1
            fs[s, DEF_T] = tf
            is_[s, DEF_SEQ] = seq0 + is_[s, RANK]
            is_[s, DEF_VER] = version
        else:
            is_[s, HAS_FIN] = 1
            fs[s, FIN_AT] = tf
            push_slot[npush] = s
            push_t[npush] = tf
            npush += 1
        if record:
            rec_slot[nrec] = s
            rec_rate[nrec] = rate
            nrec += 1
    ghost[0] = g
    counts[0] = npy
    counts[1] = npush
    counts[2] = nrec


class FlowRuns:
    """The array-mode rows of the jobs with a flow (see the module's docstring), indexed by the
    flow's slot in a netfast.FastNetShares."""

    def __init__(self, net) -> None:
        if not available():
            raise RuntimeError("FlowRuns needs numba")
        self.net = net
        self.fs = np.zeros((0, NF), dtype=np.float64)
        self.is_ = np.zeros((0, NI), dtype=np.int64)
        self.runs: list = []                 # slot -> the JobRun in array mode there (or None)
        self._ghost = np.zeros(1, dtype=np.float64)
        self._counts = np.zeros(3, dtype=np.int64)
        self._grow(256)

    def _grow(self, n: int) -> None:
        old = self.fs.shape[0]
        if n <= old:
            return
        fs = np.zeros((n, NF), dtype=np.float64)
        is_ = np.zeros((n, NI), dtype=np.int64)
        fs[:old], is_[:old] = self.fs, self.is_
        self.fs, self.is_ = fs, is_
        self.runs.extend([None] * (n - old))
        self._py_slot = np.zeros(n, dtype=np.int64)
        self._py_share = np.zeros(n, dtype=np.float64)
        self._push_slot = np.zeros(n, dtype=np.int64)
        self._push_t = np.zeros(n, dtype=np.float64)
        self._rec_slot = np.zeros(n, dtype=np.int64)
        self._rec_rate = np.zeros(n, dtype=np.float64)

    def enter(self, r, rank: int) -> None:
        """Put `r` (its rate just computed with link shares: r.factor and r.consts set) in
        array mode, in its flow's row. A job without a flow stays as it is."""
        slot = self.net._slot.get(r.spec.job_id)
        if slot is None:
            return
        if slot >= self.fs.shape[0]:
            self._grow(max(2 * self.fs.shape[0], slot + 1))
        local, most, comp, overlap, num, per, nic, cross, factor = r.consts
        d = r.deferred
        first = r.first_progress_s
        self.fs[slot] = (r.remaining, r.rate, r.last_t, r.nic_bytes, r.cross_rack_bytes,
                         math.nan if first is None else first, r.fin_at,
                         0.0 if d is None else d[0],
                         local, most, comp, overlap, num, per, nic, cross, factor)
        self.is_[slot] = (1, r.version, r.fin_ev is not None, d is not None,
                          0 if d is None else d[1], 0 if d is None else d[2], rank)
        self.runs[slot] = r
        r.slot = slot

    def own(self, r) -> None:
        """Take `r` out of array mode: its row copied back to its fields."""
        s = r.slot
        f = self.fs[s].tolist()
        i = self.is_[s].tolist()
        r.remaining, r.rate, r.last_t = f[REM], f[RATE], f[LAST]
        r.nic_bytes, r.cross_rack_bytes = f[NIC_B], f[CROSS_B]
        r.first_progress_s = None if math.isnan(f[FIRST]) else f[FIRST]
        r.fin_at = f[FIN_AT]
        r.version = i[VERSION]
        r.deferred = (f[DEF_T], i[DEF_SEQ], i[DEF_VER]) if i[HAS_DEF] else None
        self.is_[s, AMODE] = 0
        self.runs[s] = None
        r.slot = -1

    def rerate(self, n: int, slots, shares, now: float, seq0: int, defer: bool, record: bool,
               ghost: float) -> tuple[int, int, int, float]:
        """The kernel over the first n (slot, share) pairs: (flows for Python, finishes to push,
        rate records, the new ghost time); their rows are in _py_*, _push_*, _rec_*."""
        if self.fs.shape[0] < self.net._F:
            self._grow(self.net._F)
        self._ghost[0] = ghost
        c = self._counts
        _kernel(slots[:n], shares[:n], self.fs, self.is_, now, seq0, defer, record, self._ghost,
                self._py_slot, self._py_share, self._push_slot, self._push_t, self._rec_slot,
                self._rec_rate, c)
        return int(c[0]), int(c[1]), int(c[2]), float(self._ghost[0])
