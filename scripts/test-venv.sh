#!/usr/bin/env bash
# Creates a Python venv of reference tools for the integration tests at
# DIR (default build/test-venv) from REQUIREMENTS (default
# tests/zarr/requirements.txt: zarr-python, numcodecs, numpy) and checks
# that MODULES (default "zarr numcodecs numpy") import. Idempotent: quick
# when DIR already holds these requirements. CTest runs it as the setup
# fixture of integration.zarr and integration.cluster_cli (scanpy,
# tests/singlecell/requirements.txt); if it fails, those tests fail too,
# they are never skipped.
#   scripts/test-venv.sh [DIR [REQUIREMENTS [MODULES]]]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv=${1:-$root/build/test-venv}
req=${2:-$root/tests/zarr/requirements.txt}
modules=${3:-zarr numcodecs numpy}
imports="import ${modules// /, }"
stamp=$venv/.requirements
if [ -x "$venv/bin/python" ] && cmp -s "$req" "$stamp" &&
   "$venv/bin/python" -c "$imports" 2>/dev/null; then
  echo "test-venv: $venv ready ($req)"
  exit 0
fi
if ! python3 -m venv --help >/dev/null 2>&1; then
  echo "test-venv: python3 -m venv is missing (scripts/install-deps.sh installs python3-venv)" >&2
  exit 1
fi
rm -rf "$venv"
python3 -m venv "$venv"
if ! "$venv/bin/pip" install -q --disable-pip-version-check -r "$req"; then
  echo "test-venv: pip could not install $req from PyPI into $venv" >&2
  exit 1
fi
cp "$req" "$stamp"
"$venv/bin/python" -c "$imports" || { echo "test-venv: $imports fails in $venv" >&2; exit 1; }
echo "test-venv: created $venv ($req)"
