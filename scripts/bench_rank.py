#!/usr/bin/env python3
"""Reference timings for `reinforge rank`, measured in the same run as the Rust side.

* FastChat's formulation (lm-sys/FastChat fastchat/serve/monitor/rating_systems.py: `preprocess_for_bt`,
  `bt_loss_and_grad`, `fit_bt`, `compute_bootstrap_bt`): dedup battles into (a, b, outcome) rows with
  counts, weighted logistic loss with ties as half wins, scipy L-BFGS-B (maxiter 100, gtol 1e-6), and
  bootstrap rounds that redraw the row counts from a multinomial and refit in a multiprocessing pool.
  Written here from that description (numpy/scipy calls only; no FastChat code is copied).
* evalica 0.4.2 `bradley_terry` (Rust core via pyo3) for the single-fit comparison.

Prints one JSON object.
"""
import argparse
import json
import multiprocessing as mp
import time

import numpy as np
import pandas as pd
from scipy.optimize import minimize
from scipy.special import expit


def dedup_rows(df):
    n = len(df)
    inv, models = pd.factorize(pd.concat([df["model_a"], df["model_b"]]))
    sched = np.empty((n, 3), dtype=np.int32)
    sched[:, 0] = inv[:n]
    sched[:, 1] = inv[n:]
    w = df["winner"].to_numpy()
    sched[:, 2] = np.where(w == "model_a", 2, np.where(w == "model_b", 0, 1))
    uniq, counts = np.unique(sched, return_counts=True, axis=0)
    return uniq[:, :2], uniq[:, 2].astype(np.float64) / 2.0, counts.astype(np.float64), list(models)


def loss_and_grad(theta, pairs, outcome, weight, alpha):
    logits = alpha * (theta[pairs[:, 0]] - theta[pairs[:, 1]])
    p = expit(logits)
    loss = -((np.log(p) * outcome + np.log(1.0 - p) * (1.0 - outcome)) * weight).sum()
    g_rows = -alpha * (outcome - p) * weight
    grad = np.zeros_like(theta)
    np.add.at(grad, pairs[:, 0], g_rows)
    np.add.at(grad, pairs[:, 1], -g_rows)
    return loss, grad


def lbfgs_fit(pairs, outcome, weight, n_models, alpha=np.log(10.0), tol=1e-6):
    res = minimize(loss_and_grad, np.zeros(n_models), args=(pairs, outcome, weight, alpha), jac=True,
                   method="L-BFGS-B", options={"maxiter": 100, "gtol": tol})
    return res["x"]


_G = {}


def _init(pairs, outcome, n_models):
    _G.update(pairs=pairs, outcome=outcome, n_models=n_models)


def _round(weights):
    return lbfgs_fit(_G["pairs"], _G["outcome"], weights, _G["n_models"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--input", required=True)
    ap.add_argument("--rounds", type=int, default=1000, help="rounds the result is extrapolated to")
    ap.add_argument("--timed-rounds", type=int, default=40, help="bootstrap rounds actually run")
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--evalica-reps", type=int, default=3)
    a = ap.parse_args()
    out = {}
    t = time.perf_counter()
    df = pd.read_json(a.input, lines=True)
    out["pandas_read_json_s"] = time.perf_counter() - t

    t = time.perf_counter()
    pairs, outcome, weight, models = dedup_rows(df)
    out["fastchat_preprocess_s"] = time.perf_counter() - t
    t = time.perf_counter()
    theta = lbfgs_fit(pairs, outcome, weight, len(models))
    out["fastchat_fit_s"] = time.perf_counter() - t
    out["fastchat_single_fit_incl_preprocess_s"] = out["fastchat_preprocess_s"] + out["fastchat_fit_s"]

    rng = np.random.default_rng(seed=0)
    boot = rng.multinomial(n=len(df), pvals=weight / weight.sum(), size=a.timed_rounds).astype(np.float64) / len(df)
    with mp.Pool(a.procs, initializer=_init, initargs=(pairs, outcome, len(models))) as pool:
        list(pool.imap_unordered(_round, boot[: a.procs]))  # pool start-up, not timed
        t = time.perf_counter()
        res = list(pool.imap_unordered(_round, boot))
        el = time.perf_counter() - t
    assert len(res) == a.timed_rounds
    out["fastchat_bootstrap_timed_rounds"] = a.timed_rounds
    out["fastchat_bootstrap_timed_s"] = el
    out["fastchat_bootstrap_per_round_s"] = el / a.timed_rounds
    out["fastchat_bootstrap_extrapolated_s"] = el / a.timed_rounds * a.rounds
    out["fastchat_total_extrapolated_s"] = (out["fastchat_preprocess_s"] + out["fastchat_fit_s"]
                                            + out["fastchat_bootstrap_extrapolated_s"])
    out["fastchat_ratings_head"] = dict(zip(models[:3], (1000 + 400 * (theta - theta.mean()))[:3].tolist()))

    import evalica
    xs = df["model_a"].tolist()
    ys = df["model_b"].tolist()
    wmap = {"model_a": evalica.Winner.X, "model_b": evalica.Winner.Y}
    winners = [wmap.get(w, evalica.Winner.Draw) for w in df["winner"].tolist()]
    best = float("inf")
    for _ in range(a.evalica_reps):
        t = time.perf_counter()
        r = evalica.bradley_terry(xs, ys, winners)
        best = min(best, time.perf_counter() - t)
    out["evalica_bradley_terry_best_s"] = best
    out["evalica_iterations"] = int(r.iterations)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
