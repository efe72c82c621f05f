//! The token-id rows the offline preference objectives read: preference pairs and unpaired
//! rows labelled desirable or undesirable (reinforge-train reads and tokenises them).

/// Encoded pairs: prompt ids, chosen and rejected completion ids (EOS-terminated), margins.
pub struct Pairs {
    pub prompts: Vec<Vec<i64>>,
    pub chosen: Vec<Vec<i64>>,
    pub rejected: Vec<Vec<i64>>,
    /// TRL's optional `margin` column, per pair (absent: no margin term).
    pub margins: Option<Vec<f32>>,
}

impl Pairs {
    /// Number of pairs.
    pub fn len(&self) -> usize {
        self.prompts.len()
    }

    /// Whether there are no pairs.
    pub fn is_empty(&self) -> bool {
        self.prompts.is_empty()
    }

    /// Tokens of pair `r`'s two sequences (prompt + chosen, prompt + rejected).
    pub fn tokens(&self, r: usize) -> usize {
        2 * self.prompts[r].len() + self.chosen[r].len() + self.rejected[r].len()
    }

    /// Prompts and completions of `rows`, every chosen first, then every rejected (`[2B]`).
    pub fn sides(&self, rows: &[usize]) -> (Vec<&[i64]>, Vec<&[i64]>) {
        let prompts: Vec<&[i64]> = rows.iter().map(|&r| self.prompts[r].as_slice()).collect();
        let mut completions: Vec<&[i64]> =
            rows.iter().map(|&r| self.chosen[r].as_slice()).collect();
        completions.extend(rows.iter().map(|&r| self.rejected[r].as_slice()));
        (
            [prompts.as_slice(), prompts.as_slice()].concat(),
            completions,
        )
    }

    /// Whole sequences of `rows`: every chosen (`prompt ++ chosen`) first, then every rejected.
    pub fn sequences(&self, rows: &[usize]) -> Vec<Vec<i64>> {
        let join = |side: &[Vec<i64>], r: usize| [self.prompts[r].as_slice(), &side[r]].concat();
        let mut out: Vec<Vec<i64>> = rows.iter().map(|&r| join(&self.chosen, r)).collect();
        out.extend(rows.iter().map(|&r| join(&self.rejected, r)));
        out
    }
}

/// Unpaired rows: prompt ids, completion ids (EOS-terminated), desirability.
pub struct Unpaired {
    pub prompts: Vec<Vec<i64>>,
    pub completions: Vec<Vec<i64>>,
    pub labels: Vec<bool>,
}

impl Unpaired {
    /// Tokens of row `r` (prompt + completion).
    pub fn tokens(&self, r: usize) -> usize {
        self.prompts[r].len() + self.completions[r].len()
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Rows of block `index` of `batch` consecutive rows (the last block may be shorter).
    pub fn block(&self, batch: usize, index: usize) -> Vec<usize> {
        let start = index * batch;
        (start..(start + batch).min(self.len())).collect()
    }

    /// Number of blocks of `batch` rows.
    pub fn blocks(&self, batch: usize) -> usize {
        self.len().div_ceil(batch).max(1)
    }

    /// The KL completion of each row: the previous row's within its block of `batch`.
    pub fn kl_completions(&self, batch: usize) -> Vec<usize> {
        (0..self.blocks(batch))
            .flat_map(|b| {
                let rows = self.block(batch, b);
                let n = rows.len();
                (0..n).map(move |i| rows[0] + (i + n - 1) % n)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kl_completions_rotate_by_one_within_each_block() {
        let rows = Unpaired {
            prompts: vec![vec![1]; 7],
            completions: (0..7).map(|i| vec![i]).collect(),
            labels: vec![true; 7],
        };
        // TRL: (x1, y1), ..., (xn, yn) -> (x1, yn), (x2, y1), ..., (xn, yn-1) per block.
        assert_eq!(rows.kl_completions(3), vec![2, 0, 1, 5, 3, 4, 6]);
        assert_eq!(rows.block(3, 2), vec![6]);
        assert_eq!(rows.blocks(3), 3);
    }

    #[test]
    fn sides_put_every_chosen_first() {
        let pairs = Pairs {
            prompts: vec![vec![1], vec![2]],
            chosen: vec![vec![10], vec![20]],
            rejected: vec![vec![11], vec![21]],
            margins: None,
        };
        let (p, c) = pairs.sides(&[1, 0]);
        assert_eq!(p, vec![&[2][..], &[1], &[2], &[1]]);
        assert_eq!(c, vec![&[20][..], &[10], &[21], &[11]]);
        assert_eq!(pairs.sequences(&[1]), vec![vec![2, 20], vec![2, 21]]);
    }
}
