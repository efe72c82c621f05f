//! Tests of the configuration: defaults, presets, `--set` overrides, errors naming the key.
use reinforge_rl::Estimator;
use reinforge_torch::train::loss::{AggMode, KlPenalty, PolicyLossKind, Tis};
use reinforge_train::config::*;
use reinforge_train::presets::Preset;

#[test]
fn every_preset_sets_every_key_of_the_grpo_table() {
    let grpo = toml::Value::try_from(TrainConfig::default().grpo).unwrap();
    for p in Preset::ALL {
        for key in p.table().unwrap().keys() {
            assert!(
                grpo.get(key).is_some(),
                "{}: {key} is no [grpo] key",
                p.name()
            );
        }
    }
}

#[test]
fn defaults_round_trip_through_toml() {
    let cfg = TrainConfig::default();
    let back: TrainConfig = toml::from_str(&cfg.to_toml()).unwrap();
    assert_eq!(back, cfg);
}

#[test]
fn overrides_apply_and_coerce() {
    let cfg = TrainConfig::resolve(
        None,
        &[
            "rl.steps=7".into(),
            "rl.lr=1".into(),
            "name=abc".into(),
            "rl.advantage.norm_by_std=false".into(),
        ],
    )
    .unwrap();
    assert_eq!(cfg.grpo.steps, 7);
    assert_eq!(cfg.grpo.lr, 1.0);
    assert_eq!(cfg.run_name(), "abc");
    assert!(!cfg.grpo.advantage.norm_by_std);
}

#[test]
fn bad_overrides_name_the_key_and_the_expectation() {
    let err = |o: &str| {
        format!(
            "{:#}",
            TrainConfig::resolve(None, &[o.to_string()]).unwrap_err()
        )
    };
    assert!(err("rl.stepz=3").contains("rl.stepz=3") || err("rl.stepz=3").contains("unknown key"));
    assert!(err("rl.stepz=3").contains("steps"), "lists the known keys");
    assert!(
        err("rl.steps=fast").contains("`rl.steps` is of type integer"),
        "{}",
        err("rl.steps=fast")
    );
    assert!(err("grpo").contains("KEY=VALUE"));
    assert!(err("rl.num_generations=0").contains("rl.num_generations must be at least 1"));
    assert!(err("task.direct_share=1.5").contains("task.direct_share"));
}

/// `[rl]` is the section's name: a file's `[grpo]` (its old name) and `--set grpo.KEY` are
/// read as it, presets included; a file with both is refused by name; the written config says
/// `[rl]`.
#[test]
fn the_old_grpo_section_name_is_read_as_rl() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, "[grpo]\nsteps = 5\nalgorithm = \"dapo\"\n").unwrap();
    let cfg = TrainConfig::resolve(Some(&path), &["grpo.beta=0.25".into()]).unwrap();
    let rl = TrainConfig::resolve(
        None,
        &[
            "rl.steps=5".into(),
            "rl.algorithm=dapo".into(),
            "rl.beta=0.25".into(),
        ],
    )
    .unwrap();
    assert_eq!(cfg, rl);
    assert_eq!((cfg.grpo.steps, cfg.grpo.beta), (5, 0.25));
    let written = cfg.to_toml();
    assert!(
        written.contains("[rl]") && !written.contains("[grpo]"),
        "{written}"
    );
    std::fs::write(&path, "[grpo]\nsteps = 5\n[rl]\nsteps = 6\n").unwrap();
    let e = format!("{:#}", TrainConfig::resolve(Some(&path), &[]).unwrap_err());
    assert!(
        e.contains("both [rl] and [grpo]") && e.contains("c.toml"),
        "{e}"
    );
}

#[test]
fn config_file_errors_name_file_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, "[rl]\nsteps = 5\nbogus = 1\n").unwrap();
    let msg = format!("{:#}", TrainConfig::resolve(Some(&path), &[]).unwrap_err());
    assert!(msg.contains("bogus") && msg.contains("c.toml"), "{msg}");
    std::fs::write(&path, "[rl]\nsteps = 5\n").unwrap();
    assert_eq!(
        TrainConfig::resolve(Some(&path), &[]).unwrap().grpo.steps,
        5
    );
}

#[test]
fn default_resolution_is_the_grpo_preset_and_the_old_defaults() {
    let cfg = TrainConfig::resolve(None, &[]).unwrap();
    assert_eq!(cfg, TrainConfig::default());
    assert_eq!(cfg.grpo.algorithm, Preset::Grpo);
    assert_eq!(
        (cfg.grpo.epsilon_low, cfg.grpo.epsilon_high, cfg.grpo.beta),
        (0.2, 0.28, 0.0)
    );
    assert_eq!(cfg.grpo.loss_agg_mode, AggMode::TokenMean);
    assert!(!cfg.grpo.dynamic_sampling && !cfg.grpo.mask_truncated);
}

fn with(algorithm: &str, more: &[&str]) -> RlConfig {
    let mut o = vec![format!("rl.algorithm={algorithm}")];
    o.extend(more.iter().map(|s| s.to_string()));
    TrainConfig::resolve(None, &o).unwrap().grpo
}

#[test]
fn each_preset_resolves_to_its_documented_values() {
    let g = with("dr_grpo", &[]);
    assert_eq!(g.advantage_estimator, Estimator::DrGrpo);
    assert_eq!(g.loss_agg_mode, AggMode::SeqMeanTokenSumNorm);
    let d = with("dapo", &[]);
    assert_eq!((d.epsilon_low, d.epsilon_high, d.beta), (0.2, 0.28, 0.0));
    assert_eq!(d.loss_agg_mode, AggMode::TokenMean);
    assert!(d.dynamic_sampling && d.mask_truncated);
    assert_eq!((d.overlong_buffer_len, d.overlong_penalty_factor), (4, 1.0));
    let s = with("gspo", &[]);
    assert_eq!(
        (s.policy_loss, s.loss_agg_mode),
        (PolicyLossKind::Gspo, AggMode::SeqMeanTokenMean)
    );
    assert_eq!((s.epsilon_low, s.epsilon_high), (3e-4, 4e-4));
    let r = with("rloo", &[]);
    assert_eq!(
        (r.advantage_estimator, r.epsilon_high),
        (Estimator::Rloo, 0.2)
    );
    let p = with("reinforce_pp", &[]);
    assert_eq!(p.advantage_estimator, Estimator::ReinforcePlusPlusBaseline);
    let ppo = with("ppo", &[]);
    assert_eq!(
        (ppo.advantage_estimator, ppo.policy_loss),
        (GAE, PolicyLossKind::Vanilla)
    );
    assert_eq!((ppo.epsilon_low, ppo.epsilon_high), (0.2, 0.2));
    assert!(!ppo.dynamic_sampling && ppo.beta == 0.0);
    let err = TrainConfig::resolve(None, &["rl.algorithm=trpo".into()]).unwrap_err();
    assert!(format!("{err:#}").contains("rl.algorithm"), "{err:#}");
}

#[test]
fn overrides_beat_the_preset_and_config_toml_repeats_the_run() {
    let d = with("dapo", &["rl.epsilon_high=0.3", "rl.max_draws=7"]);
    assert_eq!((d.epsilon_high, d.max_draws), (0.3, 7));
    assert!(d.dynamic_sampling, "the rest of the preset still applies");
    let cfg = TrainConfig::resolve(
        None,
        &["rl.algorithm=dapo".into(), "rl.epsilon_high=0.3".into()],
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    std::fs::write(&path, cfg.to_toml()).unwrap();
    assert!(cfg.to_toml().contains("epsilon_high = 0.3"));
    assert_eq!(TrainConfig::resolve(Some(&path), &[]).unwrap(), cfg);
    // A file naming only the preset gets the preset's values for the keys it leaves out.
    std::fs::write(&path, "[rl]\nalgorithm = \"gspo\"\nepsilon_high = 0.01\n").unwrap();
    let g = TrainConfig::resolve(Some(&path), &[]).unwrap().grpo;
    assert_eq!(
        (g.policy_loss, g.epsilon_high),
        (PolicyLossKind::Gspo, 0.01)
    );
}

#[test]
fn bad_algorithm_options_are_named() {
    let err = |o: &[&str]| {
        let o: Vec<String> = o.iter().map(|s| s.to_string()).collect();
        format!("{:#}", TrainConfig::resolve(None, &o).unwrap_err())
    };
    assert!(err(&["rl.loss_agg_mode=mean"]).contains("rl.loss_agg_mode"));
    assert!(err(&["rl.tis=token"]).contains("recompute_old_logprobs"));
    assert!(err(&["rl.clip_ratio_c=0.5"]).contains("clip_ratio_c"));
    assert!(err(&["rl.kl_estimator=full"]).contains("kl_estimator"));
    let e = err(&["rl.policy_loss=gmpo"]);
    assert!(
        e.contains("rl.policy_loss") && e.contains("geo_mean") && e.contains("reinforce"),
        "names the key and lists the valid names: {e}"
    );
    let e = err(&["rl.loss_agg_mode=mean"]);
    assert!(e.contains("seq-mean-token-sum-norm"), "{e}");
    assert!(err(&["rl.tis=tokens"]).contains("sequence_mask"));
    assert!(err(&["rl.kl_estimator=k4"]).contains("low_var_kl+"));
    assert!(err(&["rl.tau_neg=0"]).contains("rl.tau_neg"));
    assert!(err(&["rl.kl_cov_ratio=0"]).contains("rl.kl_cov_ratio"));
    assert!(err(&["rl.clip_cov_ratio=nan"]).contains("rl.clip_cov_ratio"));
    assert!(err(&["rl.clip_cov_lb=6"]).contains("rl.clip_cov_ub"));
    assert!(err(&["rl.dro_beta=-1"]).contains("rl.dro_beta"));
    // TRL's scale_rewards = "batch" is the `trl_grpo` estimator's; verl's `grpo` has none.
    let batch = err(&["rl.advantage.batch_std=true"]);
    assert!(
        batch.contains("rl.advantage.batch_std") && batch.contains("trl_grpo"),
        "{batch}"
    );
    assert!(TrainConfig::resolve(
        None,
        &[
            "rl.advantage.batch_std=true".to_string(),
            "rl.advantage_estimator=trl_grpo".to_string(),
        ],
    )
    .is_ok());
    let unknown = err(&["rl.advantage_estimator=ppo"]);
    assert!(
        unknown.contains("rl.advantage_estimator") && unknown.contains("grpo_passk, gdpo"),
        "{unknown}"
    );
    let remax = err(&["rl.advantage_estimator=remax"]);
    assert!(
        remax.contains("reward_baselines") && remax.contains("rloo_vectorized"),
        "{remax}"
    );
}

#[test]
fn every_registered_name_is_accepted_and_written_back_unchanged() {
    for name in PolicyLossKind::NAMES {
        let cfg = TrainConfig::resolve(None, &[format!("rl.policy_loss={name}")]).unwrap();
        assert_eq!(cfg.grpo.policy_loss.name(), *name);
        assert!(cfg.to_toml().contains(&format!("policy_loss = \"{name}\"")));
    }
    for name in KlPenalty::NAMES {
        let cfg = TrainConfig::resolve(
            None,
            &[
                format!("rl.kl_estimator={name}"),
                "rl.algorithm=ppo".into(),
                format!("ppo.kl_penalty={name}"),
            ],
        )
        .unwrap();
        assert_eq!(
            (cfg.grpo.kl_estimator.name(), cfg.ppo.kl_penalty.name()),
            (*name, *name)
        );
        let back: TrainConfig = toml::from_str(&cfg.to_toml()).unwrap();
        assert_eq!(back, cfg);
    }
    for name in AggMode::NAMES.iter().chain(Tis::NAMES) {
        let key = if AggMode::NAMES.contains(name) {
            "loss_agg_mode"
        } else {
            "tis"
        };
        let cfg = TrainConfig::resolve(
            None,
            &[
                format!("grpo.{key}={name}"),
                "rl.recompute_old_logprobs=true".into(),
            ],
        )
        .unwrap();
        assert!(cfg.to_toml().contains(&format!("{key} = \"{name}\"")));
    }
}

#[test]
fn ppo_table_defaults_overrides_and_checks() {
    let cfg = TrainConfig::resolve(None, &["rl.algorithm=ppo".into()]).unwrap();
    let p = &cfg.ppo;
    assert_eq!((p.gamma, p.lam, p.cliprange_value), (1.0, 1.0, 0.5));
    assert!(p.whiten_advantages && p.kl_coef == 0.0 && p.critic_warmup == 0);
    assert_eq!(p.epochs(&cfg.grpo), cfg.grpo.ppo_epochs);
    assert_eq!(p.mini_batches(&cfg.grpo), cfg.grpo.mini_batches);
    let cfg = TrainConfig::resolve(
        None,
        &[
            "rl.algorithm=ppo".into(),
            "ppo.lam=0.95".into(),
            "ppo.critic_lr=1e-4".into(),
            "ppo.critic_epochs=3".into(),
        ],
    )
    .unwrap();
    assert_eq!((cfg.ppo.lam, cfg.ppo.critic_lr), (0.95, 1e-4));
    assert_eq!(cfg.ppo.epochs(&cfg.grpo), 3);
    let err = |o: &[&str]| {
        let o: Vec<String> = o.iter().map(|s| s.to_string()).collect();
        format!("{:#}", TrainConfig::resolve(None, &o).unwrap_err())
    };
    assert!(err(&["rl.algorithm=ppo", "ppo.lam=1.5"]).contains("ppo.lam"));
    assert!(err(&["rl.algorithm=ppo", "ppo.critic_lr=0"]).contains("ppo.critic_lr"));
    assert!(err(&["rl.algorithm=ppo", "ppo.kl_penalty=full"]).contains("ppo.kl_penalty"));
    assert!(err(&["ppo.lamda=1"]).contains("unknown key"));
    // A file without [ppo] (older runs) resolves to the defaults; an unknown key is named.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, "[rl]\nsteps = 5\n").unwrap();
    assert_eq!(
        TrainConfig::resolve(Some(&path), &[]).unwrap().ppo,
        PpoConfig::default()
    );
    std::fs::write(&path, "[ppo]\ngama = 0.9\n").unwrap();
    let msg = format!("{:#}", TrainConfig::resolve(Some(&path), &[]).unwrap_err());
    assert!(msg.contains("gama") && msg.contains("ppo"), "{msg}");
}

/// Defaults are written once ([`TrainConfig::default`] and the section `Default`s): a file
/// read directly, without the merge onto the defaults that `resolve` does, gets them too.
#[test]
fn absent_keys_take_the_one_default() {
    let cfg: TrainConfig = toml::from_str("seed = 3\n[grpo]\nsteps = 7\ntau_neg = 2.0\n").unwrap();
    let d = TrainConfig::default();
    assert_eq!((cfg.seed, cfg.grpo.steps, cfg.grpo.tau_neg), (3, 7, 2.0));
    let mut want = d.clone();
    (want.seed, want.grpo.steps, want.grpo.tau_neg) = (3, 7, 2.0);
    assert_eq!(cfg, want);
    assert!(
        toml::from_str::<TrainConfig>("[rl]\nstepz = 1\n").is_err(),
        "unknown keys stay errors"
    );
}

/// The CLI sweep's classes (issue 50): the largest integer in every count key, a subnormal
/// float in the positive ones, huge model sizes and zero heads are each refused naming the
/// key, never a panic or an overflow later.
#[test]
fn extreme_values_are_refused_by_name() {
    let err = |set: &str| -> String {
        let resolved = TrainConfig::resolve(None, &[set.to_string()]);
        let checked = resolved.and_then(|c| c.validate_arith().map(|_| c));
        format!("{:#}", checked.expect_err(set))
    };
    let max = "9223372036854775807";
    for key in [
        "threads",
        "sft.batch_size",
        "sft.steps",
        "rl.steps",
        "rl.prompts_per_step",
        "rl.num_generations",
        "rl.max_completion_length",
        "eval.problems",
        "eval.batch_size",
        "integrity.window",
        "model.vocab_size",
        "model.hidden_size",
        "model.intermediate_size",
        "model.num_hidden_layers",
        "model.max_position_embeddings",
    ] {
        let e = err(&format!("{key}={max}"));
        let field = key.rsplit('.').next().unwrap();
        assert!(e.contains(field) && !e.contains("panicked"), "{key}: {e}");
    }
    for key in ["rl.lr", "rl.temperature", "model.rope_theta", "sft.lr"] {
        let e = err(&format!("{key}=1e-320"));
        assert!(e.contains(key) && e.contains("2.2e-308"), "{key}: {e}");
    }
    let e = err("model.num_attention_heads=0");
    assert!(e.contains("num_attention_heads"), "{e}");
    // Bounded separately, their product is refused.
    let e = err("rl.num_generations=1000000");
    assert!(e.contains("rl.num_generations"), "{e}");
    let product = TrainConfig::resolve(
        None,
        &[
            "rl.prompts_per_step=100000".into(),
            "rl.num_generations=1000".into(),
        ],
    );
    assert!(format!("{:#}", product.unwrap_err()).contains("rollouts per step"));
}
