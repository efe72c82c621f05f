#!/usr/bin/env bash
# Benchmark reinforge-verify against Math-Verify on the same inputs in the same run.
# Creates the git-ignored venv .venv-bench with pinned math-verify (the fixtures' version).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
if [ ! -x .venv-bench/bin/python ]; then
  python3 -m venv .venv-bench
  .venv-bench/bin/pip install --quiet "math-verify==0.8.0" "latex2sympy2_extended==1.10.2"
fi
nice -n 19 cargo build --release -p reinforge-verify --features cli --bin reinforge-verify
nice -n 19 .venv-bench/bin/python scripts/bench_verify.py "$CARGO_TARGET_DIR/release/reinforge-verify"
