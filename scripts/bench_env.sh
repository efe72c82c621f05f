#!/usr/bin/env bash
# Creates the git-ignored reference environment .venv-bench (PyPI, pinned) used by the ranking /
# statistics benchmarks: numpy + scipy (FastChat's formulation), evalica, rliable.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV="$ROOT/.venv-bench"
PY="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
"$VENV/bin/pip" install --quiet --disable-pip-version-check \
  numpy==2.3.3 scipy==1.17.1 pandas==2.3.3 evalica==0.4.2 rliable==1.2.0
"$VENV/bin/python" -c "import numpy, scipy, pandas, evalica, rliable; print('bench env ok: numpy', numpy.__version__, 'scipy', scipy.__version__, 'evalica', evalica.__version__)"
