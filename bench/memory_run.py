"""Runs a command and samples its process tree every 50 ms from /proc:
the peak RSS of each process whose command line contains NAME (the
workers), and the bytes the tree wrote to storage (/proc/PID/io
write_bytes, summed over every process seen, last sample of each).
Prints `worker_peak_rss_mb=... disk_written_mb=... wall_s=...` on stderr
after the command's own output; exits with the command's exit code.

Usage: memory_run.py NAME COMMAND [ARGS...]"""
import os
import subprocess
import sys
import threading
import time


def tree(root):
    kids = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                kids.setdefault(ppid, []).append(int(pid))
            except (OSError, IndexError, ValueError):
                pass
    out, stack = [], [root]
    while stack:
        pid = stack.pop()
        out.append(pid)
        stack.extend(kids.get(pid, []))
    return out


def read(pid, name):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        rss = 0
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) * 1024
        written = 0
        with open(f"/proc/{pid}/io") as f:
            for line in f:
                if line.startswith("write_bytes:"):
                    written = int(line.split()[1])
        return name in cmd, rss, written
    except OSError:
        return None


def main():
    name, cmd = sys.argv[1], sys.argv[2:]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd)
    peak, written, done = {}, {}, threading.Event()

    def sample():
        while not done.is_set():
            for pid in tree(proc.pid):
                r = read(pid, name)
                if r is None:
                    continue
                is_worker, rss, w = r
                written[pid] = max(written.get(pid, 0), w)
                if is_worker:
                    peak[pid] = max(peak.get(pid, 0), rss)
            time.sleep(0.05)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    rc = proc.wait()
    done.set()
    t.join()
    wall = time.monotonic() - t0
    worst = max(peak.values()) / 2**20 if peak else 0
    print(f"worker_peak_rss_mb={worst:.0f} workers={len(peak)} disk_written_mb={sum(written.values()) / 2**20:.0f} "
          f"wall_s={wall:.1f}", file=sys.stderr)
    sys.exit(rc)


if __name__ == "__main__":
    main()
