#!/usr/bin/env bash
# One prepared check of reinforge on an NVIDIA machine (issue "GPU", docs/gpu.md).
#
# Planned for the hardest realistic case: the GPU machine's Python already has torch 2.11.0
# (+cu130) and transformers, nothing can be downloaded there, and at most 64 MiB of untracked
# files can be copied to it. So the binary is built on a CPU machine, stripped and carried, and
# runs against the GPU machine's own libtorch (LD_LIBRARY_PATH to its torch/lib).
#
#   scripts/gpu_check.sh --prepare DIR   on the CPU build machine: DIR/reinforge (stripped) and
#                                        DIR/wheels (trl, and accelerate/datasets if wanted),
#                                        total checked against 64 MiB
#   scripts/gpu_check.sh [--bundle DIR]  on the GPU machine (DIR: the prepared bundle; default:
#                                        target/release/reinforge and no extra wheels)
#
# Stages, each recorded in results.json (and summary.txt) under $OUT, else runs/gpu_check/<time>:
#   1. parity   CPU vs $DEVICE on the fixture checkpoints: `reinforge score` log-probs (float32)
#               and one GRPO step's loss and grad norm (a 1-step dataset run on each device)
#   2. grpo     GRPO steps with bf16 = true on a random-init model of Qwen2.5-0.5B's shape
#               (made here by transformers, with the fixture tokenizer): generation and update
#               tokens/s, peak GPU memory (nvidia-smi, polled), update MFU
#   3. trl      the same steps with TRL's GRPOTrainer (scripts/bench_trl.py, bf16) when TRL
#               imports (from the bundle's wheels or the machine's Python), alternated with
#               reinforge; the step-time ratio
#   4. nccl     `reinforge train --nproc 2` on two GPUs, only when the machine has two
#
# Environment: DEVICE (cuda; `cpu` is the dry run the test suite does), SHAPE (qwen2.5-0.5b;
# `tiny` for dry runs), STEPS (measured steps, 4), WARMUP (1), ROUNDS (alternations, 1),
# PROMPTS (8), GENERATIONS (8), MAX_LEN (128), PYTHON (python3; the project's .venv when it
# exists), TRL_PYTHON (.venv-trl when it exists, else PYTHON), CPU_BF16=1 (bf16 in a CPU run),
# REINFORGE_BIN (the binary to run).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
usage() { sed -n '2,28p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
bundle=""
case "${1:-}" in
  -h|--help) usage; exit 0 ;;
  --prepare)
    dir="${2:?usage: scripts/gpu_check.sh --prepare DIR}"
    mkdir -p "$dir/wheels"
    cargo build --release --locked -p reinforge >&2
    strip -o "$dir/reinforge" target/release/reinforge
    # TRL's own wheel; the GPU machine's Python must have its dependencies (accelerate,
    # datasets) or they are added here with PREPARE_WHEELS="accelerate==X datasets==Y".
    .venv/bin/pip download --no-deps -q -d "$dir/wheels" "trl==1.16.0" ${PREPARE_WHEELS:-} >&2
    size=$(du -sb "$dir" | cut -f1)
    echo "bundle $dir: $(du -sh "$dir/reinforge" | cut -f1) binary, $(ls "$dir/wheels" | wc -l) wheel(s), $((size / 1048576)) MiB in all" >&2
    [ "$size" -le $((64 * 1048576)) ] || { echo "error: the bundle is over 64 MiB" >&2; exit 1; }
    echo "on the GPU machine: bash scripts/gpu_check.sh --bundle $dir"
    exit 0 ;;
  --bundle) bundle="${2:?usage: scripts/gpu_check.sh --bundle DIR}" ;;
  "") ;;
  *) usage >&2; exit 2 ;;
esac

device="${DEVICE:-cuda}"
shape="${SHAPE:-qwen2.5-0.5b}"
steps="${STEPS:-4}"; warmup="${WARMUP:-1}"; rounds="${ROUNDS:-1}"
prompts="${PROMPTS:-8}"; generations="${GENERATIONS:-8}"; max_len="${MAX_LEN:-128}"
py="${PYTHON:-python3}"
[ -x .venv/bin/python ] && [ -z "${PYTHON:-}" ] && py=.venv/bin/python
out="${OUT:-runs/gpu_check/$(date -u +%Y%m%dT%H%M%SZ)}"
rm -rf "$out" && mkdir -p "$out"
out="$(cd "$out" && pwd)"
bin="${bundle:+$bundle/reinforge}"; bin="${REINFORGE_BIN:-${bin:-target/release/reinforge}}"
[ -x "$bin" ] || { echo "error: $bin not found (build it, or --bundle DIR from --prepare)" >&2; exit 1; }
tool() { "$py" scripts/gpu_check/tool.py "$@"; }
fail() { echo "error: a stage failed; the end of $1:" >&2; tail -20 "$1" >&2; exit 1; }
# The machine's own libtorch, so a binary built elsewhere finds it (its rpath points at .venv).
torch_lib="$("$py" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')"
export LD_LIBRARY_PATH="$torch_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if [ -n "$bundle" ] && ls "$bundle"/wheels/*.whl >/dev/null 2>&1; then
  mkdir -p "$out/site"  # wheels are zip files: importable once unpacked, no pip needed
  for w in "$bundle"/wheels/*.whl; do "$py" -m zipfile -e "$w" "$out/site" >/dev/null; done
  export PYTHONPATH="$out/site${PYTHONPATH:+:$PYTHONPATH}"
fi
start=$(date +%s)
json="$out/results.json"
echo "{}" > "$json"
put() { "$py" - "$json" "$1" "$2" <<'PY'
import json, sys
path, key, value = sys.argv[1], sys.argv[2], sys.argv[3]
d = json.load(open(path)); d[key] = json.loads(value); json.dump(d, open(path, "w"), indent=2)
PY
}
gpus=0
if command -v nvidia-smi >/dev/null 2>&1; then gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true); fi
gpu_name="$( [ "$gpus" -gt 0 ] && nvidia-smi --query-gpu=name --format=csv,noheader | head -1 || echo none)"
# Dense bf16 peak FLOP/s by GPU (NVIDIA's data sheets: H100 SXM and H200 989 TFLOP/s, H100 PCIe
# 756, A100 312, L40S 362); unknown names give no MFU.
case "$gpu_name" in
  *H200*|*"H100 80GB HBM3"*|*H100*SXM*) peak=989 ;; *H100*PCIe*) peak=756 ;; *H100*) peak=989 ;;
  *A100*) peak=312 ;; *L40S*) peak=362 ;; *) peak=0 ;;
esac
put machine "{\"device\": \"$device\", \"gpus\": $gpus, \"gpu\": \"$gpu_name\", \"peak_bf16_tflops\": $peak, \"torch_lib\": \"$torch_lib\", \"shape\": \"$shape\"}"
echo "==> device $device, $gpus GPU(s) ($gpu_name), results in $out" >&2

# 1. Parity on the fixtures: float32 log-probs and one GRPO step, CPU vs the device.
printf '{"prompt": "2+3=", "completion": "5 is the answer"}\n{"prompt": "12+30=", "completion": "42"}\n' > "$out/pairs.jsonl"
for i in $(seq 1 8); do echo "{\"prompt\": \"$i+$i=\", \"answer\": \"$((i + i))\"}"; done > "$out/prompts.jsonl"
# A reward that differs between samples from the first step (the completion's length), so the
# compared step has a non-zero loss and gradient.
printf '[components.length]\ntype = "length"\nshape = "dapo"\nunit = "chars"\nmax_length = 24\nbuffer = 20\npenalty_factor = 1.0\n' > "$out/length.toml"
parity="{"
for fx in llama qwen2 qwen3 mistral; do
  m="fixtures/hf/models/$fx"
  for side in cpu:cpu "dev:$device"; do
    tag="${side%%:*}"; d="${side#*:}"
    "$bin" score --model "$m" --input "$out/pairs.jsonl" --raw --dtype f32 --device "$d" \
      --output "$out/score-$fx-$tag.jsonl" 2>>"$out/parity-$fx.log" || fail "$out/parity-$fx.log"
    "$bin" train --model "$m" --data "$out/prompts.jsonl" --raw --reward "$out/length.toml" \
      --set device="$d" --set name="$fx-$tag" \
      --set runs_dir="$out/parity-runs" --set grpo.steps=1 --set grpo.prompts_per_step=2 \
      --set grpo.num_generations=4 --set grpo.max_completion_length=16 >/dev/null \
      2>>"$out/parity-$fx.log" || fail "$out/parity-$fx.log"
  done
  lp=$(tool logprob-diff "$out/score-$fx-cpu.jsonl" "$out/score-$fx-dev.jsonl")
  st=$(tool step-diff "$out/parity-runs/$fx-cpu/metrics.jsonl" "$out/parity-runs/$fx-dev/metrics.jsonl")
  parity="$parity\"$fx\": {\"logprobs\": $lp, \"grpo_step\": $st},"
done
put parity "${parity%,}}"
rm -rf "$out/parity-runs"

# 2./3. GRPO on the 0.5B shape, reinforge (bf16) and TRL (bf16), alternated.
model="$out/model-$shape"
params=$(tool make-model "$model" "$shape" fixtures/hf/models/qwen2 | "$py" -c 'import json,sys; print(json.load(sys.stdin)["params"])')
bf16=true; trl_bf16=--bf16
[ "$device" = cpu ] && [ "${CPU_BF16:-0}" != 1 ] && { bf16=false; trl_bf16=; }
total=$((warmup + steps)); rows=$((prompts * generations))
for i in $(seq 1 $((prompts * 4))); do echo "{\"prompt\": \"What is $i + $((i * 7 % 13))?\", \"answer\": \"$((i + i * 7 % 13))\"}"; done > "$out/grpo-data.jsonl"
memlog="$out/gpu-memory.csv"
poll() { while :; do nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -1 >> "$memlog"; sleep 0.5; done; }
# TRL's Python: TRL_PYTHON, else the project's .venv-trl (scripts/bench_trl.sh makes it), else
# the machine's Python (with the bundle's wheels on PYTHONPATH).
trl_py="${TRL_PYTHON:-}"
[ -z "$trl_py" ] && [ -x .venv-trl/bin/python ] && trl_py=.venv-trl/bin/python
trl_py="${trl_py:-$py}"
trl_ok=0
if "$trl_py" -c 'import trl, accelerate, datasets' >/dev/null 2>&1; then trl_ok=1; fi
for r in $(seq 1 "$rounds"); do
  : > "$memlog"; poller=""
  [ "$gpus" -gt 0 ] && { poll & poller=$!; }
  "$bin" train --model "$model" --data "$out/grpo-data.jsonl" --set device="$device" --set bf16=$bf16 \
    --set name="grpo-r$r" --set runs_dir="$out/grpo-runs" --set grpo.steps=$total \
    --set grpo.checkpoint_every=1000000 --set grpo.prompts_per_step=$prompts \
    --set grpo.num_generations=$generations --set grpo.max_completion_length=$max_len \
    --set grpo.temperature=1.0 --set grpo.top_p=1.0 --set grpo.top_k=0 --set grpo.beta=0.0 \
    --set grpo.ppo_epochs=1 --set grpo.mini_batches=1 --set grpo.lr=1e-6 \
    --set grpo.skip_zero_advantage=false > "$out/grpo-r$r.log" 2>&1 || fail "$out/grpo-r$r.log"
  [ -n "$poller" ] && kill "$poller" 2>/dev/null || true
  cp "$out/grpo-runs/grpo-r$r/metrics.jsonl" "$out/reinforge-r$r.jsonl"
  peak_mib=$(sort -n "$memlog" 2>/dev/null | tail -1); peak_mib=${peak_mib:-null}
  rm -rf "$out/grpo-runs"
  if [ "$trl_ok" = 1 ]; then
    : > "$memlog"; poller=""
    [ "$gpus" -gt 0 ] && { poll & poller=$!; }
    "$trl_py" scripts/bench_trl.py --model "$model" --data "$out/grpo-data.jsonl" --steps $total \
      --prompts $prompts --generations $generations --max-completion-length $max_len --lr 1e-6 \
      --device "$device" $trl_bf16 --workdir "$out/trl-work" --out "$out/trl-r$r.jsonl" \
      > "$out/trl-r$r.log" 2>&1 || fail "$out/trl-r$r.log"
    [ -n "$poller" ] && kill "$poller" 2>/dev/null || true
    trl_peak_mib=$(sort -n "$memlog" 2>/dev/null | tail -1); trl_peak_mib=${trl_peak_mib:-null}
    rm -rf "$out/trl-work"
  fi
done
fig=$(tool grpo-figures "$out/reinforge-r1.jsonl" "$params" "$rows" "$peak" "$warmup")
put grpo "{\"params\": $params, \"bf16\": $bf16, \"rows_per_step\": $rows, \"peak_gpu_memory_mib\": $peak_mib, \"reinforge\": $fig}"
if [ "$trl_ok" = 1 ]; then
  tf=$(tool trl-figures "$out/trl-r1.jsonl" "$warmup")
  put trl "{\"available\": true, \"peak_gpu_memory_mib\": $trl_peak_mib, \"figures\": $tf}"
  ratio=$("$py" -c "import json; d=json.load(open('$json')); print(d['grpo']['reinforge']['step_s'] / d['trl']['figures']['step_s'])")
  put trl_ratio "{\"reinforge_over_trl_step_s\": $ratio}"
else
  put trl '{"available": false, "reason": "trl, accelerate or datasets do not import (carry them with --prepare)"}'
fi

# 4. NCCL across two GPUs.
if [ "$gpus" -ge 2 ] && [ "$device" != cpu ]; then
  "$bin" train --nproc 2 --model "$model" --data "$out/grpo-data.jsonl" --set device=cuda --set bf16=true \
    --set name=nccl --set runs_dir="$out/nccl-runs" --set grpo.steps=2 --set grpo.prompts_per_step=$prompts \
    --set grpo.num_generations=$generations --set grpo.max_completion_length=32 > "$out/nccl.log" 2>&1 \
    && put nccl "{\"ran\": true, \"steps\": $(wc -l < "$out/nccl-runs/nccl/metrics.jsonl")}" \
    || put nccl '{"ran": false, "reason": "the 2-GPU run failed: see nccl.log"}'
else
  put nccl "{\"ran\": false, \"reason\": \"needs 2 GPUs; this machine has $gpus\"}"
fi
put wall_s "$(( $(date +%s) - start ))"
"$py" -c "import json; print(json.dumps(json.load(open('$json')), indent=2))" | tee "$out/summary.txt"
