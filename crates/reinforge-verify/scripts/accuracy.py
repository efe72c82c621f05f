#!/usr/bin/env python3
"""Accuracy and false-positive rate of reinforge-verify (before/after) and Math-Verify on the
hand-labelled fixtures: SmolLM2-135M-Instruct's real answers and the new number/choice classes.

Usage: accuracy.py --after BIN [--before BIN] [--data DIR]
  BIN: a `reinforge-verify` binary (cargo build --release -p reinforge-verify --features cli).
Run it with the Python of .venv-bench (math-verify==0.8.0, see scripts/bench_verify.sh) to get the
Math-Verify column; without math_verify importable that column is left out.

Prints a Markdown table. accuracy = verdicts that match the label / cases; FPR = credited but
labelled wrong / all labelled wrong; recall = credited and labelled right / all labelled right.
Math-Verify is called as scripts/bench_verify.py calls it: verify(parse(gold), parse(pred)) with
its default extraction (LaTeX + expression), the same defaults reinforge's reward uses.
"""
import argparse, json, os, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))


def load(path):
    return [json.loads(l) for l in open(path, encoding="utf-8") if l.strip()]


def sets(data):
    """(name, cases) for every reported subset."""
    real = load(os.path.join(data, "smollm2-arith-real.jsonl"))
    new = load(os.path.join(data, "new-classes.jsonl"))
    out = [("real outputs: all", real)]
    for split in ["tuning", "held_out"]:
        out.append((f"real outputs: {split}", [c for c in real if c["split"] == split]))
    out.append(("new classes: all", new))
    for cls in sorted({c["class"] for c in new}):
        out.append((f"new classes: {cls}", [c for c in new if c["class"] == cls]))
    return out


def run_binary(binary, cases):
    """Verdicts (id -> credited) of a reinforge-verify binary, default options."""
    with tempfile.TemporaryDirectory() as d:
        inp, outp = os.path.join(d, "in.jsonl"), os.path.join(d, "out.jsonl")
        with open(inp, "w", encoding="utf-8") as f:
            for c in cases:
                f.write(json.dumps({"id": c["id"], "gold": c["gold"], "pred": c["pred"]}) + "\n")
        subprocess.run([binary, "--input", inp, "--output", outp, "--quiet"], check=True)
        return {json.loads(l)["id"]: json.loads(l)["correct"] for l in open(outp)}


def run_math_verify(cases):
    """Verdicts of Math-Verify with its defaults; an exception counts as not credited."""
    from math_verify import parse, verify
    out = {}
    for c in cases:
        try:
            out[c["id"]] = bool(verify(parse(c["gold"]), parse(c["pred"])))
        except Exception:
            out[c["id"]] = False
    return out


def scores(cases, verdicts):
    """(accuracy, FPR, recall) with their counts, as strings."""
    agree = sum(verdicts[c["id"]] == c["expected"] for c in cases)
    neg = [c for c in cases if not c["expected"]]
    pos = [c for c in cases if c["expected"]]
    fp = sum(verdicts[c["id"]] for c in neg)
    tp = sum(verdicts[c["id"]] for c in pos)
    frac = lambda a, b: f"{a / b:.3f} ({a}/{b})" if b else "-"
    return frac(agree, len(cases)), frac(fp, len(neg)), frac(tp, len(pos))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--after", required=True)
    ap.add_argument("--before")
    ap.add_argument("--data", default=os.path.join(ROOT, "fixtures", "data", "verify"))
    a = ap.parse_args()
    subsets = sets(a.data)
    every = {c["id"]: c for _, cs in subsets for c in cs}.values()
    verifiers = []
    if a.before:
        verifiers.append(("reinforge before", run_binary(a.before, every)))
    verifiers.append(("reinforge after", run_binary(a.after, every)))
    try:
        verifiers.append(("Math-Verify 0.8.0", run_math_verify(every)))
    except ImportError:
        print("(math_verify not importable: run with .venv-bench/bin/python)", file=sys.stderr)
    print("| set | cases | verifier | accuracy | FPR (credited wrong / all wrong) | recall |")
    print("|---|---|---|---|---|---|")
    for name, cs in subsets:
        for vname, verdicts in verifiers:
            acc, fpr, rec = scores(cs, verdicts)
            print(f"| {name} | {len(cs)} | {vname} | {acc} | {fpr} | {rec} |")


if __name__ == "__main__":
    main()
