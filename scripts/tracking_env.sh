#!/usr/bin/env bash
# Creates the git-ignored environment .venv-tracking (PyPI, pinned) with the `tensorboard`
# package, whose own event reader checks the event files `[logging] tensorboard = true` writes,
# and `mlflow`, whose tracking server the MLflow test logs to and reads back
# (crates/reinforge/tests/tracking.rs; scripts/test.sh runs this first). Quick when the pinned
# versions are already installed: pip runs only when one of them does not import.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV="$ROOT/.venv-tracking"
PY="${PYTHON:-python3}"
TENSORBOARD=2.21.0
# mlflow 3.18.0 requires mlflow-skinny==3.18.0, which the package index did not serve when
# this was pinned (pip cannot resolve it); 3.17.2 is the newest release that installs.
MLFLOW=3.17.2
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
installed() {
  "$VENV/bin/python" - "$TENSORBOARD" "$MLFLOW" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version
sys.exit(0 if (version("tensorboard"), version("mlflow")) == tuple(sys.argv[1:3]) else 1)
PY
}
if ! installed; then
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "tensorboard==$TENSORBOARD" "mlflow==$MLFLOW"
fi
"$VENV/bin/python" -c "import tensorboard, mlflow; print('tracking env ok: tensorboard', tensorboard.__version__, 'mlflow', mlflow.__version__)"
