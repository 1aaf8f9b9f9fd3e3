"""The run loop's hand-tuned speed-ups, kept out of the loop they speed up (dlsched.scheduler.core
reads as the loop its docstring describes):

- log records built with `tuple.__new__` (`LogWriter._log`, `_log_rec`): LogRecord's own
  NamedTuple __new__ costs twice as much, and a run writes a few records per job;
- fewer gen-0 garbage collections while a run loops (`fewer_collections`).

The benchmark that justifies them is benchmarks/bench_sim.py, a whole-Philly run (82,247 jobs;
RESULTS.md, block `fifo`): when they came in (with a slotted log replay and a read-only jobs view
made once), fifo on Philly took 11.0 s against 12.1-12.7 s, and the collector's re-scans had
been about 1.5 s of 10. The FIFO family now runs Philly compiled (dlsched.sim.fastloop), so the
Python loop they speed up is what benchmarks/bench_policies.py times for every other policy on
the same trace. Neither changes what is recorded: a record built either way is the same
tuple, field for field, and when a collection runs changes no value.
"""
from __future__ import annotations

import gc
from contextlib import contextmanager

from dlsched.scheduler.eventlog import LogRecord

#: allocations between two gen-0 collections while a run loops (the default is 700); the
#: benchmark behind it: benchmarks/bench_sim.py (see the module)
_GC_GEN0 = 50_000
_tuple_new = tuple.__new__
_LOG_PAD = tuple(LogRecord._field_defaults[f] for f in LogRecord._fields[3:])
# LogWriter._log_rec lays records out by position: a change of LogRecord's fields must show here
assert LogRecord._fields == ("time_s", "kind", "job_id", "detail", "placements", "cost", "packed", "spec", "stats")


class LogWriter:
    """How the Scheduler writes its typed log (mixed in): each record to `self.log`, and to
    `self.sink` when there is one (it sees every record as it is written)."""

    def _log(self, *fields, **kw) -> None:
        # tuple.__new__ with the defaults padded: LogRecord's own __new__ costs twice as much,
        # and a run writes a few records per job (benchmarks/bench_sim.py: see the module)
        rec = LogRecord(*fields, **kw) if kw else _tuple_new(LogRecord, fields + _LOG_PAD[len(fields) - 3:])
        self.log.append(rec)
        if self.sink is not None:
            self.sink(rec)

    def _log_rec(self, rec: tuple) -> None:
        """_log of a record already laid out as LogRecord's nine fields, in order."""
        rec = _tuple_new(LogRecord, rec)
        self.log.append(rec)
        if self.sink is not None:
            self.sink(rec)


@contextmanager
def fewer_collections():
    """Collect gen 0 less often while the block runs; the threshold is put back after it. A run
    allocates many short-lived containers (transactions, plans, log records) while its job
    records and event log stay alive: at the default gen-0 threshold (700) the collector
    re-scans that growing live set over and over."""
    saved = gc.get_threshold()
    gc.set_threshold(max(saved[0], _GC_GEN0), *saved[1:])
    try:
        yield
    finally:
        gc.set_threshold(*saved)
