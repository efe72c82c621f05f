"""Writes the config.json that transformers' own configuration classes produce for every model
family reinforge implements, into fixtures/hf/configs/transformers-<version>/<family>.json, so a
test can check that reinforge loads what transformers writes. Run it with each transformers
version to cover (4.x writes `rope_theta`/`rope_scaling` and every generation default; 5.x
writes `rope_parameters`). Only configuration classes are used: no torch needed.

Usage: python make_config_fixtures.py OUT_ROOT
"""

import json
import pathlib
import sys

import transformers
from transformers import LlamaConfig, MistralConfig, Qwen2Config

CLASSES = {"llama": LlamaConfig, "qwen2": Qwen2Config, "mistral": MistralConfig}
try:
    from transformers import Qwen3Config

    CLASSES["qwen3"] = Qwen3Config
except ImportError:  # transformers < 4.51 has no Qwen3
    pass

ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
                 "qwen3": "Qwen3ForCausalLM", "mistral": "MistralForCausalLM"}


def main() -> None:
    out = pathlib.Path(sys.argv[1]) / f"transformers-{transformers.__version__}"
    out.mkdir(parents=True, exist_ok=True)
    for family, cls in CLASSES.items():
        cfg = cls(architectures=[ARCHITECTURES[family]])
        # use_diff=False writes every attribute, the superset of what save_pretrained writes
        # (older transformers versions wrote all of them, and Hub configs carry them).
        (out / f"{family}.json").write_text(cfg.to_json_string(use_diff=False))
        print(out / f"{family}.json")


if __name__ == "__main__":
    main()
