#!/usr/bin/env python3
"""Golden vectors of TRL's ORPO and KTO losses, produced by running TRL's own trainer methods.

ORPO: `ORPOTrainer.get_batch_loss_metrics` runs unchanged, with TRL's own `concatenated_forward`,
`concatenated_inputs`, `odds_ratio_loss` and `get_batch_logps` bound to a stand-in `self`. The
stand-in model returns two-token logits whose log-softmax at label token 0 equals a given per-token
log-prob (logits = [lp, log(1 - exp(lp))]), so the NLL term, the averaged sequence log-probs and the
odds ratio all come from TRL's code and gradients flow back to the per-token log-probs.

KTO: `KTOTrainer._compute_loss` runs unchanged on a stand-in `self` (precomputed reference
log-probs) and a stand-in model whose forward returns given per-token log-probs, one tensor for the
main forward and one for the KL forward (told apart by the token ids it receives).

Inputs are generated float64 values (seeded); gradients come from torch autograd through TRL's
code. Writes fixtures/oracles/orpo/trl_orpo_loss.json and fixtures/oracles/kto/trl_kto_loss.json.

Usage: .venv-trl/bin/python scripts/make_orpo_kto_oracles.py   (scripts/bench_trl.sh makes .venv-trl)
"""
import json
import types
from collections import defaultdict
from pathlib import Path

import torch
import trl
from trl.experimental.orpo.orpo_trainer import ORPOTrainer
from trl.trainer.kto_trainer import KTOTrainer

ROOT = Path(__file__).resolve().parent.parent
ORPO_METRICS = ["rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins", "logps/chosen",
                "logps/rejected", "nll_loss", "log_odds_ratio", "log_odds_chosen"]
KTO_METRICS = ["kl", "rewards/chosen", "rewards/rejected", "rewards/margins", "logps/chosen", "logps/rejected"]
KL_ID, MAIN_ID = 2, 1


class Accel:
    device = torch.device("cpu")

    def gather_for_metrics(self, x):
        return x

    def gather(self, x):
        return x


def token_logps(rng, shape, lo=-3.0, hi=-0.01):
    """Per-token log-probs uniform in [lo, hi], rounded to 6 decimals."""
    return (lo + (hi - lo) * torch.rand(shape, generator=rng, dtype=torch.float64)).round(decimals=6)


def same(x, what):
    """All entries of `x` equal (to float64 rounding); returns the first."""
    assert torch.allclose(x, x[0].expand_as(x), rtol=1e-14, atol=0.0), f"{what} differ: {x.tolist()}"
    return x[0].item()


# ---------------------------------------------------------------- ORPO

def orpo_self(beta):
    s = types.SimpleNamespace(beta=beta, is_encoder_decoder=False, padding_value=0, aux_loss_enabled=False,
                              accelerator=Accel())
    # TRL's static methods are plain functions on an instance; the others are bound to the stand-in.
    s.concatenated_inputs = ORPOTrainer.concatenated_inputs
    s.get_batch_logps = ORPOTrainer.get_batch_logps
    s.odds_ratio_loss = types.MethodType(ORPOTrainer.odds_ratio_loss, s)
    s.concatenated_forward = types.MethodType(ORPOTrainer.concatenated_forward, s)
    return s


def side(prompt, comp):
    """Right-padded token ids (all 0), attention mask and labels (prompt and padding -100) of one side."""
    width = int((prompt + comp).max())
    ids = torch.zeros(len(prompt), width, dtype=torch.long)
    att = torch.zeros(len(prompt), width, dtype=torch.long)
    labels = torch.full((len(prompt), width), -100, dtype=torch.long)
    for i, (p, n) in enumerate(zip(prompt.tolist(), comp.tolist())):
        att[i, :p + n] = 1
        labels[i, p:p + n] = 0
    return ids, att, labels


def orpo_case(rng, beta, pairs, min_prompt=1, max_prompt=4, chosen_range=(-3.0, -0.01), rejected_range=(-3.0, -0.01)):
    prompt = torch.randint(min_prompt, max_prompt + 1, (pairs,), generator=rng)
    n_c = torch.randint(1, 6, (pairs,), generator=rng)
    n_r = torch.randint(1, 6, (pairs,), generator=rng)
    c_ids, c_att, c_lab = side(prompt, n_c)
    r_ids, r_att, r_lab = side(prompt, n_r)
    batch = {"chosen_input_ids": c_ids, "chosen_attention_mask": c_att, "chosen_labels": c_lab,
             "rejected_input_ids": r_ids, "rejected_attention_mask": r_att, "rejected_labels": r_lab}
    width = max(c_ids.shape[1], r_ids.shape[1])
    # logp[row, t] is the log-prob of token t+1 (TRL shifts: logits at t predict the label at t+1). Values
    # at positions no loss reads are junk in the same range.
    lp = token_logps(rng, (2 * pairs, width))
    comp_pos = torch.zeros(2 * pairs, width, dtype=torch.bool)  # completion tokens (ORPO's odds ratio)
    nll_pos = torch.zeros(2 * pairs, width, dtype=torch.bool)   # chosen tokens after the first (NLL)
    for i in range(pairs):
        p, c, r = int(prompt[i]), int(n_c[i]), int(n_r[i])
        comp_pos[i, p - 1:p - 1 + c] = True
        comp_pos[pairs + i, p - 1:p - 1 + r] = True
        nll_pos[i, 0:p - 1 + c] = True
        lp[i, p - 1:p - 1 + c] = token_logps(rng, (c,), *chosen_range)
        lp[pairs + i, p - 1:p - 1 + r] = token_logps(rng, (r,), *rejected_range)
    lp.requires_grad_(True)
    logits = torch.stack([lp, torch.log(-torch.expm1(lp))], dim=-1)

    def model(input_ids, attention_mask=None, use_cache=False):
        assert input_ids.shape == (2 * pairs, width)
        return types.SimpleNamespace(logits=logits)

    s = orpo_self(beta)
    loss, metrics = ORPOTrainer.get_batch_loss_metrics(s, model, batch)
    loss.backward()
    g = lp.grad
    assert loss.dtype == torch.float64

    x = lp.detach()
    seq = (x * comp_pos).sum(1)
    full = (x * nll_pos).sum(1)[:pairs]
    full_n = nll_pos.sum(1)[:pairs]
    # Sanity: TRL's own summed log-probs over the labels equal the sums recorded, and its NLL is the
    # token mean of the recorded full-sequence sums.
    labels = torch.cat([torch.nn.functional.pad(c_lab, (0, width - c_lab.shape[1]), value=-100),
                        torch.nn.functional.pad(r_lab, (0, width - r_lab.shape[1]), value=-100)])
    trl_sum = ORPOTrainer.get_batch_logps(logits.detach(), labels, average_log_prob=False)
    assert torch.allclose(trl_sum, seq, rtol=1e-13, atol=1e-13), (trl_sum, seq)
    nll = -(full.sum() / full_n.sum()).item()
    assert abs(metrics["nll_loss"] - nll) <= 1e-13, (metrics["nll_loss"], nll)

    grad_cc, grad_cp, grad_rc = [], [], []
    for i in range(pairs):
        p = int(prompt[i])
        grad_cc.append(same(g[i][comp_pos[i]], f"chosen completion grads of pair {i}"))
        grad_cp.append(same(g[i, 0:p - 1], f"chosen prompt grads of pair {i}") if p >= 2 else 0.0)
        grad_rc.append(same(g[pairs + i][comp_pos[pairs + i]], f"rejected completion grads of pair {i}"))
        assert torch.all(g[pairs + i][~comp_pos[pairs + i]] == 0), "rejected prompt/padding got a gradient"
        assert torch.all(g[i][~nll_pos[i]] == 0), "chosen padding got a gradient"
    return {
        "function": "orpo_loss",
        "params": {"beta": beta},
        "inputs": {"chosen_logps": seq[:pairs].tolist(), "rejected_logps": seq[pairs:].tolist(),
                   "chosen_lengths": n_c.tolist(), "rejected_lengths": n_r.tolist(),
                   "chosen_full_logps": full.tolist(), "chosen_full_lengths": full_n.tolist()},
        "expected": {"loss": loss.item(), "grad_chosen_completion_token": grad_cc,
                     "grad_chosen_prompt_token": grad_cp, "grad_rejected_completion_token": grad_rc,
                     "metrics": {k: metrics[k] for k in ORPO_METRICS}},
    }


def orpo_cases(rng):
    cases = []
    for beta in (0.1, 0.25, 1.0):
        for pairs in (1, 3, 4):
            cases.append(orpo_case(rng, beta, pairs, min_prompt=2 if pairs == 1 else 1))
    cases.append(orpo_case(rng, 0.1, 4, min_prompt=1, max_prompt=1))  # no prompt token in the NLL
    cases.append(orpo_case(rng, 1.0, 3, min_prompt=2))
    # Average log-probs above -ln 2: log1mexp takes its log(-expm1(x)) branch.
    cases.append(orpo_case(rng, 0.1, 3, chosen_range=(-0.5, -0.01)))
    cases.append(orpo_case(rng, 0.25, 4, chosen_range=(-0.6, -0.01), rejected_range=(-0.6, -0.01)))
    for i, c in enumerate(cases):
        c["case"] = f"orpo-{i:03d}"
    return cases


# ---------------------------------------------------------------- KTO

def kto_self(loss_type, beta, dw, uw):
    s = types.SimpleNamespace()
    s.model = types.SimpleNamespace(training=True)
    s.accelerator = Accel()
    s.aux_loss_enabled = False
    s.precompute_ref_logps = True
    s.calculate_KL = loss_type == "kto"
    s.loss_type = loss_type
    s.beta = beta
    s.desirable_weight = dw
    s.undesirable_weight = uw
    s._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    s._total_train_tokens = 0
    s._tp_size = 1
    s._compute_kl_logps = types.MethodType(KTOTrainer._compute_kl_logps, s)
    return s


def completions(rng, rows, t, token_id):
    """Ids, attention mask, completion mask (1-token prompt) and per-token log-probs zero outside the completion."""
    lens = torch.randint(1, t + 1, (rows,), generator=rng)
    mask = torch.zeros(rows, t + 1, dtype=torch.long)
    for i, n in enumerate(lens):
        mask[i, 1:1 + n] = 1
    lp = (-torch.rand(rows, t, generator=rng, dtype=torch.float64) * 2.0).round(decimals=6) * mask[:, 1:].double()
    ids = torch.full((rows, t + 1), token_id, dtype=torch.long)
    return ids, torch.ones(rows, t + 1, dtype=torch.long), mask, lens, lp


def kto_case(rng, loss_type, beta, dw, uw, rows, labels=None, kl_sign=1.0, t=5, t_kl=6):
    if labels is None:
        labels = (torch.rand(rows, generator=rng) < 0.5).tolist()
        if rows >= 2 and len(set(labels)) == 1:
            labels[0] = not labels[0]
    ids, att, mask, lens, lp = completions(rng, rows, t, MAIN_ID)
    ref = (-torch.rand(rows, generator=rng, dtype=torch.float64) * 2.0 * lens.double()).round(decimals=6)
    lp.requires_grad_(True)
    inputs = {"input_ids": ids, "attention_mask": att, "completion_mask": mask,
              "label": torch.tensor(labels, dtype=torch.bool), "ref_logps": ref}
    calc_kl = loss_type == "kto"
    kl_lp = None
    if calc_kl:
        kl_ids, kl_att, kl_mask, _, kl_lp = completions(rng, rows, t_kl, KL_ID)
        # ref_KL = KL sum -/+ an offset, so the batch-mean KL is positive (kl_sign 1) or clamped to 0 (-1).
        off = (0.2 + torch.rand(rows, generator=rng, dtype=torch.float64)).round(decimals=6)
        ref_kl = (kl_lp.sum(1) - kl_sign * off).round(decimals=6)
        inputs.update({"KL_input_ids": kl_ids, "KL_attention_mask": kl_att, "KL_completion_mask": kl_mask,
                       "ref_KL_logps": ref_kl})

    def model(input_ids, attention_mask=None, labels=None, fused_lm_head=False, use_cache=False):
        assert fused_lm_head
        out = kl_lp if int(input_ids[0, 0]) == KL_ID else lp
        zeros = torch.zeros_like(out).detach()
        return types.SimpleNamespace(log_probs=out, entropy=zeros, mean_logits=zeros)

    s = kto_self(loss_type, beta, dw, uw)
    loss = KTOTrainer._compute_loss(s, model, inputs, False)
    loss.backward()
    m = s._metrics["train"]
    seq = lp.detach().sum(1)
    grads = [same(lp.grad[i, :int(n)], f"grads of row {i}") for i, n in enumerate(lens)]
    if calc_kl:
        mean_kl = (kl_lp.sum(1) - ref_kl).mean().item()
        assert (mean_kl < 0) == (kl_sign < 0) and m["kl"][-1] == max(mean_kl, 0.0), (mean_kl, m["kl"])
    return {
        "function": "kto_loss",
        "params": {"loss_type": loss_type, "beta": beta, "desirable_weight": dw, "undesirable_weight": uw},
        "inputs": {"labels": labels, "logps": seq.tolist(), "ref_logps": ref.tolist(),
                   "kl_logps": kl_lp.sum(1).tolist() if calc_kl else [],
                   "ref_kl_logps": ref_kl.tolist() if calc_kl else [], "lengths": lens.tolist()},
        "expected": {"loss": loss.item(), "grad_logps": grads,
                     "metrics": {k: m[k][-1] for k in KTO_METRICS if k in m}},
    }


def kto_cases(rng):
    cases = []
    for lt in ("kto", "apo_zero_unpaired"):
        for rows, beta, (dw, uw), sign in [(1, 0.1, (1.0, 1.0), 1.0), (4, 0.5, (1.0, 1.0), -1.0),
                                           (6, 0.1, (1.33, 0.75), 1.0), (6, 0.5, (1.33, 0.75), -1.0)]:
            cases.append(kto_case(rng, lt, beta, dw, uw, rows, kl_sign=sign))
    cases.append(kto_case(rng, "kto", 0.1, 1.33, 0.75, 4, labels=[True] * 4))
    cases.append(kto_case(rng, "kto", 0.5, 1.0, 1.0, 4, labels=[False] * 4, kl_sign=-1.0))
    cases.append(kto_case(rng, "apo_zero_unpaired", 0.1, 1.0, 1.0, 4, labels=[True] * 4))
    cases.append(kto_case(rng, "apo_zero_unpaired", 0.5, 1.33, 0.75, 4, labels=[False] * 4))
    for i, c in enumerate(cases):
        c["case"] = f"kto-{i:03d}"
    return cases


def write(rel, family, how, cases):
    doc = {"family": family, "dtype": "float64",
           "provenance": {"trl": trl.__version__, "torch": torch.__version__, "seed": 7, "how": how},
           "cases": cases}
    path = ROOT / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {len(cases)} cases to {path}")


def main():
    rng = torch.Generator().manual_seed(7)
    write("fixtures/oracles/orpo/trl_orpo_loss.json", "trl_orpo",
          "ORPOTrainer.get_batch_loss_metrics (with its concatenated_forward, concatenated_inputs, odds_ratio_loss, "
          "get_batch_logps) run unchanged on a stand-in self and a 2-token-vocabulary stand-in model "
          "(scripts/make_orpo_kto_oracles.py)", orpo_cases(rng))
    write("fixtures/oracles/kto/trl_kto_loss.json", "trl_kto",
          "KTOTrainer._compute_loss (with its _compute_kl_logps) run unchanged on a stand-in self with "
          "precompute_ref_logps=True and a stand-in model returning given per-token log-probs "
          "(scripts/make_orpo_kto_oracles.py)", kto_cases(rng))


if __name__ == "__main__":
    main()
