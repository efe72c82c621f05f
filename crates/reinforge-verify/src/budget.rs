//! The work budget of one answer comparison ([`Ctx`]): equivalence (`equiv.rs`) and the
//! numeric sampling it falls back on (`sample.rs`) both count their elementary comparisons
//! against it, so a hostile answer is answered "not equivalent" instead of running long.

use std::cell::Cell;

use crate::Options;

/// Work budget for one comparison (number of elementary comparisons); exceeding it answers
/// "not equivalent" instead of running long.
pub const WORK_BUDGET: u32 = 20_000;

/// Comparison context.
pub struct Ctx<'a> {
    pub opts: &'a Options,
    work: Cell<u32>,
    undecided: Cell<bool>,
}

impl<'a> Ctx<'a> {
    /// New context with a fresh budget.
    pub fn new(opts: &'a Options) -> Self {
        Ctx {
            opts,
            work: Cell::new(0),
            undecided: Cell::new(false),
        }
    }
    /// Whether some comparison was too large to decide exactly (and so answered "not equal").
    pub fn undecided(&self) -> bool {
        self.undecided.get()
    }
    /// Records that a comparison was too large to decide exactly.
    pub(crate) fn mark_undecided(&self) {
        self.undecided.set(true);
    }
    pub(crate) fn tick(&self, n: u32) -> bool {
        self.work.set(self.work.get().saturating_add(n));
        self.work.get() <= WORK_BUDGET
    }
}
