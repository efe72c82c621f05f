#!/usr/bin/env bash
# Seconds per AdamW step of reinforge's optimizer against torch.optim.AdamW (fused, foreach,
# single-tensor) in Python, same machine, same SmolLM2-135M parameter shapes, same thread count,
# alternating ROUNDS times; prints each line and the ratio reinforge / torch per round.
#
# Usage: scripts/bench_adamw.sh [ROUNDS]     (default 3; THREADS=2, ITERS=10 steps per run)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
rounds="${1:-3}"
bash scripts/setup.sh
cargo build --release --locked -p reinforge-torch --example adamw_bench >&2
out="$(mktemp)"
for ((i = 0; i < rounds; i++)); do
  "$root/target/release/examples/adamw_bench" | tee -a "$out"
  "$root/.venv/bin/python" scripts/bench_adamw.py | tee -a "$out"
done
python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by = {}
for r in rows:
    by.setdefault(r["impl"], []).append(r["median_s"])
ours = statistics.median(by.pop("reinforge"))
for name, ts in by.items():
    print(f"reinforge / {name}: {ours / statistics.median(ts):.2f} (medians of {len(ts)} rounds: {ours:.4f} s vs {statistics.median(ts):.4f} s)")
PY
rm -f "$out"
