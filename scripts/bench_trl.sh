#!/usr/bin/env bash
# Seconds per GRPO step of reinforge vs TRL's GRPOTrainer on the real model SmolLM2-135M-Instruct
# (scripts/real_model.sh), CPU, f32, with the same data (reasoning-gym, scripts/reasoning_gym_data.py)
# and settings: 4 prompts x 8 completions per step, at most 48 completion tokens, temperature 1,
# one optimizer step per batch, no KL/reference model, no gradient checkpointing, the same
# learning rate and thread count. The two run alternately, ROUNDS times each (reinforge, TRL,
# reinforge, TRL, ...); each run does WARMUP + STEPS steps, and the medians are over the
# post-warm-up steps of all rounds. Prints per implementation: median step, generation and
# update seconds, mean completion tokens, peak RSS (GNU time, the same for both processes),
# and the ratio reinforge / TRL of the median step. Raw per-step JSON goes to
# runs/bench_trl/<UTC time>/ (git-ignored). Details: docs/bench_trl.md.
#
# Usage: scripts/bench_trl.sh [STEPS] [THREADS] [ROUNDS]      (defaults: 8 2 2)
# VARIANTS (default "reinforge same-work trl") names what runs, alternated in that order each round:
#   reinforge   the default settings (zero-advantage rows skipped: exact, less work than TRL);
#   same-work   rl.skip_zero_advantage=false: the work TRL does (each group's prompt packed
#               once, memory.shared_prompts, as by default; `shared` is the same variant);
#   padded      same-work on the plain path: memory.shared_prompts=false (padded rows);
#   micro, ckpt, packed, micro+ckpt, all   padded with memory.max_tokens_per_microbatch=$BUDGET
#               (default 2048), memory.gradient_checkpointing=true, memory.padding_free=true,
#               micro and ckpt, or all three (the memory table);
#   all+shared  same-work with micro-batches and checkpointing;
#   NAME+compact, NAME+reuse   any of those with memory.heap=compact (the lowest-peak malloc
#               policy) or memory.heap=reuse (the default `auto` is compact exactly when
#               micro-batches or checkpointing are on);
#   trl, trl-ckpt   TRL's GRPOTrainer, plain or with gradient checkpointing.
# Environment: WARMUP (warm-up steps per run, default 2), MAX_LEN (max completion length, 48),
#   LR (learning rate, 1e-6: small, so the policy stays near the base model and both sides
#   sample completions of comparable length; speed does not depend on it), SEED (0),
#   BENCH_NO_BUILD=1 (use target/release/reinforge as it is instead of `cargo build --release`),
#   REINFORGE_EXTRA (more `--set k=v` words for reinforge), PROMPTS (prompts per step, 4; the
#   completions per prompt stay 8), MEM_LIMIT_GB (run each reinforge variant in a memory cgroup
#   of that many GiB, as root; a variant the limit kills is reported as "killed", its peak RSS
#   a lower bound and the ratios over it upper bounds, and the run goes on: the plain path of
#   the 256-token case needs more memory than a 24 GiB machine has).
# Run it on an otherwise idle machine: with other CPU work the libtorch thread pools of both
# sides slow down by large, erratic factors (the script warns when the load average is high).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
steps="${1:-8}"
threads="${2:-2}"
rounds="${3:-2}"
warmup="${WARMUP:-2}"
max_len="${MAX_LEN:-48}"
lr="${LR:-1e-6}"
seed="${SEED:-0}"
budget="${BUDGET:-2048}"
variants="${VARIANTS:-reinforge same-work trl}"
prompts="${PROMPTS:-4}"
generations=8
for v in "$steps" "$threads" "$rounds"; do
  [[ "$v" =~ ^[1-9][0-9]*$ ]] || { echo "usage: scripts/bench_trl.sh [STEPS] [THREADS] [ROUNDS] (positive integers)" >&2; exit 2; }
done
[[ "$warmup" =~ ^[0-9]+$ ]] || { echo "error: WARMUP must be a non-negative integer" >&2; exit 2; }

# TRL's side: the newest trl on PyPI (checked to run with transformers 5.23.0), with the torch
# and transformers the project's .venv pins (scripts/setup.sh).
TRL_VERSION="1.16.0"
TORCH_VERSION="2.11.0"
TRANSFORMERS_VERSION="5.23.0"

# The model; real_model.sh also sets up .venv (scripts/setup.sh).
model="$(scripts/real_model.sh)" || { echo "error: scripts/real_model.sh failed: cannot obtain SmolLM2-135M-Instruct" >&2; exit 1; }
if [ ! -f "$model/config.json" ] || [ ! -f "$model/model.safetensors" ]; then
  echo "error: the real model SmolLM2-135M-Instruct could not be obtained (expected a checkpoint at $model)" >&2
  [ -f .cache/models/UNREACHABLE ] && cat .cache/models/UNREACHABLE >&2
  exit 1
fi

# The data: reasoning-gym train split (fixed seeds, reproducible).
data_dir="runs/bench_trl/data"
[ -f "$data_dir/train.jsonl" ] || .venv/bin/python scripts/reasoning_gym_data.py "$data_dir" >&2
data="$data_dir/train.jsonl"

# The TRL venv, installed once over .venv's torch and transformers (scripts/trl_env.sh).
"$root/scripts/trl_env.sh" >&2

bin=target/release/reinforge
if [ "${BENCH_NO_BUILD:-0}" != 1 ]; then
  cargo build --release --locked -p reinforge >&2
fi
[ -x "$bin" ] || { echo "error: $bin not found (build it: cargo build --release -p reinforge)" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "error: /usr/bin/time (GNU time) is needed for peak RSS (apt-get install time)" >&2; exit 1; }

out="runs/bench_trl/$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$out"
total=$((warmup + steps))
# Both processes get the same thread settings: intra-op threads via each side's API, and
# OpenMP/MKL pools capped likewise.
export OMP_NUM_THREADS="$threads" MKL_NUM_THREADS="$threads" TOKENIZERS_PARALLELISM=false
cat > "$out/settings.json" <<EOF
{"steps": $steps, "warmup": $warmup, "rounds": $rounds, "threads": $threads, "prompts": $prompts,
 "generations": $generations, "max_completion_length": $max_len, "lr": $lr, "temperature": 1.0,
 "seed": $seed, "model": "$model", "data": "$data", "trl": "$TRL_VERSION", "torch": "$TORCH_VERSION",
 "transformers": "$TRANSFORMERS_VERSION", "reinforge_commit": "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"}
EOF
echo "==> $rounds round(s) of $warmup warm-up + $steps measured steps each, $threads threads; results in $out" >&2
check_load() {  # warns when other work competes for the CPU; keeps the load averages with the results
  read -r l1 l5 _ < /proc/loadavg
  echo "$1 load average (1 min, 5 min): $l1 $l5" >> "$out/load.txt"
  if awk -v l="$l1" 'BEGIN { exit !(l > 1.0) }'; then
    echo "warning: load average $l1 before $1: other processes compete for the CPU, timings will be noisy" >&2
  fi
}
# MEM_LIMIT_GB: a memory cgroup (v2's memory.max, or v1's memory.limit_in_bytes) that each
# reinforge process joins before it starts (`in_limit`), removed at exit.
limit_dir=""
if [ -n "${MEM_LIMIT_GB:-}" ]; then
  [[ "$MEM_LIMIT_GB" =~ ^[1-9][0-9]*$ ]] || { echo "error: MEM_LIMIT_GB must be a positive integer (GiB)" >&2; exit 2; }
  bytes=$((MEM_LIMIT_GB * 1024 * 1024 * 1024))
  if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
    limit_dir="/sys/fs/cgroup/reinforge-bench-$$"
    mkdir "$limit_dir" && echo "$bytes" > "$limit_dir/memory.max"
  elif [ -d /sys/fs/cgroup/memory ]; then
    limit_dir="/sys/fs/cgroup/memory/reinforge-bench-$$"
    mkdir "$limit_dir" && echo "$bytes" > "$limit_dir/memory.limit_in_bytes"
  fi || { echo "error: MEM_LIMIT_GB needs a writable cgroup memory controller (run as root)" >&2; exit 1; }
  [ -n "$limit_dir" ] || { echo "error: MEM_LIMIT_GB: no cgroup memory controller found" >&2; exit 1; }
  trap 'rmdir "$limit_dir" 2>/dev/null || true' EXIT
  echo "==> reinforge variants run under a ${MEM_LIMIT_GB} GiB memory limit ($limit_dir)" >&2
fi
in_limit() {  # command...: runs it inside the MEM_LIMIT_GB cgroup, if any
  if [ -n "$limit_dir" ]; then
    bash -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$limit_dir" "$@"
  else
    "$@"
  fi
}
# The reinforge settings of each variant (TRL's are flags of scripts/bench_trl.py).
reinforge_extra() {
  # NAME+compact, NAME+reuse: variant NAME under that memory.heap policy (docs/memory.md).
  case "$1" in *+compact|*+reuse) local base; base="$(reinforge_extra "${1%+*}")" || return 1
    echo "$base --set memory.heap=${1##*+}"; return ;; esac
  local same="--set rl.skip_zero_advantage=false"
  # The plain path: padded rows, each prompt once per row (shared_prompts is on by default).
  local plain="$same --set memory.shared_prompts=false"
  local micro="--set memory.max_tokens_per_microbatch=$budget"
  local ckpt="--set memory.gradient_checkpointing=true"
  local packed="--set memory.padding_free=true"
  case "$1" in
    reinforge) echo "" ;;
    same-work|shared) echo "$same" ;;
    padded) echo "$plain" ;;
    micro) echo "$plain $micro" ;;
    ckpt) echo "$plain $ckpt" ;;
    packed) echo "$plain $packed" ;;
    micro+ckpt) echo "$plain $micro $ckpt" ;;
    all) echo "$plain $micro $ckpt $packed" ;;
    all+shared) echo "$same $micro $ckpt" ;;
    *) return 1 ;;
  esac
}
run_reinforge() {  # variant round
  local v="$1" round="$2" extra
  extra="$(reinforge_extra "$v")"
  rm -rf "$out/rf-runs"
  local status=0
  # shellcheck disable=SC2086
  in_limit /usr/bin/time -v -o "$out/$v-r$round.time" "$bin" train --model "$model" --data "$data" \
    --set name=r$round --set runs_dir="$out/rf-runs" --set seed="$seed" --set threads="$threads" \
    --set rl.algorithm=grpo --set rl.steps="$total" --set rl.checkpoint_every=1000000 \
    --set rl.prompts_per_step=$prompts --set rl.num_generations=$generations \
    --set rl.max_completion_length="$max_len" --set rl.temperature=1.0 \
    --set rl.top_p=1.0 --set rl.top_k=0 --set rl.beta=0.0 \
    --set rl.ppo_epochs=1 --set rl.mini_batches=1 --set rl.lr="$lr" \
    --set rl.weight_decay=0.0 --set rl.max_grad_norm=1.0 \
    $extra ${REINFORGE_EXTRA:-} > "$out/$v-r$round.log" 2>&1 || status=$?
  if [ "$status" -ne 0 ] && [ -n "$limit_dir" ] && grep -q "Command terminated by signal 9" "$out/$v-r$round.time"; then
    echo "==> $v was killed at the ${MEM_LIMIT_GB} GiB limit: its peak RSS is a lower bound" >&2
    touch "$out/$v-r$round.killed"
    rm -rf "$out/rf-runs"
    return
  fi
  [ "$status" -eq 0 ] || { echo "error: reinforge ($v) failed, see $out/$v-r$round.log" >&2; tail -20 "$out/$v-r$round.log" >&2; exit 1; }
  cp "$out/rf-runs/r$round/metrics.jsonl" "$out/$v-r$round.jsonl"
  cp "$out/rf-runs/r$round/config.toml" "$out/$v-config.toml"
  rm -rf "$out/rf-runs"  # the run's checkpoints (hundreds of MB each)
}
run_trl() {  # variant round
  local v="$1" round="$2" flags=""
  [ "$v" = trl-ckpt ] && flags="--gradient-checkpointing"
  # shellcheck disable=SC2086
  /usr/bin/time -v -o "$out/$v-r$round.time" "$tvenv/bin/python" scripts/bench_trl.py \
    --model "$model" --data "$data" --steps "$total" --threads "$threads" --prompts $prompts \
    --generations $generations --max-completion-length "$max_len" --lr "$lr" --seed "$seed" $flags \
    --workdir "$out/trl-work" --out "$out/$v-r$round.jsonl" > "$out/$v-r$round.log" 2>&1 \
    || { echo "error: TRL ($v) failed, see $out/$v-r$round.log" >&2; tail -20 "$out/$v-r$round.log" >&2; exit 1; }
  rm -rf "$out/trl-work"
}
for v in $variants; do
  case "$v" in trl|trl-ckpt) ;; *) reinforge_extra "$v" >/dev/null || { echo "error: unknown variant $v" >&2; exit 2; } ;; esac
done
echo "$variants" > "$out/variants.txt"
for round in $(seq 1 "$rounds"); do
  for v in $variants; do
    echo "==> round $round: $v" >&2
    check_load "round $round $v"
    case "$v" in
      trl|trl-ckpt) run_trl "$v" "$round" ;;
      *) run_reinforge "$v" "$round" ;;
    esac
  done
done

.venv/bin/python - "$out" "$rounds" "$warmup" <<'PY'
import json, pathlib, re, statistics, sys

out, rounds, warmup = pathlib.Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
s = json.loads((out / "settings.json").read_text())
completions = s["prompts"] * s["generations"]

def peak_gb(path):
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", path.read_text())
    return int(m.group(1)) / 1024**2

def lines(path):
    return [json.loads(l) for l in path.read_text().splitlines() if l.strip()]

variants = (out / "variants.txt").read_text().split()
is_trl = lambda v: v.startswith("trl")
rows = {v: [] for v in variants}
rss = {v: [] for v in variants}
# Variants the MEM_LIMIT_GB cgroup killed: no steps; their peak RSS is a lower bound.
killed = {v for v in variants for r in range(1, rounds + 1) if (out / f"{v}-r{r}.killed").exists()}
for r in range(1, rounds + 1):
    for v in variants:
        if v in killed:
            rss[v].append(peak_gb(out / f"{v}-r{r}.time"))
            continue
        for m in lines(out / f"{v}-r{r}.jsonl"):
            if is_trl(v):
                if "summary" not in m and m["step"] >= warmup:
                    rows[v].append({"round": r, **m})
            elif m["step"] >= warmup:
                rows[v].append({
                    "round": r, "step": m["step"], "step_s": m["timing/step_s"],
                    "gen_s": m["timing/sample_s"], "update_s": m["timing/update_s"],
                    "completion_tokens_mean": m["response_length/mean"],
                    "reward_mean": m["reward/mean"],
                    "rows_skipped_frac": m["update/rows_skipped_frac"],
                })
        rss[v].append(peak_gb(out / f"{v}-r{r}.time"))

med = lambda name, k: statistics.median(x[k] for x in rows[name])
mean = lambda name, k: statistics.fmean(x[k] for x in rows[name])
summary = {}
for name in sorted(killed):
    summary[name] = {"killed_at_limit": True, "peak_rss_gb_at_least": max(rss[name])}
for name in (v for v in rows if v not in killed):
    if not rows[name]:
        sys.exit(f"error: no post-warm-up steps of {name} in {out}")
    summary[name] = {
        "steps": len(rows[name]),
        "median_step_s": med(name, "step_s"),
        "median_gen_s": med(name, "gen_s"),
        "median_update_s": med(name, "update_s"),
        "mean_completion_tokens": mean(name, "completion_tokens_mean"),
        "mean_reward": mean(name, "reward_mean"),
        "peak_rss_gb": max(rss[name]),
        # Step time per completion token generated and trained on (lengths are sampled, so
        # this evens out steps whose completions happen to be longer or shorter).
        "median_step_ms_per_token": statistics.median(
            1e3 * x["step_s"] / (x["completion_tokens_mean"] * completions) for x in rows[name]),
    }
    if is_trl(name):
        summary[name]["median_reward_s"] = med(name, "reward_s")
    else:
        summary[name]["mean_rows_skipped_frac"] = mean(name, "rows_skipped_frac")
trl_ref = "trl" if "trl" in summary else next((v for v in variants if is_trl(v)), None)
# The plain path the memory table divides by: `padded` (shared prompts off) when it ran.
plain = next((v for v in ("padded", "same-work") if v in summary), None)
if plain in killed:
    # Killed at the limit: each ratio over it is at most this.
    for name in variants:
        if name not in killed and not is_trl(name):
            summary[name]["rss_ratio_over_" + plain + "_at_most"] = summary[name]["peak_rss_gb"] / summary[plain]["peak_rss_gb_at_least"]
    plain = None
for name in (v for v in variants if v not in killed):
    if trl_ref and not is_trl(name):
        summary[name]["step_ratio_over_" + trl_ref] = summary[name]["median_step_s"] / summary[trl_ref]["median_step_s"]
        summary[name]["rss_ratio_over_" + trl_ref] = summary[name]["peak_rss_gb"] / summary[trl_ref]["peak_rss_gb"]
    if plain and not is_trl(name):
        summary[name]["rss_ratio_over_" + plain] = summary[name]["peak_rss_gb"] / summary[plain]["peak_rss_gb"]
if "trl-ckpt" in summary:
    for name in variants:
        if not is_trl(name) and name not in killed:
            summary[name]["rss_ratio_over_trl-ckpt"] = summary[name]["peak_rss_gb"] / summary["trl-ckpt"]["peak_rss_gb"]
(out / "steps.json").write_text(json.dumps(rows, indent=1) + "\n")
(out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")

print(f"GRPO step on {pathlib.Path(s['model']).name}, CPU f32, {s['threads']} threads: "
      f"{s['prompts']} prompts x {s['generations']} completions, at most {s['max_completion_length']} tokens, "
      f"lr {s['lr']}; medians over {s['rounds']} round(s) x {s['steps']} steps after {s['warmup']} warm-up")
print(f"{'':18} {'step':>9} {'generation':>11} {'update':>9} {'compl. tokens':>14} {'peak RSS':>9} {'step/token':>11} {'skipped':>8}")
for name in variants:
    x = summary[name]
    if name in killed:
        print(f"{name:18} killed at the memory limit: peak RSS at least {x['peak_rss_gb_at_least']:.2f}GB")
        continue
    label = f"TRL {s['trl']}" + name[3:] if is_trl(name) else name
    skipped = "" if is_trl(name) else f"{100 * x['mean_rows_skipped_frac']:7.0f}%"
    print(f"{label:18} {x['median_step_s']:8.2f}s {x['median_gen_s']:10.2f}s {x['median_update_s']:8.2f}s "
          f"{x['mean_completion_tokens']:14.1f} {x['peak_rss_gb']:7.2f}GB {x['median_step_ms_per_token']:8.1f}ms {skipped:>8}")
for name in variants:
    ratios = {k: v for k, v in summary[name].items() if "ratio" in k}
    if ratios:
        print(f"{name}: " + ", ".join(f"{k} {v:.3f}" for k, v in ratios.items()))
print("(generation includes reward scoring; 'skipped': rows left out of the update as zero-advantage, exact)")
print(f"raw per-step JSON: {out}/steps.json, summary: {out}/summary.json")
PY
