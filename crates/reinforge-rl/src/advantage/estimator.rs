//! The estimator registry: every advantage estimator of the crate under verl's
//! `algorithm.adv_estimator` name (`register_adv_est` in core_algos.py @ 1dda039), with the
//! verl function it reproduces and the inputs it needs beyond outcome rewards; and `trl_grpo`
//! (reinforge's name), TRL's GRPO advantages.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An advantage estimator, selected by its verl name (`rl.advantage_estimator` in reinforge's
/// config). Serialises as [`Estimator::name`]; parsing also accepts reinforge's older spellings
/// ([`Estimator::aliases`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Estimator {
    /// `grpo`: verl `compute_grpo_outcome_advantage`; std normalisation per [`AdvantageConfig`].
    #[default]
    Grpo,
    /// `dr_grpo` (reinforge): `grpo` with `norm_adv_by_std_in_grpo = False`, i.e. Dr.GRPO's
    /// mean-centring (Liu et al. 2025) whatever [`AdvantageConfig::norm_by_std`] says.
    DrGrpo,
    /// `grpo_vectorized`: verl `compute_grpo_vectorized_outcome_advantage`.
    GrpoVectorized,
    /// `grpo_passk`: verl `compute_grpo_passk_outcome_advantage` (only each group's best).
    GrpoPassk,
    /// `gdpo`: verl `compute_gdpo_outcome_advantage` with one reward dimension (verl's
    /// `config=None` path): GRPO per dimension, weighted sum, whitened over the batch.
    Gdpo,
    /// `rloo`: verl `compute_rloo_outcome_advantage` (leave-one-out baseline).
    Rloo,
    /// `rloo_vectorized`: verl `compute_rloo_vectorized_outcome_advantage` (singleton -> 0).
    RlooVectorized,
    /// `reinforce_plus_plus`: discounted returns whitened over the batch's tokens.
    ReinforcePlusPlus,
    /// `reinforce_plus_plus_baseline`: group mean subtracted, whitened over the batch.
    ReinforcePlusPlusBaseline,
    /// `gae`: verl `compute_gae_advantage_return`; needs the critic's values.
    Gae,
    /// `opo`: length-weighted group baseline.
    Opo,
    /// `gpg`: GPG's rescaled group-mean baseline.
    Gpg,
    /// `remax`: needs the reward of a greedy response per row as its baseline.
    Remax,
    /// `optimal_token_baseline`: needs the sampler's per-token probabilities and `Σπ²`.
    OptimalTokenBaseline,
    /// `trl_grpo` (reinforge): TRL `GRPOTrainer`'s advantages (grpo_trainer.py @ f2cd577,
    /// [`crate::advantage::trl`]): `nanstd` of the group, or of the batch with
    /// [`AdvantageConfig::batch_std`](crate::AdvantageConfig::batch_std) (TRL `scale_rewards`), a
    /// singleton group 0, unscorable (NaN) scores 0. TRL's `+1e-4` is `advantage.epsilon`.
    TrlGrpo,
}

/// An input beyond rewards, mask and group index that an estimator reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExtraInput {
    /// The critic's value of each token (`gae`).
    Values,
    /// The reward of a greedy response to the same prompt, one per row (`remax`).
    RewardBaselines,
    /// The sampler's log-prob of each token (`optimal_token_baseline`).
    OldLogProbs,
    /// `Σ_v π(v)²` over the vocabulary at each token (`optimal_token_baseline`).
    SumPiSquared,
}

impl ExtraInput {
    /// verl's argument name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Values => "values",
            Self::RewardBaselines => "reward_baselines",
            Self::OldLogProbs => "old_log_probs",
            Self::SumPiSquared => "sum_pi_squared",
        }
    }
}

/// One registry entry: the estimator, its name, accepted aliases, verl's function ("" for
/// `trl_grpo`, which reproduces TRL's) and extras.
struct Entry {
    estimator: Estimator,
    name: &'static str,
    aliases: &'static [&'static str],
    verl_function: &'static str,
    extra: &'static [ExtraInput],
    token_level: bool,
}

const fn entry(
    estimator: Estimator,
    name: &'static str,
    verl_function: &'static str,
    token_level: bool,
) -> Entry {
    Entry {
        estimator,
        name,
        aliases: &[],
        verl_function,
        extra: &[],
        token_level,
    }
}

/// The registry, in the order help text lists it.
const REGISTRY: [Entry; 15] = [
    entry(
        Estimator::Grpo,
        "grpo",
        "compute_grpo_outcome_advantage",
        false,
    ),
    Entry {
        aliases: &["grpo-no-std"],
        ..entry(
            Estimator::DrGrpo,
            "dr_grpo",
            "compute_grpo_outcome_advantage",
            false,
        )
    },
    entry(
        Estimator::GrpoVectorized,
        "grpo_vectorized",
        "compute_grpo_vectorized_outcome_advantage",
        false,
    ),
    entry(
        Estimator::GrpoPassk,
        "grpo_passk",
        "compute_grpo_passk_outcome_advantage",
        false,
    ),
    entry(
        Estimator::Gdpo,
        "gdpo",
        "compute_gdpo_outcome_advantage",
        false,
    ),
    entry(
        Estimator::Rloo,
        "rloo",
        "compute_rloo_outcome_advantage",
        false,
    ),
    entry(
        Estimator::RlooVectorized,
        "rloo_vectorized",
        "compute_rloo_vectorized_outcome_advantage",
        false,
    ),
    Entry {
        aliases: &["reinforce_pp"],
        ..entry(
            Estimator::ReinforcePlusPlus,
            "reinforce_plus_plus",
            "compute_reinforce_plus_plus_outcome_advantage",
            true,
        )
    },
    Entry {
        aliases: &["reinforce_pp_baseline"],
        ..entry(
            Estimator::ReinforcePlusPlusBaseline,
            "reinforce_plus_plus_baseline",
            "compute_reinforce_plus_plus_baseline_outcome_advantage",
            false,
        )
    },
    Entry {
        extra: &[ExtraInput::Values],
        ..entry(Estimator::Gae, "gae", "compute_gae_advantage_return", true)
    },
    entry(
        Estimator::Opo,
        "opo",
        "compute_opo_outcome_advantage",
        false,
    ),
    entry(
        Estimator::Gpg,
        "gpg",
        "compute_gpg_outcome_advantage",
        false,
    ),
    Entry {
        extra: &[ExtraInput::RewardBaselines],
        ..entry(
            Estimator::Remax,
            "remax",
            "compute_remax_outcome_advantage",
            true,
        )
    },
    Entry {
        extra: &[ExtraInput::OldLogProbs, ExtraInput::SumPiSquared],
        ..entry(
            Estimator::OptimalTokenBaseline,
            "optimal_token_baseline",
            "compute_optimal_token_baseline_advantage",
            true,
        )
    },
    entry(Estimator::TrlGrpo, "trl_grpo", "", false),
];

impl Estimator {
    /// Every estimator, in registry order.
    pub const ALL: [Estimator; 15] = [
        Self::Grpo,
        Self::DrGrpo,
        Self::GrpoVectorized,
        Self::GrpoPassk,
        Self::Gdpo,
        Self::Rloo,
        Self::RlooVectorized,
        Self::ReinforcePlusPlus,
        Self::ReinforcePlusPlusBaseline,
        Self::Gae,
        Self::Opo,
        Self::Gpg,
        Self::Remax,
        Self::OptimalTokenBaseline,
        Self::TrlGrpo,
    ];

    fn entry(self) -> &'static Entry {
        REGISTRY
            .iter()
            .find(|e| e.estimator == self)
            .unwrap_or(&REGISTRY[0])
    }

    /// The config and verl name (`dr_grpo` is reinforge's).
    pub fn name(self) -> &'static str {
        self.entry().name
    }

    /// Older reinforge spellings that parse to this estimator.
    pub fn aliases(self) -> &'static [&'static str] {
        self.entry().aliases
    }

    /// The verl function (core_algos.py @ 1dda039) whose numbers this estimator reproduces;
    /// `None` for `trl_grpo`, which reproduces TRL's advantage block instead.
    pub fn verl_function(self) -> Option<&'static str> {
        Some(self.entry().verl_function).filter(|f| !f.is_empty())
    }

    /// Inputs beyond rewards, mask and index; empty for estimators of outcome rewards alone.
    pub fn extra_inputs(self) -> &'static [ExtraInput] {
        self.entry().extra
    }

    /// Whether advantages may differ between the tokens of one row (otherwise every valid
    /// token of a row carries the row's advantage).
    pub fn is_token_level(self) -> bool {
        self.entry().token_level
    }

    /// The names of the estimators that need nothing beyond outcome rewards, group index and
    /// mask (every one but `gae`, `remax` and `optimal_token_baseline`).
    pub fn outcome_names() -> Vec<&'static str> {
        REGISTRY
            .iter()
            .filter(|e| e.extra.is_empty())
            .map(|e| e.name)
            .collect()
    }

    /// Every name, for help text and error messages.
    pub fn names() -> Vec<&'static str> {
        REGISTRY.iter().map(|e| e.name).collect()
    }
}

impl fmt::Display for Estimator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An unknown estimator name; its message lists the valid ones.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown advantage estimator {0:?}; expected one of: {names}", names = Estimator::names().join(", "))]
pub struct UnknownEstimator(pub String);

impl FromStr for Estimator {
    type Err = UnknownEstimator;
    fn from_str(s: &str) -> Result<Self, UnknownEstimator> {
        REGISTRY
            .iter()
            .find(|e| e.name == s || e.aliases.contains(&s))
            .map(|e| e.estimator)
            .ok_or_else(|| UnknownEstimator(s.to_string()))
    }
}

impl Serialize for Estimator {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for Estimator {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_list_the_valid_ones() {
        for e in Estimator::ALL {
            assert_eq!(e.name().parse::<Estimator>(), Ok(e));
            for a in e.aliases() {
                assert_eq!(a.parse::<Estimator>(), Ok(e));
            }
            let toml = toml::to_string(&std::collections::BTreeMap::from([("e", e)])).unwrap();
            assert_eq!(toml.trim(), format!("e = \"{}\"", e.name()));
        }
        assert_eq!(Estimator::names().len(), Estimator::ALL.len());
        let err = "ppo".parse::<Estimator>().unwrap_err().to_string();
        assert!(
            err.contains("\"ppo\"") && err.contains("grpo_passk, gdpo"),
            "{err}"
        );
        let de: Result<std::collections::BTreeMap<String, Estimator>, _> =
            toml::from_str("e = \"reinforce\"");
        let msg = de.unwrap_err().to_string();
        assert!(msg.contains("reinforce_plus_plus_baseline"), "{msg}");
        assert_eq!(Estimator::default(), Estimator::Grpo);
    }
}
