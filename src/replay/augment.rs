//! Symmetry augmentation: a sampled row of a batch seen through one of the game's symmetries
//! (a rotated or reflected board, CartPole's mirror image), so the networks learn every
//! orientation from one game.
//!
//! The observations (the position and every bootstrap observation) are permuted, with signs
//! flipped where the symmetry says so, the unrolled actions are mapped, and every policy
//! target is carried along with its actions. Values and rewards do not change under a
//! symmetry.

use cumind_envs::Symmetry;

use super::Batch;

/// Apply `symmetry` to row `b` of `batch`.
pub(super) fn apply_symmetry(batch: &mut Batch, b: usize, symmetry: &Symmetry) {
    let (obs_len, num_actions, k_steps) =
        (batch.obs_len, batch.num_actions, batch.num_unroll_steps);
    let permute = |slice: &mut [f32]| {
        let old = slice.to_vec();
        for (i, new) in slice.iter_mut().enumerate() {
            *new = symmetry.element(&old, i);
        }
    };
    permute(&mut batch.observations[b * obs_len..(b + 1) * obs_len]);
    for k in 0..=k_steps {
        let row = b * (k_steps + 1) + k;
        permute(&mut batch.bootstrap_observations[row * obs_len..(row + 1) * obs_len]);
        permute(&mut batch.unroll_observations[row * obs_len..(row + 1) * obs_len]);
        let policy = &mut batch.target_policies[row * num_actions..(row + 1) * num_actions];
        let old = policy.to_vec();
        for (a, &p) in old.iter().enumerate() {
            policy[symmetry.actions[a]] = p;
        }
    }
    for action in &mut batch.actions[b * k_steps..(b + 1) * k_steps] {
        *action = symmetry.actions[*action];
    }
}

/// Undo [`apply_symmetry`] on one policy: `seen` is a policy of a row seen through
/// `symmetry`, `played` receives it over the actions as played.
pub(super) fn policy_as_played(symmetry: &Symmetry, seen: &[f32], played: &mut [f32]) {
    for (a, p) in played.iter_mut().enumerate() {
        *p = seen[symmetry.actions[a]];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_is_permuted_and_its_neighbours_are_not() {
        // Two actions swapped, observations of 2 values reversed.
        let symmetry = Symmetry {
            observation: vec![1, 0],
            negate: vec![false, false],
            actions: vec![1, 0],
        };
        let mut batch = Batch::zeros(2, 1, 2, 2);
        batch.observations = vec![1.0, 2.0, 3.0, 4.0];
        batch.bootstrap_observations = vec![5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0];
        batch.unroll_observations = vec![5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0];
        batch.actions = vec![0, 0];
        batch.target_policies = vec![0.9, 0.1, 0.8, 0.2, 0.7, 0.3, 0.6, 0.4];
        apply_symmetry(&mut batch, 1, &symmetry);
        assert_eq!(batch.observations, vec![1.0, 2.0, 4.0, 3.0]);
        assert_eq!(
            batch.bootstrap_observations,
            vec![5.0, 6.0, 7.0, 8.0, 10.0, 9.0, 12.0, 11.0]
        );
        assert_eq!(batch.unroll_observations, batch.bootstrap_observations);
        assert_eq!(batch.actions, vec![0, 1]);
        assert_eq!(
            batch.target_policies,
            vec![0.9, 0.1, 0.8, 0.2, 0.3, 0.7, 0.4, 0.6]
        );
    }

    #[test]
    fn policy_as_played_undoes_the_symmetry_of_a_policy() {
        // A three-cycle of the actions: not its own inverse.
        let symmetry = Symmetry {
            observation: vec![0],
            negate: vec![false],
            actions: vec![1, 2, 0],
        };
        let mut batch = Batch::zeros(1, 0, 1, 3);
        batch.target_policies = vec![0.5, 0.3, 0.2];
        apply_symmetry(&mut batch, 0, &symmetry);
        assert_eq!(batch.target_policies, vec![0.2, 0.5, 0.3]);
        let mut played = vec![0.0; 3];
        policy_as_played(&symmetry, &batch.target_policies, &mut played);
        assert_eq!(played, vec![0.5, 0.3, 0.2]);
    }

    #[test]
    fn a_signed_symmetry_negates_the_flagged_elements() {
        // CartPole's mirror: every element negated, the two pushes swapped.
        let symmetry = Symmetry {
            observation: vec![0, 1],
            negate: vec![true, false],
            actions: vec![1, 0],
        };
        let mut batch = Batch::zeros(1, 1, 2, 2);
        batch.observations = vec![1.5, -2.0];
        batch.bootstrap_observations = vec![3.0, 4.0, -5.0, 6.0];
        batch.unroll_observations = vec![0.5, 0.25, 7.0, -8.0];
        batch.actions = vec![1];
        batch.target_policies = vec![0.9, 0.1, 0.6, 0.4];
        apply_symmetry(&mut batch, 0, &symmetry);
        assert_eq!(batch.observations, vec![-1.5, -2.0]);
        assert_eq!(batch.bootstrap_observations, vec![-3.0, 4.0, 5.0, 6.0]);
        assert_eq!(batch.unroll_observations, vec![-0.5, 0.25, -7.0, -8.0]);
        assert_eq!(batch.actions, vec![0]);
        assert_eq!(batch.target_policies, vec![0.1, 0.9, 0.4, 0.6]);
    }
}
