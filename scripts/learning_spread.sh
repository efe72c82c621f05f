#!/usr/bin/env bash
# The seed-to-seed spread of the changes the binary's learning tests assert (tests/pipeline.rs,
# tests/rollouts.rs; crates/reinforge/tests/common/tiny.rs: `quarter_change`, the mean of a
# metric over the last quarter of the RL steps minus that over the first quarter), over seeds
# 0..SEEDS-1 of each configuration they train and of its null, a run in which the checked thing
# does not learn: the policy frozen (rl.lr=1e-12) for the reward and the retry game's turns,
# the critic frozen (ppo.critic_lr=1e-12) for PPO's value loss. The nulls' mean and sd are the
# `Null` constants of tiny.rs (REWARD_NULL, VALUE_LOSS_NULL, TURNS_NULL), from which each test's
# margin follows; the learning runs' numbers say how many seeds a test needs. Rerun it when the
# tiny configuration, the step count or the seeding changes. About 3 minutes per seed on 2
# shared cores (7 runs of 80 steps), two runs at a time (JOBS). The raw per-seed figures go to
# crates/reinforge/tests/data/learning_null.tsv (RAW), which tiny.rs reads: commit it.
# Usage: scripts/learning_spread.sh [SEEDS (default 10)]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
seeds="${1:-10}"
tiny_rs=crates/reinforge/tests/common/tiny.rs
# The tests' configuration and step count, read from tiny.rs so that there is one source.
mapfile -t tiny < <(sed -n '/^pub const TINY/,/^];/p' "$tiny_rs" | grep -o '"[^"]*"' | tr -d '"')
steps="$(grep -Eo 'pub const LEARNING_STEPS: usize = [0-9]+' "$tiny_rs" | grep -Eo '[0-9]+$')"
cargo build --release --locked -q -p reinforge
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
# name and extra keys of each configuration (as in tests/pipeline.rs and tests/rollouts.rs).
configs=(
  "grpo|"
  "ppo|rl.algorithm=ppo"
  "async|rollout.max_staleness=2"
  "retry|task.attempts=3"
  "null|rl.lr=1e-12"
  "ppo-frozen-critic|rl.algorithm=ppo ppo.critic_lr=1e-12"
  "retry-null|task.attempts=3 rl.lr=1e-12"
)
# Every (configuration, seed) run, two at a time: each run is single-threaded (`threads = 1`).
jobs="$out/jobs"
: >"$jobs"
for seed in $(seq 0 $((seeds - 1))); do
  for c in "${configs[@]}"; do
    echo "$seed|$c" >>"$jobs"
  done
done
tiny_keys="${tiny[*]}"
export out steps tiny_keys
run_one() {
  local seed="${1%%|*}" c="${1#*|}"
  local name="${c%%|*}" extra=() args=() tiny=()
  read -ra extra <<<"${c#*|}"
  read -ra tiny <<<"$tiny_keys"
  for kv in "${tiny[@]}" "${extra[@]}" "rl.steps=$steps" "seed=$seed" "runs_dir=$out" "name=$name-$seed"; do
    args+=(--set "$kv")
  done
  target/release/reinforge train "${args[@]}" >"$out/$name-$seed.log" 2>&1 ||
    { cat "$out/$name-$seed.log" >&2; return 1; }
  echo "$name seed $seed done" >&2
}
export -f run_one
xargs -a "$jobs" -d '\n' -P "${JOBS:-2}" -I{} bash -c 'run_one "$1"' _ {}
# The raw figures, one line per (metric, configuration, seed): what tiny.rs reads.
raw="${RAW:-crates/reinforge/tests/data/learning_null.tsv}"
mkdir -p "$(dirname "$raw")"
.venv/bin/python - "$out" "$seeds" "$steps" "$raw" "$(git rev-parse --short HEAD)" <<'EOF'
import json, statistics, sys
out, seeds, steps, raw, commit = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
rows = []
print(f"change over {steps} steps (last quarter - first quarter), seeds 0..{seeds - 1}:")
for key, names in [
    ("reward/mean", ["grpo", "ppo", "async", "retry", "null"]),
    ("critic/value_loss", ["ppo", "ppo-frozen-critic"]),
    ("multi_turn/turns_mean", ["retry", "retry-null"]),
]:
    print(key)
    for name in names:
        changes = []
        for s in range(seeds):
            v = [json.loads(l)[key] for l in open(f"{out}/{name}-{s}/metrics.jsonl")]
            q = len(v) // 4
            changes.append(sum(v[-q:]) / q - sum(v[:q]) / q)
            rows.append(f"{key}\t{name}\t{s}\t{changes[-1]:.6f}")
        sd = statistics.stdev(changes) if len(changes) > 1 else float("nan")
        print(f"  {name:18s} mean {statistics.mean(changes):+.3f}  sd {sd:.3f}  "
              f"min {min(changes):+.3f}  max {max(changes):+.3f}")
with open(raw, "w") as f:
    f.write(f"# scripts/learning_spread.sh {seeds} at {commit}: quarter_change over {steps} RL steps\n")
    f.write("# metric\tconfiguration\tseed\tchange\n")
    f.write("\n".join(rows) + "\n")
print(f"raw figures: {raw}")
EOF
