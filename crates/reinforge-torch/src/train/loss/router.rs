//! The mixture-of-experts load-balancing loss, as transformers' `load_balancing_loss_func`
//! (transformers 5.23, shared by Qwen3-MoE, OLMoE and Mixtral): over every sparse layer's
//! tokens at once, the fraction of top-k choices each expert receives times its mean router
//! probability, summed and scaled by the number of experts (balanced routing gives `k`).
//! With an attention mask, padding tokens count in neither mean. The router's softmax is
//! recomputed from its logits, so the gradient reaches the router weights.

use tch::{Kind, Tensor};

use crate::model::moe::Routing;

/// `E * sum_e f_e * P_e` over the routes of every sparse layer (`[B * T, E]` logits each);
/// `mask` (`[B, T]`, 1 for real tokens) excludes padding. `None` with no sparse layer.
pub fn load_balancing_loss(
    routes: &[Routing],
    top_k: i64,
    mask: Option<&Tensor>,
) -> Option<Tensor> {
    let logits: Vec<&Tensor> = routes.iter().map(|r| &r.logits).collect();
    let first = logits.first()?;
    let experts = first.size()[1];
    let all = Tensor::cat(&logits, 0);
    let probs = all.softmax(-1, Kind::Float);
    let (_, chosen) = probs.topk(top_k, -1, true, true);
    // [L * N, k, E]: which expert each of a token's k choices is.
    let hits = chosen.one_hot(experts).to_kind(Kind::Float);
    let weight = match mask {
        None => Tensor::ones([all.size()[0]], (Kind::Float, all.device())),
        Some(m) => m
            .to_kind(Kind::Float)
            .flatten(0, 1)
            .repeat([routes.len() as i64]),
    };
    let total = weight.sum(Kind::Float);
    let per_expert =
        (hits * weight.view([-1, 1, 1])).sum_dim_intlist(0, false, Kind::Float) / &total;
    let prob_per_expert =
        (&probs * weight.view([-1, 1])).sum_dim_intlist(0, false, Kind::Float) / &total;
    Some((per_expert * prob_per_expert.unsqueeze(0)).sum(Kind::Float) * experts as f64)
}
