"""Runs a command and reports the peak of the summed resident memory of
its whole process tree (every descendant: scheduler, workers, Dask worker
processes), sampled every 20 ms from /proc. Prints `peak_rss_mb=...` and
`wall_s=...` on stderr after the command's own output; exits with the
command's exit code."""
import os
import subprocess
import sys
import threading
import time


def children_map():
    kids = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(pid))
    return kids


def tree_rss_kb(root):
    kids, total, stack = children_map(), 0, [root]
    while stack:
        pid = stack.pop()
        stack.extend(kids.get(pid, []))
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


def main():
    start = time.perf_counter()
    proc = subprocess.Popen(sys.argv[1:])
    peak = [0]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], tree_rss_kb(proc.pid))
            time.sleep(0.02)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    rc = proc.wait()
    done.set()
    t.join()
    print(f"peak_rss_mb={peak[0] / 1024:.0f} wall_s={time.perf_counter() - start:.2f}", file=sys.stderr, flush=True)
    sys.exit(rc)


if __name__ == "__main__":
    main()
