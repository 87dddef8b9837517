//! Dirichlet exploration noise at the root (MuZero / AlphaZero).

use rand::Rng;
use rand_distr::{Distribution, Gamma};

/// Mix Dirichlet(`alpha`) noise into the legal entries of `priors`:
/// `prior = (1 - fraction) * prior + fraction * noise`, with the noise drawn over the legal
/// actions only (illegal priors are left untouched, normally 0). `scratch` holds one value per
/// action.
///
/// The Dirichlet sample is drawn as normalised Gamma(`alpha`, 1) samples; if they all underflow
/// to 0 (tiny `alpha`), the noise falls back to uniform over the legal actions.
///
/// # Panics
/// If `alpha` is not a positive finite number (validated by the search beforehand).
pub fn add_dirichlet_noise<R: Rng + ?Sized>(
    priors: &mut [f32],
    legal: &[bool],
    alpha: f32,
    fraction: f32,
    rng: &mut R,
    scratch: &mut [f32],
) {
    let gamma = Gamma::new(alpha, 1.0).expect("dirichlet alpha must be positive and finite");
    let mut total = 0.0f32;
    let mut count = 0usize;
    for (n, &ok) in scratch.iter_mut().zip(legal) {
        *n = if ok {
            count += 1;
            gamma.sample(rng)
        } else {
            0.0
        };
        total += *n;
    }
    if count == 0 {
        return;
    }
    let uniform = !(total > 0.0 && total.is_finite());
    for ((p, &n), &ok) in priors.iter_mut().zip(scratch.iter()).zip(legal) {
        if ok {
            let noise = if uniform {
                1.0 / count as f32
            } else {
                n / total
            };
            *p = (1.0 - fraction) * *p + fraction * noise;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn noise_stays_on_legal_actions_and_sums_to_one() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let legal = [true, false, true, true, false];
        let mut mean = [0.0f32; 5];
        for _ in 0..2000 {
            let mut priors = [0.5, 0.0, 0.5, 0.0, 0.0];
            let mut scratch = [0.0; 5];
            add_dirichlet_noise(&mut priors, &legal, 0.3, 0.25, &mut rng, &mut scratch);
            assert_eq!(priors[1], 0.0);
            assert_eq!(priors[4], 0.0);
            assert!((priors.iter().sum::<f32>() - 1.0).abs() < 1e-5);
            // At least 75% of the original prior remains.
            assert!(priors[0] >= 0.375 - 1e-6 && priors[2] >= 0.375 - 1e-6);
            for (m, p) in mean.iter_mut().zip(priors) {
                *m += p / 2000.0;
            }
        }
        // E[noise] = 1/3 per legal action: E[prior] = 0.75 * 0.5 + 0.25 / 3 = 0.4583 (a0, a2),
        // 0.0833 (a3).
        assert!((mean[0] - 0.4583).abs() < 0.02, "{mean:?}");
        assert!((mean[3] - 0.0833).abs() < 0.02, "{mean:?}");
    }

    #[test]
    fn tiny_alpha_falls_back_gracefully() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        let legal = [true, true];
        let mut priors = [1.0, 0.0];
        let mut scratch = [0.0; 2];
        add_dirichlet_noise(&mut priors, &legal, 1e-30, 1.0, &mut rng, &mut scratch);
        assert!(priors.iter().all(|p| p.is_finite()));
        assert!(
            (priors.iter().sum::<f32>() - 1.0).abs() < 1e-5,
            "{priors:?}"
        );
    }
}
