#!/usr/bin/env python3
"""Recall and false-positive rate, with Wilson 95% intervals, of reinforge-verify and Math-Verify
on the blind SmolLM2 set (fixtures/data/verify/smollm2-blind.jsonl, labelled before the rules it
measures; see the README there).

Usage: blind_rates.py --bin BIN [--data FILE] [--misses]
  BIN: a `reinforge-verify` binary (a workspace release build has target/release/reinforge-verify).
Run it with a Python that has math-verify==0.8.0 (.venv-bench, see accuracy.sh) to get the
Math-Verify rows; without math_verify importable they are left out. --misses lists every case
where a verifier and the label differ.

recall = credited and labelled right / all labelled right; FPR = credited but labelled wrong / all
labelled wrong. Math-Verify is called as accuracy.py calls it: verify(parse(gold), parse(pred)) with
its default extraction; an exception counts as not credited.
"""
import argparse
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from accuracy import ROOT, load, run_binary, run_math_verify  # noqa: E402


def wilson(k, n, z=1.96):
    """Wilson score interval (low, high) of k successes in n trials."""
    if n == 0:
        return (float("nan"), float("nan"))
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def rate(k, n):
    """`0.xxx (k/n) [lo, hi]` with the Wilson interval."""
    lo, hi = wilson(k, n)
    return f"{k / n:.3f} ({k}/{n}) [{lo:.3f}, {hi:.3f}]"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--data", default=os.path.join(ROOT, "fixtures", "data", "verify", "smollm2-blind.jsonl"))
    ap.add_argument("--misses", action="store_true")
    a = ap.parse_args()
    cases = load(a.data)
    verifiers = [("reinforge", run_binary(a.bin, cases))]
    try:
        verifiers.append(("Math-Verify 0.8.0", run_math_verify(cases)))
    except ImportError:
        print("(math_verify not importable: run with .venv-bench/bin/python)", file=sys.stderr)
    pos = [c for c in cases if c["expected"]]
    neg = [c for c in cases if not c["expected"]]
    print("| verifier | recall [Wilson 95%] | FPR [Wilson 95%] |")
    print("|---|---|---|")
    for name, v in verifiers:
        tp = sum(v[c["id"]] for c in pos)
        fp = sum(v[c["id"]] for c in neg)
        print(f"| {name} | {rate(tp, len(pos))} | {rate(fp, len(neg))} |")
    if a.misses:
        for name, v in verifiers:
            for c in cases:
                if v[c["id"]] != c["expected"]:
                    print(f"{name}: {c['id']} expected={c['expected']} gold={c['gold']} pred={c['pred']!r}")


if __name__ == "__main__":
    main()
