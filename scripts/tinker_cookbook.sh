#!/usr/bin/env bash
# Runs two tinker-cookbook recipes, unmodified, against `reinforge serve --model MODEL --tinker`:
# the chat SFT recipe (tinker_cookbook.recipes.chat_sl.train) on the cookbook's own small chat
# set (example_data/conversations.jsonl, passed as its `dataset=<file>.jsonl` option), and the RL
# recipe (tinker_cookbook.recipes.math_rl.train, env=arithmetic: generated problems, no
# download). The only changes from a run on Tinker are the options the recipes expose:
# `base_url` (this server), `model_name` (the model's directory, which the server is told to
# serve under that name with --served-model-name and from which the cookbook loads the
# tokenizer, with no network), `renderer_name=role_colon` (the cookbook picks renderers by
# hub name) and small sizes. Prints the SFT loss and the RL reward per step.
#
#   scripts/tinker_cookbook.sh [MODEL_DIR [OUT_DIR]]
#
# MODEL_DIR defaults to .cache/models/SmolLM2-135M-Instruct, OUT_DIR to runs/tinker_cookbook
# (each recipe's log_path: OUT_DIR/sft, OUT_DIR/rl, with their metrics.jsonl). Settings from the
# environment (defaults in brackets): REINFORGE [target/release/reinforge], THREADS [2],
# LORA_RANK [8], SFT_STEPS [16], SFT_BATCH [8], SFT_LR [1e-3], SFT_MAX_LENGTH [512],
# RL_STEPS [10], RL_GROUPS [4], RL_GROUP_SIZE [8], RL_LR [5e-4], RL_MAX_TOKENS [8].
# Needs .venv-tinker (scripts/tinker_env.sh). Used by crates/reinforge/tests/tinker_cookbook.rs.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
MODEL="$(cd "${1:-$ROOT/.cache/models/SmolLM2-135M-Instruct}" && pwd)"
OUT="${2:-$ROOT/runs/tinker_cookbook}"
PY="$ROOT/.venv-tinker/bin/python"
REINFORGE="${REINFORGE:-$ROOT/target/release/reinforge}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
CONVERSATIONS="$("$PY" -c 'import tinker_cookbook, os; print(os.path.join(os.path.dirname(tinker_cookbook.__file__), "example_data", "conversations.jsonl"))')"

PORT="$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
"$REINFORGE" serve --port "$PORT" --no-sandbox --threads "${THREADS:-2}" --model "$MODEL" \
  --served-model-name "$MODEL" --tinker --tinker-dir "$OUT/checkpoints" >"$OUT/server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
URL="http://127.0.0.1:$PORT"
for _ in $(seq 600); do
  if "$PY" -c "import urllib.request; urllib.request.urlopen('$URL/api/v1/healthz')" 2>/dev/null; then break; fi
  kill -0 $SERVER 2>/dev/null || { cat "$OUT/server.log" >&2; exit 1; }
  sleep 0.2
done

# The SDK wants a key starting with `tml-`; a loopback server without --api-key takes any.
export TINKER_API_KEY="${TINKER_API_KEY:-tml-local}" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
cd "$OUT"
start=$(date +%s)
"$PY" -m tinker_cookbook.recipes.chat_sl.train \
  base_url="$URL" model_name="$MODEL" renderer_name=role_colon dataset="$CONVERSATIONS" \
  lora_rank="${LORA_RANK:-8}" batch_size="${SFT_BATCH:-8}" max_steps="${SFT_STEPS:-16}" \
  learning_rate="${SFT_LR:-1e-3}" max_length="${SFT_MAX_LENGTH:-512}" eval_every=0 save_every=0 \
  log_path="$OUT/sft" behavior_if_log_dir_exists=delete >"$OUT/sft.log" 2>&1 \
  || { tail -40 "$OUT/sft.log" >&2; exit 1; }
mid=$(date +%s)
"$PY" -m tinker_cookbook.recipes.math_rl.train \
  base_url="$URL" model_name="$MODEL" renderer_name=role_colon env=arithmetic \
  lora_rank="${LORA_RANK:-8}" groups_per_batch="${RL_GROUPS:-4}" group_size="${RL_GROUP_SIZE:-8}" \
  max_steps="${RL_STEPS:-10}" learning_rate="${RL_LR:-5e-4}" max_tokens="${RL_MAX_TOKENS:-8}" \
  eval_every=0 save_every=0 log_path="$OUT/rl" behavior_if_log_dir_exists=delete >"$OUT/rl.log" 2>&1 \
  || { tail -40 "$OUT/rl.log" >&2; exit 1; }
end=$(date +%s)

"$PY" - "$OUT" $((mid - start)) $((end - mid)) <<'EOF'
import json, sys
out, sft_s, rl_s = sys.argv[1], sys.argv[2], sys.argv[3]
def rows(name):
    return [json.loads(l) for l in open(f"{out}/{name}/metrics.jsonl") if l.strip()]
sft = [r for r in rows("sft") if "train_mean_nll" in r]
print(f"SFT ({sft_s} s): step train_mean_nll")
for r in sft:
    print(f"  {r['step']:3d} {r['train_mean_nll']:.4f}")
rl = [r for r in rows("rl") if "env/all/reward/total" in r]
print(f"RL ({rl_s} s): step mean_reward frac_correct")
for r in rl:
    print(f"  {r['step']:3d} {r['env/all/reward/total']:.4f} {r.get('env/all/correct', float('nan')):.4f}")
EOF
