#!/usr/bin/env bash
# rliable agreement (point estimates, 1e-9) and timing of `stats`, in one run.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
"$ROOT/scripts/bench_env.sh" >&2
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
(cd "$ROOT" && nice -n 19 cargo build --release -q -p reinforge-eval --example reinforge_eval)
nice -n 19 "$ROOT/.venv-bench/bin/python" "$ROOT/scripts/bench_stats.py" "$CARGO_TARGET_DIR/release/examples/reinforge_eval"
