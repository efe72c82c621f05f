#!/usr/bin/env bash
# The second built-in experiment (docs/experiments.md): GRPO on a real pretrained model,
# SmolLM2-135M-Instruct (scripts/real_model.sh), on reasoning-gym tasks
# (scripts/reasoning_gym_data.py), with a held-out evaluation before and after training:
# pass@k up to k = 32 with paired bootstrap intervals, accuracy per task, response length.
# About an hour on two CPU cores. Extra arguments go to `reinforge train` (e.g. --set seed=1).
# Usage: scripts/real_experiment.sh [--set KEY=VALUE ...]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
cd "$root"
model="$(scripts/real_model.sh)"
if [ ! -f "$model/config.json" ]; then
  echo "error: the real model could not be fetched (see .cache/models/UNREACHABLE)" >&2
  exit 1
fi
data=runs/real-data
.venv/bin/python scripts/reasoning_gym_data.py "$data" --train 256 --held-out 32 >&2
cargo build --release --locked -p reinforge
exec target/release/reinforge train --model "$model" --data "$data/train.jsonl" \
  --heldout "$data/heldout.jsonl" \
  --set name=smollm2-reasoning-gym \
  --set threads=2 \
  --set rl.steps=31 \
  --set rl.prompts_per_step=8 \
  --set rl.num_generations=8 \
  --set rl.max_completion_length=64 \
  --set rl.lr=1e-5 \
  --set rl.checkpoint_every=10 \
  --set eval.problems=96 \
  --set eval.samples=32 \
  "$@"
