#!/usr/bin/env bash
# The bf16 policy (`bf16 = true`: float32 weights, bfloat16 autocast) measured on the real model
# SmolLM2-135M-Instruct on CPU: reinforge samples N completions of reasoning-gym prompts, scores
# them with `reinforge score` in float32 and with --autocast-bf16, and scripts/check_bf16.py
# scores the same token ids with transformers both ways. Prints the per-token log-prob drift of
# each side and the ratio (docs/gpu.md reports it). Usage: scripts/check_bf16.sh [N] (default 16)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
n="${1:-16}"
[[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "usage: scripts/check_bf16.sh [N]" >&2; exit 2; }
model="$(scripts/real_model.sh)"
[ -f "$model/model.safetensors" ] || { echo "error: SmolLM2 could not be obtained (scripts/real_model.sh)" >&2; exit 1; }
cargo build --release --locked -q -p reinforge
out="runs/check_bf16"
mkdir -p "$out"
[ -f "$out/data/train.jsonl" ] || .venv/bin/python scripts/reasoning_gym_data.py "$out/data" >&2
head -n "$n" "$out/data/train.jsonl" > "$out/prompts.jsonl"
bin=target/release/reinforge
"$bin" generate --model "$model" --input "$out/prompts.jsonl" --max-new-tokens 64 \
  --temperature 1 --seed 0 --output "$out/samples.jsonl"
# The pairs: each prompt with its sampled completion (on-policy text, as an RL batch has).
.venv/bin/python - "$out/prompts.jsonl" "$out/samples.jsonl" > "$out/pairs.jsonl" <<'PY'
import json, sys
prompts = [json.loads(l) for l in open(sys.argv[1])]
for s in map(json.loads, open(sys.argv[2])):
    print(json.dumps({"prompt": prompts[s["index"]]["prompt"], "completion": s["completion"]}))
PY
"$bin" score --model "$model" --input "$out/pairs.jsonl" --output "$out/f32.jsonl"
"$bin" score --model "$model" --input "$out/pairs.jsonl" --autocast-bf16 --output "$out/bf16.jsonl"
.venv/bin/python scripts/check_bf16.py "$model" "$out/pairs.jsonl" "$out/f32.jsonl" "$out/bf16.jsonl" | tee "$out/report.json"
