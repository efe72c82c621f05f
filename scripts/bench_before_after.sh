#!/usr/bin/env bash
# Throughput of /v1/verify and /v1/completions under two builds, alternated on this machine
# (issue 24: the security changes must keep both within 5% of before).
#
# /v1/verify: the `reinforge-serve` binary of each build under the `loadgen` example (as
# scripts/bench_serve.sh runs it; the client is the same binary for both builds); reports
# requests/s. /v1/completions: scripts/bench_policy_serve.sh with REINFORGE set to each build's
# `reinforge`; reports generated tokens/s. Each round runs old then new, the next new then old.
#
# Usage: scripts/bench_before_after.sh OLD_TARGET_DIR NEW_TARGET_DIR MODEL_DIR
# Env: ROUNDS (2), ROUTES ("verify completions"), VERIFY_S (20), COMPLETIONS_S (20),
#      CONNECTIONS (8), CONCURRENCY (8), MAX_TOKENS (32)
# Both target dirs must hold release builds of the binaries and the loadgen example
# (cargo build --release --workspace --all-targets).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OLD="${1:?usage: OLD_TARGET_DIR NEW_TARGET_DIR MODEL_DIR}"
NEW="${2:?usage: OLD_TARGET_DIR NEW_TARGET_DIR MODEL_DIR}"
MODEL="${3:?usage: OLD_TARGET_DIR NEW_TARGET_DIR MODEL_DIR}"
ROUNDS="${ROUNDS:-2}"
LOADGEN="$NEW/release/examples/loadgen"

# Requests/s of /v1/verify against TARGET's reinforge-serve.
verify_rps() {
  local log url server
  log="$(mktemp)"
  "$1/release/reinforge-serve" --port 0 --no-sandbox --workers 2 2>"$log" &
  server=$!
  for _ in $(seq 100); do
    url="$(grep -o 'http://[0-9.:]*' "$log" | head -1 || true)"
    [ -n "$url" ] && break
    sleep 0.1
  done
  "$LOADGEN" --url "$url" --route verify --connections "${CONNECTIONS:-8}" \
    --duration-s "${VERIFY_S:-20}" --interval-s "${VERIFY_S:-20}" --pid "$server" 2>/dev/null |
    python3 -c 'import json,sys; r=json.load(sys.stdin); print("%.1f %d" % (r["requests_per_s"], r["errors"]))'
  kill -TERM "$server"; wait "$server" || true
  rm -f "$log"
}

# Generated tokens/s of /v1/completions against TARGET's reinforge.
completions_tps() {
  REINFORGE="$1/release/reinforge" CONCURRENCY="${CONCURRENCY:-8}" THREADS=1 \
    "$ROOT/scripts/bench_policy_serve.sh" "$MODEL" "${COMPLETIONS_S:-20}" "${MAX_TOKENS:-32}" \
    2>/dev/null | python3 -c '
import json, sys
text = sys.stdin.read()
r = json.loads(text[:text.index("\n|")])
l = r["levels"][0]
print("%.1f %d" % (l["tokens_per_s"], l["errors"]))'
}

echo "| round | build | /v1/verify req/s (errors) | /v1/completions tokens/s (errors) |"
echo "|---|---|---|---|"
for round in $(seq "$ROUNDS"); do
  order="old new"
  [ $((round % 2)) -eq 0 ] && order="new old"
  for build in $order; do
    dir="$OLD"; [ "$build" = new ] && dir="$NEW"
    rps=- verr=- tps=- terr=-
    case " ${ROUTES:-verify completions} " in *" verify "*) read -r rps verr < <(verify_rps "$dir") ;; esac
    case " ${ROUTES:-verify completions} " in *" completions "*) read -r tps terr < <(completions_tps "$dir") ;; esac
    echo "| $round | $build | $rps ($verr) | $tps ($terr) |"
  done
done
