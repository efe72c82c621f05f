#!/usr/bin/env python3
"""The Tinker SDK's basic loop against `reinforge serve --model DIR --tinker`, unmodified but for
the base URL: a LoRA training client, forward, two forward_backward + optim_step rounds,
save_state and the checkpoint list, importance_sampling and ppo losses, sampling with a seed
from the trained weights and from the base model, and bad requests that must raise the SDK's
own error types while the server keeps serving.

Run with the `tinker` SDK of .venv-tinker (scripts/tinker_env.sh):
  .venv-tinker/bin/python scripts/clients/tinker_basic_loop.py --base-url http://127.0.0.1:8000 \\
      --model llama --tokens tokens.json --out result.json
`tokens.json` holds {"prompt": [ids], "completion": [ids]}; the datum is the full sequence
shifted by one with weights 1 on the completion (Tinker's SFT datum). Every number measured is
written to --out for crates/reinforge/tests/tinker.rs to check; the script itself asserts only
what needs no reference (error types, seeded reproducibility).
"""

import argparse
import asyncio
import json
import sys
import time

import tinker
from tinker import types
from tinker._client import AsyncTinker  # the SDK's own low-level client
from tinker.lib.api_future_impl import _APIFuture
from tinker.lib.client_connection_pool_type import ClientConnectionPoolType
from tinker.lib.public_interfaces.training_client import TrainingClient, fetch_training_info


def sft_datum(prompt, completion):
    full = prompt + completion
    weights = [0.0] * (len(prompt) - 1) + [1.0] * len(completion)
    return types.Datum(
        model_input=types.ModelInput.from_ints(full[:-1]),
        loss_fn_inputs={"target_tokens": full[1:], "weights": weights},
    )


def policy_datum(prompt, completion, logprobs, advantage):
    full = prompt + completion
    n = len(full) - 1
    return types.Datum(
        model_input=types.ModelInput.from_ints(full[:-1]),
        loss_fn_inputs={
            "target_tokens": full[1:],
            "logprobs": logprobs,
            "advantages": [advantage] * n,
        },
    )


def expect_error(name, kinds, fn, out):
    """Runs fn; records which SDK exception it raised (it must be one of `kinds`)."""
    try:
        fn()
    except kinds as e:
        out[name] = {"type": type(e).__name__, "message": str(e)[:300]}
        return
    except Exception as e:  # noqa: BLE001 - reported, then the assertion below fails
        out[name] = {"type": type(e).__name__, "message": str(e)[:300], "unexpected": True}
        raise AssertionError(f"{name}: raised {type(e).__name__}, not one of {kinds}: {e}")
    raise AssertionError(f"{name}: no error raised")


async def raw_errors(base_url, api_key, out):
    """The SDK's low-level client: an unknown model id and a future that does not exist."""
    client = AsyncTinker(base_url=base_url, api_key=api_key)
    try:
        try:
            await client.models.get_info(request=types.GetInfoRequest(model_id="model_nope"))
            raise AssertionError("get_info of an unknown model succeeded")
        except tinker.NotFoundError as e:
            out["unknown_model_get_info"] = {"type": type(e).__name__, "message": str(e)[:300]}
        try:
            await client.futures.retrieve(
                request=types.FutureRetrieveRequest(request_id="987654321")
            )
            raise AssertionError("retrieve_future of an unknown id succeeded")
        except tinker.NotFoundError as e:
            out["unknown_future"] = {"type": type(e).__name__, "message": str(e)[:300]}
    finally:
        await client.close()


def full_training_client(sc, model):
    """A training client of every weight: the SDK's own `create_lora_training_client` steps
    (`service_client.py`) with no `lora_config`, which the public SDK never sends but the API
    allows."""
    holder = sc.holder

    async def create():
        with holder.aclient(ClientConnectionPoolType.TRAIN) as client:
            request = types.CreateModelRequest(
                session_id=holder.get_session_id(),
                model_seq_id=holder.get_training_client_id(),
                base_model=model,
            )
            future = await client.models.create(request=request)
        created = await _APIFuture(
            types.CreateModelResponse,
            holder,
            future,
            request_start_time=time.time(),
            request_type="CreateModel",
        )
        info = await fetch_training_info(holder, created.model_id)
        return TrainingClient(holder, model_seq_id=0, model_id=created.model_id, info=info)

    return holder.run_coroutine_threadsafe(create()).result()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--model", required=True, help="the base model name the server offers")
    ap.add_argument("--api-key", default="tml-reinforge-local")
    ap.add_argument("--tokens", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--lr", type=float, default=1e-2)
    args = ap.parse_args()
    toks = json.load(open(args.tokens))
    prompt, completion = toks["prompt"], toks["completion"]
    out = {"sdk_version": tinker.__version__}
    t0 = time.time()

    sc = tinker.ServiceClient(base_url=args.base_url, api_key=args.api_key)
    tc = sc.create_lora_training_client(base_model=args.model, rank=4, seed=0).result()
    info = tc.get_info()
    out["model_id"] = tc.model_id
    out["is_lora"] = info.is_lora
    out["lora_rank"] = info.lora_rank
    datum = sft_datum(prompt, completion)
    # The untrained adapter, for a reference that replays the steps elsewhere.
    out["init_checkpoint"] = tc.save_state("init").result().path

    # Forward only: the base model's NLL of the completion (LoRA's B starts at zero).
    fwd = tc.forward([datum], "cross_entropy").result()
    out["loss0"] = fwd.metrics["loss:sum"]
    out["logprobs0"] = fwd.loss_fn_outputs[0]["logprobs"].tolist()

    adam = types.AdamParams(learning_rate=args.lr, beta1=0.9, beta2=0.95, eps=1e-8)
    out["adam"] = adam.model_dump()
    rounds = []
    for _ in range(2):
        start = time.time()
        fb = tc.forward_backward([datum], "cross_entropy")
        step = tc.optim_step(adam)
        fb, step = fb.result(), step.result()
        rounds.append(
            {
                "loss": fb.metrics["loss:sum"],
                "optim_metrics": step.metrics,
                "seconds": time.time() - start,
            }
        )
    out["rounds"] = rounds
    out["loss2"] = tc.forward([datum], "cross_entropy").result().metrics["loss:sum"]

    saved = tc.save_state("two-steps").result()
    out["checkpoint"] = saved.path
    # Resuming from the checkpoint: a new training client with the trained weights.
    resumed = sc.create_training_client_from_state(saved.path).result()
    out["resumed_model_id"] = resumed.model_id
    out["loss_resumed"] = resumed.forward([datum], "cross_entropy").result().metrics["loss:sum"]
    rc = tinker.RestClient(base_url=args.base_url, api_key=args.api_key)
    listing = rc.list_checkpoints(tc.model_id).result()
    out["checkpoints"] = [c.tinker_path for c in listing.checkpoints]

    # Full fine-tuning: the same two rounds on every weight.
    full = full_training_client(sc, args.model)
    out["full_is_lora"] = full.get_info().is_lora
    out["full_rounds"] = []
    for _ in range(2):
        fb = full.forward_backward([datum], "cross_entropy")
        step = full.optim_step(adam)
        out["full_rounds"].append(fb.result().metrics["loss:sum"])
        step.result()
    out["full_loss2"] = full.forward([datum], "cross_entropy").result().metrics["loss:sum"]

    # Policy losses with the model's own log-probs as the sampler's: every ratio is 1, so the
    # loss is -sum(advantages) whatever the model.
    lps = tc.forward([datum], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].tolist()
    pdatum = policy_datum(prompt, completion, lps, 0.5)
    out["is_loss"] = tc.forward([pdatum], "importance_sampling").result().metrics["loss:sum"]
    out["ppo_loss"] = tc.forward([pdatum], "ppo").result().metrics["loss:sum"]
    out["policy_tokens"] = len(lps)

    # Sampling with a seed, twice, from the trained weights and from the base model.
    sampler = tc.save_weights_and_get_sampling_client().result()
    params = types.SamplingParams(max_tokens=8, seed=1234, temperature=1.0)
    p = types.ModelInput.from_ints(prompt)
    start = time.time()
    a = sampler.sample(p, num_samples=2, sampling_params=params).result()
    out["sample_seconds"] = time.time() - start
    b = sampler.sample(p, num_samples=2, sampling_params=params).result()
    out["sample_a"] = [s.tokens for s in a.sequences]
    out["sample_b"] = [s.tokens for s in b.sequences]
    out["sample_logprobs"] = [s.logprobs for s in a.sequences]
    assert out["sample_a"] == out["sample_b"], "a seeded sample is not reproducible"
    other = sampler.sample(
        p, num_samples=2, sampling_params=types.SamplingParams(max_tokens=8, seed=99)
    ).result()
    out["sample_other_seed"] = [s.tokens for s in other.sequences]
    # A named sampler checkpoint of the same weights, sampled through its tinker:// path.
    named = tc.save_weights_for_sampler("sampler-two-steps").result()
    out["sampler_path"] = named.path
    by_path = sc.create_sampling_client(model_path=named.path).result()
    e = by_path.sample(p, num_samples=2, sampling_params=params).result()
    out["sample_named"] = [s.tokens for s in e.sequences]
    base = sc.create_sampling_client(base_model=args.model).result()
    c = base.sample(p, num_samples=1, sampling_params=params).result()
    d = base.sample(p, num_samples=1, sampling_params=params).result()
    out["base_sample"] = [c.sequences[0].tokens, d.sequences[0].tokens]
    assert c.sequences[0].tokens == d.sequences[0].tokens

    # Bad requests: each on a fresh training client (a failed request poisons its client).
    def fresh():
        return sc.create_lora_training_client(base_model=args.model, rank=2).result()

    expect_error(
        "unsupported_loss",
        (tinker.BadRequestError,),
        lambda: fresh().forward_backward([datum], "cispo").result(),
        out,
    )
    short = types.Datum(
        model_input=types.ModelInput.from_ints(prompt + completion),
        loss_fn_inputs={"target_tokens": completion},
    )
    expect_error(
        "shape_mismatch",
        (tinker.BadRequestError,),
        lambda: fresh().forward_backward([short], "cross_entropy").result(),
        out,
    )
    expect_error(
        "unknown_base_model",
        (tinker.BadRequestError,),
        lambda: sc.create_lora_training_client(base_model="no/such-model", rank=2).result(),
        out,
    )
    asyncio.run(raw_errors(args.base_url, args.api_key, out))

    # The server still serves: the trained client's forward is unchanged.
    out["loss_after_errors"] = tc.forward([datum], "cross_entropy").result().metrics["loss:sum"]
    out["seconds"] = time.time() - t0
    sc.close("success").result()
    json.dump(out, open(args.out, "w"), indent=1)
    keys = ("loss0", "loss2", "is_loss", "ppo_loss", "sample_seconds", "seconds")
    summary = {k: out[k] for k in keys}
    summary["round_seconds"] = [r["seconds"] for r in rounds]
    print(json.dumps(summary))


if __name__ == "__main__":
    sys.exit(main())
