#!/usr/bin/env python3
"""Benchmark: reinforge-verify vs Math-Verify (PyPI math-verify) on the same inputs, same run.

Builds a JSONL of MATH-style responses from the fixtures (each hardverify answer wrapped
in a short worked response ending in \\boxed{...}, plus the math-verify test cases), runs
`reinforge-verify` on it (timing from its own per-line `micros` and process CPU time), then runs
math_verify.parse/verify on the same gold/pred pairs in this process (single thread), and prints
checks per CPU-second, p50/p99/max latency and the throughput ratio.
"""
import json, os, random, resource, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.environ.get("REINFORGE_VERIFY_DATA", os.path.join(ROOT, "fixtures", "data", "verify"))
BIN = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release", "reinforge-verify")
OUT = os.environ.get("BENCH_DIR", "/tmp/bench_verify")
REPEAT = int(os.environ.get("BENCH_REPEAT", "3"))
os.makedirs(OUT, exist_ok=True)

FILLER = ("We first simplify the expression. Multiplying both sides by the denominator gives a "
          "polynomial equation, which we solve and check against the constraints. ")


def cases():
    rnd = random.Random(0)
    out = []
    for line in open(os.path.join(DATA, "hardverify-math.jsonl")):
        d = json.loads(line)
        resp = FILLER * rnd.randint(2, 8) + "Therefore the answer is $\\boxed{" + d["pred"] + "}$."
        out.append({"id": d["id"], "gold": d["gold"], "pred": resp})
    for line in open(os.path.join(DATA, "math-verify-tests.jsonl")):
        d = json.loads(line)
        if "options" not in d:
            out.append({"id": d["id"], "gold": d["gold"], "pred": d["pred"]})
    return out * REPEAT


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(round((len(v) - 1) * q)))]


def main():
    cs = cases()
    inp = os.path.join(OUT, "cases.jsonl")
    with open(inp, "w") as f:
        for i, c in enumerate(cs):
            c = dict(c, id=f"{c['id']}#{i}")
            f.write(json.dumps(c) + "\n")
    outp = os.path.join(OUT, "verdicts.jsonl")
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([BIN, "--input", inp, "--output", outp, "--quiet"], check=True)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    rust_cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    lat = [json.loads(l)["micros"] for l in open(outp)]
    rust_tput = len(lat) / rust_cpu
    print(f"reinforge-verify: {len(lat)} checks, {rust_cpu:.3f} CPU s (process, incl. start-up), "
          f"{rust_tput:.0f} checks/CPU-s; p50 {pct(lat, .5)} us, p99 {pct(lat, .99)} us, max {max(lat)} us")

    from math_verify import parse, verify  # noqa: E402
    mv_lat = []
    c0 = time.process_time()
    for c in cs:
        t = time.perf_counter()
        try:
            verify(parse(c["gold"]), parse(c["pred"]))
        except Exception:
            pass
        mv_lat.append(int((time.perf_counter() - t) * 1e6))
    mv_cpu = time.process_time() - c0
    mv_tput = len(cs) / mv_cpu
    print(f"math-verify:      {len(cs)} checks, {mv_cpu:.3f} CPU s, {mv_tput:.0f} checks/CPU-s; "
          f"p50 {pct(mv_lat, .5)} us, p99 {pct(mv_lat, .99)} us, max {max(mv_lat)} us")
    print(f"throughput ratio reinforge/math-verify: {rust_tput / mv_tput:.1f}x")


if __name__ == "__main__":
    main()
