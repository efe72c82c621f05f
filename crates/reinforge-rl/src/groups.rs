//! Rollouts grouped by prompt: G completions of one prompt form a group.

use std::collections::BTreeMap;

/// Group membership of a batch of rollouts, by group id (as verl's `index`): rows of a
/// group need not be contiguous.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Groups {
    members: Vec<Vec<usize>>,
}

impl Groups {
    /// Groups rows by the ids in `index` (first appearance order).
    pub fn from_index(index: &[i64]) -> Self {
        let mut order: Vec<i64> = vec![];
        let mut map: BTreeMap<i64, Vec<usize>> = BTreeMap::new();
        for (row, &id) in index.iter().enumerate() {
            map.entry(id).or_insert_with(|| {
                order.push(id);
                vec![]
            });
            map.get_mut(&id).expect("just inserted").push(row);
        }
        Self {
            members: order
                .iter()
                .map(|id| map.remove(id).expect("present"))
                .collect(),
        }
    }

    /// `n_groups` contiguous blocks of `group_size` rows (TRL's layout).
    pub fn contiguous(n_groups: usize, group_size: usize) -> Self {
        Self {
            members: (0..n_groups)
                .map(|g| (g * group_size..(g + 1) * group_size).collect())
                .collect(),
        }
    }

    /// The rows of each group.
    pub fn iter(&self) -> impl Iterator<Item = &[usize]> {
        self.members.iter().map(Vec::as_slice)
    }

    /// Number of groups.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether there are no groups.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }
}

/// Reward statistics of a grouped batch (what `metrics.jsonl` reports per step).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct GroupStats {
    pub mean: f64,
    /// Population standard deviation over all rows.
    pub std: f64,
    /// Fraction of groups whose rewards are all equal: they carry no GRPO signal.
    pub zero_variance_frac: f64,
}

impl GroupStats {
    /// Statistics of `rewards` grouped by `groups`.
    pub fn of(rewards: &[f64], groups: &Groups) -> Self {
        if rewards.is_empty() {
            return Self::default();
        }
        let n = rewards.len() as f64;
        let mean = rewards.iter().sum::<f64>() / n;
        let std = (rewards.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / n).sqrt();
        let flat = groups
            .iter()
            .filter(|g| g.iter().all(|&i| rewards[i] == rewards[g[0]]))
            .count();
        Self {
            mean,
            std,
            zero_variance_frac: flat as f64 / groups.len().max(1) as f64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_by_id_keep_first_appearance_order() {
        let g = Groups::from_index(&[5, 2, 5, 9, 2]);
        let v: Vec<&[usize]> = g.iter().collect();
        assert_eq!(v, vec![&[0, 2][..], &[1, 4][..], &[3][..]]);
        assert_eq!(
            Groups::contiguous(2, 3).iter().collect::<Vec<_>>(),
            vec![&[0, 1, 2][..], &[3, 4, 5][..]]
        );
    }

    #[test]
    fn zero_variance_fraction_counts_flat_groups() {
        let s = GroupStats::of(&[1.0, 1.0, 0.0, 1.0, 0.0, 0.0], &Groups::contiguous(3, 2));
        assert_eq!(s.zero_variance_frac, 2.0 / 3.0);
        assert!((s.mean - 0.5).abs() < 1e-12 && (s.std - 0.5).abs() < 1e-12);
    }
}
