//! `passk` inputs and curves: per-problem `(n, c)` counts or raw per-sample verdicts (with optional final
//! answers for maj@k), pass@k / maj@k for k = 1, 2, 4, ... and percentile-bootstrap intervals over problems.

use crate::bootstrap::{quantile_sorted, round_rng};
use crate::passk::try_pass_at_k;
use anyhow::{bail, Result};
use rand::Rng;
use rayon::prelude::*;
use serde::Deserialize;
use serde::Serialize;
use std::collections::HashMap;
use std::io::BufRead;

/// One problem: sample count, correct count and (when answers are known) the size of each answer group
/// with whether that answer is correct.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Problem {
    /// Problem id.
    pub id: String,
    /// Samples.
    pub n: u64,
    /// Correct samples.
    pub c: u64,
    /// `(group size, group is correct)` per distinct answer; empty when answers are unknown.
    pub answers: Vec<(u64, bool)>,
}

#[derive(Deserialize)]
struct RawSample {
    problem: Option<serde_json::Value>,
    n: Option<u64>,
    c: Option<u64>,
    correct: Option<bool>,
    answer: Option<serde_json::Value>,
    verdicts: Option<Vec<bool>>,
    answers: Option<Vec<serde_json::Value>>,
}

/// A problem being read: its counts, its answers (count, correct) and whether it came as counts.
type ProblemEntry = (Problem, HashMap<String, (u64, bool)>, bool);

/// Parses samples JSONL. Each line has `problem` (string or number) and one of:
/// `n` + `c` (counts); `correct` (+ optional `answer`) for one sample, aggregated per problem; or
/// `verdicts` (+ optional parallel `answers`) for all samples of a problem.
pub fn parse_samples<R: BufRead>(reader: R, source: &str) -> Result<Vec<Problem>> {
    let mut order: Vec<String> = vec![];
    let mut map: HashMap<String, ProblemEntry> = HashMap::new();
    for (i, line) in reader.lines().enumerate() {
        let lineno = i + 1;
        let line = line.map_err(|e| anyhow::anyhow!("{source}:{lineno}: read error: {e}"))?;
        if line.trim().is_empty() {
            continue;
        }
        let r: RawSample = serde_json::from_str(&line)
            .map_err(|e| anyhow::anyhow!("{source}:{lineno}: invalid sample JSON: {e}"))?;
        let id = match r.problem {
            Some(serde_json::Value::String(s)) => s,
            Some(serde_json::Value::Number(n)) => n.to_string(),
            Some(_) => bail!("{source}:{lineno}: field `problem`: expected a string or number"),
            None => bail!("{source}:{lineno}: field `problem`: missing"),
        };
        let entry = map.entry(id.clone()).or_insert_with(|| {
            order.push(id.clone());
            (
                Problem {
                    id: id.clone(),
                    ..Problem::default()
                },
                HashMap::new(),
                true,
            )
        });
        let key = |v: &serde_json::Value| match v {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        match (r.n, r.c, r.correct, r.verdicts) {
            (Some(n), Some(c), None, None) => {
                if c > n {
                    bail!("{source}:{lineno}: field `c`: {c} correct out of n = {n}");
                }
                entry.0.n += n;
                entry.0.c += c;
                entry.2 = false; // counts carry no answers
            }
            (None, None, Some(ok), None) => {
                entry.0.n += 1;
                entry.0.c += ok as u64;
                match &r.answer {
                    Some(a) => {
                        let g = entry.1.entry(key(a)).or_insert((0, ok));
                        if g.1 != ok {
                            bail!("{source}:{lineno}: field `correct`: answer {} was judged both right and wrong", key(a));
                        }
                        g.0 += 1;
                    }
                    None => entry.2 = false,
                }
            }
            (None, None, None, Some(v)) => {
                entry.0.n += v.len() as u64;
                entry.0.c += v.iter().filter(|x| **x).count() as u64;
                match &r.answers {
                    Some(a) if a.len() == v.len() => {
                        for (ans, ok) in a.iter().zip(&v) {
                            let g = entry.1.entry(key(ans)).or_insert((0, *ok));
                            if g.1 != *ok {
                                bail!("{source}:{lineno}: field `answers`: answer {} was judged both right and wrong", key(ans));
                            }
                            g.0 += 1;
                        }
                    }
                    Some(a) => bail!(
                        "{source}:{lineno}: field `answers`: {} answers for {} verdicts",
                        a.len(),
                        v.len()
                    ),
                    None => entry.2 = false,
                }
            }
            _ => bail!(
                "{source}:{lineno}: expected exactly one of `n`+`c`, `correct`, or `verdicts`"
            ),
        }
    }
    Ok(order
        .into_iter()
        .map(|id| {
            let (mut p, groups, has_answers) = map.remove(&id).expect("present");
            if has_answers {
                let mut g: Vec<(u64, bool)> = groups.into_values().collect();
                g.sort();
                p.answers = g;
            }
            p
        })
        .collect())
}

fn ln_choose(n: u64, k: u64) -> f64 {
    if k > n {
        return f64::NEG_INFINITY;
    }
    ln_gamma(n as f64 + 1.0) - ln_gamma(k as f64 + 1.0) - ln_gamma((n - k) as f64 + 1.0)
}

/// ln Gamma by Lanczos (g = 7, 9 terms); ~1e-15 relative for the arguments used here.
fn ln_gamma(x: f64) -> f64 {
    const C: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    let x = x - 1.0;
    let mut a = C[0];
    let t = x + 7.5;
    for (i, c) in C.iter().enumerate().skip(1) {
        a += c / (x + i as f64);
    }
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

/// maj@k: probability that the most frequent answer among `k` samples drawn without replacement from
/// the problem's `n` is a correct one, ties between answer groups broken uniformly at random. Exact,
/// by dynamic programming over answer groups (multivariate hypergeometric). `None` without answers.
pub fn maj_at_k(p: &Problem, k: u64) -> Option<f64> {
    if p.answers.is_empty() || k == 0 || k > p.n {
        return None;
    }
    let total_ln = ln_choose(p.n, k);
    let mut prob = 0.0;
    // Condition on the count x drawn from each correct group g, then require every other group to have
    // at most x (tracking how many tie at exactly x for the tie-break).
    for (gi, &(mg, ok)) in p.answers.iter().enumerate() {
        if !ok {
            continue;
        }
        for x in 1..=mg.min(k) {
            // dp[s][t]: ways (scaled by exp(-total_ln)) to draw s samples from the other groups with t of
            // them tied at exactly x.
            let others: Vec<u64> = p
                .answers
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != gi)
                .map(|(_, a)| a.0)
                .collect();
            let rest = (k - x) as usize;
            let ng = others.len();
            let mut dp = vec![vec![0.0f64; ng + 1]; rest + 1];
            dp[0][0] = (ln_choose(mg, x) - total_ln).exp();
            for &m in &others {
                let mut nd = vec![vec![0.0f64; ng + 1]; rest + 1];
                for s in 0..=rest {
                    for (t, &v) in dp[s].iter().enumerate() {
                        if v == 0.0 {
                            continue;
                        }
                        for y in 0..=m.min(x).min((rest - s) as u64) {
                            let w = ln_choose(m, y).exp();
                            let tt = t + (y == x) as usize;
                            nd[s + y as usize][tt] += v * w;
                        }
                    }
                }
                dp = nd;
            }
            for (t, v) in dp[rest].iter().enumerate() {
                prob += v / (t + 1) as f64;
            }
        }
    }
    Some(prob.min(1.0))
}

/// A curve with bootstrap intervals over problems.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CurvePoint {
    /// k.
    pub k: u64,
    /// Mean over problems.
    pub value: f64,
    /// Lower percentile-bootstrap bound.
    pub lower: f64,
    /// Upper bound.
    pub upper: f64,
}

/// Mean over problems of `per_problem[p][j]` for each column `j`, with percentile intervals from
/// resampling problems with replacement (`reps` rounds, seeded per round).
pub fn mean_with_intervals(
    per_problem: &[Vec<f64>],
    ks: &[u64],
    reps: usize,
    seed: u64,
    level: f64,
) -> Vec<CurvePoint> {
    let np = per_problem.len();
    let nk = ks.len();
    let mean_of = |idx: &mut dyn Iterator<Item = usize>| {
        let mut s = vec![0.0; nk];
        for i in idx {
            for j in 0..nk {
                s[j] += per_problem[i][j];
            }
        }
        s.iter().map(|x| x / np as f64).collect::<Vec<f64>>()
    };
    let point = mean_of(&mut (0..np));
    let rounds: Vec<Vec<f64>> = (0..reps)
        .into_par_iter()
        .map(|r| {
            let mut rng = round_rng(seed, r as u64);
            mean_of(&mut (0..np).map(|_| rng.gen_range(0..np)))
        })
        .collect();
    let a = (1.0 - level) / 2.0;
    (0..nk)
        .map(|j| {
            let mut col: Vec<f64> = rounds.iter().map(|r| r[j]).collect();
            col.sort_by(f64::total_cmp);
            let (lower, upper) = if col.is_empty() {
                (f64::NAN, f64::NAN)
            } else {
                (quantile_sorted(&col, a), quantile_sorted(&col, 1.0 - a))
            };
            CurvePoint {
                k: ks[j],
                value: point[j],
                lower,
                upper,
            }
        })
        .collect()
}

/// Powers of two up to the smallest sample count: 1, 2, 4, ..., plus that count itself.
pub fn default_ks(problems: &[Problem]) -> Vec<u64> {
    let nmin = problems.iter().map(|p| p.n).min().unwrap_or(1).max(1);
    let mut ks: Vec<u64> = (0..63)
        .map(|i| 1u64 << i)
        .take_while(|&k| k <= nmin)
        .collect();
    if *ks.last().unwrap() != nmin {
        ks.push(nmin);
    }
    ks
}

/// pass@k table (problems x ks); errors name the problem when k exceeds its sample count.
pub fn pass_table(problems: &[Problem], ks: &[u64]) -> Result<Vec<Vec<f64>>> {
    problems
        .iter()
        .map(|p| {
            ks.iter()
                .map(|&k| {
                    try_pass_at_k(p.n, p.c, k)
                        .map_err(|e| anyhow::anyhow!("problem {:?}: {e}", p.id))
                })
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Brute-force maj@k by enumerating all k-subsets of a small sample list.
    fn brute(groups: &[(u64, bool)], k: usize) -> f64 {
        let mut labels = vec![];
        for (g, &(m, _)) in groups.iter().enumerate() {
            labels.extend(std::iter::repeat_n(g, m as usize));
        }
        let n = labels.len();
        let (mut num, mut den) = (0.0, 0.0);
        for mask in 0u32..(1 << n) {
            if mask.count_ones() as usize != k {
                continue;
            }
            let mut cnt = vec![0; groups.len()];
            for i in 0..n {
                if mask >> i & 1 == 1 {
                    cnt[labels[i]] += 1;
                }
            }
            let best = *cnt.iter().max().unwrap();
            let top: Vec<usize> = (0..groups.len()).filter(|&g| cnt[g] == best).collect();
            num += top.iter().filter(|&&g| groups[g].1).count() as f64 / top.len() as f64;
            den += 1.0;
        }
        num / den
    }

    #[test]
    fn maj_at_k_matches_enumeration() {
        let cases: Vec<Vec<(u64, bool)>> = vec![
            vec![(3, true), (4, false), (2, false)],
            vec![(1, true), (1, false), (1, false), (5, false)],
            vec![(2, true), (2, true), (3, false)],
            vec![(6, false), (5, true)],
        ];
        for g in cases {
            let n: u64 = g.iter().map(|x| x.0).sum();
            let c: u64 = g.iter().filter(|x| x.1).map(|x| x.0).sum();
            let p = Problem {
                id: "p".into(),
                n,
                c,
                answers: g.clone(),
            };
            for k in 1..=n {
                let got = maj_at_k(&p, k).unwrap();
                let want = brute(&g, k as usize);
                assert!((got - want).abs() < 1e-12, "{g:?} k={k}: {got} vs {want}");
            }
        }
    }

    #[test]
    fn parses_all_three_layouts_with_line_errors() {
        let text = "{\"problem\":\"a\",\"n\":4,\"c\":1}\n\
                    {\"problem\":1,\"correct\":true,\"answer\":\"42\"}\n\
                    {\"problem\":1,\"correct\":false,\"answer\":\"41\"}\n\
                    {\"problem\":1,\"correct\":true,\"answer\":\"42\"}\n\
                    {\"problem\":\"v\",\"verdicts\":[true,false,false],\"answers\":[7,8,8]}\n";
        let p = parse_samples(text.as_bytes(), "s.jsonl").unwrap();
        assert_eq!(p.len(), 3);
        assert_eq!((p[0].n, p[0].c, p[0].answers.is_empty()), (4, 1, true));
        assert_eq!((p[1].id.as_str(), p[1].n, p[1].c), ("1", 3, 2));
        assert_eq!(p[1].answers, vec![(1, false), (2, true)]);
        assert_eq!(p[2].answers, vec![(1, true), (2, false)]);
        let e = parse_samples(
            "{\"problem\":\"a\",\"n\":2,\"c\":1}\n{\"problem\":\"a\",\"n\":2,\"c\":3}\n".as_bytes(),
            "s.jsonl",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("s.jsonl:2") && e.contains("`c`"), "{e}");
        let e = parse_samples("{\"n\":2,\"c\":1}".as_bytes(), "s.jsonl")
            .unwrap_err()
            .to_string();
        assert!(e.contains("s.jsonl:1") && e.contains("`problem`"), "{e}");
    }

    #[test]
    fn intervals_bracket_means() {
        let probs: Vec<Problem> = (0..40)
            .map(|i| Problem {
                id: i.to_string(),
                n: 8,
                c: (i % 5) as u64,
                answers: vec![],
            })
            .collect();
        let ks = default_ks(&probs);
        assert_eq!(ks, vec![1, 2, 4, 8]);
        let t = pass_table(&probs, &ks).unwrap();
        let curve = mean_with_intervals(&t, &ks, 400, 1, 0.95);
        for w in curve.windows(2) {
            assert!(w[1].value >= w[0].value);
        }
        for c in &curve {
            assert!(c.lower <= c.value && c.value <= c.upper, "{c:?}");
        }
        assert!((curve[0].value - (0.0 + 1.0 + 2.0 + 3.0 + 4.0) / 5.0 / 8.0).abs() < 1e-12);
    }
}
