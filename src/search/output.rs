//! What a batched search returns ([`SearchOutput`]): flat row-major arrays, one row per tree.

use serde::{Deserialize, Serialize};

/// The result of a batched search. Per-action arrays are `[batch * num_actions]`, row-major.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SearchOutput {
    pub batch: usize,
    pub num_actions: usize,
    /// `[B]` search value of each root (mean of the initial value and the backed-up returns),
    /// from the root player's perspective.
    pub root_values: Vec<f32>,
    /// `[B * A]` visit counts of the root children (they sum to `num_simulations`).
    pub visit_counts: Vec<u32>,
    /// `[B * A]` normalised visit counts (pUCT) or the improved policy (Gumbel); 0 on illegal
    /// actions.
    pub policy_targets: Vec<f32>,
    /// `[B * A]` Q of each root child from the root player's perspective (0 if unvisited).
    pub root_q: Vec<f32>,
    /// `[B * A]` the root's prior (the network's policy over the legal actions; with pUCT's
    /// root noise mixed in when it was added).
    #[serde(default)]
    pub root_priors: Vec<f32>,
    /// `[B]` the action chosen by Gumbel MuZero (Gumbel only).
    pub gumbel_actions: Option<Vec<usize>>,
    /// Deepest node reached in any tree (root = 0).
    pub max_depth: usize,
}

impl SearchOutput {
    /// This batch's rows followed by `other`'s (the two halves of a split search).
    pub fn append(mut self, other: SearchOutput) -> SearchOutput {
        self.batch += other.batch;
        self.root_values.extend(other.root_values);
        self.visit_counts.extend(other.visit_counts);
        self.policy_targets.extend(other.policy_targets);
        self.root_q.extend(other.root_q);
        self.root_priors.extend(other.root_priors);
        if let (Some(mine), Some(theirs)) = (self.gumbel_actions.as_mut(), other.gumbel_actions) {
            mine.extend(theirs);
        }
        self.max_depth = self.max_depth.max(other.max_depth);
        self
    }

    /// `[A]` visit counts of the root children of batch element `b`.
    pub fn visit_counts_of(&self, b: usize) -> &[u32] {
        &self.visit_counts[b * self.num_actions..(b + 1) * self.num_actions]
    }

    /// `[A]` policy target of batch element `b`.
    pub fn policy_target_of(&self, b: usize) -> &[f32] {
        &self.policy_targets[b * self.num_actions..(b + 1) * self.num_actions]
    }

    /// `[A]` root-child Q-values of batch element `b`.
    pub fn root_q_of(&self, b: usize) -> &[f32] {
        &self.root_q[b * self.num_actions..(b + 1) * self.num_actions]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_batch_elements() {
        let out = SearchOutput {
            batch: 2,
            num_actions: 3,
            root_values: vec![0.5, -0.5],
            visit_counts: vec![1, 2, 3, 4, 5, 6],
            policy_targets: vec![0.1, 0.2, 0.7, 0.0, 0.5, 0.5],
            root_q: vec![-1.0, 0.0, 1.0, 2.0, 3.0, 4.0],
            root_priors: vec![0.2; 6],
            gumbel_actions: None,
            max_depth: 2,
        };
        assert_eq!(out.visit_counts_of(0), &[1, 2, 3]);
        assert_eq!(out.visit_counts_of(1), &[4, 5, 6]);
        assert_eq!(out.policy_target_of(1), &[0.0, 0.5, 0.5]);
        assert_eq!(out.root_q_of(0), &[-1.0, 0.0, 1.0]);
        assert_eq!(out.root_q_of(1), &[2.0, 3.0, 4.0]);
    }
}
