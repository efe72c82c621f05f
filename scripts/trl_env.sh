#!/usr/bin/env bash
# Creates the git-ignored environment .venv-trl with TRL (PyPI, pinned) over the project's
# .venv torch and transformers (scripts/linked_venv.sh: nothing .venv has is downloaded again):
# the reference of scripts/bench_trl.sh and of the TRL stage of scripts/gpu_check.sh, whose CPU
# dry run crates/reinforge/tests/gpu_check.rs checks (scripts/test.sh runs this first).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# The newest trl on PyPI checked to run with .venv's transformers 5.23.0 and torch 2.11.0.
TRL_VERSION="1.16.0"
venv="$root/.venv-trl"
stamp="$venv/.reinforge-trl-env-$TRL_VERSION-1"
"$root/scripts/linked_venv.sh" "$venv"
if [ ! -f "$stamp" ]; then
  "$venv/bin/pip" install --disable-pip-version-check -q "trl==$TRL_VERSION" \
    "torch==2.11.0" "transformers==5.23.0"
  rm -f "$venv"/.reinforge-trl-env-* "$venv"/.bench-trl-*
  touch "$stamp"
fi
"$venv/bin/python" -c "import trl; print('trl env ok: trl', trl.__version__)"
