#!/usr/bin/env bash
# Idempotent set-up shared by scripts/run.sh and scripts/test.sh.
#
# Installs libtorch from PyPI (torch==2.11.0, the version tch 0.24 is built against) into the
# project-local, git-ignored virtual environment .venv, and points .venv/libtorch at it, which is
# where .cargo/config.toml tells torch-sys to look and where binaries' rpath finds it at run time.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

TORCH_VERSION="2.11.0"
PYTHON="${PYTHON:-python3}"
venv="$root/.venv"
# Bump the suffix when the installed packages change, so existing environments update.
stamp="$venv/.reinforge-setup-torch$TORCH_VERSION-6"

if ! command -v cargo >/dev/null 2>&1; then
  echo "error: cargo not found; install a Rust toolchain (rustup) first" >&2
  exit 1
fi

if [ ! -f "$stamp" ]; then
  echo "==> setting up $venv with torch==$TORCH_VERSION (first run only)" >&2
  if ! "$PYTHON" -c 'import venv, ensurepip' >/dev/null 2>&1; then
    echo "error: $PYTHON lacks venv/ensurepip (on Debian: apt-get install python3-venv)" >&2
    exit 1
  fi
  [ -x "$venv/bin/python" ] || "$PYTHON" -m venv "$venv"
  # numpy and safetensors are for the side-by-side PyTorch benchmark script; transformers and
  # peft are the references the checkpoint tests compare against (a checkpoint reinforge saves
  # must load back in them); gguf lets transformers convert the real model (scripts/real_model.sh)
  # and reasoning-gym generates the real tasks (scripts/reasoning_gym_data.py); the official
  # openai client checks `reinforge serve --model` (scripts/clients/openai_policy_client.py).
  # The product never imports Python. nvidia-cuda-crt and nvidia-cuda-cccl are CUDA 13.0's
  # header-only packages (the torch wheel's runtime package lacks crt/ and nv/target), which
  # reinforge-torch's build.rs needs to compile NCCL's process group; on a machine without the
  # CUDA wheel they are harmless headers.
  "$venv/bin/pip" install --disable-pip-version-check --no-cache-dir -q "torch==$TORCH_VERSION" numpy safetensors \
    "transformers==5.23.0" "peft==0.21.2" "gguf==0.19.0" "reasoning-gym==0.1.25" "openai==3.51.0" \
    "nvidia-cuda-crt==13.0.88" "nvidia-cuda-cccl==13.0.85"
  touch "$stamp"
fi

site="$("$venv/bin/python" -c 'import torch, os; print(os.path.dirname(torch.__file__))')"
# Re-linked only when it changed: scripts/test.sh runs this again (through real_model.sh) while
# cargo builds against the link, and `ln -sfn` removes it for a moment.
[ "$(readlink "$venv/libtorch" 2>/dev/null)" = "$site" ] || ln -sfn "$site" "$venv/libtorch"

# Gloo's headers, which libtorch's c10d headers include but the torch wheel does not ship:
# reinforge-torch's build.rs compiles its torch.distributed shim against them (the Gloo code
# itself is libtorch's). Debian's libgloo-dev is unpacked into .venv/gloo, headers only, with
# no root needed; without it the build works and distributed training says how to enable it.
gloo="$venv/gloo"
if [ ! -f "$gloo/usr/include/gloo/context.h" ] && [ ! -f /usr/include/gloo/context.h ]; then
  if command -v apt-get >/dev/null 2>&1 && command -v dpkg-deb >/dev/null 2>&1; then
    tmp="$(mktemp -d)"
    if (cd "$tmp" && apt-get download libgloo-dev >/dev/null 2>&1) ||
       { [ "$(id -u)" = 0 ] && apt-get update -qq >/dev/null 2>&1 &&
         (cd "$tmp" && apt-get download libgloo-dev >/dev/null 2>&1); }; then
      mkdir -p "$gloo" && dpkg-deb -x "$tmp"/libgloo-dev_*.deb "$gloo"
      echo "==> Gloo headers unpacked into $gloo (torch.distributed)" >&2
    else
      echo "warning: could not fetch Debian's libgloo-dev: building without torch.distributed" >&2
    fi
    rm -rf "$tmp"
  else
    echo "warning: no apt-get/dpkg-deb for Gloo's headers: building without torch.distributed (set REINFORGE_GLOO_INCLUDE)" >&2
  fi
fi
