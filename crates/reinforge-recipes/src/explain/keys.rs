//! The one table of a config key's TRL `GRPOConfig` and verl equivalents, read by
//! `reinforge explain`. docs/algorithms.md maps the *names* a key takes (estimators, losses,
//! aggregation modes); this table maps the *keys*. A key it lacks has no equivalent in either.

/// One config key's counterparts; `None` where the framework has no such option.
#[derive(Debug, Clone, Copy)]
pub struct Equivalent {
    /// The reinforge key, as `--set` spells it.
    pub key: &'static str,
    /// TRL `GRPOConfig` field (TRL 1.x).
    pub trl: Option<&'static str>,
    /// verl config path (0.10; `actor.` is `actor_rollout_ref.actor.`, `rollout.` is
    /// `actor_rollout_ref.rollout.`).
    pub verl: Option<&'static str>,
    /// How the two differ from reinforge's meaning, when they do.
    pub note: &'static str,
}

const fn eq(
    key: &'static str,
    trl: Option<&'static str>,
    verl: Option<&'static str>,
    note: &'static str,
) -> Equivalent {
    Equivalent {
        key,
        trl,
        verl,
        note,
    }
}

/// Every key with a counterpart in TRL or verl.
pub const EQUIVALENTS: &[Equivalent] = &[
    eq("seed", Some("seed"), None, ""),
    eq("bf16", Some("bf16"), None, "verl: actor.fsdp_config.mixed_precision"),
    eq("zero_stage", None, None, "TRL: the DeepSpeed/accelerate config; verl: FSDP"),
    eq("memory.max_tokens_per_microbatch", None, Some("actor.ppo_max_token_len_per_gpu"), "verl: with actor.use_dynamic_bsz = true; TRL bounds rows (per_device_train_batch_size), not tokens"),
    eq("memory.gradient_checkpointing", Some("gradient_checkpointing"), Some("actor_rollout_ref.model.enable_gradient_checkpointing"), ""),
    eq("memory.padding_free", Some("padding_free"), Some("actor_rollout_ref.model.use_remove_padding"), ""),
    eq("rl.steps", Some("max_steps"), Some("trainer.total_training_steps"), "TRL counts optimizer steps, reinforge and verl count rollouts"),
    eq("rl.checkpoint_every", Some("save_steps"), Some("trainer.save_freq"), ""),
    eq("rl.prompts_per_step", None, Some("data.train_batch_size"), "TRL: generation_batch_size / num_generations"),
    eq("rl.num_generations", Some("num_generations"), Some("rollout.n"), ""),
    eq("rl.temperature", Some("temperature"), Some("rollout.temperature"), ""),
    eq("rl.top_p", Some("top_p"), Some("rollout.top_p"), ""),
    eq("rl.top_k", Some("top_k"), Some("rollout.top_k"), "0 = off here; verl -1"),
    eq("rl.max_completion_length", Some("max_completion_length"), Some("data.max_response_length"), ""),
    eq("rl.ignore_eos", None, Some("rollout.ignore_eos"), ""),
    eq("rl.dynamic_sampling", None, Some("algorithm.filter_groups.enable"), ""),
    eq("rl.max_draws", None, Some("algorithm.filter_groups.max_num_gen_batches"), ""),
    eq("rl.advantage_estimator", Some("scale_rewards"), Some("algorithm.adv_estimator"), "TRL: group/batch/none std scaling only (docs/algorithms.md)"),
    eq("rl.advantage.norm_by_std", Some("scale_rewards"), Some("algorithm.norm_adv_by_std_in_grpo"), "TRL: scale_rewards = \"none\" for false"),
    eq("rl.advantage.batch_std", Some("scale_rewards"), None, "TRL: scale_rewards = \"batch\" for true (advantage_estimator = \"trl_grpo\")"),
    eq("rl.overlong_buffer_len", None, Some("reward_model.overlong_buffer.len"), "TRL: soft_punish_cache of trl.rewards.get_soft_overlong_punishment, a reward function"),
    eq("rl.overlong_penalty_factor", None, Some("reward_model.overlong_buffer.penalty_factor"), ""),
    eq("rl.policy_loss", Some("loss_type"), Some("actor.policy_loss.loss_mode"), "TRL: cispo and sapo only; gspo is importance_sampling_level = \"sequence\""),
    eq("rl.loss_agg_mode", Some("loss_type"), Some("actor.loss_agg_mode"), "TRL's loss_type fixes the aggregation (docs/algorithms.md)"),
    eq("rl.epsilon_low", Some("epsilon"), Some("actor.clip_ratio_low"), ""),
    eq("rl.epsilon_high", Some("epsilon_high"), Some("actor.clip_ratio_high"), ""),
    eq("rl.clip_ratio_c", Some("delta"), Some("actor.clip_ratio_c"), "TRL's delta (two-sided GRPO) equals it when delta >= 1 + epsilon_high"),
    eq("rl.clamp_log_ratio", None, None, "true: verl's ±20 log-ratio clamp; TRL clamps nothing (false)"),
    eq("rl.beta", Some("beta"), Some("actor.kl_loss_coef"), "verl: with actor.use_kl_loss = true"),
    eq("rl.kl_estimator", None, Some("actor.kl_loss_type"), "TRL: k3 without clamps always (k3_unclamped)"),
    eq("rl.entropy_coef", None, Some("actor.entropy_coeff"), ""),
    eq("rl.tau_pos", Some("sapo_temperature_pos"), Some("actor.policy_loss.tau_pos"), ""),
    eq("rl.tau_neg", Some("sapo_temperature_neg"), Some("actor.policy_loss.tau_neg"), ""),
    eq("rl.dro_beta", None, Some("actor.policy_loss.dro_beta"), ""),
    eq("rl.kl_cov_ratio", None, Some("actor.policy_loss.kl_cov_ratio"), ""),
    eq("rl.ppo_kl_coef", None, Some("actor.policy_loss.ppo_kl_coef"), ""),
    eq("rl.clip_cov_ratio", None, Some("actor.policy_loss.clip_cov_ratio"), ""),
    eq("rl.clip_cov_lb", None, Some("actor.policy_loss.clip_cov_lb"), ""),
    eq("rl.clip_cov_ub", None, Some("actor.policy_loss.clip_cov_ub"), ""),
    eq("rl.mask_truncated", Some("mask_truncated_completions"), None, ""),
    eq("rl.tis", Some("vllm_importance_sampling_mode"), Some("algorithm.rollout_is"), ""),
    eq("rl.tis_cap", Some("vllm_importance_sampling_cap"), Some("algorithm.rollout_is_threshold"), ""),
    eq("rl.ppo_epochs", Some("num_iterations"), Some("actor.ppo_epochs"), ""),
    eq("rl.mini_batches", Some("steps_per_generation"), None, "verl: actor.ppo_mini_batch_size = data.train_batch_size / mini_batches (prompts)"),
    eq("rl.lr", Some("learning_rate"), Some("actor.optim.lr"), ""),
    eq("rl.max_grad_norm", Some("max_grad_norm"), Some("actor.grad_clip"), ""),
    eq("rl.weight_decay", Some("weight_decay"), Some("actor.optim.weight_decay"), ""),
];

/// The table's entry for `key`.
pub fn equivalent(key: &str) -> Option<&'static Equivalent> {
    EQUIVALENTS.iter().find(|e| e.key == key)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every key of the table is a key of the config schema, so a renamed key cannot leave a
    /// stale row behind.
    #[test]
    fn every_mapped_key_is_a_config_key() {
        let schema = reinforge_train::overrides::schema().unwrap();
        for e in EQUIVALENTS {
            let mut node = &schema;
            for part in e.key.split('.') {
                node = node
                    .get(part)
                    .unwrap_or_else(|| panic!("{} is not a config key", e.key));
            }
            assert!(!node.is_table(), "{} is a section", e.key);
        }
    }
}
