#!/usr/bin/env bash
# Creates the git-ignored environment .venv-tinker (PyPI, pinned) with the `tinker` Python SDK, whose
# unmodified client scripts/clients/tinker_basic_loop.py drives `reinforge serve --model M --tinker`
# (crates/reinforge/tests/tinker.rs; scripts/test.sh runs this first).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV="$ROOT/.venv-tinker"
PY="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
"$VENV/bin/pip" install --quiet --disable-pip-version-check tinker==0.38.0
"$VENV/bin/python" -c "import tinker; print('tinker env ok: tinker', tinker.__version__)"
