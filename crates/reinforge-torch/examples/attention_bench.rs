//! Times the decoding-step attention kernel (src/decode_attention.rs) against libtorch's sdpa
//! on SmolLM2-135M's shape: 30 layers, 32 rows, 9 query / 3 key-value heads of 64, each
//! layer's cache a view of `POSITIONS` slots of a 512-slot buffer (as the sampler's cache).
//! Usage: attention_bench [POSITIONS...]   (default 64 290; env THREADS, default 2; REPS, 10)
#[path = "support/env.rs"]
mod env;
use env::env_or;

use std::time::Instant;

use reinforge_torch::kernels::decode_attention::attend;
use reinforge_torch::tch::{self, Device, Kind, Tensor};

fn main() {
    let threads: i32 = env_or("THREADS", 2);
    let reps: usize = env_or("REPS", 10);
    tch::set_num_threads(threads);
    let positions: Vec<i64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let positions = if positions.is_empty() {
        vec![64, 290]
    } else {
        positions
    };
    let (rows, heads, kv, d, layers) = (32i64, 9i64, 3i64, 64i64, 30usize);
    let opts = (Kind::Float, Device::Cpu);
    let caches: Vec<(Tensor, Tensor)> = (0..layers)
        .map(|_| {
            (
                Tensor::randn([rows, kv, 512, d], opts),
                Tensor::randn([rows, kv, 512, d], opts),
            )
        })
        .collect();
    let q = Tensor::randn([rows, heads, 1, d], opts);
    let _g = tch::no_grad_guard();
    for s in positions {
        let mask = Tensor::ones([rows, 1, 1, s], (Kind::Bool, Device::Cpu));
        let views: Vec<(Tensor, Tensor)> = caches
            .iter()
            .map(|(k, v)| (k.narrow(2, 0, s), v.narrow(2, 0, s)))
            .collect();
        let mut best = [f64::MAX; 2];
        for _ in 0..reps {
            for (i, best) in best.iter_mut().enumerate() {
                let t = Instant::now();
                for (k, v) in &views {
                    let _y = if i == 0 {
                        reinforge_torch::kernels::linear::sampling(|| attend(&q, k, v, &mask))
                            .expect("the kernel applies")
                    } else {
                        Tensor::scaled_dot_product_attention(
                            &q,
                            k,
                            v,
                            Some(&mask),
                            0.0,
                            false,
                            None,
                            true,
                        )
                    };
                }
                *best = best.min(t.elapsed().as_secs_f64() * 1e3);
            }
        }
        println!(
            "positions {s}: kernel {:.1} ms, sdpa {:.1} ms (30 layers, best of {reps})",
            best[0], best[1]
        );
    }
}
