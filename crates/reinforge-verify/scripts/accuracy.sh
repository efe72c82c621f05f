#!/usr/bin/env bash
# Accuracy/FPR table of docs/verifier.md: reinforge-verify at BASE (before) and at the working
# tree (after), and Math-Verify 0.8.0, on fixtures/data/verify/{smollm2-arith-real,new-classes}.jsonl.
# Usage: crates/reinforge-verify/scripts/accuracy.sh [BASE]   (BASE: the commit before the
# stated-answer policy, c4cf544 by default). Builds BASE in a temporary worktree with its own
# target directory (a cold build of reinforge-verify, a few minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/../../.."
BASE="${1:-c4cf544}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
if [ ! -x .venv-bench/bin/python ]; then
  python3 -m venv .venv-bench
  .venv-bench/bin/pip install --quiet "math-verify==0.8.0" "latex2sympy2_extended==1.10.2"
fi
nice -n 10 cargo build --release -p reinforge-verify --features cli --bin reinforge-verify
BEFORE_DIR="${BEFORE_DIR:-/tmp/reinforge-verify-before}"
if [ ! -x "$BEFORE_DIR/target/release/reinforge-verify" ]; then
  rm -rf "$BEFORE_DIR/src"
  git worktree add --detach "$BEFORE_DIR/src" "$BASE"
  (cd "$BEFORE_DIR/src" && CARGO_TARGET_DIR="$BEFORE_DIR/target" nice -n 10 \
    cargo build --release -p reinforge-verify --features cli --bin reinforge-verify)
  git worktree remove --force "$BEFORE_DIR/src"
fi
.venv-bench/bin/python crates/reinforge-verify/scripts/accuracy.py \
  --before "$BEFORE_DIR/target/release/reinforge-verify" \
  --after "$CARGO_TARGET_DIR/release/reinforge-verify"
