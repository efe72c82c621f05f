#!/usr/bin/env bash
# Sets everything up (first run only), builds, and runs every test of the workspace.
# Tests build in the release profile so they share the build of scripts/run.sh.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
cd "$root"
exec cargo test --workspace --release --locked "$@"
