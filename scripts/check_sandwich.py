#!/usr/bin/env python3
"""Side by side: arena-rank's Bradley-Terry with sandwich intervals vs reinforge_eval::sandwich.

Runs arena-rank (PyPI 0.1.1, .venv-arena from scripts/arena_env.sh) and the reinforge-eval example
binary on the same battles and prints the largest differences of ratings, interval bounds and
coefficients (Elo scale). Cases: LLMFAO crowd battles (plain BT, unweighted and reweighted),
generated battles with style metadata (contextual BT, reweighted and unweighted) and generated Search
Arena battles with a citation covariate (contextual BT on `(a - b) / (a + b)` of the citation
counts, at arena-rank's default reg = 1 and unpenalised, reg = 0; `rank --covariate`). For the
covariate cases the coefficients' sandwich variances are also compared: arena-rank returns only the
ratings' variances, so its own `compute_hessian_and_covariance` is called at its optimum and
`diag(H^-1 G H^-1) / n` taken as its `compute_ratings_and_cis` does for the ratings.

arena-rank is run twice per case: with its defaults (optax L-BFGS, gtol = ftol = 1e-9, which stops
short of the optimum) and run to convergence (gtol = 1e-14, ftol = 0). reinforge's Newton solution is
compared with the converged run; the interval formula alone is compared at arena-rank's own default
optimum (`sandwich --at`).

--write-fixture writes the generated battles and arena-rank's outputs into fixtures/data/arena/ (the
Rust test tests/arena_sandwich.rs reads them). --bench N times a fit with intervals on N generated
battles (100 models) in both, from battles in memory; --bench-contextual N the same for the contextual
model on N generated style battles (30 models).
"""

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from importlib import metadata

import numpy as np
import pandas as pd

from arena_rank.models.bradley_terry import BradleyTerry
from arena_rank.models.contextual_bradley_terry import ContextualBradleyTerry
from arena_rank.utils.data_utils import ContextualPairDataset, PairDataset

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "target", "release", "examples", "reinforge_eval")
FIX = os.path.join(ROOT, "fixtures", "data", "arena")
LLMFAO = os.path.join(ROOT, "fixtures", "data", "rank", "llmfao-battles.jsonl")
STYLE = os.path.join(FIX, "style-battles.jsonl")
COV = os.path.join(FIX, "covariate-battles.jsonl")
COV_SPEC = "cites=conv_metadata.cites_a,conv_metadata.cites_b"
TIGHT = dict(gtol=1e-14, ftol=0.0, max_iter=100000)
ELEMENTS = ["sum_assistant_tokens", "header_count", "list_count", "bold_count"]


def key(element, side):
    """FastChat's conv_metadata key of a style element for side "a" or "b"."""
    if element == "sum_assistant_tokens":
        return f"sum_assistant_{side}_tokens"
    return f"{element}_{side}"


def gen_style_battles(path, n_models=12, n=4000, seed=7):
    """Battles whose outcome depends on model strength and on the length/bold differences.
    (The default arguments make the fixture; changing them changes fixtures/data/arena.)"""
    rng = np.random.default_rng(seed)
    strength = rng.normal(0, 1, n_models)
    lines = []
    for _ in range(n):
        a, b = rng.choice(n_models, 2, replace=False)
        tok = rng.lognormal(6, 0.7, 2).round()
        hdr = rng.poisson(1.0, 2)
        lst = rng.poisson(2.0, 2)
        bold = rng.poisson(1.5, 2)
        ratio = lambda x: (x[0] - x[1]) / ((x[0] + x[1]) or 1)
        z = strength[a] - strength[b] + 1.2 * ratio(tok) + 0.4 * ratio(bold)
        pa, pb = 1 / (1 + math.exp(-(z - 0.3))), 1 / (1 + math.exp(-(-z - 0.3)))
        u = rng.random()
        winner = "model_a" if u < pa else ("model_b" if u < pa + pb else "tie")
        meta = {}
        for name, v in zip(ELEMENTS, [tok, hdr, lst, bold]):
            meta[key(name, "a")] = int(v[0])
            meta[key(name, "b")] = int(v[1])
        lines.append(json.dumps({"model_a": f"m{a:02d}", "model_b": f"m{b:02d}", "winner": winner, "conv_metadata": meta}))
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def gen_covariate_battles(path, n_models=8, n=3000, seed=13):
    """Search Arena's situation: the weakest models cite most and citations win votes (true effect 2.0
    on the logit of (a - b) / (a + b) of the citation counts; zero sum -> 0). Strengths evenly spaced over
    1.5 log-odds, weakest first; citation counts Poisson with mean 6 (weakest) down to 1 (strongest); no ties.
    (The default arguments make the fixture; changing them changes fixtures/data/arena.)"""
    rng = np.random.default_rng(seed)
    pos = np.arange(n_models) / (n_models - 1)
    strength = 1.5 * (pos - 0.5)
    mean_cites = 6.0 + (1.0 - 6.0) * pos
    lines = []
    for _ in range(n):
        a, b = rng.choice(n_models, 2, replace=False)
        ca, cb = rng.poisson(mean_cites[a]), rng.poisson(mean_cites[b])
        z = strength[a] - strength[b] + (2.0 * (ca - cb) / (ca + cb) if ca + cb > 0 else 0.0)
        winner = "model_a" if rng.random() < 1 / (1 + math.exp(-z)) else "model_b"
        lines.append(json.dumps({"model_a": f"m{a:02d}", "model_b": f"m{b:02d}", "winner": winner,
                                 "conv_metadata": {"cites_a": int(ca), "cites_b": int(cb)}}))
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def covariate_frame(path):
    df = pd.read_json(path, lines=True)
    xa = df["conv_metadata"].apply(lambda m: float(m["cites_a"]))
    xb = df["conv_metadata"].apply(lambda m: float(m["cites_b"]))
    s = xa + xb
    s[s == 0] = 1.0
    df["cites"] = (xa - xb) / s
    return df, ["cites"]


def style_frame(path):
    df = pd.read_json(path, lines=True)
    feats = []
    for e in ELEMENTS:
        xa = df["conv_metadata"].apply(lambda m: float(m[key(e, "a")]))
        xb = df["conv_metadata"].apply(lambda m: float(m[key(e, "b")]))
        s = xa + xb
        s[s == 0] = 1.0
        df[e] = (xa - xb) / s
        feats.append(e)
    return df, feats


def arena(case, tight):
    kw = TIGHT if tight else {}
    if case["kind"] == "plain":
        df = pd.read_json(case["input"], lines=True)[["model_a", "model_b", "winner"]]
        ds = PairDataset.from_pandas(df, reweighted=case["reweighted"])
        m = BradleyTerry(n_competitors=len(ds.competitors), **kw)
    else:
        df, feats = (covariate_frame if case["kind"] == "covariate" else style_frame)(case["input"])
        ds = ContextualPairDataset.from_pandas(df, feature_cols=feats, reweighted=case["reweighted"])
        m = ContextualBradleyTerry(n_competitors=len(ds.competitors), n_features=len(feats),
                                   reg=case.get("reg", 1.0), **kw)
    r = m.compute_ratings_and_cis(ds)
    names = list(r["competitors"])
    out = {k: dict(zip(names, map(float, r[src]))) for k, src in
           [("ratings", "ratings"), ("lower", "rating_lower"), ("upper", "rating_upper"), ("variances", "variances")]}
    out["params"] = dict(zip(names, map(float, m.params["ratings"])))
    if "coeffs" in r:
        out["coefficients"] = [float(c) for c in r["coeffs"]]
    if case["kind"] == "covariate":
        h, g = m.compute_hessian_and_covariance(
            m.params["ratings"], m.params["coeffs"], ds.pairs, ds.features, ds.outcomes, ds.weights,
            m.reg, m.hessian_reg, m.n_competitors, m.n_features, ds.pairs.shape[0])
        hi = np.linalg.inv(np.asarray(h))
        var = np.diag(hi @ np.asarray(g) @ hi) / ds.pairs.shape[0]
        out["coefficient_variances"] = [float(v) for v in var[m.n_competitors:]]
    return out


def exact_at_default(case, default):
    """arena-rank's sandwich formula at its default optimum, with H and G assembled from the deduplicated
    rows and inverted in 40-digit arithmetic: the intervals without float64 rounding. (Assembling G in
    float64 leaves a residual along the common-shift direction u, where G u = 0 exactly; H^-1 has
    1 / (hessian_reg) along u, so that residual is amplified by 1 / hessian_reg^2.)"""
    import mpmath as mp

    mp.mp.dps = 40
    df = pd.read_json(case["input"], lines=True)[["model_a", "model_b", "winner"]]
    ds = PairDataset.from_pandas(df, reweighted=case["reweighted"])
    m = BradleyTerry(n_competitors=len(ds.competitors))
    r = np.array([default["params"][c] for c in ds.competitors])
    total = float(np.sum(ds.counts))
    reg = m.hessian_reg * (total if np.allclose(ds.weights, 1.0) else 1.0)
    k = len(ds.competitors)
    h, g = mp.zeros(k, k), mp.zeros(k, k)
    pairs, outcomes = np.asarray(ds.pairs), np.asarray(ds.outcomes)
    counts, opt_w = np.asarray(ds.counts), np.asarray(ds.opt_weights)
    for (a, b), o, n, w in zip(pairs, outcomes, counts, opt_w):
        p = 1 / (1 + mp.exp(-(mp.mpf(r[a]) - mp.mpf(r[b]))))
        for mat, v in ((h, p * (1 - p) * mp.mpf(w)), (g, ((mp.mpf(o) - p) * mp.mpf(w)) ** 2 / mp.mpf(n))):
            mat[a, a] += v
            mat[b, b] += v
            mat[a, b] -= v
            mat[b, a] -= v
    for i in range(k):
        h[i, i] += mp.mpf(reg)
    hi = h**-1
    cov = hi * g * hi
    z = mp.sqrt(2) * mp.erfinv(mp.mpf(1) - mp.mpf("0.05"))
    out = {"ratings": {}, "lower": {}, "upper": {}}
    for i, c in enumerate(ds.competitors):
        w = z * mp.sqrt(cov[i, i])
        out["ratings"][c] = float(mp.mpf(r[i]) * m.alpha + m.init_rating)
        out["lower"][c] = float((mp.mpf(r[i]) - w) * m.alpha + m.init_rating)
        out["upper"][c] = float((mp.mpf(r[i]) + w) * m.alpha + m.init_rating)
    return out


def rust(case, at=None):
    cmd = [BIN, "sandwich", "--input", case["input"]]
    if case["kind"] == "contextual":
        cmd.append("--style")
    if case["kind"] == "covariate":
        cmd += ["--covariate", COV_SPEC, "--reg", str(case["reg"])]
    if case["reweighted"]:
        cmd.append("--reweighted")
    if at is not None:
        cmd += ["--at", at]
    r = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    out = {k: dict(zip(r["models"], r[k])) for k in ["ratings", "lower", "upper", "variances"]}
    out["coefficients"] = r["coefficients"]
    out["coefficient_variances"] = r["coefficient_variances"]
    return out


def maxdiff(a, b):
    d = {k: max(abs(a[k][m] - b[k][m]) for m in a[k]) for k in ["ratings", "lower", "upper"]}
    if a.get("coefficients"):
        d["coefficients"] = max(abs(x - y) for x, y in zip(a["coefficients"], b["coefficients"]))
    if a.get("coefficient_variances") and b.get("coefficient_variances"):
        # relative: the variances are ~1e-4 in logit units
        d["coefficient_variances_rel"] = max(abs(x - y) / abs(x) for x, y in
                                             zip(a["coefficient_variances"], b["coefficient_variances"]))
    return d


def bench(n):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "battles.jsonl")
        subprocess.run([BIN, "gen-battles", "--output", path, "--models", "100", "--battles", str(n), "--seed", "0"], check=True)
        r = json.loads(subprocess.run([BIN, "sandwich", "--input", path, "--reps", "3"], check=True, capture_output=True, text=True).stdout)
        df = pd.read_json(path, lines=True)[["model_a", "model_b", "winner"]]
        times, fit_times = [], []
        for _ in range(3):
            t = time.perf_counter()
            ds = PairDataset.from_pandas(df)
            t1 = time.perf_counter()
            res = BradleyTerry(n_competitors=len(ds.competitors)).compute_ratings_and_cis(ds)
            np.asarray(res["rating_upper"]).sum()  # block until computed
            times.append(time.perf_counter() - t)
            fit_times.append(time.perf_counter() - t1)
        names = list(res["competitors"])
        ours = dict(zip(r["models"], r["ratings"]))
        gap = max(abs(ours[m] - float(x)) for m, x in zip(names, res["ratings"]))
    print(f"\n1M-battle timing ({n} battles, 100 models, fit + sandwich intervals, battles in memory):")
    print(f"  reinforge  best of 3: {r['fit_with_intervals_best_s']:.4f} s")
    print(f"  arena-rank first (incl. JIT): {times[0]:.3f} s, best of 3: {min(times):.3f} s "
          f"(of which compute_ratings_and_cis on the built PairDataset: {min(fit_times):.3f} s)")
    print(f"  ratio arena-rank best / reinforge best: {min(times) / r['fit_with_intervals_best_s']:.1f}x")
    print(f"  rating gap to arena-rank defaults (L-BFGS stop): {gap:.2e} Elo")


def bench_contextual(n):
    """Contextual (style-controlled) fit with intervals on n generated style battles, both sides."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "style.jsonl")
        gen_style_battles(path, n_models=30, n=n, seed=11)
        case = dict(kind="contextual", input=path, reweighted=True)
        r = json.loads(subprocess.run([BIN, "sandwich", "--input", path, "--style", "--reweighted", "--reps", "3"],
                                      check=True, capture_output=True, text=True).stdout)
        df, feats = style_frame(path)
        times = []
        for _ in range(3):
            t = time.perf_counter()
            ds = ContextualPairDataset.from_pandas(df, feature_cols=feats, reweighted=True)
            res = ContextualBradleyTerry(n_competitors=len(ds.competitors), n_features=len(feats)).compute_ratings_and_cis(ds)
            np.asarray(res["rating_upper"]).sum()
            times.append(time.perf_counter() - t)
        conv = arena(case, True)
        ours = {k: dict(zip(r["models"], r[k])) for k in ["ratings", "lower", "upper"]}
        ours["coefficients"] = r["coefficients"]
        d = maxdiff(conv, ours)
    print(f"\ncontextual timing ({n} style battles, 30 models, 4 features, reweighted):")
    print(f"  reinforge  best of 3: {r['fit_with_intervals_best_s']:.3f} s ({r['iterations']} Newton iterations)")
    print(f"  arena-rank first (incl. JIT): {times[0]:.3f} s, best of 3: {min(times):.3f} s")
    print(f"  ratio arena-rank best / reinforge best: {min(times) / r['fit_with_intervals_best_s']:.1f}x")
    print("  vs converged arena-rank: " + ", ".join(f"{k} {v:.2e}" for k, v in d.items()))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--write-fixture", action="store_true")
    ap.add_argument("--bench", type=int, default=0)
    ap.add_argument("--bench-contextual", type=int, default=0)
    args = ap.parse_args()
    os.makedirs(FIX, exist_ok=True)
    if args.write_fixture or not os.path.exists(STYLE):
        gen_style_battles(STYLE)
    if args.write_fixture or not os.path.exists(COV):
        gen_covariate_battles(COV)
    cases = {
        "llmfao_plain": dict(kind="plain", input=LLMFAO, reweighted=False),
        "llmfao_plain_reweighted": dict(kind="plain", input=LLMFAO, reweighted=True),
        "style_contextual_reweighted": dict(kind="contextual", input=STYLE, reweighted=True),
        "style_contextual": dict(kind="contextual", input=STYLE, reweighted=False),
        "covariate_reg1": dict(kind="covariate", input=COV, reweighted=True, reg=1.0),
        "covariate_reg0": dict(kind="covariate", input=COV, reweighted=True, reg=0.0),
    }
    fixture = {"provenance": {
        "what": "arena-rank outputs (Elo scale) on the battles named by `input`; `default` = arena-rank's defaults, `converged` = the same with gtol=1e-14, ftol=0, max_iter=100000; `params` are arena-rank's natural-log-odds ratings",
        "made_by": "scripts/check_sandwich.py --write-fixture",
        "versions": {p: metadata.version(p) for p in ["arena-rank", "jax", "optax", "numpy", "pandas"]},
        "covariate_features": "covariate cases: one feature (a - b) / (a + b) of conv_metadata.cites_a / cites_b, a zero sum replaced by 1, standardised by ContextualPairDataset.from_pandas; coefficient_variances = diag(H^-1 G H^-1)[coefficients] / n from arena-rank's compute_hessian_and_covariance at its optimum",
        "contextual_features": "per style element (tokens, headers, lists, bold): (a - b) / (a + b), a zero sum replaced by 1 (lmarena's arena-rank example), then ContextualPairDataset.from_pandas(normalize_features=True)",
    }, "cases": {}}
    worst = 0.0
    for name, case in cases.items():
        default, conv = arena(case, False), arena(case, True)
        ours = rust(case)
        d_conv = maxdiff(conv, ours)
        line = f"{name:30s} vs converged arena-rank: " + ", ".join(f"{k} {v:.2e}" for k, v in d_conv.items())
        if case["kind"] != "plain":
            worst = max(worst, *d_conv.values())
        if case["kind"] == "plain":
            with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
                json.dump(default["params"], f)
            at = rust(case, at=f.name)
            os.unlink(f.name)
            d_at = maxdiff(default, at)
            exact = exact_at_default(case, default)
            d_ex, d_ex_arena = maxdiff(exact, at), maxdiff(exact, default)
            # Interval bounds are gated on the 40-digit evaluation: where arena-rank's float64 inversion
            # is itself further than 1e-6 from it (reweighted data), comparing with arena-rank would
            # measure arena-rank's rounding.
            worst = max(worst, d_conv["ratings"], *d_ex.values())
            if max(d_ex_arena.values()) <= 1e-7:
                worst = max(worst, *d_at.values(), *d_conv.values())
            line += " | formula at arena-rank's default optimum: " + ", ".join(f"{k} {v:.2e}" for k, v in d_at.items())
            line += f" | vs 40-digit: ours {max(d_ex.values()):.2e}, arena-rank {max(d_ex_arena.values()):.2e}"
            default["exact_at_default"] = exact
        d_def = maxdiff(default, ours)
        line += " | solver gap (arena-rank defaults vs converged ours): " + f"{max(d_def.values()):.2e}"
        print(line)
        rel = os.path.relpath(case["input"], ROOT)
        fixture["cases"][name] = {"input": rel, "kind": case["kind"], "reweighted": case["reweighted"], "default": default, "converged": conv}
        if "reg" in case:
            fixture["cases"][name]["reg"] = case["reg"]
            fixture["cases"][name]["covariate"] = COV_SPEC
    print(f"largest difference over all checks: {worst:.2e} (tolerance 1e-6)")
    if args.write_fixture:
        with open(os.path.join(FIX, "arena_rank_expected.json"), "w") as f:
            json.dump(fixture, f, indent=1)
    if args.bench:
        bench(args.bench)
    if args.bench_contextual:
        bench_contextual(args.bench_contextual)
    sys.exit(0 if worst <= 1e-6 else 1)


if __name__ == "__main__":
    main()
