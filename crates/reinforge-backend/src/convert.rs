//! The server's sampling types as the sampler's and back: one mapping for every backend.

use reinforge_serve::policy::backend::{Finish, Sequence, StepToken};
use reinforge_serve::policy::Sampling;
use reinforge_torch::{Completion, RowEnd, SamplingParams};

/// A request's sampling settings as the sampler's (a negative `top_k` is no limit).
pub fn params(s: &Sampling) -> SamplingParams {
    SamplingParams {
        temperature: s.temperature,
        top_p: s.top_p,
        top_k: s.top_k.max(0),
        max_new_tokens: s.max_tokens,
        stop_tokens: s.stop_token_ids.clone(),
    }
}

/// How a row ended, as the server reports it.
pub fn row_end(e: RowEnd) -> Finish {
    match e {
        RowEnd::Stop => Finish::Stop,
        RowEnd::Length => Finish::Length,
    }
}

/// One step's token as the server's (`end` as the sampler decided it).
pub fn step_token(t: &reinforge_torch::StepToken) -> StepToken {
    StepToken {
        row: t.row,
        token: t.token,
        logprob: t.logprob,
        end: t.end.map(row_end),
    }
}

/// A finished completion as the server's sequence (no prompt scores).
pub fn sequence(c: Completion) -> Sequence {
    Sequence {
        finish: if c.aborted {
            Finish::Abort
        } else if c.truncated {
            Finish::Length
        } else {
            Finish::Stop
        },
        tokens: c.tokens,
        logprobs: c.logprobs,
        top: c.top,
        prompt: vec![],
    }
}
