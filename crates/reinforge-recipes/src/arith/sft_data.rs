//! The SFT warm-start data of the arithmetic experiment: reference solutions in a mixture of
//! the task's two patterns.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use reinforge_tasks::tokenizer::{EOS, PAD};
use reinforge_tasks::{ArithTask, Pattern, Split};
use reinforge_torch::{Device, SequenceBatch};

use super::env::encode_prompt;
use reinforge_train::config::TaskConfig;
use reinforge_train::seeds::{step_seed, PHASE_SFT};

/// The rows `rows` of SFT step `step`'s batch of `batch_size` examples (all of them, or a
/// data-parallel rank's share: the same examples, packed without the others): training
/// problems, each written in the direct pattern with probability `direct_share`, else in the
/// columns pattern.
pub fn sft_batch_rows(
    task_cfg: &TaskConfig,
    batch_size: usize,
    seed: u64,
    step: usize,
    device: Device,
    rows: std::ops::Range<usize>,
) -> SequenceBatch {
    let task = ArithTask::new(task_cfg.digits);
    let tok = ArithTask::tokenizer();
    let mut rng = ChaCha8Rng::seed_from_u64(step_seed(seed, PHASE_SFT, step as u64));
    let mut prompts = Vec::with_capacity(batch_size);
    let mut completions = Vec::with_capacity(batch_size);
    for _ in 0..batch_size {
        let p = task.sample(&mut rng, Split::Train);
        let pattern = if rng.gen_bool(task_cfg.direct_share) {
            Pattern::Direct
        } else {
            Pattern::Columns
        };
        let mut c = tok
            .encode(&task.completion(&p, pattern))
            .expect("task alphabet");
        c.push(EOS);
        prompts.push(encode_prompt(&task, &p));
        completions.push(c);
    }
    let p: Vec<&[i64]> = prompts[rows.clone()].iter().map(Vec::as_slice).collect();
    let c: Vec<&[i64]> = completions[rows].iter().map(Vec::as_slice).collect();
    SequenceBatch::new(&p, &c, PAD, device)
}

/// Tokens of the longest SFT example (`<bos>`, prompt, columns solution, `<eos>`): the
/// columns pattern is the longer one, and its length depends only on the digits.
pub fn longest_example(digits: u32) -> usize {
    let task = ArithTask::new(digits);
    let max = 10u64.pow(digits) - 1;
    let p = reinforge_tasks::Problem { a: max, b: max };
    1 + task.prompt(&p).len() + task.completion(&p, Pattern::Columns).len() + 1
}
