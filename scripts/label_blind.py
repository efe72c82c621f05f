#!/usr/bin/env python3
"""Labelling helper for fixtures/data/verify/smollm2-blind.jsonl (README.md there has the rules).

  label_blind.py show RAW FROM TO     print samples FROM..TO (inclusive indices) with prompt and gold
  label_blind.py merge RAW LABELS OUT write the fixture: RAW's lines plus the labels of LABELS

RAW is the output of scripts/sample_smollm2_blind.py. LABELS is a tab-separated file, one line per
sample: `id<TAB>stated answer or -<TAB>note (optional)`; `-` means no final answer is stated.
`expected` is computed, never typed: a stated answer that equals the gold as a number.
Never imported by the product.
"""
import json
import sys
from fractions import Fraction


def load(path):
    """The JSON lines of `path`."""
    return [json.loads(l) for l in open(path, encoding="utf-8") if l.strip()]


def show(raw, lo, hi):
    """Print each sample with its prompt and gold, the response between rulers, verbatim."""
    for r in load(raw)[lo:hi + 1]:
        print(f"=== {r['id']} [{r['task']}] gold={r['gold']} prompt={r['prompt']!r}")
        print(r["pred"])
        print("---")


def read_labels(path):
    """id -> (stated answer or None, note) from the tab-separated labels file."""
    out = {}
    for line in open(path, encoding="utf-8"):
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.rstrip("\n").split("\t")
        sid, ans = parts[0].strip(), parts[1].strip()
        note = parts[2].strip() if len(parts) > 2 else ""
        if sid in out:
            sys.exit(f"{sid} labelled twice")
        out[sid] = (None if ans == "-" else ans, note)
    return out


def equal(answer, gold):
    """Whether a stated answer equals the gold as a number (exact rational comparison)."""
    try:
        return Fraction(answer) == Fraction(gold)
    except ValueError:
        return False


def merge(raw, labels, out):
    """Write the labelled fixture; every sample must have exactly one label."""
    lab = read_labels(labels)
    rows = load(raw)
    missing = [r["id"] for r in rows if r["id"] not in lab]
    extra = set(lab) - {r["id"] for r in rows}
    if missing or extra:
        sys.exit(f"unlabelled: {missing}; unknown ids: {sorted(extra)}")
    with open(out, "w", encoding="utf-8") as f:
        for r in rows:
            ans, note = lab[r["id"]]
            r["stated"] = ans is not None
            r["stated_answer"] = ans
            r["expected"] = ans is not None and equal(ans, r["gold"])
            if note:
                r["note"] = note
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    pos = sum(1 for r in load(out) if r["expected"])
    print(f"{out}: {len(rows)} samples, {pos} right, {sum(a is not None for a, _ in lab.values())} stated")


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "show" and len(sys.argv) == 5:
        show(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif cmd == "merge" and len(sys.argv) == 5:
        merge(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        sys.exit(__doc__)
