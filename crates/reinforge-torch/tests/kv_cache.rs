//! The preallocated KV cache: decoding through joins and retirements equals the uncached
//! forward pass, and decoding below capacity writes in place (no reallocation per step).

use reinforge_torch::kernels::decode_attention::kernel_calls_on_this_thread;
use reinforge_torch::model::cache::KvCache;
use reinforge_torch::model::transformer::{positions_from_mask, ForwardInput};
use reinforge_torch::sample::left_pad;
use reinforge_torch::tch::{Device, Kind, Tensor};
use reinforge_torch::{ModelConfig, Policy};

fn tiny() -> ModelConfig {
    serde_json::from_value(serde_json::json!({
        "vocab_size": 11, "hidden_size": 16, "intermediate_size": 24, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 128,
        "tie_word_embeddings": true, "rms_norm_eps": 1e-6
    }))
    .unwrap()
}

/// Heads of 8 dimensions, four query heads per key/value head: decoding steps run the decode
/// attention kernel (src/decode_attention.rs), which needs a multiple of 8; `tiny`'s heads of
/// 4 run sdpa.
fn tiny_kernel_heads() -> ModelConfig {
    serde_json::from_value(serde_json::json!({
        "vocab_size": 11, "hidden_size": 64, "intermediate_size": 48, "num_hidden_layers": 2,
        "num_attention_heads": 8, "num_key_value_heads": 2, "max_position_embeddings": 128,
        "tie_word_embeddings": true, "rms_norm_eps": 1e-6
    }))
    .unwrap()
}

/// A running batch decoded through the cache: each row's tokens, the key mask (left padding
/// false) and the logits of each row's next token.
struct Batch {
    cache: KvCache,
    rows: Vec<Vec<i64>>,
    mask: Tensor,
    logits: Tensor,
}

impl Batch {
    /// Prefills `prompts` (left-padded) into a cache reserving `slots` positions.
    fn prefill(p: &Policy, prompts: &[Vec<i64>], slots: i64) -> Self {
        let (ids, mask) = left_pad(prompts, 0, Device::Cpu);
        let mut cache = KvCache::with_capacity(p.model.config().num_hidden_layers, slots);
        let logits = forward(p, &mut cache, &ids, &positions_from_mask(&mask), &mask);
        Self {
            cache,
            rows: prompts.to_vec(),
            mask,
            logits,
        }
    }

    /// Feeds row `i` token `tokens[i]`.
    fn step(&mut self, p: &Policy, tokens: &[i64]) {
        let n = tokens.len() as i64;
        let ones = Tensor::ones([n, 1], (Kind::Bool, Device::Cpu));
        self.mask = Tensor::cat(&[&self.mask, &ones], 1);
        let pos: Vec<i64> = self.rows.iter().map(|r| r.len() as i64).collect();
        for (row, &t) in self.rows.iter_mut().zip(tokens) {
            row.push(t);
        }
        let ids = Tensor::from_slice(tokens).view([n, 1]);
        let positions = Tensor::from_slice(&pos).view([n, 1]);
        self.logits = forward(p, &mut self.cache, &ids, &positions, &self.mask);
    }

    /// Keeps rows `keep`, in that order.
    fn retain(&mut self, keep: &[i64]) {
        let idx = Tensor::from_slice(keep);
        self.cache.retain_rows(&idx);
        self.mask = self.mask.index_select(0, &idx);
        self.logits = self.logits.index_select(0, &idx);
        self.rows = keep
            .iter()
            .map(|&j| self.rows[j as usize].clone())
            .collect();
    }

    /// Appends the rows of `other`; the shorter key mask is left-padded.
    fn join(&mut self, other: Batch) {
        let (a, b) = (self.mask.size()[1], other.mask.size()[1]);
        let pad = |m: &Tensor, by: i64| m.constant_pad_nd([by.max(0), 0]);
        self.mask = Tensor::cat(&[pad(&self.mask, b - a), pad(&other.mask, a - b)], 0);
        self.cache.join(other.cache);
        self.logits = Tensor::cat(&[&self.logits, &other.logits], 0);
        self.rows.extend(other.rows);
    }

    /// Every row's cached next-token logits against an uncached forward pass of that row
    /// alone (no padding): the largest absolute difference.
    fn max_diff_to_uncached(&self, p: &Policy) -> f64 {
        let mut worst = 0f64;
        for (i, row) in self.rows.iter().enumerate() {
            let ids = Tensor::from_slice(row).view([1, -1]);
            let mask = Tensor::ones([1, row.len() as i64], (Kind::Bool, Device::Cpu));
            let full = p.model.forward(
                &ForwardInput {
                    ids: &ids,
                    positions: &positions_from_mask(&mask),
                    key_mask: &mask,
                    segments: &[],
                    images: None,
                },
                None,
                true,
            );
            let d = (full.view([-1]) - self.logits.get(i as i64)).abs().max();
            worst = worst.max(d.double_value(&[]));
        }
        worst
    }
}

/// Last-position logits `[B, V]` of one cached forward pass.
fn forward(p: &Policy, cache: &mut KvCache, ids: &Tensor, pos: &Tensor, mask: &Tensor) -> Tensor {
    p.model
        .forward(
            &ForwardInput {
                ids,
                positions: pos,
                key_mask: mask,
                segments: &[],
                images: None,
            },
            Some(cache),
            true,
        )
        .squeeze_dim(1)
}

/// Deterministic tokens below the tiny vocabulary for `n` rows at step `s`.
fn tokens(n: usize, s: usize) -> Vec<i64> {
    (0..n)
        .map(|i| ((3 * i + 5 * s + 1) % 10 + 1) as i64)
        .collect()
}

/// A mixed sequence of continuous batching: decode, retire rows, admit a shorter batch
/// (written into free rows in place), admit a longer one (the running rows shift right),
/// retire again, decode past the reserved capacity. At every step each row's cached logits
/// equal its uncached forward pass.
#[test]
fn cache_matches_uncached_forward_through_joins_and_retirements() {
    joins_and_retirements(&tiny());
}

/// The same sequence where decoding steps run the decode attention kernel (counted: the
/// kernel, not sdpa standing in for it, computed this thread's decoding attention).
#[test]
fn kernel_attention_matches_uncached_forward_through_joins_and_retirements() {
    let before = kernel_calls_on_this_thread();
    joins_and_retirements(&tiny_kernel_heads());
    let ran = kernel_calls_on_this_thread() - before;
    if cfg!(reinforge_decode_attention) {
        assert!(ran > 0, "the decoding steps never ran the kernel");
    } else {
        assert_eq!(ran, 0);
        crate::hf_support::real_model::skip("the decode attention shim is not built");
    }
}

fn joins_and_retirements(cfg: &ModelConfig) {
    let p = Policy::new(cfg, Device::Cpu, 11).unwrap();
    let _guard = reinforge_torch::tch::no_grad_guard();
    let mut b = Batch::prefill(&p, &[vec![1, 2, 3], vec![4, 5], vec![6, 7, 8, 9]], 8);
    let mut checked = 0;
    let mut check = |b: &Batch| {
        let d = b.max_diff_to_uncached(&p);
        assert!(d < 1e-5, "step {checked}: max |cached - uncached| = {d}");
        checked += 1;
    };
    check(&b);
    for s in 0..3 {
        b.step(&p, &tokens(3, s));
        check(&b);
    }
    // A row finishes: the others keep their place, the buffers keep their row room and
    // their memory (written in place, no new buffer).
    let before = b.cache.key_buffer_address(0);
    b.retain(&[0, 2]);
    assert_eq!(b.cache.row_capacity(), 3);
    assert_eq!(b.cache.key_buffer_address(0), before, "retained in place");
    check(&b);
    b.step(&p, &tokens(2, 3));
    check(&b);
    // A shorter batch joins into the free row without moving the running rows.
    let before = b.cache.key_buffer_address(0);
    b.join(Batch::prefill(&p, &[vec![2, 3]], 0));
    assert_eq!(b.cache.key_buffer_address(0), before, "joined in place");
    check(&b);
    for s in 4..6 {
        b.step(&p, &tokens(3, s));
        check(&b);
    }
    // A batch longer than the running one: the running rows move right (left padding).
    let long: Vec<i64> = (0..14).map(|i| i % 10 + 1).collect();
    b.join(Batch::prefill(
        &p,
        &[long, vec![5, 4, 3, 2, 1, 9, 8, 7, 6, 5, 4, 3]],
        0,
    ));
    check(&b);
    // Rows retired out of order and repeated (samples sharing a prefilled prompt).
    b.retain(&[4, 0, 3, 3]);
    check(&b);
    // Past the reserved slots: the buffers grow and the results stay equal.
    for s in 6..30 {
        b.step(&p, &tokens(4, s));
        check(&b);
    }
    assert!(b.cache.capacity() >= b.cache.len());
}

/// Below capacity a decoding step writes into the same buffers (no reallocation per token);
/// past it the capacity doubles, and then stays put again: reallocations are logarithmic in
/// the number of tokens.
#[test]
fn decoding_below_capacity_does_not_reallocate() {
    let p = Policy::new(&tiny(), Device::Cpu, 12).unwrap();
    let _guard = reinforge_torch::tch::no_grad_guard();
    let mut b = Batch::prefill(&p, &[vec![1, 2, 3, 4, 5], vec![6, 7]], 40);
    assert_eq!(b.cache.capacity(), 40);
    let addresses = |c: &KvCache| (0..2).map(|l| c.key_buffer_address(l)).collect::<Vec<_>>();
    let first = addresses(&b.cache);
    assert!(first.iter().all(Option::is_some));
    for s in 0..35 {
        b.step(&p, &tokens(2, s));
        assert_eq!(b.cache.capacity(), 40, "step {s}");
        assert_eq!(
            addresses(&b.cache),
            first,
            "step {s}: reallocated below capacity"
        );
    }
    assert_eq!(b.cache.len(), 40);
    let mut capacities = vec![b.cache.capacity()];
    for s in 35..120 {
        b.step(&p, &tokens(2, s));
        if capacities.last() != Some(&b.cache.capacity()) {
            capacities.push(b.cache.capacity());
        }
    }
    assert_eq!(capacities, vec![40, 80, 160], "doubling");
    assert!(b.max_diff_to_uncached(&p) < 1e-5);
}

/// Without a reserve the first allocation still leaves room (no regrowth every step).
#[test]
fn an_unreserved_cache_grows_geometrically() {
    let p = Policy::new(&tiny(), Device::Cpu, 13).unwrap();
    let _guard = reinforge_torch::tch::no_grad_guard();
    let mut b = Batch::prefill(&p, &[vec![1, 2]], 0);
    let mut reallocations = 0;
    for s in 0..100 {
        let before = b.cache.key_buffer_address(1);
        b.step(&p, &tokens(1, s));
        reallocations += usize::from(b.cache.key_buffer_address(1) != before);
    }
    assert!(
        reallocations <= 3,
        "{reallocations} reallocations in 100 steps"
    );
    assert!(b.max_diff_to_uncached(&p) < 1e-5);
}
