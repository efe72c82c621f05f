#!/usr/bin/env bash
# Creates the git-ignored environment .venv-tinker (PyPI, pinned) with the `tinker` Python SDK, whose
# unmodified client scripts/clients/tinker_basic_loop.py drives `reinforge serve --model M --tinker`
# (crates/reinforge/tests/tinker.rs), and `tinker-cookbook`, whose unmodified SFT and RL recipes
# run against it (crates/reinforge/tests/tinker_cookbook.rs, scripts/tinker_cookbook.sh).
# scripts/test.sh runs this first.
#
# tinker-cookbook==0.5.8 (with its `math-rl` extra: sympy, math-verify, which the math_rl recipes
# import) is the newest that installs from the package index: 0.6.x needs
# tml-renderers>=0.4.1, and the index offers tml-renderers only up to 0.2.1. The cookbook pulls
# torch and transformers: torch comes from the project's .venv (scripts/linked_venv.sh: the
# environment sees .venv's packages, so the pin below is already met and no second torch is
# downloaded), transformers is pinned to 5.5.4, the newest the cookbook allows
# (`transformers<=5.5.4`; the project's .venv has 5.23.0, which it refuses), and installed here,
# where it shadows .venv's.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV="$ROOT/.venv-tinker"
PY="${PYTHON:-python3}"
STAMP="$VENV/.reinforge-tinker-env-4"
PYTHON="$PY" "$ROOT/scripts/linked_venv.sh" "$VENV"
if [ ! -f "$STAMP" ]; then
  "$VENV/bin/pip" install --quiet --disable-pip-version-check tinker==0.38.0 \
    "tinker-cookbook[math-rl]==0.5.8" torch==2.11.0 transformers==5.5.4
  touch "$STAMP"
fi
"$VENV/bin/python" -c "import tinker, tinker_cookbook; print('tinker env ok: tinker', tinker.__version__, 'tinker-cookbook', tinker_cookbook.__version__)"
