#!/usr/bin/env bash
# bench/pca.sh — PCA of PLINK 1 genotypes: Tessera's tsr-pca against
# plink2, on the issue's CPU case (100,000 samples x 50,000 SNPs, 1%
# missing, 5 populations from bench/gen_bed.c), same machine, same run.
# Prints the wall time and peak RSS of each side (bench/peakrss.py: the
# whole process tree, scheduler and workers included), the eigenvalue
# agreement (max relative difference of the top 10) and the time and
# memory ratios.
#
# Usage: bench/pca.sh [--plink2-only] [--exact | --no-exact] [SAMPLES [SNPS]]
#   SAMPLES, SNPS   the size (default 100000 50000); a quick run: 2000 5000
#   --plink2-only   generate and run plink2 only (no tsr-pca needed)
#   --exact         also run plink2's exact --pca 10 (default: only up to
#                   20,000 samples; its GRM is SAMPLES^2 doubles), killed
#                   after 15 minutes; --no-exact never runs it
# Files go to $OUT (default bench/out/pca-SAMPLESxSNPS); the data set is
# reused when its parameters match. BIN (default build/bin) holds the
# binaries.
#
# The exact commands (PREFIX = $OUT/gen):
#   build/bin/tsr-gen-bed --out PREFIX --samples SAMPLES --snps SNPS --missing 0.01 --pops 5 --fst 0.05 --seed 1
#   build-cpu/bin/tessera local --cpu-workers 2 --threads-per-worker 1 --memory-limit 1GiB -- \
#     build-cpu/bin/tsr-pca --bed PREFIX --k 10 --out $OUT/tsr      (tsr-pca's defaults: 6 Krylov iterations, l = 20)
#   plink2 --bfile PREFIX --pca approx 10 --threads 2 --out $OUT/plink2
#   timeout 15m plink2 --bfile PREFIX --pca 10 --threads 2 --out $OUT/plink2_exact
#   (accuracy reference) tsr-pca ... --power-iters 12 --oversamples 40 --out $OUT/tsr_ref
# Tessera runs from a CPU-only Release build (build-cpu, made here when
# missing): the CUDA libraries a CUDA build links cost each worker ~190 MB
# of resident memory at load, on a machine without a GPU too. Each worker
# holds at most 1 GiB: the packed .bed chunks it drops under that limit
# are read again when needed (docs/memory.md), with the same results.
# plink2 gets the 2 threads that Tessera's 2 single-threaded workers get.
set -euo pipefail
cd "$(dirname "$0")/.."

plink2_only=0 exact=auto
args=()
for a in "$@"; do
  case "$a" in
    --plink2-only) plink2_only=1 ;;
    --exact) exact=yes ;;
    --no-exact) exact=no ;;
    -h|--help) sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "bench/pca.sh: unknown flag $a (see --help)" >&2; exit 2 ;;
    *) args+=("$a") ;;
  esac
done
samples=${args[0]:-100000}
snps=${args[1]:-50000}
bin=${BIN:-build-cpu/bin}
if [ -z "${BIN:-}" ] && [ ! -x "$bin/tsr-pca" -o ! -x "$bin/tsr-gen-bed" ]; then
  BUILD_DIR=build-cpu scripts/build.sh -DTSR_CUDA=OFF -DCMAKE_BUILD_TYPE=Release
fi
out=${OUT:-bench/out/pca-${samples}x${snps}}
prefix=$out/gen
[ "$exact" = auto ] && { [ "$samples" -le 20000 ] && exact=yes || exact=no; }

fail() { echo "bench/pca.sh: $*" >&2; exit 1; }
[ -x "$bin/tsr-gen-bed" ] || fail "$bin/tsr-gen-bed is missing: build it (scripts/build.sh)"
if [ "$plink2_only" = 0 ]; then
  [ -x "$bin/tsr-pca" ] || fail "$bin/tsr-pca is missing: build it (scripts/build.sh), or run with --plink2-only"
  [ -x "$bin/tessera" ] || fail "$bin/tessera is missing: build it (scripts/build.sh)"
fi
if ! command -v plink2 >/dev/null; then
  apt-get -o DPkg::Lock::Timeout=120 install -y plink2 >/dev/null ||
    { apt-get -o DPkg::Lock::Timeout=120 update >/dev/null && apt-get -o DPkg::Lock::Timeout=120 install -y plink2 >/dev/null; } ||
    fail "cannot install Debian's plink2 (apt-get install plink2)"
fi

mkdir -p "$out"
gen_args="--samples $samples --snps $snps --missing 0.01 --pops 5 --fst 0.05 --seed 1"
if [ "$(cat "$prefix.params" 2>/dev/null)" != "$gen_args" ] || [ ! -f "$prefix.bed" ]; then
  rm -f "$prefix.params"
  "$bin/tsr-gen-bed" --out "$prefix" $gen_args
  echo "$gen_args" > "$prefix.params"
fi

echo "# bench/pca  $(date -u +%Y-%m-%d)  $(nproc) cores $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
echo "# data: $bin/tsr-gen-bed --out $prefix $gen_args  ($(stat -c %s "$prefix.bed") bytes of .bed)"
echo "# $(plink2 --version 2>/dev/null | head -1)"

results=$(mktemp)
trap 'rm -f "$results"' EXIT
run() {  # label, log file, command...
  local label=$1 log=$2; shift 2
  echo "# $label: $*"
  if ! python3 bench/peakrss.py "$@" > "$log" 2>&1; then
    printf "%-14s FAILED (exit status; the last lines of %s:)\n" "$label" "$log"
    tail -5 "$log" | sed 's/^/    /'
    return 1
  fi
  local line; line=$(grep -E "^peak_rss_mb=[0-9]+ wall_s=" "$log" | tail -1)
  local rss wall
  rss=$(echo "$line" | sed -E 's/.*peak_rss_mb=([0-9]+).*/\1/')
  wall=$(echo "$line" | sed -E 's/.*wall_s=([0-9.]+).*/\1/')
  printf "%-14s wall_s=%-9s peak_rss_mb=%s\n" "$label" "$wall" "$rss"
  echo "$label $wall $rss" >> "$results"
}

status=0
if [ "$plink2_only" = 0 ]; then
  run tessera "$out/tsr.log" "$bin/tessera" local --cpu-workers 2 --threads-per-worker 1 --memory-limit 1GiB -- \
    "$bin/tsr-pca" --bed "$prefix" --k 10 --out "$out/tsr" || status=1
fi
run plink2-approx "$out/plink2.run.log" plink2 --bfile "$prefix" --pca approx 10 --threads 2 --out "$out/plink2" || status=1
# The accuracy reference where plink2's exact PCA is out of reach: the
# same Krylov PCA run further (12 iterations of 50 columns: at HapMap3
# size six of 20 match the exact eigenvalues to 3e-5). Not timed against
# anything.
if [ "$plink2_only" = 0 ]; then
  run tessera-ref "$out/tsr_ref.log" "$bin/tessera" local --cpu-workers 2 --threads-per-worker 1 -- \
    "$bin/tsr-pca" --bed "$prefix" --k 10 --power-iters 12 --oversamples 40 --out "$out/tsr_ref" || status=1
fi
if [ "$exact" = yes ]; then
  run plink2-exact "$out/plink2_exact.run.log" timeout 15m plink2 --bfile "$prefix" --pca 10 --threads 2 \
    --out "$out/plink2_exact" || status=1
fi

python3 - "$results" "$out" <<'PY'
import os, sys
rows = {l.split()[0]: (float(l.split()[1]), float(l.split()[2])) for l in open(sys.argv[1]) if len(l.split()) == 3}
out = sys.argv[2]
def eigvals(name):
    path = os.path.join(out, name + ".eigenval")
    return [float(x) for x in open(path).read().split()][:10] if os.path.exists(path) else None
files = {"tessera": "tsr", "tessera-ref": "tsr_ref", "plink2-approx": "plink2", "plink2-exact": "plink2_exact"}
vals = {label: eigvals(f) for label, f in files.items() if label in rows}
for label, v in vals.items():
    if v is not None:
        print(f"eigenvalues {label:14s} " + " ".join(f"{x:.4f}" for x in v))
def agreement(a, b):
    n = min(len(a), len(b))
    return max(abs(a[i] - b[i]) / abs(b[i]) for i in range(n)) if n else float("nan")
pairs = [("tessera", "plink2-approx"), ("tessera", "plink2-exact"), ("plink2-approx", "plink2-exact"),
         ("tessera", "tessera-ref"), ("plink2-approx", "tessera-ref"), ("tessera-ref", "plink2-exact")]
for a, b in pairs:
    if vals.get(a) and vals.get(b):
        print(f"agreement {a} vs {b}: max relative difference of the top {min(len(vals[a]), len(vals[b]))} eigenvalues {agreement(vals[a], vals[b]):.2e}")
if "tessera" in rows:
    t = rows["tessera"]
    for peer in ("plink2-approx", "plink2-exact"):
        if peer in rows:
            p = rows[peer]
            print(f"ratio {peer}/tessera: time {p[0] / t[0]:.2f}x, peak memory {p[1] / t[1]:.2f}x")
PY
exit $status
