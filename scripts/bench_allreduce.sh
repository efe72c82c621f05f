#!/usr/bin/env bash
# All-reduce bandwidth of reinforge's c10d binding against torch.distributed in Python, same
# machine, same Gloo, same sizes (1, 4, 16, 64 MiB of float32), alternating ROUNDS times.
# Each side runs WORLD ranks (one process each, torchrun's variables) and reports the median
# time per all-reduce and the bus bandwidth 2(n-1)/n·bytes/s; then the ratio per size.
#
# Usage: scripts/bench_allreduce.sh [WORLD] [ROUNDS]     (defaults: 2 2; ITERS=20 per size)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
world="${1:-2}"
rounds="${2:-2}"
bash scripts/setup.sh
cargo build --release --locked -p reinforge-torch --example allreduce_bench >&2
bin="$root/target/release/examples/allreduce_bench"
out="$(mktemp)"
ranks() { # COMMAND...: WORLD ranks of COMMAND on a fresh port; rank 0's output appended
  local port
  port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  local pids=()
  for ((r = 1; r < world; r++)); do
    RANK=$r LOCAL_RANK=$r WORLD_SIZE=$world MASTER_ADDR=127.0.0.1 MASTER_PORT=$port OMP_NUM_THREADS=1 "$@" >/dev/null &
    pids+=($!)
  done
  RANK=0 LOCAL_RANK=0 WORLD_SIZE=$world MASTER_ADDR=127.0.0.1 MASTER_PORT=$port OMP_NUM_THREADS=1 "$@" >>"$out"
  wait "${pids[@]}"
}
for ((i = 0; i < rounds; i++)); do
  ranks "$bin"
  ranks "$root/.venv/bin/python" scripts/bench_allreduce.py
done
python3 - "$out" <<'PY'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = {}
for r in rows:
    by.setdefault((r["bytes"], r["impl"]), []).append(r["median_s"])
print(f"{'MiB':>5} {'reinforge ms':>13} {'torch.dist ms':>14} {'ratio':>6} {'reinforge GB/s':>15} {'torch GB/s':>11}")
for b in sorted({k[0] for k in by}):
    ours = statistics.median(by[(b, "reinforge")])
    ref = statistics.median(by[(b, "torch.distributed")])
    w = rows[0]["world"]
    bw = lambda s: 2 * (w - 1) / w * b / s / 1e9
    print(f"{b >> 20:>5} {ours*1e3:>13.2f} {ref*1e3:>14.2f} {ours/ref:>6.2f} {bw(ours):>15.3f} {bw(ref):>11.3f}")
PY
rm -f "$out"
