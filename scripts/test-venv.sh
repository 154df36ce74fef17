#!/usr/bin/env bash
# Creates the Python venv the Zarr integration test uses (zarr-python,
# numcodecs, numpy from PyPI, pinned in tests/zarr/requirements.txt) at
# DIR (default build/test-venv). Idempotent: quick when DIR already holds
# these requirements. CTest runs it as the setup fixture of
# integration.zarr (tests/integration/CMakeLists.txt); if it fails, that
# test fails too, it is never skipped.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv=${1:-$root/build/test-venv}
req=$root/tests/zarr/requirements.txt
stamp=$venv/.requirements
if [ -x "$venv/bin/python" ] && cmp -s "$req" "$stamp" &&
   "$venv/bin/python" -c "import zarr, numcodecs, numpy" 2>/dev/null; then
  echo "test-venv: $venv ready (zarr $("$venv/bin/python" -c 'import zarr; print(zarr.__version__)'))"
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
echo "test-venv: created $venv (zarr $("$venv/bin/python" -c 'import zarr; print(zarr.__version__)'))"
