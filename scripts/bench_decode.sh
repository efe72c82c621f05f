#!/usr/bin/env bash
# Decoding on SmolLM2-135M-Instruct (scripts/real_model.sh), CPU, float32, greedy, no EOS stop:
# `reinforge generate`, the trainer's sampler (in-process, crates/reinforge-torch/examples/
# decode_bench.rs) and `reinforge serve` against transformers' `generate` on the same 32
# chat prompts x 128 new tokens, alternated ROUNDS times in one run (medians and their ratios),
# then the ms per step of the first and last 32 of 256 new tokens for reinforge's sampler
# (crates/reinforge-torch/examples/decode_bench.rs) and transformers. The server (one per round,
# its start and model load untimed) is timed in two forms of /v1/chat/completions: one request
# with n = 32 for the first prompt ("reinforge serve n=32"), and 32 concurrent clients, one
# request each ("reinforge serve 32 clients"). Records the load average beside every
# measurement: compare numbers within one run only.
#
# Usage: scripts/bench_decode.sh [OUT_JSONL]   (default /tmp/bench_decode.jsonl; a run cut
# short is reported by: .venv/bin/python scripts/bench_decode.py report OUT_JSONL)
# Env: ROWS (32: also the server's n and client count), NEW_TOKENS (128), LONG_TOKENS (256),
#      ROUNDS (3), LONG_ROUNDS (1), COMPARE_SDPA (0), SERVE (1; 0 skips the serve cases),
#      THREADS (2).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
out="${1:-/tmp/bench_decode.jsonl}"
# The model; real_model.sh also sets up .venv (scripts/setup.sh).
model="$(scripts/real_model.sh)" || { echo "error: scripts/real_model.sh failed: cannot obtain SmolLM2-135M-Instruct" >&2; exit 1; }
if [ ! -f "$model/config.json" ]; then
  [ -f .cache/models/UNREACHABLE ] && cat .cache/models/UNREACHABLE >&2
  echo "error: no SmolLM2-135M-Instruct checkpoint at $model" >&2
  exit 1
fi
# The whole workspace (a no-op when built): building one library alone unifies features
# differently and rebuilds its dependents.
cargo build --release --locked --workspace --all-targets >&2
echo "uptime at start: $(uptime)" >&2
.venv/bin/python scripts/bench_decode.py run "$model" "$root/target/release/reinforge" \
  "$root/target/release/examples/decode_bench" "$out"
echo "uptime at end: $(uptime)"
