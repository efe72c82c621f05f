//! Times the CPU linear kernels (src/linear.rs) on the matrix products of one SmolLM2-135M
//! decoding step (30 layers' q, k, v, o, gate, up, down and the 49152-row head), alternated.
//! Usage: linear_bench [ROWS...]   (env THREADS, default 2; REPS, default 5)
#[path = "support/env.rs"]
mod env;
use env::env_or;

use std::time::Instant;

use reinforge_torch::kernels::linear::{dot_linear, onednn_linear};
use reinforge_torch::tch::{self, Device, Kind, Tensor};

fn main() {
    let threads: i32 = env_or("THREADS", 2);
    let reps: usize = env_or("REPS", 5);
    tch::set_num_threads(threads);
    let rows: Vec<i64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let rows = if rows.is_empty() { vec![32] } else { rows };
    let layer = [
        (576, 576),
        (192, 576),
        (192, 576),
        (576, 576),
        (1536, 576),
        (1536, 576),
        (576, 1536),
    ];
    let mut ws: Vec<Tensor> = (0..30)
        .flat_map(|_| {
            layer
                .iter()
                .map(|&(n, k)| Tensor::randn([n, k], (Kind::Float, Device::Cpu)))
        })
        .collect();
    ws.push(Tensor::randn([49152, 576], (Kind::Float, Device::Cpu)));
    let _g = tch::no_grad_guard();
    for m in rows {
        let xs: Vec<Tensor> = [576i64, 1536]
            .iter()
            .map(|&k| Tensor::randn([m, k], (Kind::Float, Device::Cpu)))
            .collect();
        let x_for = |w: &Tensor| if w.size()[1] == 576 { &xs[0] } else { &xs[1] };
        let mut best = [f64::MAX; 3];
        for _ in 0..reps {
            for (i, name) in ["dot", "onednn", "blas"].iter().enumerate() {
                let t = Instant::now();
                for w in &ws {
                    let x = x_for(w);
                    let _y = match *name {
                        "dot" => dot_linear(x, w, None, i64::MAX).expect("dot applies"),
                        "onednn" => onednn_linear(x, w, None).expect("onednn applies"),
                        _ => x.linear::<Tensor>(w, None),
                    };
                }
                best[i] = best[i].min(t.elapsed().as_secs_f64() * 1e3);
            }
        }
        let w = ws.last().unwrap();
        let d = (dot_linear(&xs[0], w, None, i64::MAX).unwrap() - xs[0].linear::<Tensor>(w, None))
            .abs()
            .max()
            .double_value(&[]);
        println!("rows {m}: dot {:.1} ms, onednn {:.1} ms, blas {:.1} ms (best of {reps}); head max diff {d:.2e}", best[0], best[1], best[2]);
    }
}
