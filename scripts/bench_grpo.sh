#!/usr/bin/env bash
# Times one full GRPO iteration (sampling, scoring, update) of the default model in reinforge
# and in plain PyTorch (scripts/bench_grpo.py), same shapes and thread count, in one run, and
# prints the ratio. Usage: scripts/bench_grpo.sh [ITERATIONS] [THREADS]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
cd "$root"
iters="${1:-10}"
threads="${2:-1}"
cargo build --release --locked -p reinforge >&2
out="$(mktemp -d)"
# Alternate the two twice so neither always runs on a warmer or quieter machine.
for round in 1 2; do
  target/release/reinforge bench --iterations "$iters" --set "threads=$threads" > "$out/rust$round.json"
  .venv/bin/python scripts/bench_grpo.py --iterations "$iters" --threads "$threads" > "$out/torch$round.json"
done
.venv/bin/python - "$out" <<'PY'
import json, statistics, sys, pathlib
d = pathlib.Path(sys.argv[1])
load = lambda n: [json.loads((d / f"{n}{r}.json").read_text()) for r in (1, 2)]
rust, torch = load("rust"), load("torch")
med = lambda runs, key: statistics.median(x for r in runs for x in ([r[key]] if key != "iteration_s" else r[key]))
r, t = med(rust, "iteration_s"), med(torch, "iteration_s")
print(f"shapes: {rust[0]['prompts']} prompts x {rust[0]['generations']} samples x {rust[0]['completion_tokens']} tokens, threads {rust[0]['threads']}")
print(f"{'':12} {'iteration':>10} {'sampling':>10} {'update':>10}")
for name, runs in (("reinforge", rust), (torch[0]["implementation"], torch)):
    print(f"{name:12} {med(runs, 'iteration_s'):9.3f}s {med(runs, 'median_sample_s'):9.3f}s {med(runs, 'median_update_s'):9.3f}s")
print(f"ratio reinforge / pytorch (median iteration): {r / t:.3f}")
PY
