//! Seconds per AdamW step of reinforge's optimizer (`reinforge_torch::AdamW`, fused kernel
//! where built in) on a SmolLM2-135M-shaped parameter set, side by side with torch.optim.AdamW
//! in Python (scripts/bench_adamw.py, the same shapes, run by scripts/bench_adamw.sh). Prints
//! one JSON line: the median over `ITERS` steps after one warm-up step.
#[path = "support/env.rs"]
mod env;
use env::env_or;

use std::time::Instant;

use reinforge_torch::tch::{nn::VarStore, Device, Kind, Tensor};
use reinforge_torch::{AdamW, AdamWConfig};

/// SmolLM2-135M's matrices: the tied embedding, 30 layers of attention and MLP (576 hidden,
/// 1536 intermediate, 3 KV heads of 64), the norms.
fn shapes() -> Vec<Vec<i64>> {
    let mut s = vec![vec![49152, 576]];
    for _ in 0..30 {
        s.extend([
            vec![576, 576],
            vec![192, 576],
            vec![192, 576],
            vec![576, 576],
        ]);
        s.extend([vec![1536, 576], vec![1536, 576], vec![576, 1536]]);
        s.extend([vec![576], vec![576]]);
    }
    s.push(vec![576]);
    s
}

fn main() {
    let threads: i32 = env_or("THREADS", 2);
    let iters: usize = env_or("ITERS", 10);
    reinforge_torch::tch::set_num_threads(threads);
    let vs = VarStore::new(Device::Cpu);
    let params: Vec<Tensor> = shapes()
        .iter()
        .enumerate()
        .map(|(i, s)| vs.root().randn(&format!("p{i}"), s, 0.0, 0.02))
        .collect();
    let count: i64 = params.iter().map(Tensor::numel).map(|n| n as i64).sum();
    let mut opt = AdamW::new(
        &vs,
        AdamWConfig {
            weight_decay: 0.0,
            ..AdamWConfig::default()
        },
    );
    // One backward pass defines every gradient; each step then overwrites them in place.
    params
        .iter()
        .map(|p| p.sum(Kind::Float))
        .fold(Tensor::zeros([], (Kind::Float, Device::Cpu)), |a, b| a + b)
        .backward();
    let mut times = vec![];
    for i in 0..=iters {
        for p in &params {
            p.grad().copy_(&Tensor::randn_like(p));
        }
        let start = Instant::now();
        opt.step(1e-4);
        if i > 0 {
            times.push(start.elapsed().as_secs_f64());
        }
    }
    times.sort_by(f64::total_cmp);
    println!(
        "{{\"impl\": \"reinforge\", \"params\": {count}, \"threads\": {threads}, \"median_s\": {:.6}}}",
        times[times.len() / 2]
    );
}
