//! Prompt-to-Leaderboard models (lmarena/p2l): a transformer backbone whose hidden state at
//! the prompt's last token feeds linear heads giving one Bradley-Terry coefficient per model
//! (`coefs`), and, for the tie-aware losses, `eta` (and `gamma` for `ba`), as p2l's `BTHead`,
//! `RKHead` and `BAHead`. p2l appends a CLS token and reads its hidden state; here the last
//! token of the rendered prompt plays that role (the prompt's final position, as a
//! `*ForSequenceClassification` model reads it). Trained with [`crate::train::loss::p2l::P2lLoss`].

use std::path::Path;

use anyhow::{bail, Context, Result};
use tch::nn::{Init, VarStore};
use tch::{Device, Kind, Tensor};

use crate::model::config::ModelConfig;
use crate::model::policy::Policy;
use crate::model::transformer::Transformer;
use crate::train::loss::p2l::{HeadOutputs, P2lLoss};
use crate::train::optim::{AdamW, AdamWConfig, GradStep};

/// The weights file of a P2L model directory (backbone and heads).
pub const P2L_WEIGHTS: &str = "p2l.safetensors";

/// A head's outputs for a batch of prompts (owned tensors).
pub struct Heads {
    pub coefs: Tensor,
    pub eta: Option<Tensor>,
    pub gamma: Option<Tensor>,
}

impl Heads {
    /// The loss's view of these outputs.
    pub fn view(&self) -> HeadOutputs<'_> {
        HeadOutputs {
            coefs: &self.coefs,
            eta: self.eta.as_ref(),
            gamma: self.gamma.as_ref(),
        }
    }
}

/// A linear layer `out = x W^T + b` as p2l's `nn.Linear(hidden, out, bias=True)`.
struct Linear {
    w: Tensor,
    b: Tensor,
}

impl Linear {
    fn new(vs: &VarStore, name: &str, input: i64, output: i64) -> Self {
        let p = vs.root() / name;
        // PyTorch's nn.Linear default init (reset_parameters): U(-1/sqrt(in), 1/sqrt(in)).
        let bound = 1.0 / (input as f64).sqrt();
        let init = Init::Uniform {
            lo: -bound,
            up: bound,
        };
        Linear {
            w: p.var("weight", &[output, input], init),
            b: p.var("bias", &[output], Init::Const(0.0)),
        }
    }

    fn forward(&self, x: &Tensor) -> Tensor {
        x.linear(&self.w, Some(&self.b))
    }
}

/// A P2L model: backbone, coefficient head and the loss's extra heads, in one var store
/// (`policy.vs`, so the trainer's optimizer and checkpoints cover the heads too).
pub struct P2lModel {
    pub policy: Policy,
    pub loss: P2lLoss,
    coefs: Linear,
    eta: Option<Linear>,
    gamma: Option<Linear>,
}

impl P2lModel {
    /// A model for `models` competitors under `loss` with random weights (`seed`).
    pub fn new(
        cfg: &ModelConfig,
        models: usize,
        loss: P2lLoss,
        device: Device,
        seed: i64,
    ) -> Result<Self> {
        cfg.validate()?;
        if models < 2 {
            bail!("a leaderboard needs at least 2 models, got {models}");
        }
        Ok(crate::runtime::with_seed(seed, || {
            let vs = VarStore::new(device);
            let model = Transformer::new(&vs.root(), cfg);
            let h = cfg.hidden_size as i64;
            let coefs = Linear::new(&vs, "p2l_head", h, models as i64);
            let eta = loss
                .needs_eta()
                .then(|| Linear::new(&vs, "p2l_eta_head", h, 1));
            let gamma = loss
                .needs_gamma()
                .then(|| Linear::new(&vs, "p2l_gamma_head", h, 1));
            crate::model::value::freeze_lm_head(&vs);
            Self {
                policy: Policy { vs, model },
                loss,
                coefs,
                eta,
                gamma,
            }
        }))
    }

    /// A model whose backbone is a copy of `policy`'s weights and whose heads are fresh.
    pub fn from_policy(policy: &Policy, models: usize, loss: P2lLoss, seed: i64) -> Result<Self> {
        let p = Self::new(policy.model.config(), models, loss, policy.device(), seed)?;
        let source = policy.vs.variables();
        let _guard = tch::no_grad_guard();
        for (name, mut t) in p.policy.vs.variables() {
            if let Some(s) = source.get(&name) {
                t.copy_(s);
            } else if !name.starts_with("p2l_") {
                bail!("the checkpoint has no parameter `{name}` for the P2L backbone");
            }
        }
        Ok(p)
    }

    /// Head outputs for `prompts` (token ids), read at each prompt's last token.
    pub fn heads(&self, prompts: &[Vec<i64>], pad_id: i64) -> Heads {
        let x = crate::model::logprobs::hidden_at(
            &self.policy.model,
            self.policy.vs.device(),
            prompts,
            pad_id,
            crate::model::logprobs::last_position,
        )
        .to_kind(Kind::Float);
        Heads {
            coefs: self.coefs.forward(&x),
            eta: self.eta.as_ref().map(|l| l.forward(&x)),
            gamma: self.gamma.as_ref().map(|l| l.forward(&x)),
        }
    }

    /// A trained model written by [`Self::save`] (with its `config.json`) in `dir`, on the
    /// CPU.
    pub fn open(dir: &Path, models: usize, loss: P2lLoss) -> Result<Self> {
        let cfg = crate::model::checkpoint::config_json::read(&dir.join("config.json"), false)?;
        // host: a trained P2L model answers on the CPU.
        let mut p2l = Self::new(&cfg, models, loss, Device::Cpu, 0)?;
        p2l.load(dir)?;
        Ok(p2l)
    }

    /// One optimizer step on a batch of battles (label rows `(winner, loser, tie)`, the
    /// columns the loss reads); returns the loss before the step and the step's gradient norm.
    pub fn train_step(
        &self,
        opt: &mut AdamW,
        prompts: &[Vec<i64>],
        labels: &[[i64; 3]],
        pad_id: i64,
        (max_grad_norm, lr): (f64, f64),
    ) -> Result<(f64, GradStep)> {
        opt.zero_grad();
        let heads = self.heads(prompts, pad_id);
        let labels = label_tensor(labels, self.loss).to_device(self.policy.vs.device());
        let loss = self.loss.loss(&heads.view(), &labels, None)?;
        loss.backward();
        let step = opt.clip_and_step(max_grad_norm, lr);
        Ok((loss.double_value(&[]), step))
    }

    /// The mean loss of battles, without gradients (held-out log-likelihood).
    pub fn eval_loss(&self, prompts: &[Vec<i64>], labels: &[[i64; 3]], pad_id: i64) -> Result<f64> {
        let _guard = tch::no_grad_guard();
        let heads = self.heads(prompts, pad_id);
        let labels = label_tensor(labels, self.loss).to_device(self.policy.vs.device());
        Ok(self
            .loss
            .loss(&heads.view(), &labels, None)?
            .double_value(&[]))
    }

    /// Coefficients `[prompts][models]` of `prompts`, 32 prompts per forward pass, without
    /// gradients.
    pub fn coefficients(&self, prompts: &[Vec<i64>], pad_id: i64) -> Result<Vec<Vec<f64>>> {
        let _guard = tch::no_grad_guard();
        let mut out = vec![];
        for chunk in prompts.chunks(32) {
            let c = self.heads(chunk, pad_id).coefs;
            let m = c.size()[1] as usize;
            let flat = Vec::<f64>::try_from(&c.to_kind(Kind::Double).flatten(0, -1))?;
            out.extend(flat.chunks(m).map(<[f64]>::to_vec));
        }
        Ok(out)
    }

    /// Writes every weight to `dir/p2l.safetensors`.
    pub fn save(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(P2L_WEIGHTS);
        self.policy
            .vs
            .save(&path)
            .with_context(|| format!("writing {}", path.display()))
    }

    /// Loads weights written by [`Self::save`].
    pub fn load(&mut self, dir: &Path) -> Result<()> {
        let path = dir.join(P2L_WEIGHTS);
        self.policy
            .vs
            .load(&path)
            .with_context(|| format!("loading {}", path.display()))
    }
}

/// The single global leaderboard under `loss`: a constant head (coefficients, and `eta`,
/// `gamma` where the loss has them) fitted by Adam to all battles; the baseline P2L must beat
/// on held-out log-likelihood.
pub struct GlobalFit {
    pub coefs: Tensor,
    pub eta: Option<Tensor>,
    pub gamma: Option<Tensor>,
}

impl GlobalFit {
    /// Fits on the label rows `labels` (`steps` full-batch Adam steps at `lr`).
    pub fn fit(
        loss: P2lLoss,
        models: usize,
        labels: &[[i64; 3]],
        steps: usize,
        lr: f64,
    ) -> Result<Self> {
        let labels = &label_tensor(labels, loss);
        // host: the global leaderboard fit is a few numbers, fitted on the CPU.
        let vs = VarStore::new(Device::Cpu);
        let root = vs.root();
        let coefs = root.var("coefs", &[1, models as i64], Init::Const(0.0));
        let eta = loss
            .needs_eta()
            .then(|| root.var("eta", &[1, 1], Init::Const(0.0)));
        let gamma = loss
            .needs_gamma()
            .then(|| root.var("gamma", &[1, 1], Init::Const(0.0)));
        let mut opt = AdamW::new(
            &vs,
            AdamWConfig {
                weight_decay: 0.0,
                ..Default::default()
            },
        );
        let fit = GlobalFit { coefs, eta, gamma };
        for _ in 0..steps {
            opt.zero_grad();
            let l = fit.loss_of(loss, labels)?;
            l.backward();
            opt.clip_and_step(f64::INFINITY, lr);
        }
        Ok(fit)
    }

    /// The mean loss of the label rows `labels` under the constant head.
    pub fn loss(&self, loss: P2lLoss, labels: &[[i64; 3]]) -> Result<f64> {
        Ok(self
            .loss_of(loss, &label_tensor(labels, loss))?
            .double_value(&[]))
    }

    fn loss_of(&self, loss: P2lLoss, labels: &Tensor) -> Result<Tensor> {
        let b = labels.size()[0];
        let coefs = self.coefs.expand([b, self.coefs.size()[1]], false);
        let eta = self.eta.as_ref().map(|e| e.expand([b, 1], false));
        let gamma = self.gamma.as_ref().map(|g| g.expand([b, 1], false));
        loss.loss(
            &HeadOutputs {
                coefs: &coefs,
                eta: eta.as_ref(),
                gamma: gamma.as_ref(),
            },
            labels,
            None,
        )
    }
}

/// Label rows as the `[rows, columns]` tensor `loss` reads (its first `label_columns`).
fn label_tensor(labels: &[[i64; 3]], loss: P2lLoss) -> Tensor {
    let cols = loss.label_columns() as usize;
    let flat: Vec<i64> = labels.iter().flat_map(|l| l[..cols].to_vec()).collect();
    // host: labels; callers move them to the model's device.
    Tensor::from_slice(&flat).view([labels.len() as i64, cols as i64])
}
