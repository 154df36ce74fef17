#!/usr/bin/env python3
"""Checks an efficiency report (docs/report.md) for test_report.sh.

  check_report.py json FILE.json      fields present, values sane
  check_report.py dom FILE.dom OPS..  the rendered DOM has the sections, charts and op names
  check_report.py pixels FILE.png MIN [MAX]
                                      fraction of non-background pixels of a screenshot in [MIN, MAX]

Prints what it checked; exits 1 with the reason on the first failure."""
import json
import sys


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def in_unit(v):
    return isinstance(v, (int, float)) and 0 < v <= 1


def check_json(path):
    with open(path) as f:
        d = json.load(f)
    check(d.get("tessera_report") == 1, "tessera_report is %r, not 1" % d.get("tessera_report"))
    for key in ("program", "started", "wall_s", "tasks", "ops", "workers", "efficiency", "tiers", "data", "samples", "bound"):
        check(key in d, "field '%s' is missing" % key)
    check(d["wall_s"] > 0, "wall_s %r is not > 0" % d["wall_s"])
    t = d["tasks"]
    check(t["total"] > 0 and t["done"] == t["total"] and t["erred"] == 0, "tasks %r: not all done" % t)
    check(t["busy_s"] > 0, "busy_s %r is not > 0" % t["busy_s"])
    ops = d["ops"]
    check(len(ops) >= 2, "only %d ops" % len(ops))
    op_busy = sum(o["busy_s"] for o in ops)
    # a fused task's time is split among its parts with integer microseconds
    check(abs(op_busy - t["busy_s"]) <= 0.01 * t["busy_s"] + 0.001,
          "per-op busy %.6f s does not add up to the job's %.6f s" % (op_busy, t["busy_s"]))
    check(sum(o["tasks"] for o in ops) == t["total"], "per-op tasks do not add up to %d" % t["total"])
    check(all(ops[i]["busy_s"] >= ops[i + 1]["busy_s"] for i in range(len(ops) - 1)), "ops not sorted by busy time")
    check(in_unit(d["efficiency"]["busy"]), "busy efficiency %r not in (0,1]" % d["efficiency"]["busy"])
    check(in_unit(d["efficiency"]["cpu"]), "CPU efficiency %r not in (0,1]" % d["efficiency"]["cpu"])
    check(len(d["workers"]) == 2, "%d workers, expected 2" % len(d["workers"]))
    for w in d["workers"]:
        check(in_unit(w["cpu_efficiency"]), "worker %s CPU efficiency %r not in (0,1]" % (w["name"], w["cpu_efficiency"]))
        check(w["cpu_s"] > 0 and w["tasks_done"] > 0, "worker %s did nothing: %r" % (w["name"], w))
        check(w["memory_peak"] > 0, "worker %s memory_peak %r" % (w["name"], w["memory_peak"]))
        check(in_unit(w["memory_efficiency"]), "worker %s memory efficiency %r" % (w["name"], w["memory_efficiency"]))
    host = d["tiers"]["host"]
    check(in_unit(host["efficiency"]) and host["peak"] > 0, "host tier %r" % host)
    check(d["data"]["bytes_made"] == t["bytes_done"] and d["data"]["bytes_fetched"] > 0, "data %r" % d["data"])
    s = d["samples"]
    check(len(s["t"]) >= 2 and all(len(v) == len(s["t"]) for v in s.values()), "samples ragged or < 2")
    check(max(v for v in s["memory_used"] if v is not None) > 0, "memory never sampled above 0")
    b = d["bound"]
    check(b["by"] in ("compute", "transfer", "spill", "scheduler"), "bound.by %r" % b["by"])
    check(len(b["evidence"]) >= 4, "evidence %r" % b["evidence"])
    f = b["fractions"]
    check(abs(f["compute"] + f["transfer"] + f["idle"] - 1) < 1e-6 or f["idle"] == 0, "fractions %r" % f)
    print("json ok: wall %.2f s, %d tasks, busy %.2f s in %d ops, cpu eff %.2f, bounded by %s"
          % (d["wall_s"], t["total"], t["busy_s"], len(ops), d["efficiency"]["cpu"], b["by"]))


def check_dom(path, ops):
    with open(path, errors="replace") as f:
        dom = f.read()
    for sec in ("summary", "bound", "ops", "timeline", "workers", "data"):
        check('<section id="%s">' % sec in dom, "section '%s' missing from the DOM" % sec)
    check(dom.count("<svg") >= 4, "only %d charts" % dom.count("<svg"))
    check(dom.count("<polyline") >= 2, "no line plots")
    check('id="report-data"' in dom, "no embedded JSON")
    for op in ops:
        check(">%s</text>" % op in dom, "op '%s' has no bar label" % op)
    check("http://" not in dom and "https://" not in dom, "the page refers to the network")
    print("dom ok: 6 sections, %d charts, %d ops labelled" % (dom.count("<svg"), len(ops)))


def check_pixels(path, lo, hi):
    from PIL import Image
    im = Image.open(path).convert("RGB")
    w, h = im.size
    bg = im.getpixel((w - 1, h - 1))
    data = im.getdata()
    ink = sum(1 for p in data if max(abs(p[0] - bg[0]), abs(p[1] - bg[1]), abs(p[2] - bg[2])) > 24)
    frac = ink / float(w * h)
    check(lo <= frac <= hi, "%s: non-background fraction %.4f not in [%g, %g]" % (path, frac, lo, hi))
    print("pixels ok: %s %dx%d, %.2f%% non-background" % (path, w, h, 100 * frac))


if __name__ == "__main__":
    if len(sys.argv) < 3:
        fail(__doc__)
    kind, path = sys.argv[1], sys.argv[2]
    if kind == "json":
        check_json(path)
    elif kind == "dom":
        check_dom(path, sys.argv[3:])
    elif kind == "pixels":
        check_pixels(path, float(sys.argv[3]), float(sys.argv[4]) if len(sys.argv) > 4 else 1.0)
    else:
        fail("unknown check '%s'" % kind)
