#!/usr/bin/env bash
# Creates bench/.venv with the benchmark peers from PyPI (never by hand).
set -euo pipefail
cd "$(dirname "$0")"
if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c "import dask.distributed" 2>/dev/null; then
  python3 -m venv .venv
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -r requirements.txt
fi
echo "bench venv ready: $(.venv/bin/python -c 'import dask; print("dask", dask.__version__)')"
