//! The fused sampling kernels (src/sampling_ops.rs) against libtorch's composite ops: equal to
//! float32 rounding inside sampling forwards (the model's ops) and for the draw's statistics;
//! standing aside outside sampling, for other dtypes, with gradients, and for rows that are
//! not finite.

use reinforge_torch::kernels::linear::sampling;
use reinforge_torch::kernels::sampling_ops::{
    logit_stats, rms_norm, rope_, sampling_ops, silu_mul, SamplingOps,
};
use tch::{Device, Kind, Tensor};

const CPU: (Kind, Device) = (Kind::Float, Device::Cpu);

/// The shim is in this build and the default choice is in force (no test here changes it).
fn fused() -> bool {
    cfg!(reinforge_sampling_ops) && sampling_ops() == SamplingOps::Fused
}

/// Largest `|a - b| / (1 + |b|)`.
fn rel_diff(a: &Tensor, b: &Tensor) -> f64 {
    ((a - b).abs() / (b.abs() + 1.0)).max().double_value(&[])
}

#[test]
fn rms_norm_equals_libtorch_inside_sampling_only() {
    tch::manual_seed(1);
    let _guard = tch::no_grad_guard();
    // SmolLM2's width, a width with a scalar tail, a Qwen3 per-head norm's shape.
    for shape in [vec![32, 1, 576], vec![3, 5, 13], vec![2, 4, 9, 64]] {
        let h = *shape.last().unwrap();
        let x = Tensor::randn(shape.as_slice(), CPU) * 3.0;
        let w = Tensor::randn([h], CPU);
        let want = x.rms_norm([h].as_slice(), Some(&w), 1e-5);
        assert!(
            rms_norm(&x, &w, 1e-5).is_none(),
            "outside sampling: libtorch"
        );
        let got = sampling(|| rms_norm(&x, &w, 1e-5));
        if !fused() {
            assert!(got.is_none());
            continue;
        }
        let got = got.expect("float32, contiguous");
        assert_eq!(got.size(), want.size());
        let diff = rel_diff(&got, &want);
        assert!(diff < 1e-6, "{shape:?}: {diff}");
        let x64 = x.to_kind(Kind::Double);
        assert!(sampling(|| rms_norm(&x64, &w, 1e-5)).is_none(), "float64");
        let strided = x.transpose(0, 1);
        if !strided.is_contiguous() {
            assert!(
                sampling(|| rms_norm(&strided, &w, 1e-5)).is_none(),
                "strided"
            );
        }
    }
}

/// `x * cos + rotate_half(x) * sin` for `x` `[B, H, T, D]` (the model's unfused RoPE).
fn rope_reference(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Tensor {
    let half = x.size()[3] / 2;
    let rotated = Tensor::cat(&[x.narrow(3, half, half).neg(), x.narrow(3, 0, half)], 3);
    x * cos + rotated * sin
}

#[test]
fn rope_rotates_queries_and_keys_in_place_as_the_model_does() {
    tch::manual_seed(2);
    let _guard = tch::no_grad_guard();
    // (rows, positions, query heads, key/value heads, head dim): decoding with SmolLM2's heads,
    // a prefill, and head sizes whose half is not a multiple of 8.
    for (b, t, hq, hk, d) in [(32, 1, 9, 3, 64), (2, 7, 4, 2, 16), (3, 2, 2, 1, 6)] {
        let q = Tensor::randn([b, t, hq, d], CPU);
        let k = Tensor::randn([b, t, hk, d], CPU);
        let angles = Tensor::randn([b, 1, t, d], CPU);
        let (cos, sin) = (angles.cos(), angles.sin());
        let want_q = rope_reference(&q.transpose(1, 2), &cos, &sin);
        let want_k = rope_reference(&k.transpose(1, 2), &cos, &sin);
        let (q0, k0) = (q.copy(), k.copy());
        assert!(!rope_(&q, &k, &cos, &sin), "outside sampling: untouched");
        assert!(q.equal(&q0) && k.equal(&k0));
        if !fused() {
            assert!(!sampling(|| rope_(&q, &k, &cos, &sin)));
            continue;
        }
        assert!(
            sampling(|| rope_(&q, &k, &cos, &sin)),
            "{b} {t} {hq} {hk} {d}"
        );
        let dq = rel_diff(&q.transpose(1, 2), &want_q);
        let dk = rel_diff(&k.transpose(1, 2), &want_k);
        assert!(dq < 1e-6 && dk < 1e-6, "d {d}: {dq} {dk}");
    }
    // Tables of another shape, an odd head size: neither tensor is touched.
    let q = Tensor::randn([2, 1, 2, 8], CPU);
    let k = Tensor::randn([2, 1, 1, 8], CPU);
    let small = Tensor::randn([1, 1, 1, 8], CPU);
    let q0 = q.copy();
    assert!(!sampling(|| rope_(&q, &k, &small, &small)));
    let odd = Tensor::randn([2, 1, 2, 7], CPU);
    let odd_t = Tensor::randn([2, 1, 1, 7], CPU);
    assert!(!sampling(|| rope_(&odd, &odd.copy(), &odd_t, &odd_t)));
    assert!(q.equal(&q0));
}

#[test]
fn silu_mul_equals_libtorch_over_the_exponential_range() {
    tch::manual_seed(3);
    let _guard = tch::no_grad_guard();
    // A decoding step's MLP, several 4096-float chunks with a tail, and extreme gates (the
    // exponential's clamps: e^100 overflows, e^-100 is 0).
    let extremes =
        Tensor::from_slice(&[-100.0f32, -88.0, -87.0, -20.0, 0.0, 1e-8, 20.0, 88.0, 100.0])
            .view([1, 9]);
    for gate in [
        Tensor::randn([32, 1, 1536], CPU) * 4.0,
        Tensor::randn([3, 4099], CPU) * 10.0,
        extremes,
    ] {
        let up = Tensor::randn(gate.size().as_slice(), CPU);
        let want = gate.silu() * &up;
        assert!(silu_mul(&gate, &up).is_none(), "outside sampling: libtorch");
        let got = sampling(|| silu_mul(&gate, &up));
        if !fused() {
            assert!(got.is_none());
            continue;
        }
        let diff = rel_diff(&got.expect("float32, contiguous"), &want);
        assert!(diff < 2e-6, "{:?}: {diff}", gate.size());
    }
    let (g, u) = (Tensor::randn([4, 8], CPU), Tensor::randn([4, 9], CPU));
    assert!(sampling(|| silu_mul(&g.narrow(1, 0, 8), &u.narrow(1, 0, 8))).is_none());
}

#[test]
fn logit_stats_give_argmax_logsumexp_and_entropy() {
    tch::manual_seed(4);
    let _guard = tch::no_grad_guard();
    let logits = Tensor::randn([5, 49153], CPU) * 4.0;
    // Row 1: top-k filtered (-inf outside 10 logits); row 2: a tie, the first index wins;
    // row 3: one dominant logit (entropy near 0); row 4: large magnitudes.
    let _ = logits.get(1).narrow(0, 10, 49143).fill_(f64::NEG_INFINITY);
    let _ = logits.get(2).narrow(0, 7, 1).fill_(50.0);
    let _ = logits.get(2).narrow(0, 40000, 1).fill_(50.0);
    let _ = logits.get(3).narrow(0, 49152, 1).fill_(200.0);
    let _ = logits.get(4).g_mul_scalar_(1e3);
    let Some((arg, stats)) = logit_stats(&logits) else {
        assert!(!fused(), "the kernel applies to float32 logits");
        return;
    };
    assert_eq!(arg, logits.argmax(-1, false));
    assert_eq!(i64::try_from(arg.get(2)).unwrap(), 7);
    let logp = logits.log_softmax(-1, Kind::Float);
    let lse = logits.logsumexp([-1].as_slice(), false);
    let p = logp.exp();
    let entropy = -(p * logp.nan_to_num(0.0, None, None)).sum_dim_intlist(-1, false, Kind::Float);
    let d_lse = rel_diff(&stats.select(1, 0), &lse);
    let d_ent = rel_diff(&stats.select(1, 1), &entropy);
    assert!(d_lse < 1e-6, "log-sum-exp: {d_lse}");
    assert!(d_ent < 1e-5, "entropy: {d_ent}");
    // A NaN row or another dtype: libtorch's path.
    let bad = logits.copy();
    let _ = bad.get(0).narrow(0, 3, 1).fill_(f64::NAN);
    assert!(logit_stats(&bad).is_none());
    assert!(logit_stats(&logits.to_kind(Kind::Double)).is_none());
}

#[test]
fn the_choice_parses_its_names_and_names_its_variable() {
    assert_eq!("fused".parse::<SamplingOps>(), Ok(SamplingOps::Fused));
    assert_eq!("aten".parse::<SamplingOps>(), Ok(SamplingOps::Aten));
    let err = "torch".parse::<SamplingOps>().unwrap_err();
    assert!(
        err.contains("REINFORGE_SAMPLING_OPS") && err.contains("fused or aten"),
        "{err}"
    );
}
