#!/usr/bin/env bash
# Installs what Tessera needs to build and test on Debian 12, from Debian's
# packages only. Safe to run again: apt skips what is already there.
#   scripts/install-deps.sh          to build
#   scripts/install-deps.sh --test   also what the deployment tests and
#                                    bench/hosts run (label deploy: a one-node
#                                    SLURM, hosts in network namespaces)
set -euo pipefail
pkgs=(build-essential cmake pkg-config
      libzmq3-dev libmsgpack-dev libblosc-dev libucx-dev
      libopenblas-dev liblapacke-dev libsodium-dev
      libzstd-dev zlib1g-dev libisal-dev libjansson-dev libhdf5-dev libcairo2-dev
      python3 python3-numpy python3-venv)
# The test-deps group: slurmctld/slurmd/sbatch and munged (tests/slurm),
# ip/ss, iptables and iperf3 (tests/hosts, bench/hosts).
test_pkgs=(slurm-wlm munge iproute2 iptables iperf3)
case "${1:-}" in
  --test) pkgs+=("${test_pkgs[@]}") ;;
  "") ;;
  *) echo "usage: $0 [--test]" >&2; exit 2 ;;
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
