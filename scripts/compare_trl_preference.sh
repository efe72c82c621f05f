#!/usr/bin/env bash
# Side by side of reinforge and TRL 1.16 on DPO, reward-model, ORPO and KTO training
# (train-dpo/DPOTrainer, train-rm/RewardTrainer, train-orpo/ORPOTrainer, train-kto/KTOTrainer):
# the first two steps' metrics (|diff| per metric, the acceptance bound is 1e-5), the token ids
# both sides read (checked), and seconds per step, on the same model, batch (all pairs or rows
# every step) and thread count. Details and measured numbers: docs/preference_trl.md; what is
# compared and how: scripts/compare_trl_preference.py.
#
# Usage: scripts/compare_trl_preference.sh [MODEL] [-- more options of compare_trl_preference.py]
#   MODEL defaults to fixtures/hf/models/llama (the 2-layer fixture Llama).
#   --methods dpo,rm,orpo,kto (the default) picks a subset, e.g. `-- --methods orpo,kto`.
# Environment: REINFORGE_BIN (default target/release/reinforge; not built here),
#   TRL_PYTHON (default .venv-trl/bin/python: trl 1.16.0, transformers 5.23.0, torch 2.11.0,
#   the venv scripts/bench_trl.sh sets up), THREADS (2), WORK (runs/compare_trl_preference/<model>).
# Prints the JSON summary (also in WORK/summary.json).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
model=fixtures/hf/models/llama
if [ $# -gt 0 ] && [ "$1" != "--" ]; then model="$1"; shift; fi
[ "${1:-}" = "--" ] && shift
bin="${REINFORGE_BIN:-target/release/reinforge}"
py="${TRL_PYTHON:-.venv-trl/bin/python}"
[ -x "$bin" ] || { echo "error: $bin not found (cargo build --release -p reinforge, or set REINFORGE_BIN)" >&2; exit 1; }
[ -x "$py" ] || { echo "error: $py not found (scripts/bench_trl.sh sets up .venv-trl, or set TRL_PYTHON)" >&2; exit 1; }
[ -f "$model/config.json" ] || { echo "error: $model/config.json not found" >&2; exit 1; }
"$py" -c 'import trl, sys; sys.exit(trl.__version__ != "1.16.0")' \
  || echo "warning: $py has trl $("$py" -c 'import trl; print(trl.__version__)'), the comparison was written against 1.16.0" >&2
work="${WORK:-runs/compare_trl_preference/$(basename "$model")}"
read -r load _ < /proc/loadavg
awk -v l="$load" 'BEGIN { exit !(l > 1.0) }' \
  && echo "warning: load average $load: other processes compete for the CPU, the timings will be noisy" >&2
exec "$py" scripts/compare_trl_preference.py --bin "$bin" --model "$model" --work "$work" \
  --threads "${THREADS:-2}" "$@"
