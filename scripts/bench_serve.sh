#!/usr/bin/env bash
# Load test of the reward server over loopback: builds the release `reinforge-serve` binary
# and the `loadgen` example (crates/reinforge-serve/examples/loadgen.rs), starts the server,
# drives POST /v1/verify (one math check per request) and POST /get_reward (a batch of
# samples per request), and prints, per route, requests/s, p50/p90/p99/max latency, errors
# and the server's RSS sampled every interval (JSON, also saved under $OUT_DIR).
#
# Usage: scripts/bench_serve.sh                        # 60 s per route
#        DURATION_S=600 ROUTES=verify scripts/bench_serve.sh   # the 10-minute memory run
# Environment: DURATION_S (60), ROUTES ("verify reward"), CONNECTIONS (8), REWARD_BATCH (16),
#              WORKERS (2), INTERVAL_S (10), CARGO_TARGET_DIR (target), OUT_DIR (runs/bench_serve)
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION_S=${DURATION_S:-60}
ROUTES=${ROUTES:-"verify reward"}
CONNECTIONS=${CONNECTIONS:-8}
REWARD_BATCH=${REWARD_BATCH:-16}
WORKERS=${WORKERS:-2}
INTERVAL_S=${INTERVAL_S:-10}
TARGET=${CARGO_TARGET_DIR:-target}
OUT_DIR=${OUT_DIR:-runs/bench_serve}
mkdir -p "$OUT_DIR"

cargo build --release --locked -p reinforge-serve --features cli --bin reinforge-serve --example loadgen >&2

LOG="$OUT_DIR/server.log"
"$TARGET/release/reinforge-serve" --port 0 --no-sandbox --workers "$WORKERS" 2>"$LOG" &
SERVER=$!
trap 'kill -TERM $SERVER 2>/dev/null || true' EXIT
URL=""
for _ in $(seq 100); do
  URL=$(grep -o 'http://[0-9.:]*' "$LOG" | head -1 || true)
  [ -n "$URL" ] && break
  sleep 0.1
done
[ -n "$URL" ] || { echo "server did not start:"; cat "$LOG"; exit 1; } >&2
echo "server pid $SERVER at $URL; $(nproc) CPU cores shared by server and load generator" >&2

for route in $ROUTES; do
  batch=1
  [ "$route" = reward ] && batch=$REWARD_BATCH
  echo "== $route: batch $batch, $CONNECTIONS connections, ${DURATION_S}s" >&2
  "$TARGET/release/examples/loadgen" --url "$URL" --route "$route" --batch "$batch" \
    --connections "$CONNECTIONS" --duration-s "$DURATION_S" --interval-s "$INTERVAL_S" \
    --pid "$SERVER" | tee "$OUT_DIR/$route.json"
done

kill -TERM "$SERVER"
wait "$SERVER"
trap - EXIT
echo "server stopped cleanly; reports in $OUT_DIR/" >&2
