#!/usr/bin/env bash
# Creates the git-ignored environment .venv-tracking (PyPI, pinned) with the `tensorboard`
# package, whose own event reader checks the event files `[logging] tensorboard = true` writes
# (crates/reinforge/tests/tracking.rs; scripts/test.sh runs this first).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV="$ROOT/.venv-tracking"
PY="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
"$VENV/bin/pip" install --quiet --disable-pip-version-check tensorboard==2.21.0
"$VENV/bin/python" -c "import tensorboard; print('tracking env ok: tensorboard', tensorboard.__version__)"
