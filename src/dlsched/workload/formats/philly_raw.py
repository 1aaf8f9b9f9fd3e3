"""Microsoft Philly's raw job log, `cluster_job_log` (Jeon et al., ATC'19; msr-fiddle/philly-traces).

One JSON array of jobs (a file of one job object per line is read too), each as the
philly-traces README documents it:

    {"status": "Pass", "vc": "ee9e8c", "jobid": "application_1506638472019_14199",
     "submitted_time": "2017-10-07 01:11:39", "user": "ce2f4c",
     "attempts": [{"start_time": "2017-10-07 01:12:09", "end_time": "2017-10-07 01:13:23",
                   "detail": [{"ip": "m47", "gpus": ["gpu0", ..., "gpu7"]}]}, ...]}

Times are `YYYY-MM-DD HH:MM:SS`; a missing one is null or the string "None".

| key                      | dlsched                                                         |
| ---                      | ---                                                             |
| jobid                    | job_id (as written)                                             |
| user                     | user                                                            |
| vc                       | queue (the virtual cluster)                                     |
| submitted_time           | submit_time_s (seconds from the earliest submission)            |
| attempts[0].detail[*].gpus | GPUs (as the README's notebook counts them): that many workers x 1 GPU |
| attempts[0].start_time   | recorded_start_s (same clock)                                   |
| attempts[-1].end_time    | recorded_end_s                                                  |
| attempts                 | duration_s = the sum of the attempts' run times (end - start),  |
|                          | retries' waits left out, as the Pollux authors' per-job CSV has it |
| status, number of attempts, machines of the first attempt, other keys | extra          |

Dropped (counted): jobs with no attempt (never scheduled), with no GPU, whose last attempt has
no end_time (still running when the log was taken) or with no attempt that has both times.
Killed and Failed jobs are kept with the time they ran. Bad input: JSON that does not parse (a
record cut short: the line where parsing stopped and the last key read), a job that is not an
object, a time that does not parse.
"""
from __future__ import annotations

import json
import re

import numpy as np

from dlsched.core.errors import InputError
from dlsched.workload.formats import common as c
from dlsched.workload.formats.table import read_bytes

NAME = "philly-raw"
KEYS = ("jobid", "submitted_time", "attempts")
MAPPED = ("jobid", "user", "vc", "submitted_time", "attempts", "status")
TIME_FORMAT = "%Y-%m-%d %H:%M:%S"
_KEY = re.compile(r'"([^"\\]+)"\s*:')


def load(path) -> list[tuple[int, dict]]:
    """(line, job) of every job object of the file, the line where the object starts."""
    file = str(path)
    text = read_bytes(path).decode("utf-8-sig", errors="replace")
    dec = json.JSONDecoder()
    out: list[tuple[int, dict]] = []
    pos, line, n = 0, 1, len(text)
    ws = re.compile(r"[\s,\[\]]*")
    while True:
        m = ws.match(text, pos)
        line += text.count("\n", pos, m.end())
        pos = m.end()
        if pos >= n:
            break
        try:
            obj, end = dec.raw_decode(text, pos)
        except json.JSONDecodeError as e:
            keys = _KEY.findall(text, pos, e.pos)
            raise InputError(f"invalid JSON ({e.msg}; a record cut short?)", file=file,
                             line=text.count("\n", 0, e.pos) + 1, field=keys[-1] if keys else None) from None
        if not isinstance(obj, dict):
            raise InputError("expected a job object {...}", file=file, line=line)
        out.append((line, obj))
        line += text.count("\n", pos, end)
        pos = end
    return out


def _time(v) -> str | None:
    return None if v is None or str(v).strip() in ("", "None") else str(v).strip()


def read(records: list[tuple[int, dict]], *, file=None) -> c.Trace:
    import pandas as pd
    n = len(records)
    ids, users, vcs, subs, gpus, firsts, lasts, extras = [], [], [], [], [], [], [], []
    att_job, att_start, att_end = [], [], []
    for k, (line, job) in enumerate(records):
        for key in KEYS:
            if key not in job:
                raise InputError("missing key", file=file, line=line, field=key)
        attempts = job["attempts"]
        if not isinstance(attempts, list) or not all(isinstance(a, dict) for a in attempts):
            raise InputError("expected a list of attempt objects", file=file, line=line, field="attempts")
        ids.append(str(job["jobid"]))
        users.append(job.get("user"))
        vcs.append(job.get("vc"))
        subs.append(_time(job["submitted_time"]))
        g, hosts = 0, []
        if attempts:
            detail = attempts[0].get("detail") or []
            try:
                g = sum(len(d.get("gpus") or []) for d in detail)
                hosts = [d.get("ip") for d in detail]
            except (AttributeError, TypeError):
                raise InputError("expected a list of {ip, gpus}", file=file, line=line, field="attempts[0].detail") from None
        gpus.append(g)
        firsts.append(_time(attempts[0].get("start_time")) if attempts else None)
        lasts.append(_time(attempts[-1].get("end_time")) if attempts else None)
        for a in attempts:
            att_job.append(k)
            att_start.append(_time(a.get("start_time")))
            att_end.append(_time(a.get("end_time")))
        other = {key: v for key, v in job.items() if key not in MAPPED}
        extras.append(json.dumps({"status": job.get("status"), "attempts": len(attempts), "hosts": hosts, **other},
                                 separators=(",", ":")))
    lines = np.asarray([ln for ln, _ in records], dtype=np.int64)

    def parse(values: list, where: str, per_job: np.ndarray | None = None) -> np.ndarray:
        s = pd.Series(values, dtype=object)
        ts = pd.to_datetime(s, format=TIME_FORMAT, errors="coerce")
        bad = np.flatnonzero(ts.isna().to_numpy() & s.notna().to_numpy())
        if bad.size:
            i = int(bad[0])
            row = i if per_job is None else int(per_job[i])
            raise InputError(f"expected a time {TIME_FORMAT!r} or null, got {values[i]!r}", file=file,
                             line=int(lines[row]), field=where)
        ns = ts.to_numpy(dtype="datetime64[ns]")
        return np.where(np.isnat(ns), np.nan, ns.astype(np.int64) / 1e9)

    submit = parse(subs, "submitted_time")
    first_bad_sub = np.flatnonzero(np.isnan(submit))
    if first_bad_sub.size:
        raise InputError("is required", file=file, line=int(lines[first_bad_sub[0]]), field="submitted_time")
    aj = np.asarray(att_job, dtype=np.int64)
    a0, a1 = parse(att_start, "attempts.start_time", aj), parse(att_end, "attempts.end_time", aj)
    first, last = parse(firsts, "attempts[0].start_time"), parse(lasts, "attempts[-1].end_time")
    ran = np.isfinite(a0) & np.isfinite(a1)
    dur = np.zeros(n)
    timed = np.zeros(n, dtype=np.int64)
    np.add.at(dur, aj[ran], np.maximum(a1[ran] - a0[ran], 0.0))
    np.add.at(timed, aj[ran], 1)
    g = np.asarray(gpus, dtype=np.float64)
    n_att = np.bincount(aj, minlength=n) if aj.size else np.zeros(n, dtype=np.int64)
    dropped: dict[str, int] = {}
    never = n_att == 0
    no_gpu = ~never & (g == 0)
    running = ~never & ~no_gpu & np.isnan(last)
    untimed = ~never & ~no_gpu & ~running & (timed == 0)
    c.count(dropped, "never scheduled (no attempt)", never)
    c.count(dropped, "no GPU", no_gpu)
    c.count(dropped, "still running (last attempt has no end_time)", running)
    c.count(dropped, "no attempt with both times", untimed)
    keep = ~(never | no_gpu | running | untimed)
    idx = np.flatnonzero(keep)
    pick = idx.tolist()
    pairs = c.build_jobs(origin=c.origin(submit),
        job_ids=[ids[i] for i in pick], submit=submit[keep], duration=dur[keep], workers=g[keep],
        gpus_per_worker=np.ones(idx.size), lines=lines[keep], users=[users[i] for i in pick],
        queues=[vcs[i] for i in pick], start=first[keep], end=last[keep], extra=[extras[i] for i in pick])
    return c.Trace(NAME, pairs, dropped)
