#!/usr/bin/env bash
# Runs the default experiment over seeds (and presets) and tabulates their summary.json files:
# one row per run, then per preset the mean over seeds with a 95% Student-t interval.
#
# Usage: scripts/seeds.sh [--presets grpo,dapo,...] [--jobs N] [SEED ...]
#   default: preset grpo, seeds 0 1 2 3 4, one run at a time.
# Runs go to runs/seeds/<preset>-seed<N>; a finished run directory is reused as is, so the
# script can be re-run to extend a table. Numbers are only comparable within one machine and
# one build (README: "What is deterministic").
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
presets="grpo"
jobs=1
seeds=()
while [ $# -gt 0 ]; do
  case "$1" in
    --presets) presets="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    -h|--help) sed -n 2,9p "$0"; exit 0 ;;
    *) seeds+=("$1"); shift ;;
  esac
done
[ ${#seeds[@]} -gt 0 ] || seeds=(0 1 2 3 4)
"$root/scripts/setup.sh"
cd "$root"
cargo build --release --locked -p reinforge >&2
bin="${REINFORGE_BIN:-target/release/reinforge}"

one_run() {
  local p="$1" s="$2" name="$1-seed$2"
  [ -f "runs/seeds/$name/summary.json" ] && return 0
  local start; start=$(date +%s)
  if [ -f "runs/seeds/$name/config.toml" ]; then
    "$bin" train --resume "runs/seeds/$name" >"runs/seeds/$name.log" 2>&1
  else
    "$bin" train --set "seed=$s" --set "rl.algorithm=$p" --set runs_dir=runs/seeds \
      --set "name=$name" >"runs/seeds/$name.log" 2>&1
  fi
  echo "$name: $(( $(date +%s) - start )) s wall" >&2
}
export -f one_run
export bin
mkdir -p runs/seeds
IFS=, read -r -a preset_list <<<"$presets"
for p in "${preset_list[@]}"; do for s in "${seeds[@]}"; do echo "$p $s"; done; done |
  xargs -P "$jobs" -L 1 bash -c 'one_run "$0" "$1"'

.venv/bin/python - "$presets" "${seeds[@]}" <<'PY'
import json, math, sys
presets, seeds = sys.argv[1].split(","), sys.argv[2:]
# Two-sided 95% Student-t quantiles t_{0.975, df}, df = 1..30 (standard table values).
T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
        2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
        2.060, 2.056, 2.052, 2.048, 2.045, 2.042]

def interval(xs):
    n = len(xs); m = sum(xs) / n
    if n < 2:
        return m, float("nan")
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1))
    t = T975[min(n - 1, len(T975)) - 1]
    return m, t * sd / math.sqrt(n)

def load(p, s):
    return json.load(open(f"runs/seeds/{p}-seed{s}/summary.json"))

print("| preset | seed | pass@1 SFT | pass@1 RL | gain | best pattern: share SFT -> RL | RL s |")
print("|---|---|---|---|---|---|---|")
for p in presets:
    for s in seeds:
        d = load(p, s)
        print(f"| {p} | {s} | {d['pass_at_1_sft']:.3f} | {d['pass_at_1_rl']:.3f} | "
              f"{d['pass_at_1_gain']:+.3f} | {d['best_pattern']}: {d['best_pattern_share_sft']:.3f} -> {d['best_pattern_share_rl']:.3f} | "
              f"{d['grpo_seconds']:.1f} |")
print()
print(f"Mean over {len(seeds)} seeds ± half-width of the 95% Student-t interval:")
print()
print("| preset | pass@1 SFT | pass@1 RL | gain | RL s |")
print("|---|---|---|---|---|")
for p in presets:
    rows = [load(p, s) for s in seeds]
    cells = []
    for key in ("pass_at_1_sft", "pass_at_1_rl", "pass_at_1_gain", "grpo_seconds"):
        m, h = interval([r[key] for r in rows])
        cells.append(f"{m:.3f} ± {h:.3f}" if key != "grpo_seconds" else f"{m:.1f} ± {h:.1f}")
    print(f"| {p} | " + " | ".join(cells) + " |")
if len(presets) > 1:
    base = presets[0]
    print()
    print(f"Paired by seed (same SFT model), pass@1 after RL minus `{base}`'s, mean ± 95% t half-width:")
    print()
    print(f"| preset | pass@1 RL − {base} | seeds where higher |")
    print("|---|---|---|")
    for p in presets[1:]:
        diffs = [load(p, s)["pass_at_1_rl"] - load(base, s)["pass_at_1_rl"] for s in seeds]
        m, h = interval(diffs)
        print(f"| {p} | {m:+.3f} ± {h:.3f} | {sum(d > 0 for d in diffs)}/{len(diffs)} |")
PY
