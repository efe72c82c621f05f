#!/usr/bin/env bash
# Runs/s of a trivial Python program in the reinforge sandbox (sequential and threaded) vs plain
# `python -c pass` subprocesses. Needs root (or unprivileged user namespaces).
# Usage: scripts/bench_sandbox.sh [runs] [threads...]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo run --release -q -p reinforge-sandbox --example bench_sandbox -- "$@"
