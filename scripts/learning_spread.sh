#!/usr/bin/env bash
# The seed-to-seed spread of the changes the binary's learning tests assert (tests/pipeline.rs,
# tests/rollouts.rs; crates/reinforge/tests/common/tiny.rs: `quarter_change`, the mean of a
# metric over the last quarter of the RL steps minus that over the first quarter), over seeds
# 0..SEEDS-1 of each configuration they train and of its null, a run in which the checked thing
# does not learn: the policy frozen (grpo.lr=1e-12) for the reward and the retry game's turns,
# the critic frozen (ppo.critic_lr=1e-12) for PPO's value loss. The nulls' mean and sd are the
# `Null` constants of tiny.rs (REWARD_NULL, VALUE_LOSS_NULL, TURNS_NULL), from which each test's
# margin follows; the learning runs' numbers say how many seeds a test needs. Rerun it when the
# tiny configuration, the step count or the seeding changes. About 3 minutes per seed on 2
# shared cores (7 runs of 80 steps).
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
  "ppo|grpo.algorithm=ppo"
  "async|rollout.max_staleness=2"
  "retry|task.attempts=3"
  "null|grpo.lr=1e-12"
  "ppo-frozen-critic|grpo.algorithm=ppo ppo.critic_lr=1e-12"
  "retry-null|task.attempts=3 grpo.lr=1e-12"
)
for seed in $(seq 0 $((seeds - 1))); do
  for c in "${configs[@]}"; do
    name="${c%%|*}"
    read -ra extra <<<"${c#*|}"
    args=()
    for kv in "${tiny[@]}" "${extra[@]}" "grpo.steps=$steps" "seed=$seed" "runs_dir=$out" "name=$name-$seed"; do
      args+=(--set "$kv")
    done
    target/release/reinforge train "${args[@]}" >"$out/$name-$seed.log" 2>&1 ||
      { cat "$out/$name-$seed.log" >&2; exit 1; }
  done
  echo "seed $seed done" >&2
done
echo "change over $steps steps (last quarter - first quarter), seeds 0..$((seeds - 1)):"
.venv/bin/python - "$out" "$seeds" <<'EOF'
import json, statistics, sys
out, seeds = sys.argv[1], int(sys.argv[2])
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
        sd = statistics.stdev(changes) if len(changes) > 1 else float("nan")
        print(f"  {name:18s} mean {statistics.mean(changes):+.3f}  sd {sd:.3f}  "
              f"min {min(changes):+.3f}  max {max(changes):+.3f}")
EOF
