#!/usr/bin/env python3
"""Checks `stats` point estimates against rliable 1.2.0 on the same matrices and times both.

Generates per-algorithm runs x tasks matrices, writes them as JSONL, runs the Rust `stats`
(JSON output), and compares IQM, mean, median, optimality gap, probability of improvement and the
score-distribution profile with rliable's `metrics.aggregate_*`, `metrics.probability_of_improvement`
and `library.create_performance_profile` point estimates. Prints max |diff| and timings as JSON.
"""
import json, subprocess, sys, tempfile, time, os
import numpy as np
from rliable import metrics, library

binary = sys.argv[1]
rng = np.random.default_rng(0)
algos = {f"algo{i}": rng.beta(2 + i, 3, size=(10, 26)) * 1.3 for i in range(3)}
taus = np.linspace(0.0, 1.3, 27)
with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "scores.jsonl")
    with open(path, "w") as f:
        for a, m in algos.items():
            f.write(json.dumps({"algorithm": a, "scores": m.tolist()}) + "\n")
    t = time.perf_counter()
    out = subprocess.run([binary, "stats", "--input", path, "--format", "json", "--reps", "2000",
                          "--taus", ",".join(repr(float(x)) for x in taus)], check=True, capture_output=True, text=True).stdout
    rust_s = time.perf_counter() - t
rep = json.loads(out)
worst = 0.0
for a in rep["algorithms"]:
    m = algos[a["algorithm"]]
    ref = {"iqm": metrics.aggregate_iqm(m), "mean": metrics.aggregate_mean(m), "median": metrics.aggregate_median(m),
           "optimality_gap": metrics.aggregate_optimality_gap(m, 1.0)}
    for k, v in ref.items():
        worst = max(worst, abs(a[k]["point"] - v))
    prof = library.score_distributions(m, taus)
    worst = max(worst, max(abs(p["point"] - q) for p, q in zip(a["profile"], prof)))
for p in rep["improvement"]:
    worst = max(worst, abs(p["probability"]["point"] - metrics.probability_of_improvement(algos[p["x"]], algos[p["y"]])))
# rliable's own interval estimates (2000 reps) for timing, all algorithms, IQM/mean/median/gap.
agg = lambda x: np.array([metrics.aggregate_iqm(x), metrics.aggregate_mean(x), metrics.aggregate_median(x),
                          metrics.aggregate_optimality_gap(x)])
t = time.perf_counter()
library.get_interval_estimates(algos, agg, reps=2000)
rl_s = time.perf_counter() - t
print(json.dumps({"max_abs_diff_point_estimates": worst, "rust_stats_total_s": rust_s,
                  "rliable_interval_estimates_aggregates_only_s": rl_s}))
