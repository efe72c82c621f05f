"""One GRPO iteration of reinforge's default model, written directly in PyTorch.

The reference side of `scripts/bench_grpo.sh`: the same math on the same shapes as
`reinforge bench` (crates/reinforge/src/bench.rs): a Llama-family decoder (RMSNorm, rotate-half
RoPE, grouped-query attention via SDPA, SwiGLU, tied head), batched KV-cache sampling of
P x G completions of fixed length, exact answer verification, GRPO group advantages, and
`ppo_epochs` x `mini_batches` PPO-clip updates with token-mean loss, global-norm clipping and
torch.optim.AdamW. Plain eager PyTorch, as a researcher would write it; no reinforge code.

Prints one JSON object like `reinforge bench`.
"""

import argparse
import json
import math
import random
import statistics
import time

import torch
import torch.nn.functional as F

ALPHABET = "0123456789+=,>"
PAD, BOS, EOS = 0, 1, 2


class Config:
    vocab = len(ALPHABET) + 3
    hidden = 64
    inter = 192
    layers = 3
    heads = 4
    kv_heads = 2
    max_pos = 64
    eps = 1e-6
    theta = 10000.0


class Block(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        d = c.hidden // c.heads
        self.c, self.d = c, d
        self.n1 = torch.nn.Parameter(torch.ones(c.hidden))
        self.n2 = torch.nn.Parameter(torch.ones(c.hidden))
        self.q = torch.nn.Linear(c.hidden, c.heads * d, bias=False)
        self.k = torch.nn.Linear(c.hidden, c.kv_heads * d, bias=False)
        self.v = torch.nn.Linear(c.hidden, c.kv_heads * d, bias=False)
        self.o = torch.nn.Linear(c.heads * d, c.hidden, bias=False)
        self.gate = torch.nn.Linear(c.hidden, c.inter, bias=False)
        self.up = torch.nn.Linear(c.hidden, c.inter, bias=False)
        self.down = torch.nn.Linear(c.inter, c.hidden, bias=False)

    def forward(self, x, cos, sin, mask, cache):
        b, t, _ = x.shape
        h = F.rms_norm(x, (self.c.hidden,), self.n1, self.c.eps)
        q = self.q(h).view(b, t, self.c.heads, self.d).transpose(1, 2)
        k = self.k(h).view(b, t, self.c.kv_heads, self.d).transpose(1, 2)
        v = self.v(h).view(b, t, self.c.kv_heads, self.d).transpose(1, 2)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        if cache is not None:
            if cache[0] is not None:
                k = torch.cat([cache[0], k], 2)
                v = torch.cat([cache[1], v], 2)
            cache[0], cache[1] = k, v
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        x = x + self.o(y.transpose(1, 2).reshape(b, t, -1))
        h = F.rms_norm(x, (self.c.hidden,), self.n2, self.c.eps)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


def rope(x, cos, sin):
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * cos + rotated * sin


class Model(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embed = torch.nn.Embedding(c.vocab, c.hidden)
        self.blocks = torch.nn.ModuleList(Block(c) for _ in range(c.layers))
        self.norm = torch.nn.Parameter(torch.ones(c.hidden))
        for p in self.parameters():
            if p.dim() == 2:
                torch.nn.init.normal_(p, 0.0, 0.02)
        d = c.hidden // c.heads
        inv = torch.exp(torch.arange(0, d, 2, dtype=torch.float64) / d * -math.log(c.theta))
        freqs = torch.outer(torch.arange(c.max_pos, dtype=torch.float64), inv)
        emb = torch.cat([freqs, freqs], -1)
        self.cos_table, self.sin_table = emb.cos().float(), emb.sin().float()

    def forward(self, ids, positions, key_mask, caches=None, last_only=False):
        b, t = ids.shape
        past = 0 if caches is None or caches[0][0] is None else caches[0][0].shape[2]
        x = self.embed(ids)
        cos = self.cos_table[positions].unsqueeze(1)
        sin = self.sin_table[positions].unsqueeze(1)
        s = past + t
        q_pos = torch.arange(past, s).view(t, 1)
        k_pos = torch.arange(s).view(1, s)
        mask = (key_mask[:, None, None, :] & (k_pos <= q_pos)) | (k_pos == q_pos)
        for i, blk in enumerate(self.blocks):
            x = blk(x, cos, sin, mask, None if caches is None else caches[i])
        if last_only:
            x = x[:, -1:]
        return F.rms_norm(x, (self.c.hidden,), self.norm, self.c.eps) @ self.embed.weight.t()


@torch.no_grad()
def generate(model, prompts, max_new, stop_at_eos):
    b = len(prompts)
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[PAD] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[False] * (width - len(p)) + [True] * len(p) for p in prompts])
    positions = (mask.long().cumsum(1) - 1).clamp(min=0)
    caches = [[None, None] for _ in range(model.c.layers)]
    logits = model(ids, positions, mask, caches, last_only=True)[:, 0]
    next_pos = positions[:, -1:] + 1
    tokens, logps = [[] for _ in range(b)], [[] for _ in range(b)]
    live = [True] * b
    for step in range(max_new):
        logp = logits.float().log_softmax(-1)
        entropy = -(logp.exp() * logp).sum(-1)
        tok = logits.softmax(-1).multinomial(1)
        toks, lps, _ = tok[:, 0].tolist(), logp.gather(1, tok)[:, 0].tolist(), entropy.tolist()
        for i in range(b):
            if live[i]:
                tokens[i].append(toks[i])
                logps[i].append(lps[i])
                if stop_at_eos and toks[i] == EOS:
                    live[i] = False
        if step + 1 == max_new or not any(live):
            break
        mask = torch.cat([mask, torch.ones(b, 1, dtype=torch.bool)], 1)
        logits = model(tok, next_pos, mask, caches, last_only=True)[:, 0]
        next_pos = next_pos + 1
    return tokens, logps


def load_checkpoint(model, directory):
    """Copies a reinforge checkpoint (HF parameter names) into the model."""
    from safetensors.torch import load_file

    w = load_file(f"{directory}/model.safetensors")
    with torch.no_grad():
        model.embed.weight.copy_(w["model.embed_tokens.weight"])
        model.norm.copy_(w["model.norm.weight"])
        for i, blk in enumerate(model.blocks):
            pre = f"model.layers.{i}."
            blk.n1.copy_(w[pre + "input_layernorm.weight"])
            blk.n2.copy_(w[pre + "post_attention_layernorm.weight"])
            for name, lin in (("self_attn.q_proj", blk.q), ("self_attn.k_proj", blk.k), ("self_attn.v_proj", blk.v),
                              ("self_attn.o_proj", blk.o), ("mlp.gate_proj", blk.gate), ("mlp.up_proj", blk.up),
                              ("mlp.down_proj", blk.down)):
                lin.weight.copy_(w[pre + name + ".weight"])


def decode(tokens):
    out = []
    for t in tokens:
        if t == EOS:
            break
        if t > 2:
            out.append(ALPHABET[t - 3])
    return "".join(out)


def verify(a, b, text):
    parts = text.split(">")
    if len(parts) != 2 or not parts[1].isdigit() or len(parts[1]) > 19:
        return 0.0
    return 1.0 if int(parts[1]) == a + b else 0.0


def token_logprobs(model, ids, attn, positions):
    logits = model(ids, positions, attn)[:, :-1].float()
    logp_all = logits.log_softmax(-1)
    logp = logp_all.gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy


def iteration(model, opt, rng, args):
    t0 = time.perf_counter()
    problems = [(rng.randrange(1000), rng.randrange(1000)) for _ in range(args.prompts)]
    prompts = []
    for a, b in problems:
        p = [BOS] + [ALPHABET.index(ch) + 3 for ch in f"{a:03d}+{b:03d}="]
        prompts += [p] * args.generations
    completions, old = generate(model, prompts, args.max_new, args.checkpoint is not None)
    rewards = [verify(*problems[i // args.generations], decode(c)) for i, c in enumerate(completions)]
    sample_s = time.perf_counter() - t0

    t1 = time.perf_counter()
    r = torch.tensor(rewards, dtype=torch.float64).view(args.prompts, args.generations)
    adv = ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-6)).view(-1).float()
    n = len(prompts)
    # Right-pad prompt ++ completion rows to the longest, as TRL and verl batch them.
    width = max(len(p) + len(c) for p, c in zip(prompts, completions))
    ids = torch.full((n, width), PAD)
    attn = torch.zeros(n, width, dtype=torch.bool)
    loss_mask = torch.zeros(n, width - 1)
    old_logp = torch.zeros(n, width - 1)
    for i, (p, c) in enumerate(zip(prompts, completions)):
        ids[i, : len(p) + len(c)] = torch.tensor(p + c)
        attn[i, : len(p) + len(c)] = True
        loss_mask[i, len(p) - 1 : len(p) - 1 + len(c)] = 1.0
        old_logp[i, len(p) - 1 : len(p) - 1 + len(c)] = torch.tensor(old[i])
    positions = (attn.long().cumsum(1) - 1).clamp(min=0)
    advantages = adv.view(-1, 1).expand(n, width - 1)
    per = math.ceil(n / args.mini_batches)
    stats = []
    for _ in range(args.epochs):
        order = torch.randperm(n)
        for start in range(0, n, per):
            idx = order[start:start + per]
            m = loss_mask[idx]
            tokens = m.sum()
            opt.zero_grad()
            logp, entropy = token_logprobs(model, ids[idx], attn[idx], positions[idx])
            o, a = old_logp[idx], advantages[idx]
            ratio = (logp - o).clamp(-20, 20).exp()
            pg = torch.maximum(-a * ratio, -a * ratio.clamp(1 - 0.2, 1 + 0.28))
            loss = (pg * m).sum() / tokens
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            with torch.no_grad():
                d = ratio.detach()
                stats.append((
                    loss.item(), grad_norm.item(), ((entropy * m).sum() / tokens).item(),
                    (((d > 1.28) & (a > 0)).float() * m).sum().item() / tokens.item(),
                    (((d < 0.8) & (a < 0)).float() * m).sum().item() / tokens.item(),
                    (((o - logp.detach()) * m).sum() / tokens).item(),
                ))
    return sample_s, time.perf_counter() - t1, sum(map(len, completions)) / n


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--generations", type=int, default=8)
    ap.add_argument("--max-new", type=int, default=48)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--mini-batches", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--checkpoint", help="reinforge checkpoint dir: load its model.safetensors and stop at <eos>")
    args = ap.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    model = Model(Config())
    if args.checkpoint:
        load_checkpoint(model, args.checkpoint)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    times, samples, updates, lengths = [], [], [], []
    for step in range(args.warmup + args.iterations):
        t = time.perf_counter()
        s, u, length = iteration(model, opt, rng, args)
        if step >= args.warmup:
            lengths.append(length)
            times.append(time.perf_counter() - t)
            samples.append(s)
            updates.append(u)
    print(json.dumps({
        "implementation": f"pytorch {torch.__version__}",
        "iterations": args.iterations,
        "threads": torch.get_num_threads(),
        "prompts": args.prompts,
        "generations": args.generations,
        "completion_tokens": args.max_new,
        "mean_completion_tokens": statistics.fmean(lengths),
        "iteration_s": times,
        "median_s": statistics.median(times),
        "mean_s": statistics.fmean(times),
        "median_sample_s": statistics.median(samples),
        "median_update_s": statistics.median(updates),
    }))


if __name__ == "__main__":
    main()
