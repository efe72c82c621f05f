#!/usr/bin/env bash
# Creates the virtual environment DIR (if missing) so that it sees the project's .venv packages
# (torch, transformers, numpy ...) behind its own: a `.pth` file appends .venv's site-packages
# to its path. pip then counts those as installed, so a reference environment (TRL, the tinker
# SDK) installs only what .venv lacks instead of a second torch (about 4 GB with the CUDA
# wheel's nvidia packages, docs/ci.md); a pin that differs from .venv's (the cookbook's older
# transformers) is installed into DIR and shadows .venv's copy there.
# Usage: scripts/linked_venv.sh DIR      (after scripts/setup.sh)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${1:?usage: scripts/linked_venv.sh DIR}"
base="$root/.venv/bin/python"
[ -x "$base" ] || { echo "error: $base not found: run scripts/setup.sh first" >&2; exit 1; }
[ -x "$venv/bin/python" ] || "${PYTHON:-python3}" -m venv "$venv"
site() { "$1" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
echo "$(site "$base")" >"$(site "$venv/bin/python")/reinforge-project-venv.pth"
