//! Choosing the action to play from root visit counts.

use rand::Rng;

/// Choose an action from root `visit_counts` over the `legal` actions.
///
/// - `temperature <= 0` (or NaN): the most visited legal action; ties go to the lowest index.
/// - otherwise: sample with probability proportional to `N(a)^(1 / temperature)` over the
///   legal actions (computed in log space, so small temperatures do not overflow). If no legal
///   action was visited, sample uniformly among the legal actions.
///
/// # Panics
/// If the slices differ in length or no action is legal.
pub fn select_action<R: Rng + ?Sized>(
    visit_counts: &[u32],
    legal_mask: &[bool],
    temperature: f32,
    rng: &mut R,
) -> usize {
    assert_eq!(
        visit_counts.len(),
        legal_mask.len(),
        "visit counts and legal mask differ in length"
    );
    let legal = || {
        visit_counts
            .iter()
            .zip(legal_mask)
            .enumerate()
            .filter(|(_, (_, &ok))| ok)
            .map(|(a, (&n, _))| (a, n))
    };
    let (best, best_n) = legal()
        .fold(None, |acc: Option<(usize, u32)>, (a, n)| match acc {
            Some((_, bn)) if bn >= n => acc,
            _ => Some((a, n)),
        })
        .expect("select_action needs at least one legal action");
    if temperature.is_nan() || temperature <= 0.0 {
        return best;
    }
    if best_n == 0 {
        let count = legal().count();
        let k = rng.random_range(0..count);
        return legal().nth(k).map(|(a, _)| a).unwrap_or(best);
    }
    let inv_t = 1.0 / f64::from(temperature);
    let log_max = f64::from(best_n).ln();
    let weight = |n: u32| {
        if n == 0 {
            0.0
        } else {
            ((f64::from(n).ln() - log_max) * inv_t).exp()
        }
    };
    let total: f64 = legal().map(|(_, n)| weight(n)).sum();
    let mut u = rng.random::<f64>() * total;
    let mut last = best;
    for (a, n) in legal() {
        let w = weight(n);
        if w > 0.0 {
            if u < w {
                return a;
            }
            u -= w;
            last = a;
        }
    }
    last
}

/// The action to play in every tree of a search: Gumbel MuZero's own selected action when the
/// search made one, else [`select_action`] on each root's visit counts at `temperature`.
///
/// # Shapes
/// `legal_masks`: `[B * A]`; returns `[B]`.
pub fn choose_actions<R: Rng + ?Sized>(
    output: &super::SearchOutput,
    legal_masks: &[bool],
    temperature: f32,
    rng: &mut R,
) -> Vec<usize> {
    if let Some(actions) = &output.gumbel_actions {
        return actions.clone();
    }
    let a = output.num_actions;
    (0..output.batch)
        .map(|i| {
            select_action(
                &output.visit_counts[i * a..(i + 1) * a],
                &legal_masks[i * a..(i + 1) * a],
                temperature,
                rng,
            )
        })
        .collect()
}

/// [`choose_actions`] for trees whose games have played `moves_played` moves each: a game
/// that has played `sampling_moves` or more plays its most visited move instead of a sample
/// (AlphaZero's sampling moves; Gumbel's selected actions stand). With `sampling_moves` `None`,
/// [`choose_actions`] exactly.
///
/// # Shapes
/// `legal_masks`: `[B * A]`, `moves_played`: `[B]`; returns `[B]`.
pub fn choose_actions_in_games<R: Rng + ?Sized>(
    output: &super::SearchOutput,
    legal_masks: &[bool],
    temperature: f32,
    moves_played: &[usize],
    sampling_moves: Option<usize>,
    rng: &mut R,
) -> Vec<usize> {
    let Some(limit) = sampling_moves else {
        return choose_actions(output, legal_masks, temperature, rng);
    };
    if let Some(actions) = &output.gumbel_actions {
        return actions.clone();
    }
    let a = output.num_actions;
    (0..output.batch)
        .map(|i| {
            let t = if moves_played[i] >= limit {
                0.0
            } else {
                temperature
            };
            select_action(
                &output.visit_counts[i * a..(i + 1) * a],
                &legal_masks[i * a..(i + 1) * a],
                t,
                rng,
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    /// Past its sampling moves a game plays its most visited legal move, whatever the
    /// temperature; before them it still samples.
    #[test]
    fn games_past_their_sampling_moves_play_the_most_visited_move() {
        let output = crate::search::SearchOutput {
            batch: 2,
            num_actions: 3,
            root_values: vec![0.0; 2],
            visit_counts: vec![1, 5, 3, 1, 5, 3],
            policy_targets: vec![0.0; 6],
            root_q: vec![0.0; 6],
            root_priors: vec![0.0; 6],
            gumbel_actions: None,
            max_depth: 1,
        };
        let masks = vec![true; 6];
        let mut sampled = std::collections::BTreeSet::new();
        for seed in 0..50 {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let actions =
                choose_actions_in_games(&output, &masks, 1000.0, &[4, 5], Some(5), &mut rng);
            assert_eq!(actions[1], 1, "seed {seed}: the game past 5 moves");
            sampled.insert(actions[0]);
        }
        assert_eq!(sampled.len(), 3, "the game at 4 moves samples every action");
        // Without a limit, both sample.
        let mut rng = rand::rngs::StdRng::seed_from_u64(0);
        let free: std::collections::BTreeSet<usize> = (0..50)
            .map(|_| choose_actions_in_games(&output, &masks, 1000.0, &[4, 5], None, &mut rng)[1])
            .collect();
        assert_eq!(free.len(), 3);
    }

    #[test]
    fn temperature_zero_is_argmax_over_legal() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(0);
        assert_eq!(select_action(&[1, 5, 5, 2], &[true; 4], 0.0, &mut rng), 1);
        assert_eq!(
            select_action(&[9, 5, 5, 2], &[false, true, true, true], 0.0, &mut rng),
            1
        );
        assert_eq!(
            select_action(&[0, 0, 0], &[false, false, true], 0.0, &mut rng),
            2
        );
    }

    #[test]
    fn temperature_one_samples_proportionally() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let visits = [10, 0, 30, 60, 100];
        let legal = [true, true, true, true, false];
        let mut counts = [0usize; 5];
        let n = 40_000;
        for _ in 0..n {
            counts[select_action(&visits, &legal, 1.0, &mut rng)] += 1;
        }
        assert_eq!(counts[1], 0);
        assert_eq!(counts[4], 0);
        for (a, p) in [(0, 0.1), (2, 0.3), (3, 0.6)] {
            let f = counts[a] as f64 / n as f64;
            assert!((f - p).abs() < 0.02, "action {a}: {f} vs {p}");
        }
        // Temperature 0.5 squares the counts: 1 : 9 : 36.
        let mut counts = [0usize; 5];
        for _ in 0..n {
            counts[select_action(&visits, &legal, 0.5, &mut rng)] += 1;
        }
        let f3 = counts[3] as f64 / n as f64;
        assert!((f3 - 36.0 / 46.0).abs() < 0.02, "{f3}");
        // Tiny temperatures behave like argmax without overflow.
        assert_eq!(select_action(&visits, &legal, 1e-6, &mut rng), 3);
        // No visits at all: uniform over legal.
        let mut seen = [false; 3];
        for _ in 0..200 {
            seen[select_action(&[0, 0, 0], &[true, false, true], 1.0, &mut rng)] = true;
        }
        assert_eq!(seen, [true, false, true]);
    }
}
