//! Rewards that cannot stall a step (`timeout_s`): a learned component that hangs for ever and
//! one that crashes give their rows `timeout_score`, named in `failed`, within the deadline;
//! the other components keep their values.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use reinforge_reward::{Failure, Learned, ModelScorer, Reward, RewardSpec, Sample};

/// A learned scorer that behaves as told: answers 0.5, never answers, or panics.
enum Behaviour {
    Answers,
    Hangs,
    Crashes,
}

impl ModelScorer for Behaviour {
    fn score(&self, prompts: &[&str], _responses: &[&str]) -> Result<Vec<f64>> {
        match self {
            Behaviour::Answers => Ok(vec![0.5; prompts.len()]),
            Behaviour::Hangs => loop {
                std::thread::sleep(Duration::from_secs(3600));
            },
            Behaviour::Crashes => panic!("a reward model that crashes"),
        }
    }
}

fn spec(timeout_s: f64) -> RewardSpec {
    RewardSpec::from_toml(&format!(
        r#"
timeout_s = {timeout_s}
timeout_score = -1.0
[components.math]
type = "math"
[components.good]
type = "model"
path = "unused"
batch_size = 2
[components.stuck]
type = "model"
path = "unused"
batch_size = 3
[components.broken]
type = "judge"
path = "unused"
"#
    ))
    .unwrap()
}

fn reward(timeout_s: f64) -> Reward {
    Reward::with_models(spec(timeout_s), None, &|name, _: Learned| {
        let b = match name {
            "good" => Behaviour::Answers,
            "stuck" => Behaviour::Hangs,
            _ => Behaviour::Crashes,
        };
        Ok(Arc::new(b) as Arc<dyn ModelScorer>)
    })
    .unwrap()
}

#[test]
fn hung_and_crashed_components_score_timeout_score_within_the_deadline() {
    let samples: Vec<Sample> = (0..3)
        .map(|i| Sample {
            prompt: format!("{i}+1="),
            response: format!("The answer is {}.", i + 1),
            label: Some((i + 1).to_string()),
        })
        .collect();
    // A deadline long enough for a crash to be seen as one (the panic hook may print a
    // symbolised backtrace first), short enough for the test.
    let r = reward(3.0);
    let t = Instant::now();
    let scored = r.score(&samples).unwrap();
    // One batch of the hung component waits the deadline; nothing else waits.
    let waited = t.elapsed();
    assert!(waited >= Duration::from_secs(3), "{waited:?}");
    assert!(waited < Duration::from_secs(8), "{waited:?}");
    for s in &scored {
        assert_eq!(s.components["math"], 1.0, "{s:?}");
        assert_eq!(s.components["good"], 0.5);
        assert_eq!(s.components["stuck"], -1.0);
        assert_eq!(s.components["broken"], -1.0);
        assert_eq!(s.failed["stuck"], Failure::Timeout);
        assert_eq!(s.failed["broken"], Failure::Crash);
        assert!(!s.failed.contains_key("math") && !s.failed.contains_key("good"));
        assert_eq!(s.total, 1.0 + 0.5 - 1.0 - 1.0);
    }
    let json = serde_json::to_value(&scored[0]).unwrap();
    assert_eq!(json["failed"]["stuck"], "timeout");
}

/// A spec whose only learned component hangs, scored one sample per batch.
fn stuck_alone(timeout_s: f64) -> Reward {
    let spec = RewardSpec::from_toml(&format!(
        "timeout_s = {timeout_s}\n[components.math]\ntype = \"math\"\n[components.stuck]\ntype = \"model\"\npath = \"unused\"\nbatch_size = 1\n"
    ))
    .unwrap();
    Reward::with_models(spec, None, &|_, _: Learned| {
        Ok(Arc::new(Behaviour::Hangs) as Arc<dyn ModelScorer>)
    })
    .unwrap()
}

#[test]
fn a_batch_waits_one_deadline_and_a_stuck_component_is_disabled() {
    let samples: Vec<Sample> = (0..12)
        .map(|i| Sample {
            prompt: format!("{i}+1="),
            response: format!("The answer is {}.", i + 1),
            label: Some((i + 1).to_string()),
        })
        .collect();
    let r = stuck_alone(1.0);
    for call in 0..reinforge_reward::BREAK_AFTER + 1 {
        let t = Instant::now();
        let scored = r.score(&samples).unwrap();
        let waited = t.elapsed();
        // Twelve batches of one sample share the batch's one deadline (not 12 s); once the
        // component has failed BREAK_AFTER times it is not called, and nothing waits.
        if call < reinforge_reward::BREAK_AFTER {
            assert!(
                waited >= Duration::from_millis(950),
                "call {call}: {waited:?}"
            );
            assert!(waited < Duration::from_secs(3), "call {call}: {waited:?}");
            assert_eq!(scored[0].failed["stuck"], Failure::Timeout);
        } else {
            assert!(
                waited < Duration::from_millis(500),
                "call {call}: {waited:?}"
            );
            assert_eq!(scored[0].failed["stuck"], Failure::Disabled);
        }
        for s in &scored {
            assert_eq!(s.components["math"], 1.0, "call {call}: {s:?}");
            assert_eq!(s.credited, Some(true));
            assert!(s.failed.contains_key("stuck"));
        }
    }
}

#[test]
fn timeout_s_must_be_a_number_of_seconds() {
    let text = "timeout_s = -1\n[components.m]\ntype = \"math\"\n";
    let e = format!("{:#}", RewardSpec::from_toml(text).unwrap_err());
    assert!(e.contains("timeout_s"), "{e}");
    let ok = RewardSpec::from_toml("[components.m]\ntype = \"math\"\n").unwrap();
    assert_eq!((ok.timeout_s, ok.timeout_score), (60.0, 0.0));
    let s = Sample {
        prompt: "1+1=".into(),
        response: "The answer is 2.".into(),
        label: Some("2".into()),
    };
    let scored = Reward::new(ok, None).unwrap().score(&[s]).unwrap();
    assert!(scored[0].failed.is_empty());
    assert_eq!(scored[0].total, 1.0);
}
