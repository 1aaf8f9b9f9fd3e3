"""The compiled region solve alone, on the updates of a real run: record them once, replay them
as often as a change to dlsched/sim/netfast_kernel.py needs timing.

Why: on `v100-1500` with 8:1 rack uplinks the region solve is about half of a 100,000-job run
(docs/simulator.md, "Oversubscribed uplinks"), and the run takes minutes. A replay of the same
updates times the kernel alone in seconds, and its hash of every rate it reports says whether a
change gave the same numbers bit for bit.

    python benchmarks/net_replay.py record --jobs 100000 --uplinks 8 --updates 30000
    python benchmarks/net_replay.py replay out/net_replay/v100-1500-os8-100000.pkl --skip 15000
                                          [--whole-min 1000000000]

`record` runs the simulation (fifo, `poisson:jobs=N,rate=0.05`, seed 1, as bench_scale.py's high
case) until it has seen `--updates` updates of the shares and writes them (each a dict of job ->
its links, or None when it leaves) to out/net_replay/ (git-ignored; `--out` another folder).
`replay` applies them to a fresh netfast.FastNetShares and prints the time of the updates after
the first `--skip` (the first ones fill an empty cluster), the mean region and solves per
update, and the hash.
"""
from __future__ import annotations

import argparse
import hashlib
import pickle
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

OUT = Path("out/net_replay")            # (git-ignored)


class _Enough(Exception):
    pass


def record(jobs: int, uplinks: int, updates: int, out: Path = OUT) -> Path:
    import dlsched
    from bench_scale import cluster_file
    from dlsched.sim import netfast
    out.mkdir(parents=True, exist_ok=True)
    cluster = cluster_file("v100-1500", uplinks, out)
    seen: list[dict] = []
    capacity: list = []
    real = netfast.FastNetShares.update_slots

    def recording(self, changes):
        if not capacity:
            capacity.append(self.capacity.copy())
        seen.append(dict(changes))
        if len(seen) >= updates:
            raise _Enough
        return real(self, changes)

    netfast.FastNetShares.update_slots = recording
    try:
        dlsched.simulate(cluster, f"poisson:jobs={jobs},rate=0.05", "fifo", seed=1, record_rates=False)
    except _Enough:
        pass
    finally:
        netfast.FastNetShares.update_slots = real
    if not capacity:
        raise ValueError(f"{jobs} jobs made no update of the shares (no job crossed a shared link)")
    path = out / f"v100-1500-os{uplinks}-{jobs}.pkl"
    with open(path, "wb") as f:
        pickle.dump((capacity[0], seen), f)
    return path


def replay(path: Path, skip: int, whole_min: int | None = None) -> str:
    from dlsched.sim import netfast, network
    if whole_min is not None:             # whole solves from this many live flows (A/B: a huge one)
        network.WHOLE_MIN_FLOWS = whole_min
    with open(path, "rb") as f:
        capacity, updates = pickle.load(f)
    net = netfast.FastNetShares(capacity)
    net.update_slots({})                  # compiled before the clock starts
    digest = hashlib.sha1()
    spent, region, solves = 0.0, 0, 0
    for i, changes in enumerate(updates):
        before = net._counters.copy()
        t0 = time.perf_counter()
        n = net.update_slots(changes)
        if i >= skip:
            spent += time.perf_counter() - t0
            region += int(net._counters[1] - before[1])
            solves += int(net._counters[2] - before[2])
        digest.update(net._out_slot[:n].tobytes())
        digest.update(net._out_rate[:n].tobytes())
    m = max(len(updates) - skip, 1)
    return (f"{m} updates: {spent:.2f} s, {spent / m * 1e3:.3f} ms each; region {region / m:.0f} flows, "
            f"{solves / m:.2f} solves; hash {digest.hexdigest()[:12]}")


def _positive(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text}")
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("--jobs", type=_positive, default=100000)
    r.add_argument("--uplinks", type=_positive, default=8, help="oversubscription k of k:1")
    r.add_argument("--updates", type=_positive, default=30000)
    r.add_argument("--out", type=Path, default=OUT, help="folder for the cluster file and the updates")
    p = sub.add_parser("replay")
    p.add_argument("file", type=Path)
    p.add_argument("--skip", type=int, default=15000, help="updates applied but not timed (the first ones)")
    p.add_argument("--whole-min", type=_positive, default=None,
                   help="whole solves from this many live flows on (network.WHOLE_MIN_FLOWS; 10**9: never)")
    args = ap.parse_args()
    if args.cmd == "record":
        from dlsched.core.errors import DlschedError
        try:
            print(record(args.jobs, args.uplinks, args.updates, args.out))
        except (DlschedError, OSError, ValueError) as e:
            print(f"net_replay.py record: {e}", file=sys.stderr)
            sys.exit(2)
    else:
        try:
            print(replay(args.file, args.skip, args.whole_min))
        except (OSError, pickle.UnpicklingError, EOFError, ValueError, TypeError) as e:
            # (a file this script's `record` did not write: one line, exit 2)
            print(f"net_replay.py: {args.file}: not a recording of `net_replay.py record` ({e})", file=sys.stderr)
            sys.exit(2)


if __name__ == "__main__":
    main()
