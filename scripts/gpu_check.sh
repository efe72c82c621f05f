#!/usr/bin/env bash
# One prepared check of reinforge on an NVIDIA machine (issue 22 item 6; docs/gpu.md).
#
#   scripts/gpu_check.sh --prepare OUTDIR     on the CPU build machine: the carry bundle (stripped
#                                             binary + the wheels TRL needs beyond torch/transformers)
#   scripts/gpu_check.sh [--bin FILE] [--trl-wheels DIR]
#                                             on the GPU machine (or DEVICE=cpu SHAPE=tiny: a dry run)
#
# Stages: (1) parity: `reinforge score` log-probs on every fixture, cpu f32 vs the device in f32 and
# bf16, and one GRPO step (loss, grad norm; rollout.rng=per_row so both devices draw the same
# tokens) on cpu vs the device; (2) GRPO steps (bf16) on a random-init model of Qwen2.5-0.5B's
# shape: generation and update tokens/s, peak memory, MFU; (3) the same steps with TRL's
# GRPOTrainer (scripts/bench_trl.py), alternated with reinforge, and the step-time ratio (with
# stand-ins for datasets/pyarrow when the machine lacks them: pyarrow is over the carry budget);
# (4) 2 processes (`reinforge train --nproc 2`): NCCL when 2 GPUs are present; on a CPU dry run
# the same command over Gloo; skipped otherwise.
#
# Environment: DEVICE (cuda; cpu = dry run), SHAPE (qwen2.5-0.5b; tiny for dry runs), PYTHON (the
#   Python with torch + transformers; default .venv/bin/python if present, else python3), BF16 (1),
#   STEPS (3 measured), WARMUP (1), ROUNDS (2), PROMPTS (8), GENERATIONS (8), MAX_LEN (128),
#   TRL_PYTHON (a Python that imports trl; default: PYTHON, else .venv-trl/bin/python on DEVICE=cpu),
#   PEAK_TFLOPS (the GPU's dense bf16 peak when its name is not in the table), WORK (scratch dir,
#   default a temp dir, removed at the end unless KEEP_WORK=1), OUT (results; default
#   runs/gpu_check/<UTC time>).
# Results: $OUT/results.json (every figure) and $OUT/summary.txt.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
here="$root/scripts/gpu_check"
die() { echo "gpu_check: error: $*" >&2; exit 1; }
say() { echo "==> $*" >&2; }
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }

prepare="" bin="" trl_wheels=""
while [ $# -gt 0 ]; do
  case "$1" in
    --prepare) prepare="${2:?--prepare needs OUTDIR}"; shift 2 ;;
    --bin) bin="${2:?--bin needs FILE}"; shift 2 ;;
    --trl-wheels) trl_wheels="${2:?--trl-wheels needs DIR}"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument $1" ;;
  esac
done

if [ -z "${PYTHON:-}" ]; then
  if [ -x "$root/.venv/bin/python" ]; then PYTHON="$root/.venv/bin/python"; else PYTHON=python3; fi
fi

# ---------------------------------------------------------------------------------- prepare
if [ -n "$prepare" ]; then
  limit=$((64 * 1024 * 1024))
  src="$root/target/release/reinforge"
  [ -x "$src" ] || die "$src not found: build it first (cargo build --release -p reinforge)"
  [ -x "$root/.venv/bin/pip" ] || die "$root/.venv/bin/pip not found (scripts/setup.sh)"
  [ -x "$root/.venv-trl/bin/python" ] || die ".venv-trl not found: run scripts/bench_trl.sh once (it installs trl)"
  mkdir -p "$prepare/wheels"
  cp "$src" "$prepare/reinforge" && strip "$prepare/reinforge"
  say "stripped binary: $(stat -c %s "$prepare/reinforge") bytes"
  # Every distribution trl needs that torch + transformers do not, at .venv-trl's versions (the
  # ones the CPU dry run used). Binary wheels are for this machine's Python (cp311, manylinux
  # x86_64): a GPU machine with another Python gets the pure-Python ones only (see docs/gpu.md).
  mapfile -t reqs < <("$root/.venv-trl/bin/python" "$here/helpers.py" wheels)
  "$root/.venv/bin/pip" download --disable-pip-version-check -q --no-deps -d "$prepare/wheels" "${reqs[@]}" \
    || die "pip download failed for: ${reqs[*]}"
  # Drop the largest wheels until the bundle fits (the binary must go; TRL is optional).
  total() { du -sb "$prepare" | cut -f1; }
  while [ "$(total)" -gt "$limit" ]; do
    big="$(ls -S "$prepare"/wheels/*.whl | head -1)"
    say "bundle over 64 MiB: leaving out $(basename "$big") ($(stat -c %s "$big") bytes): the GPU machine uses its own, or the stand-ins in scripts/gpu_check/datasets_stub"
    echo "$(basename "$big")" >> "$prepare/LEFT_OUT.txt"
    rm -f "$big"
  done
  ls -l "$prepare/wheels" >&2
  say "bundle: $(total) bytes of $limit allowed ($(du -sh "$prepare" | cut -f1)) in $prepare"
  say "on the GPU machine, from the repository root, with the bundle copied to BUNDLE:"
  echo "  scripts/gpu_check.sh --bin BUNDLE/reinforge --trl-wheels BUNDLE/wheels"
  exit 0
fi

# ---------------------------------------------------------------------------------- check
t_start=$(date +%s)
device="${DEVICE:-cuda}"
shape="${SHAPE:-qwen2.5-0.5b}"
bf16="${BF16:-1}"; [ "$bf16" = 1 ] && bf16v=true || bf16v=false
steps="${STEPS:-3}" warmup="${WARMUP:-1}" rounds="${ROUNDS:-2}"
prompts="${PROMPTS:-8}" gens="${GENERATIONS:-8}" max_len="${MAX_LEN:-128}"
case "$device" in cpu|cuda) ;; *) die "DEVICE must be cpu or cuda (got $device)" ;; esac
case "$shape" in qwen2.5-0.5b|tiny) ;; *) die "SHAPE must be qwen2.5-0.5b or tiny (got $shape)" ;; esac
for v in "$steps" "$rounds" "$prompts" "$gens" "$max_len"; do
  [[ "$v" =~ ^[1-9][0-9]*$ ]] || die "STEPS, ROUNDS, PROMPTS, GENERATIONS, MAX_LEN must be positive integers"
done
[[ "$warmup" =~ ^[0-9]+$ ]] || die "WARMUP must be a non-negative integer"

bin="${bin:-$root/target/release/reinforge}"
[ -x "$bin" ] || die "no reinforge binary at $bin (--bin FILE, or build it)"
bin="$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")"
command -v "$PYTHON" >/dev/null || die "PYTHON=$PYTHON not found"
torch_info="$("$PYTHON" -c 'import os, torch, transformers; print(os.path.join(os.path.dirname(torch.__file__), "lib")); print(torch.__version__); print(transformers.__version__)')" \
  || die "$PYTHON cannot import torch and transformers"
torch_lib="$(sed -n 1p <<<"$torch_info")" torch_ver="$(sed -n 2p <<<"$torch_info")" tf_ver="$(sed -n 3p <<<"$torch_info")"
[[ "$torch_ver" == 2.11.* ]] || die "the binary is built against libtorch 2.11 (tch 0.24); $PYTHON has torch $torch_ver"
# The binary runs on that Python's own libtorch (and, through it, its CUDA and NCCL libraries).
export LD_LIBRARY_PATH="$torch_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
"$bin" --version >/dev/null || die "$bin does not start against $torch_lib (see the loader's message above)"

gpu_name="" gpu_count=0 driver=""
if [ "$device" = cuda ]; then
  command -v nvidia-smi >/dev/null || die "DEVICE=cuda but nvidia-smi is not found (DEVICE=cpu for a dry run)"
  gpu_name="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
  gpu_count="$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)"
  driver="$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)"
  mem_mode=gpu
else
  mem_mode=rss
fi

stamp="$(date -u +%Y%m%dT%H%M%SZ)"
out="${OUT:-$root/runs/gpu_check/$stamp}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
if [ -z "${WORK:-}" ]; then work="$(mktemp -d)"; [ "${KEEP_WORK:-0}" = 1 ] || trap 'rm -rf "$work"' EXIT
else work="$WORK"; mkdir -p "$work"; fi
mkdir -p "$work/parity" "$work/grpo" "$work/dp"
say "device $device ${gpu_name:+($gpu_count x $gpu_name, driver $driver) }shape $shape; torch $torch_ver, transformers $tf_ver; results in $out"
walls="{}"
stage_done() { walls="$("$PYTHON" -c 'import json,sys; d=json.loads(sys.argv[1]); d[sys.argv[2]]=float(sys.argv[3]); print(json.dumps(d))' "$walls" "$1" "$(( $(date +%s) - $2 ))")"; }
run_log() {  # run_log LOG CMD...: runs CMD with its output in LOG, shows the tail on failure
  local log="$1"; shift
  "$@" > "$log" 2>&1 || { tail -25 "$log" >&2; die "failed ($(basename "$log")): $*"; }
}

# ---------------------------------------------------------------------------------- TRL python
trl_python="" trl_reason=""
if [ -n "$trl_wheels" ]; then
  [ -d "$trl_wheels" ] || die "--trl-wheels $trl_wheels is not a directory"
  say "installing the carried wheels the Python lacks into $work/pylib"
  "$PYTHON" "$here/helpers.py" install "$trl_wheels" "$work/pylib"
  export PYTHONPATH="$work/pylib${PYTHONPATH:+:$PYTHONPATH}"
fi
# Candidates in order: TRL_PYTHON, PYTHON, PYTHON with the stand-ins for datasets and pyarrow
# (scripts/gpu_check/datasets_stub: pyarrow's wheel alone is over the carry budget; used only
# when the real ones cannot be imported), and on a CPU dry run .venv-trl.
trl_pythonpath="${PYTHONPATH:-}" trl_datasets=""
stub_path="$here/datasets_stub${PYTHONPATH:+:$PYTHONPATH}"
cands=("${TRL_PYTHON:-}|${PYTHONPATH:-}|real" "$PYTHON|${PYTHONPATH:-}|real" "$PYTHON|$stub_path|stand-in (no pyarrow)")
[ "$device" = cpu ] && cands+=("$root/.venv-trl/bin/python|${PYTHONPATH:-}|real")
for c in "${cands[@]}"; do
  IFS='|' read -r p pp kind <<<"$c"
  [ -n "$p" ] || continue
  if err="$(PYTHONPATH="$pp" "$p" -c 'from trl import GRPOTrainer; import datasets' 2>&1)"; then
    trl_python="$p" trl_pythonpath="$pp" trl_datasets="$kind"; break
  fi
  [ -n "$trl_reason" ] || trl_reason="$p cannot import trl's GRPOTrainer and datasets: $(tail -1 <<<"$err")"
done
[ -z "$trl_python" ] || say "TRL side: $trl_python (datasets: $trl_datasets)"
if [ -z "$trl_python" ]; then
  trl_reason="${trl_reason:-no Python with trl} (carry the wheels: scripts/gpu_check.sh --prepare, then --trl-wheels DIR)"
  say "TRL stage will be skipped: $trl_reason"
fi

# 2 processes
dp=0 dp_backend="" dp_note=""
if [ "$device" = cuda ] && [ "$gpu_count" -ge 2 ]; then
  dp=1 dp_backend=nccl dp_note="NCCL on cuda:0 and cuda:1"
elif [ "$device" = cuda ]; then
  dp_note="NCCL not run: this machine has $gpu_count GPU (2 needed)"
else
  dp=1 dp_backend=gloo dp_note="CPU dry run: NCCL not run (no GPU); the same 2-process command over Gloo"
fi

# ---------------------------------------------------------------------------------- stage 1: parity
t=$(date +%s)
say "parity: log-probs on the fixtures, cpu f32 vs $device f32 and bf16"
pairs="$work/parity/pairs.jsonl"
printf '%s\n' '{"prompt": "What is 2+3?", "completion": " 5, so the answer is 5."}' \
  '{"prompt": "Name a colour.", "completion": " Blue, like the sky at noon"}' \
  '{"prompt": "Count: 1 2 3", "completion": " 4 5 6 7 8 9 10"}' > "$pairs"
models=()
for m in "$root"/fixtures/hf/models/*/; do
  m="$(basename "$m")"; models+=("$m")
  md="$root/fixtures/hf/models/$m"
  run_log "$work/parity/$m.log" "$bin" score --model "$md" --input "$pairs" --raw --device cpu --dtype f32 -o "$work/parity/$m-cpu-f32.jsonl"
  for dt in f32 bf16; do
    run_log "$work/parity/$m.log" "$bin" score --model "$md" --input "$pairs" --raw --device "$device" --dtype "$dt" -o "$work/parity/$m-dev-$dt.jsonl"
  done
done
say "parity: one GRPO step on the qwen2 fixture, cpu vs $device"
data_fx="$work/parity/arith.jsonl"
for i in $(seq 0 15); do echo "{\"prompt\": \"What is $((i % 7))+$((i % 5))?\", \"answer\": \"$((i % 7 + i % 5))\"}"; done > "$data_fx"
# A reward some completions of the random fixture earn and others not (about 1 in 5 here), so
# advantages and the gradient are not zero.
printf '[components.xz]\ntype = "format"\npattern = %s\n' "'[xz]'" > "$work/parity/reward.toml"
fixture_run() {  # fixture_run NAME DEVICE [more args]: 1-step f32 dataset run on the qwen2 fixture
  local name="$1" dev="$2"; shift 2
  "$bin" train --model "$root/fixtures/hf/models/qwen2" --data "$data_fx" --reward "$work/parity/reward.toml" \
    --set runs_dir="$work/runs" --set name="$name" --set device="$dev" --set seed=0 --set threads=1 \
    --set rollout.rng=per_row --set rl.steps="${FX_STEPS:-1}" --set rl.prompts_per_step=4 \
    --set rl.num_generations=8 --set rl.max_completion_length=16 --set rl.lr=1e-3 \
    --set rl.checkpoint_every=1000000 "$@"
}
run_log "$work/parity/grpo-cpu.log" fixture_run pcpu cpu
run_log "$work/parity/grpo-dev.log" fixture_run pdev "$device"
cp "$work/runs/pcpu/metrics.jsonl" "$work/parity/grpo-cpu.jsonl"
cp "$work/runs/pdev/metrics.jsonl" "$work/parity/grpo-dev.jsonl"
rm -rf "$work/runs"
stage_done parity "$t"

# ---------------------------------------------------------------------------------- stage 2+3: GRPO
t=$(date +%s)
say "building the $shape model (random init, fixture tokenizer)"
run_log "$work/model.log" "$PYTHON" "$here/helpers.py" model "$shape" "$work/model" "$root/fixtures/hf/models/qwen2"
stage_done model "$t"
t=$(date +%s)
total=$((warmup + steps))
# No network on the target: transformers and TRL must not try the Hub (or send telemetry).
export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 TRANSFORMERS_OFFLINE=1
threads="${THREADS:-$(nproc)}"
for r in $(seq 1 "$rounds"); do
  say "round $r/$rounds: reinforge, $total GRPO steps (bf16=$bf16v)"
  rm -rf "$work/rf-runs"
  run_log "$work/grpo/reinforge-r$r.log" "$PYTHON" "$here/helpers.py" measure "$work/grpo/reinforge-r$r.mem.json" "$mem_mode" -- \
    "$bin" train --model "$work/model" --data "$work/model/data.jsonl" \
    --set name=r$r --set runs_dir="$work/rf-runs" --set seed=0 --set threads="$threads" --set device="$device" \
    --set bf16=$bf16v --set rl.algorithm=grpo --set rl.steps="$total" --set rl.checkpoint_every=1000000 \
    --set rl.prompts_per_step="$prompts" --set rl.num_generations="$gens" \
    --set rl.max_completion_length="$max_len" --set rl.temperature=1.0 --set rl.top_p=1.0 --set rl.top_k=0 \
    --set rl.beta=0.0 --set rl.ppo_epochs=1 --set rl.mini_batches=1 --set rl.lr=1e-6 \
    --set rl.weight_decay=0.0 --set rl.max_grad_norm=1.0 --set rl.skip_zero_advantage=false
  cp "$work/rf-runs/r$r/metrics.jsonl" "$work/grpo/reinforge-r$r.jsonl"
  rm -rf "$work/rf-runs"
  if [ -n "$trl_python" ]; then
    say "round $r/$rounds: TRL GRPOTrainer, $total steps"
    trl_args=(--device "$device"); [ "$bf16" = 1 ] && trl_args+=(--bf16)
    run_log "$work/grpo/trl-r$r.log" "$PYTHON" "$here/helpers.py" measure "$work/grpo/trl-r$r.mem.json" "$mem_mode" -- \
      env PYTHONPATH="$trl_pythonpath" "$trl_python" "$here/helpers.py" trl "${trl_args[@]}" --model "$work/model" --data "$work/model/data.jsonl" \
      --steps "$total" --threads "$threads" --prompts "$prompts" --generations "$gens" \
      --max-completion-length "$max_len" --lr 1e-6 --seed 0 --workdir "$work/trl-work" --out "$work/grpo/trl-r$r.jsonl"
    rm -rf "$work/trl-work"
  fi
done
stage_done grpo "$t"

# ---------------------------------------------------------------------------------- stage 4: 2 processes
t=$(date +%s)
if [ "$dp" = 1 ]; then
  say "2 processes ($dp_backend) vs 1 on the qwen2 fixture, 3 steps"
  FX_STEPS=3 run_log "$work/dp/one.log" fixture_run one "$device"
  FX_STEPS=3 run_log "$work/dp/two.log" fixture_run two "$device" --nproc 2
  cp "$work/runs/one/metrics.jsonl" "$work/dp/one.jsonl"; cp "$work/runs/two/metrics.jsonl" "$work/dp/two.jsonl"
  rm -rf "$work/runs"
else
  say "2 processes: skipped: $dp_note"
fi
stage_done dp2 "$t"
walls="$("$PYTHON" -c 'import json,sys; d=json.loads(sys.argv[1]); d["total"]=float(sys.argv[2]); print(json.dumps(d))' "$walls" "$(( $(date +%s) - t_start ))")"
echo "$walls" > "$work/stage_wall.json"

# ---------------------------------------------------------------------------------- report
"$PYTHON" - "$work/settings.json" <<PY
import json, sys
json.dump({"started_utc": "$stamp", "device": "$device", "shape": "$shape", "bf16": $([ "$bf16" = 1 ] && echo True || echo False),
  "gpu_name": "$gpu_name", "gpu_count": $gpu_count, "driver": "$driver", "torch": "$torch_ver", "transformers": "$tf_ver",
  "binary": "$bin", "libtorch": "$torch_lib", "steps": $steps, "warmup": $warmup, "rounds": $rounds, "prompts": $prompts,
  "generations": $gens, "max_len": $max_len, "threads": $threads, "parity_models": "${models[*]}".split(),
  "trl_python": "$trl_python", "trl_datasets": "$trl_datasets", "trl_reason": """$trl_reason""", "dp": bool($dp), "dp_backend": "$dp_backend",
  "dp_note": "$dp_note", "reinforge_commit": "$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"},
  open(sys.argv[1], "w"), indent=1)
PY
"$PYTHON" "$here/helpers.py" report "$work" "$out"
say "results: $out/results.json, $out/summary.txt"
