#!/usr/bin/env bash
# Sets everything up (first run only), builds, and runs the default experiment:
# SFT warm-start, evaluation, GRPO, evaluation, report. Extra arguments go to `reinforge train`.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
cd "$root"
cargo build --release --locked -p reinforge
exec "$root/target/release/reinforge" train "$@"
