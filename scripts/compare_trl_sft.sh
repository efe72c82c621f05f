#!/usr/bin/env bash
# Side by side of `reinforge train-sft` and TRL 1.16's SFTTrainer: the token ids and trained
# positions TRL prepares from the same rows, the first two steps' loss and grad norm on the same
# ids, and seconds per step (scripts/compare_trl_sft.py says how; docs/sft.md has the figures).
#
# Usage: scripts/compare_trl_sft.sh [MODEL] [-- more options of compare_trl_sft.py]
#   MODEL defaults to .cache/models/SmolLM2-135M-Instruct (scripts/real_model.sh fetches it).
# Environment: REINFORGE_BIN (default target/release/reinforge; not built here), TRL_PYTHON
#   (default .venv-trl/bin/python, the venv scripts/bench_trl.sh sets up), THREADS (2),
#   WORK (runs/compare_trl_sft/<model>).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
model=.cache/models/SmolLM2-135M-Instruct
if [ $# -gt 0 ] && [ "$1" != "--" ]; then model="$1"; shift; fi
[ "${1:-}" = "--" ] && shift
bin="${REINFORGE_BIN:-target/release/reinforge}"
py="${TRL_PYTHON:-.venv-trl/bin/python}"
[ -x "$bin" ] || { echo "error: $bin not found (cargo build --release -p reinforge, or set REINFORGE_BIN)" >&2; exit 1; }
[ -x "$py" ] || { echo "error: $py not found (scripts/bench_trl.sh sets up .venv-trl, or set TRL_PYTHON)" >&2; exit 1; }
[ -f "$model/config.json" ] || { echo "error: $model/config.json not found" >&2; exit 1; }
read -r load _ < /proc/loadavg
awk -v l="$load" 'BEGIN { exit !(l > 1.0) }' \
  && echo "warning: load average $load: other processes compete for the CPU, the timings will be noisy" >&2
exec "$py" scripts/compare_trl_sft.py --bin "$bin" --model "$model" \
  --work "${WORK:-runs/compare_trl_sft/$(basename "$model")}" --threads "${THREADS:-2}" "$@"
