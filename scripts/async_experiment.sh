#!/usr/bin/env bash
# Asynchronous rollouts on the default experiment: for each seed, SFT once (a run with
# rl.steps = 0), then the RL phase three times from that same SFT checkpoint, with
# rollout.max_staleness = 0 (synchronous), 1 and 2, each followed by the held-out evaluation.
# Prints final pass@1 per seed and k, and the mean wall-clock per RL step.
# Usage: scripts/async_experiment.sh [SEEDS (default "0 1 2")] [KS (default "0 1 2")]
# Env: REINFORGE (binary, default target/release/reinforge), OUT (default runs/async),
#      EXTRA (more --set arguments for every run), STEPS (RL steps, default 30),
#      RL_SET (space-separated section.key=TOML-value pairs set in each RL run's config, e.g.
#      'rl.recompute_old_logprobs=true rl.tis="token"'), TAG (suffix of the RL run names).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BIN="${REINFORGE:-$ROOT/target/release/reinforge}"
OUT="${OUT:-$ROOT/runs/async}"
SEEDS="${1:-0 1 2}"
KS="${2:-0 1 2}"
read -r -a EXTRA_ARGS <<< "${EXTRA:-}"
mkdir -p "$OUT"
# RL steps of each run (the default experiment's rl.steps).
STEPS="${STEPS:-30}"
for seed in $SEEDS; do
  base="$OUT/seed$seed-sft"
  if [ ! -f "$base/eval_sft.json" ]; then
    rm -rf "$base"
    "$BIN" train --set runs_dir="$OUT" --set name="seed$seed-sft" --set seed="$seed" \
      --set rl.steps=0 "${EXTRA_ARGS[@]}" > "$base.log" 2>&1
  fi
  for k in $KS; do
    run="$OUT/seed$seed-k$k${TAG:-}"
    rm -rf "$run"
    cp -r "$base" "$run"
    rm -f "$run/eval_rl.json" "$run/summary.json" "$run/report.md" "$run/metrics.jsonl"
    python3 - "$run/config.toml" "$STEPS" "$k" ${RL_SET:-} <<'PY'
import re, sys
path, steps, k = sys.argv[1], sys.argv[2], sys.argv[3]
text = open(path).read()
def set_key(text, section, key, value):
    head = f"[{section}]\n"
    start = text.index(head) + len(head)
    end = text.find("\n[", start)
    end = len(text) if end < 0 else end
    body, n = re.subn(rf"(?m)^{key} = .*$", f"{key} = {value}", text[start:end])
    assert n == 1, (section, key)
    return text[:start] + body + text[end:]
text = set_key(text, "grpo", "steps", steps)
text = set_key(text, "rollout", "max_staleness", k)
for pair in sys.argv[4:]:
    key, value = pair.split("=", 1)
    section, name = key.rsplit(".", 1)
    text = set_key(text, section, name, value)
open(path, "w").write(text)
PY
    "$BIN" train --resume "$run" > "$run.log" 2>&1
  done
done
python3 - "$OUT" "$SEEDS" "$KS" "${TAG:-}" <<'PY'
import json, statistics, sys
out, seeds, ks, tag = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), sys.argv[4]
rows = {}
for k in ks:
    for s in seeds:
        run = f"{out}/seed{s}-k{k}{tag}"
        p1 = json.load(open(f"{run}/eval_rl.json"))["pass_at_1"]
        steps = [json.loads(l) for l in open(f"{run}/metrics.jsonl")]
        step_s = statistics.mean(m["timing/step_s"] for m in steps)
        rows.setdefault(k, []).append((s, p1, step_s))
sft = {s: json.load(open(f"{out}/seed{s}-sft/eval_sft.json"))["pass_at_1"] for s in seeds}
lines = ["| max_staleness | " + " | ".join(f"seed {s} pass@1" for s in seeds) + " | mean | spread (max-min) | s/step |", "|" + "---|" * (len(seeds) + 4)]
lines.append("| SFT only | " + " | ".join(f"{sft[s]:.3f}" for s in seeds) + f" | {statistics.mean(sft.values()):.3f} | | |")
for k, r in rows.items():
    p = [x[1] for x in r]
    lines.append(f"| {k} | " + " | ".join(f"{x:.3f}" for x in p) + f" | {statistics.mean(p):.3f} | {max(p)-min(p):.3f} | {statistics.mean(x[2] for x in r):.3f} |")
table = "\n".join(lines)
print(table)
open(f"{out}/summary{tag}.md", "w").write(table + "\n")
json.dump(rows, open(f"{out}/summary{tag}.json", "w"), indent=1)
PY
