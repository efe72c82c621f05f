#!/usr/bin/env python3
"""Golden vectors of TRL's distillation losses, produced by running TRL's own functions.

Three families, each called unchanged on seeded random float64 inputs (rounded to 6 decimals):

* `generalized_jsd_loss`: `GKDTrainer.generalized_jsd_loss` (trl.experimental.gkd), the
  full-vocabulary generalised JSD with `beta`, `temperature`, the label mask and every
  `reduction` (and `num_items_in_batch`), with d loss / d student_logits from autograd.
* `chunked_divergence_loss`: `_chunked_divergence_loss` of the main `DistillationTrainer`
  (trl/trainer/distillation_trainer.py), the same divergence computed from hidden states and
  LM-head weights in float32 tiles; the case records the logits `hidden @ weight.T` (float64)
  so a logit-level implementation can be compared with it.
* `topk_divergence`: the sparse loss of `ServerDistillationTrainer` (a teacher that gives only
  top-k log-probs): `_compute_server_forward_kl_loss` for beta = 0 (its only full top-k path),
  and for other betas the same composition of TRL's `_add_tail_bucket`, `_jsd_divergence`
  and `_reduce_divergence_loss` that method runs.

Writes fixtures/oracles/distill/trl_distill_losses.json.

Usage: .venv-trl/bin/python scripts/make_distill_oracles.py   (scripts/bench_trl.sh makes .venv-trl)
"""
import json
import os
import types
from pathlib import Path

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch
import torch.nn.functional as F
import trl
from trl.experimental.gkd.gkd_trainer import GKDTrainer
from trl.experimental.server_distillation.server_distillation_trainer import (
    ServerDistillationTrainer,
    _add_tail_bucket,
    _jsd_divergence,
)
from trl.trainer.distillation_trainer import _chunked_divergence_loss

ROOT = Path(__file__).resolve().parent.parent


def rounded(shape, rng, scale):
    return (torch.randn(*shape, generator=rng, dtype=torch.float64) * scale).round(decimals=6)


def random_mask(rng, b, t):
    """Right-padded completion masks: row i keeps its first 1..t positions."""
    lens = torch.randint(1, t + 1, (b,), generator=rng)
    mask = torch.zeros(b, t, dtype=torch.bool)
    for i, n in enumerate(lens):
        mask[i, :n] = True
    return mask


def jsd_case(rng, beta, temperature, reduction, num_items=None, b=3, t=4, v=7, scale=2.0, masked=True):
    s = rounded((b, t, v), rng, scale).requires_grad_(True)
    te = rounded((b, t, v), rng, scale)
    mask = random_mask(rng, b, t) if masked else torch.ones(b, t, dtype=torch.bool)
    labels = torch.where(mask, torch.ones(b, t, dtype=torch.long), torch.full((b, t), -100)) if masked else None
    out = GKDTrainer.generalized_jsd_loss(s, te, labels=labels, beta=beta, temperature=temperature,
                                          reduction=reduction, num_items_in_batch=num_items)
    expected = {}
    if out.dim() == 0:
        out.backward()
        expected["loss"] = out.item()
    else:
        expected["elements"] = out.detach().tolist()
        out.sum().backward()
        expected["elements_shape"] = list(out.shape)
    expected["grad_student_logits"] = s.grad.tolist()
    return {
        "function": "generalized_jsd_loss",
        "params": {"beta": beta, "temperature": temperature, "reduction": reduction,
                   "num_items_in_batch": num_items},
        "inputs": {"student_logits": s.detach().tolist(), "teacher_logits": te.tolist(),
                   "mask": mask.double().tolist(), "masked": masked},
        "expected": expected,
    }


def chunked_case(rng, beta, temperature, b=2, t=3, h=5, v=9):
    hs = rounded((b, t, h), rng, 1.0)
    ht = rounded((b, t, h), rng, 1.0)
    ws = rounded((v, h), rng, 1.0).requires_grad_(True)
    wt = rounded((v, h), rng, 1.0)
    mask = random_mask(rng, b, t)
    hs_leaf = hs.clone().requires_grad_(True)
    loss, entropy_sum, n_valid = _chunked_divergence_loss(hs_leaf, ht, ws, wt, mask.long(), beta,
                                                          temperature=temperature)
    loss.backward()
    zs = hs @ ws.detach().T
    zt = ht @ wt.T
    return {
        "function": "chunked_divergence_loss",
        "note": "TRL computes it in float32 tiles (fp32 projection and statistics)",
        "params": {"beta": beta, "temperature": temperature, "reduction": "batchmean"},
        "inputs": {"student_logits": zs.detach().tolist(), "teacher_logits": zt.tolist(),
                   "mask": mask.double().tolist()},
        "expected": {"loss": loss.item(), "student_entropy_sum": entropy_sum.item(),
                     "valid_tokens": int(n_valid.item())},
    }


class ServerSelf:
    """The attributes `_compute_server_forward_kl_loss` reads."""

    def __init__(self, add_tail):
        self.loss_add_tail = add_tail
        self._reduce_divergence_loss = ServerDistillationTrainer._reduce_divergence_loss


def topk_case(rng, beta, k, temperature, add_tail, b=3, t=4, v=11, scale=2.0, short_rows=True):
    s = rounded((b, t, v), rng, scale).requires_grad_(True)
    te = rounded((b, t, v), rng, scale)
    t_logp = F.log_softmax(te, dim=-1)
    top_lp, top_ids = t_logp.topk(k, dim=-1)
    top_lp = top_lp.round(decimals=6)
    if short_rows:
        # A server may return fewer than k alternatives at a position: -inf marks the gap.
        top_lp[0, 0, k - 1] = float("-inf")
    mask = random_mask(rng, b, t)
    labels = torch.where(mask, torch.ones(b, t, dtype=torch.long), torch.full((b, t), -100))
    student_log_probs = F.log_softmax(s / temperature, dim=-1)
    if beta == 0.0:
        result = {"topk_logprobs": top_lp, "topk_token_ids": top_ids}
        loss = ServerDistillationTrainer._compute_server_forward_kl_loss(ServerSelf(add_tail), result,
                                                                         student_log_probs, labels)
        how = "ServerDistillationTrainer._compute_server_forward_kl_loss"
    else:
        # The same steps as that method with another beta (TRL offers beta > 0 only on top-1
        # support of the sampled token; this replays its building blocks on top-k support).
        valid = top_lp > float("-inf")
        neg_inf = torch.full((), float("-inf"), dtype=torch.float64)
        st = torch.where(valid, student_log_probs.gather(-1, top_ids), neg_inf)
        tt = torch.where(valid, top_lp, neg_inf)
        if add_tail:
            ss, support = _add_tail_bucket(st, valid)
            ts, _ = _add_tail_bucket(tt, valid)
        else:
            support = valid
            ss = st - torch.logsumexp(st, dim=-1, keepdim=True)
            ts = tt - torch.logsumexp(tt, dim=-1, keepdim=True)
        jsd = _jsd_divergence(ss, ts, beta, support)
        loss = ServerDistillationTrainer._reduce_divergence_loss(jsd, completion_mask=labels != -100,
                                                                 reduction="batchmean")
        how = "_add_tail_bucket + _jsd_divergence + _reduce_divergence_loss"
    loss.backward()
    return {
        "function": "topk_divergence",
        "note": how,
        "params": {"beta": beta, "top_k": k, "temperature": temperature, "add_tail": add_tail,
                   "reduction": "batchmean"},
        "inputs": {"student_logits": s.detach().tolist(),
                   "teacher_topk_logprobs": [[[x if x != float("-inf") else None for x in p] for p in r]
                                             for r in top_lp.tolist()],
                   "teacher_topk_ids": top_ids.tolist(), "mask": mask.double().tolist()},
        "expected": {"loss": loss.item(), "grad_student_logits": s.grad.tolist()},
    }


def main():
    rng = torch.Generator().manual_seed(28)
    cases = []
    for beta in (0.0, 0.1, 0.5, 0.9, 1.0):
        for temperature in (1.0, 0.7, 2.0):
            cases.append(jsd_case(rng, beta, temperature, "batchmean"))
    for reduction in ("sum", "mean", "none"):
        for beta in (0.0, 0.5, 1.0):
            cases.append(jsd_case(rng, beta, 1.0, reduction))
    cases.append(jsd_case(rng, 0.5, 1.0, "batchmean", num_items=11))
    cases.append(jsd_case(rng, 1.0, 1.3, "batchmean", num_items=5))
    cases.append(jsd_case(rng, 0.5, 1.0, "batchmean", masked=False))
    # Peaked logits: the mixture's log-sum-exp and the KL ends far from uniform.
    cases.append(jsd_case(rng, 0.5, 1.0, "batchmean", scale=8.0))
    cases.append(jsd_case(rng, 1.0, 1.0, "batchmean", scale=8.0))
    for beta in (0.0, 0.5, 1.0):
        for temperature in (1.0, 0.8):
            cases.append(chunked_case(rng, beta, temperature))
    for beta in (0.0, 0.5, 1.0):
        for k in (1, 3):
            for add_tail in (True, False):
                cases.append(topk_case(rng, beta, k, 1.0 if k == 1 else 0.9, add_tail, short_rows=k > 1))
    for i, c in enumerate(cases):
        c["case"] = f"{c['function']}-{i:03d}"
    doc = {"family": "trl_distill", "dtype": "float64",
           "provenance": {"trl": trl.__version__, "torch": torch.__version__, "seed": 28,
                          "how": "TRL's own loss functions called on seeded inputs (scripts/make_distill_oracles.py)"},
           "cases": cases}
    path = ROOT / "fixtures/oracles/distill/trl_distill_losses.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc) + "\n")
    print(f"wrote {len(cases)} cases to {path}")


if __name__ == "__main__":
    main()
