#!/usr/bin/env bash
# Times `rank` (Bradley-Terry fit + bootstrap) in Rust against FastChat's formulation (scipy L-BFGS-B,
# multiprocessing bootstrap) and evalica's single fit, on the same synthetic battles, in one run.
# Usage: scripts/bench_rank.sh [N_BATTLES] [N_MODELS] [ROUNDS] [PY_TIMED_ROUNDS]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
N="${1:-1000000}"; M="${2:-100}"; R="${3:-1000}"; PYR="${4:-40}"
WORK="${BENCH_WORK:-$ROOT/target/bench-rank}"
mkdir -p "$WORK"
"$ROOT/scripts/bench_env.sh" >&2
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
(cd "$ROOT" && nice -n 19 cargo build --release -q -p reinforge-eval --example reinforge_eval)
BIN="$CARGO_TARGET_DIR/release/examples/reinforge_eval"
DATA="$WORK/battles-$N-$M.jsonl"
[ -s "$DATA" ] || nice -n 19 "$BIN" gen-battles --output "$DATA" --models "$M" --battles "$N" --seed 0
echo "== rust" >&2
RUST_JSON="$(nice -n 19 /usr/bin/env time -f '%M' -o "$WORK/rust.maxrss" "$BIN" bench-rank --input "$DATA" --rounds "$R")"
echo "== python (FastChat formulation, evalica)" >&2
PY_JSON="$(nice -n 19 "$ROOT/.venv-bench/bin/python" "$ROOT/scripts/bench_rank.py" --input "$DATA" --rounds "$R" --timed-rounds "$PYR")"
"$ROOT/.venv-bench/bin/python" - "$RUST_JSON" "$PY_JSON" "$(cat "$WORK/rust.maxrss" 2>/dev/null || echo 0)" <<'PY'
import json, sys
r, p, rss = json.loads(sys.argv[1]), json.loads(sys.argv[2]), float(sys.argv[3] or 0)
print(json.dumps({"rust": r, "python": p, "rust_max_rss_mib_time": rss / 1024}, indent=1))
fc = p["fastchat_total_extrapolated_s"]
print(f"\nBT fit + {r['rounds']} bootstrap rounds, {r['n_battles']} battles, {r['n_models']} models, {r['threads']} threads")
print(f"  rust (aggregate+fit+bootstrap): {r['total_s']:.2f} s   (+ parse {r['parse_s']:.2f} s)  peak RSS {r['peak_rss_mib']:.0f} MiB")
print(f"  FastChat formulation: {fc:.1f} s (extrapolated from {p['fastchat_bootstrap_timed_rounds']} timed rounds, "
      f"{p['fastchat_bootstrap_per_round_s']*1e3:.0f} ms/round)")
print(f"  speed-up: {fc / r['total_s']:.1f}x (incl. parse: {fc / (r['total_s'] + r['parse_s']):.1f}x)")
print(f"single fit: rust {r['single_fit_incl_aggregation_best_s']*1e3:.1f} ms vs evalica {p['evalica_bradley_terry_best_s']*1e3:.1f} ms"
      f" -> {p['evalica_bradley_terry_best_s']/r['single_fit_incl_aggregation_best_s']:.1f}x; FastChat fit {p['fastchat_single_fit_incl_preprocess_s']*1e3:.0f} ms")
PY
