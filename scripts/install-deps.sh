#!/usr/bin/env bash
# Installs what Tessera needs on Debian 12 (or Ubuntu 24.04, the CUDA
# images' base), from the distribution's packages only. Safe to run again:
# apt skips what is already there.
#
#   scripts/install-deps.sh            build + test (README command 2)
#   scripts/install-deps.sh --build    only what the build needs (docker/Dockerfile's build stage)
#   scripts/install-deps.sh --deploy   the deployment tests' tools (label deploy, docs/deploy.md,
#                                      docs/slurm.md, docs/hosts.md): podman, buildah, runc,
#                                      netavark + aardvark-dns (containers find each other by name),
#                                      debootstrap, podman-compose, cloud-init; a one-node SLURM
#                                      (slurm-wlm, munge); hosts in network namespaces (iproute2,
#                                      iptables, iperf3 for bench/hosts)
set -euo pipefail
build=(build-essential cmake pkg-config
       libzmq3-dev libmsgpack-dev libblosc-dev libucx-dev
       libopenblas-dev liblapacke-dev libsodium-dev
       libzstd-dev zlib1g-dev libisal-dev libjansson-dev libhdf5-dev libcairo2-dev
       libinih-dev libtiff-dev libjpeg62-turbo-dev libpng-dev
       libmicrohttpd-dev libjs-chart.js libcurl4-openssl-dev)
# clang + its runtimes (libFuzzer, ASan, UBSan): tests/fuzz/run.sh, the fuzz stage of scripts/test.sh.
# chromium, prometheus (promtool), python3-pil: integration.dashboard (docs/dashboard.md) and
# integration.report (loads the HTML report headless and reads its screenshot).
# ucx-utils: ucx_info -d (which UCX transports exist) and ucx_perftest, the peer of bench/transfer.sh.
test=(python3 python3-numpy python3-venv python3-openslide clang libclang-rt-dev chromium prometheus python3-pil ucx-utils)
# Heavy and only for the deploy tests: kept out of the build's list.
deploy=(podman buildah runc netavark aardvark-dns debootstrap podman-compose cloud-init
        slurm-wlm munge iproute2 iptables iperf3)
case "${1:-}" in
  "") pkgs=("${build[@]}" "${test[@]}") ;;
  --build) pkgs=("${build[@]}") ;;
  --deploy) pkgs=("${deploy[@]}") ;;
  *) echo "install-deps: unknown option '$1' (--build or --deploy)" >&2; exit 2 ;;
esac
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#pkgs[@]} packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get -o DPkg::Lock::Timeout=120 update -qq
$SUDO apt-get -o DPkg::Lock::Timeout=120 install -y -qq --no-install-recommends "${missing[@]}"
