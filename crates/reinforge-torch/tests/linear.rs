//! The CPU linear kernels (src/linear.rs): oneDNN's agrees with `at::linear` to float32
//! rounding, and stands aside wherever it must (gradients, other dtypes).

use reinforge_torch::linear::{onednn_linear, CpuLinear};
use tch::{Device, Kind, Tensor};

fn max_rel_diff(a: &Tensor, b: &Tensor) -> f64 {
    let scale = b.abs().max().double_value(&[]).max(1e-12);
    (a - b).abs().max().double_value(&[]) / scale
}

#[test]
fn onednn_matches_at_linear_for_batched_inputs_with_and_without_bias() {
    tch::manual_seed(7);
    let w = Tensor::randn([48, 40], (Kind::Float, Device::Cpu));
    let b = Tensor::randn([48], (Kind::Float, Device::Cpu));
    for shape in [vec![5i64, 40], vec![3, 7, 40], vec![1, 1, 40]] {
        let x = Tensor::randn(&shape[..], (Kind::Float, Device::Cpu));
        for bias in [None, Some(&b)] {
            let want = x.linear(&w, bias);
            let got = tch::no_grad(|| onednn_linear(&x, &w, bias));
            if !cfg!(reinforge_onednn_linear) {
                assert!(got.is_none());
                continue;
            }
            let got = got.expect("oneDNN applies to float32 CPU tensors without gradients");
            assert_eq!(got.size(), want.size());
            let d = max_rel_diff(&got, &want);
            assert!(
                d < 1e-5,
                "shape {shape:?} bias {}: relative diff {d}",
                bias.is_some()
            );
        }
    }
    // A transposed (non-contiguous) input gives the same result.
    let x = Tensor::randn([40, 6], (Kind::Float, Device::Cpu)).tr();
    if let Some(got) = tch::no_grad(|| onednn_linear(&x, &w, None)) {
        assert!(max_rel_diff(&got, &x.linear::<Tensor>(&w, None)) < 1e-5);
    }
}

#[test]
fn onednn_stands_aside_where_a_gradient_or_another_dtype_is_involved() {
    let w = Tensor::randn([8, 4], (Kind::Float, Device::Cpu)).set_requires_grad(true);
    let x = Tensor::randn([2, 4], (Kind::Float, Device::Cpu));
    assert!(
        onednn_linear(&x, &w, None).is_none(),
        "a weight that needs a gradient"
    );
    // The model's entry point then records the graph: the weight gets its gradient.
    let y = reinforge_torch::linear::linear(&x, &w, None);
    y.sum(Kind::Float).backward();
    let g = w.grad();
    assert!(g.defined() && g.abs().sum(Kind::Float).double_value(&[]) > 0.0);
    let w64 = Tensor::randn([8, 4], (Kind::Double, Device::Cpu));
    let x64 = Tensor::randn([2, 4], (Kind::Double, Device::Cpu));
    assert!(tch::no_grad(|| onednn_linear(&x64, &w64, None)).is_none());
}

#[test]
fn the_kernel_choice_parses_its_two_names_and_rejects_others() {
    assert_eq!("onednn".parse::<CpuLinear>(), Ok(CpuLinear::Onednn));
    assert_eq!("blas".parse::<CpuLinear>(), Ok(CpuLinear::Blas));
    let err = "mkl".parse::<CpuLinear>().unwrap_err();
    assert!(
        err.contains("REINFORGE_CPU_LINEAR") && err.contains("mkl"),
        "{err}"
    );
}

#[test]
fn only_sampling_forwards_use_onednn_so_training_passes_stay_bit_exact() {
    tch::manual_seed(3);
    let w = Tensor::randn([64, 96], (Kind::Float, Device::Cpu));
    let x = Tensor::randn([9, 96], (Kind::Float, Device::Cpu));
    let blas = x.linear::<Tensor>(&w, None);
    // A pass without gradient outside sampling (old log-probs, a checkpointed layer's first
    // run) computes exactly what `at::linear` computes.
    let outside = tch::no_grad(|| reinforge_torch::linear::linear(&x, &w, None));
    assert!(outside.equal(&blas));
    // Inside sampling it runs the chosen kernel: oneDNN's result where the shim is built.
    let inside = tch::no_grad(|| {
        reinforge_torch::linear::sampling(|| reinforge_torch::linear::linear(&x, &w, None))
    });
    let onednn = tch::no_grad(|| onednn_linear(&x, &w, None)).unwrap_or(blas);
    if reinforge_torch::linear::cpu_linear() == CpuLinear::Onednn {
        assert!(inside.equal(&onednn));
    }
    assert!(max_rel_diff(&inside, &outside) < 1e-5);
}
