#!/usr/bin/env bash
# Times full GRPO iterations (sampling, scoring, update) of the default model in reinforge and
# in plain PyTorch (scripts/bench_grpo.py: the same math written as a researcher would), with
# the same shapes and thread count, in one run, and prints the ratios. Two workloads:
#   fixed: a random model, every completion exactly 48 tokens (identical shapes on both sides);
#   real:  the SFT checkpoint of a default run, completions stop at <eos> as in training.
# Usage: scripts/bench_grpo.sh [ITERATIONS] [THREADS] [CHECKPOINT]
#   CHECKPOINT defaults to runs/default-seed0/checkpoints/sft (made by scripts/run.sh);
#   without one, only the fixed workload runs.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
cd "$root"
iters="${1:-10}"
threads="${2:-1}"
ckpt="${3:-runs/default-seed0/checkpoints/sft}"
cargo build --release --locked -p reinforge >&2
out="$(mktemp -d)"
modes=(fixed)
[ -f "$ckpt/model.safetensors" ] && modes+=(real) || echo "no checkpoint at $ckpt: skipping the real workload" >&2
for mode in "${modes[@]}"; do
  extra=()
  [ "$mode" = real ] && extra=(--checkpoint "$ckpt")
  # Alternate the two twice so neither always runs on a warmer or quieter machine.
  for round in 1 2; do
    target/release/reinforge bench --iterations "$iters" --set "threads=$threads" "${extra[@]}" > "$out/$mode-rust$round.json"
    .venv/bin/python scripts/bench_grpo.py --iterations "$iters" --threads "$threads" "${extra[@]}" > "$out/$mode-torch$round.json"
  done
done
.venv/bin/python - "$out" "${modes[@]}" <<'PY'
import json, statistics, sys, pathlib
d = pathlib.Path(sys.argv[1])
for mode in sys.argv[2:]:
    load = lambda n: [json.loads((d / f"{mode}-{n}{r}.json").read_text()) for r in (1, 2)]
    rust, torch = load("rust"), load("torch")
    it = lambda runs: statistics.median(x for r in runs for x in r["iteration_s"])
    med = lambda runs, k: statistics.median(r[k] for r in runs)
    print(f"[{mode}] {rust[0]['prompts']} prompts x {rust[0]['generations']} samples, at most {rust[0]['completion_tokens']} tokens, threads {rust[0]['threads']}")
    print(f"  {'':22} {'iteration':>10} {'sampling':>10} {'update':>10} {'mean len':>9}")
    for name, runs in (("reinforge", rust), (torch[0]["implementation"], torch)):
        print(f"  {name:22} {it(runs):9.3f}s {med(runs, 'median_sample_s'):9.3f}s {med(runs, 'median_update_s'):9.3f}s {med(runs, 'mean_completion_tokens'):9.1f}")
    if mode == "real":
        print(f"  reinforge skipped {100 * med(rust, 'rows_skipped_frac'):.1f}% of rows (zero advantage)")
    print(f"  ratio reinforge / pytorch (median iteration): {it(rust) / it(torch):.3f}")
PY
