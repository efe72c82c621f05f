#!/usr/bin/env bash
# Runs the default experiment for several seeds and tabulates their summary.json files.
# Usage: scripts/seeds.sh [SEED ...]   (default: 0 1 2). Runs go to runs/default-seed<N>;
# an existing run directory is reused as is.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
cd "$root"
cargo build --release --locked -p reinforge >&2
seeds=("$@")
[ ${#seeds[@]} -gt 0 ] || seeds=(0 1 2)
for s in "${seeds[@]}"; do
  if [ ! -f "runs/default-seed$s/summary.json" ]; then
    start=$(date +%s)
    target/release/reinforge train --set "seed=$s"
    echo "seed $s: $(( $(date +%s) - start )) s wall" >&2
  fi
done
.venv/bin/python - "${seeds[@]}" <<'PY'
import json, sys
print("| seed | pass@1 SFT | pass@1 RL | gain | best pattern | share SFT | share RL | success SFT (best/other) | success RL (best/other) | SFT s | GRPO s | eval s |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for s in sys.argv[1:]:
    d = json.load(open(f"runs/default-seed{s}/summary.json"))
    b = d["best_pattern"]; o = "direct" if b == "columns" else "columns"
    f = lambda v: "–" if v is None else f"{v:.3f}"
    print(f"| {s} | {d['pass_at_1_sft']:.3f} | {d['pass_at_1_rl']:.3f} | {d['pass_at_1_gain']:+.3f} | {b} | "
          f"{d['best_pattern_share_sft']:.3f} | {d['best_pattern_share_rl']:.3f} | "
          f"{f(d['success_rate_sft'][b])}/{f(d['success_rate_sft'][o])} | {f(d['success_rate_rl'][b])}/{f(d['success_rate_rl'][o])} | "
          f"{d['sft_seconds']:.0f} | {d['grpo_seconds']:.0f} | {d['eval_seconds']:.0f} |")
PY
