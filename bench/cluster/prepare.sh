# bench/cluster/prepare.sh — sourced by run.sh and kmeans.sh (from the
# repository root, with $cells set and $1 the Python modules to check):
# builds build-cpu when BIN is not given, makes the peers' venv, and writes
# the mixture (mixture.py --cells $cells --dims 50 --clusters 30 --seed 0)
# and the k-means initial centers both sides start from (sklearn's
# k-means++, random_state 0) into $dir. Sets bin, py and dir.
bin=${BIN:-build-cpu/bin}
if [ -z "${BIN:-}" ] && [ ! -x "$bin/tsr-cluster" ]; then
  BUILD_DIR=build-cpu scripts/build.sh -DTSR_CUDA=OFF -DCMAKE_BUILD_TYPE=Release
fi
venv=bench/cluster/.venv
if ! "$venv/bin/python" -c "import $1" 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q -r bench/cluster/requirements.txt
fi
py=$venv/bin/python
dir=${OUT:-bench/out/cluster-$cells}
mkdir -p "$dir"
[ -f "$dir/X.npy" ] || "$py" bench/cluster/mixture.py --cells "$cells" --dims 50 --clusters 30 --seed 0 --out "$dir"
[ -f "$dir/init.npy" ] || "$py" -c "
import numpy as np
from sklearn.cluster import kmeans_plusplus
X = np.load('$dir/X.npy')
c, _ = kmeans_plusplus(X, 30, random_state=0)
np.save('$dir/init.npy', c.astype(np.float64))"
