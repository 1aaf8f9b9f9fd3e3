"""Policy errors on the real runtime: a round's exception contained (see dlsched.scheduler.core's
docstring, "Policy errors"). `self` is the Scheduler."""
from __future__ import annotations

import logging
import re

from dlsched.core.types import JobSpec, Plan
from dlsched.scheduler import events as ev
from dlsched.scheduler.context import _SETTLED, JobRecord

log = logging.getLogger("dlsched.scheduler")
_JOB_ID_RE = re.compile(r"\b[\w.-]+\b")


def contained_round(self, backend, now: float) -> Plan:
    """`round`, with an exception in it contained (see the module docstring). Each retry
    holds one more job, so this ends after at most one round per job plus one."""
    name = self.profile.spec.name
    for _ in range(len(self.jobs) + 1):
        try:
            return self.round(backend.snapshot())
        except Exception as e:                     # a policy bug: contain it
            job_id = culprit(self, e)
            err = f"{type(e).__name__}: {e}"
            self.round_errors.append((now, job_id, err))
            if job_id is None:
                reason = f"policy {name} failed in a round not attributable to one job ({err}); previous plan kept"
                log.error("%s", reason, exc_info=True)
                backend.policy_error(None, reason)
                return Plan([])
            reason = f"policy {name} failed on this job: {err}"
            log.error("policy %s failed on job %s; job put on hold: %s", name, job_id, err, exc_info=True)
            backend.policy_error(job_id, reason)
            self.handle(ev.JobHeld(now, job_id, reason), backend)
    return Plan([])

def culprit(self, e: BaseException) -> str | None:
    """The job an exception raised in a round is about: the innermost frame below `round`
    that holds a job (a JobRecord or JobSpec local, or a job-id string local), else a known
    job id named in the message. Frames of `round` itself are skipped: its loop variables
    may name a job the error has nothing to do with."""
    frames = []
    tb, below = e.__traceback__, False
    while tb is not None:
        if below:
            frames.append(tb.tb_frame)
        elif tb.tb_frame.f_code is type(self).round.__code__:
            below = True
        tb = tb.tb_next
    for fr in reversed(frames):                 # innermost first
        for v in fr.f_locals.values():
            jid = (v.job_id if isinstance(v, (JobRecord, JobSpec))
                   else v if isinstance(v, str) and v in self.jobs else None)
            if jid is not None and jid in self.jobs and self.jobs[jid].state not in _SETTLED:
                return jid
    named = [w for w in _JOB_ID_RE.findall(str(e)) if w in self.jobs]
    return named[0] if len(set(named)) == 1 else None
