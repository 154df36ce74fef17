#!/usr/bin/env python3
"""bench/overhead_trace.py: where a one-task round trip's time goes (issue 13).

Reads the stamp files a run with TESSERA_RTTRACE=PREFIX left (PREFIX.<pid>,
one per process: lines "<ns> <label>", common/util/rttrace.h), and for every
round trip of bench/overhead's latency loop (the window from one `c.submit`
to the next) follows the hops below in order, each the first stamp of its
label after the previous hop. Prints the median time of each hop, and of the
round trip (c.submit -> c.wait_ret), over the round trips that showed every
hop. The stamps share CLOCK_MONOTONIC, so hops between processes compare.

    bench/overhead_trace.py PREFIX [--label NAME]
"""
import glob
import statistics
import sys

# (label, what the time up to it was spent on)
HOPS = [
    ("c.submit", "round trip starts: tsr_submit called"),
    ("c.sent", "client: API thread -> client I/O thread (eventfd), zmq_send of the submit"),
    ("s.submit", "client zmq I/O -> TCP -> scheduler zmq I/O -> scheduler thread, frame read"),
    ("s.handled", "scheduler: decode and handle the submit (admission)"),
    ("s.placed", "scheduler: timers, placement pass"),
    ("s.sent_w", "scheduler: flush: `compute` (and `submitted`) handed to zmq"),
    ("w.compute", "scheduler zmq I/O -> TCP -> worker zmq I/O -> worker main, frame read"),
    ("w.exec_start", "worker: decode compute, queue -> executor thread"),
    ("w.exec_end", "executor: run the no-op, store the output"),
    ("w.complete", "executor -> worker main (inproc PUSH/PULL)"),
    ("w.sent", "worker main: task_done encoded and zmq_send"),
    ("s.task_done", "worker zmq I/O -> TCP -> scheduler zmq I/O -> scheduler thread, frame read"),
    ("s.handled", "scheduler: handle task_done"),
    ("s.sent_c", "scheduler: placement pass, flush `key_done`"),
    ("c.key_done", "scheduler zmq I/O -> TCP -> client zmq I/O -> client I/O thread"),
    ("c.wait_ret", "client I/O thread -> API thread (condvar), tsr_future_wait returns"),
]


def load(prefix):
    stamps = []
    for path in glob.glob(prefix + ".*"):
        with open(path) as f:
            for line in f:
                ns, label = line.split()
                stamps.append((int(ns), label))
    stamps.sort()
    return stamps


def windows(stamps):
    starts = [i for i, (_, label) in enumerate(stamps) if label == "c.submit"]
    for k, i in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else len(stamps)
        yield stamps[i:end]


def follow(window):
    """Times of each hop in order, or None when one is missing. A hop
    marked '?' may be missing (the client's I/O thread may have been woken
    before tsr_submit by the previous future's release): it then takes the
    next hop's time, and that hop's time is counted as its own."""
    times, j = [], 0
    for label, _ in HOPS:
        k = j
        while k < len(window) and window[k][1] != label.rstrip("?"):
            k += 1
        if k == len(window):
            if label.endswith("?"):
                times.append(None)
                continue
            return None
        times.append(window[k][0])
        j = k + 1
    for h in range(len(times) - 2, -1, -1):
        if times[h] is None:
            times[h] = times[h + 1]
    return times


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    prefix = sys.argv[1]
    name = sys.argv[3] if len(sys.argv) > 3 and sys.argv[2] == "--label" else prefix
    chains = [t for t in (follow(w) for w in windows(load(prefix))) if t is not None]
    # the latency loop's round trips are the short ones at the start; big graphs later have many stamps
    chains = [t for t in chains if t[-1] - t[0] < 50_000_000]
    if not chains:
        print(f"{name}: no complete round trip in {prefix}.*")
        return 1
    print(f"# {name}: {len(chains)} round trips, median of each hop (us)")
    for h in range(1, len(HOPS)):
        d = statistics.median((t[h] - t[h - 1]) / 1e3 for t in chains)
        print(f"{HOPS[h][0]:>13} {d:8.1f}  {HOPS[h][1]}")
    total = statistics.median((t[-1] - t[0]) / 1e3 for t in chains)
    print(f"{'round trip':>13} {total:8.1f}  c.submit -> c.wait_ret (sum of medians "
          f"{sum(statistics.median((t[h] - t[h - 1]) / 1e3 for t in chains) for h in range(1, len(HOPS))):.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
