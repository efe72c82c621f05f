#!/usr/bin/env bash
# Sets everything up (first run only), fetches the real model, builds, and runs every test of
# the workspace.
# Tests build in the release profile so they share the build of scripts/run.sh.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
cd "$root"
# The real model of the real-model tests (skipped only when the registry is unreachable).
"$root/scripts/real_model.sh" >/dev/null
exec cargo test --workspace --release --locked "$@"
