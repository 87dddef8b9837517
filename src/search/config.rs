//! The search hyper-parameters ([`SearchConfig`]), the selection rule ([`SearchPolicy`]) and
//! their validation.

use serde::{Deserialize, Serialize};

use super::error::SearchError;
use super::{gumbel, puct};

/// Default simulations per search.
const DEFAULT_NUM_SIMULATIONS: usize = 50;
/// Default discount.
const DEFAULT_DISCOUNT: f32 = 0.997;
/// Default Dirichlet concentration of the pUCT root noise.
const DEFAULT_DIRICHLET_ALPHA: f32 = 0.25;
/// Default weight of the pUCT root noise.
const DEFAULT_EXPLORATION_FRACTION: f32 = 0.25;

/// The selection rule.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub enum SearchPolicy {
    /// MuZero's pUCT everywhere (see [`puct`]).
    #[default]
    Puct,
    /// Gumbel MuZero: Sequential Halving with Gumbel noise at the root, deterministic improved
    /// policy selection below it (see [`gumbel`]).
    Gumbel {
        max_considered_actions: usize,
        c_visit: f32,
        c_scale: f32,
        /// Scale of the root's Gumbel noise when it is added (self-play): 1 samples actions
        /// as the paper does, below 1 plays closer to the improved policy's best action, 0
        /// deterministically (mctx's `gumbel_scale`). Policy targets do not depend on it.
        noise_scale: f32,
    },
}

impl SearchPolicy {
    /// Gumbel MuZero with the paper's defaults: 16 considered actions, `c_visit = 50`,
    /// `c_scale = 1`, noise scale 1.
    pub fn default_gumbel() -> Self {
        SearchPolicy::Gumbel {
            max_considered_actions: gumbel::DEFAULT_MAX_CONSIDERED_ACTIONS,
            c_visit: gumbel::DEFAULT_C_VISIT,
            c_scale: gumbel::DEFAULT_C_SCALE,
            noise_scale: 1.0,
        }
    }
}

/// What pUCT takes for the value term of a child that no simulation has visited yet.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum UnvisitedValue {
    /// The bottom of the normalised range (the MuZero pseudocode and mctx's
    /// `qtransform_by_min_max`): an unvisited child competes through its prior only.
    #[default]
    Min,
    /// The parent's mean value so far, normalised like the visited children's Q (first-play
    /// urgency at the parent's value, as Leela Chess Zero's without its reduction): an
    /// unvisited child looks as good as the position it is played from, so a visited child
    /// that turns out worse than that lets the others be tried.
    Parent,
}

/// Search hyper-parameters.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct SearchConfig {
    /// Simulations per search (at least 1); each tree gets `num_simulations + 1` nodes.
    pub num_simulations: usize,
    /// Discount in `[0, 1]`.
    pub discount: f32,
    /// pUCT `c1` (`pb_c_init`), default 1.25.
    pub c1: f32,
    /// pUCT `c2` (`pb_c_base`), default 19652.
    pub c2: f32,
    /// Dirichlet concentration of the root noise (pUCT, `add_noise` only).
    pub dirichlet_alpha: f32,
    /// Weight of the root noise in `[0, 1]` (pUCT, `add_noise` only).
    pub exploration_fraction: f32,
    /// Alternate the player at every level (values negated from parent to child).
    pub two_player: bool,
    pub policy: SearchPolicy,
    /// Symmetries of the game to search every root through as well, pooling the roots'
    /// statistics (see the `symmetric` module); empty (the default) searches each root once.
    #[serde(skip)]
    pub symmetries: Vec<cumind_envs::Symmetry>,
    /// Search the real game instead of the learned model (`mcts.model = "exact"`): the
    /// callers that hold the environments search through `crate::exact_model::ExactModel`.
    /// The search itself does not read it.
    pub exact_rules: bool,
    /// Self-play samples its moves by visit-count temperature for this many moves of each
    /// game's record, then plays the most visited move (AlphaZero's sampling moves); `None`
    /// samples every move. The search itself does not read it.
    #[serde(default)]
    pub sampling_moves: Option<usize>,
    /// pUCT: known bounds `(min, max)` of the values (MuZero's `KnownBounds`, for example
    /// `(-1, 1)` in board games): each tree's min-max normalisation starts from them instead
    /// of from nothing, so Q is scaled by the game's range rather than by the few values one
    /// search has seen. `None`: the tree's own range.
    #[serde(default)]
    pub value_bounds: Option<(f32, f32)>,
    /// pUCT: the value term of an unvisited child.
    #[serde(default)]
    pub unvisited_value: UnvisitedValue,
    /// With `exact_rules`: check every position one move ahead with the real rules (see
    /// `crate::exact_model`). The search itself does not read it.
    #[serde(default)]
    pub decisive_moves: bool,
    /// MCTS-Solver (Winands, Bjornsson and Saito, 2008) for models that know where the game
    /// ends (the exact-rules model): a node whose game has ended is proven (value 0, its
    /// reward exact); a node with a move proven to return `SOLVED_WIN` or more, or whose legal
    /// moves are all proven, is proven at the best of them; a proven node backs up its exact
    /// value instead of its sampled mean. For games whose returns lie in [-1, 1].
    #[serde(default)]
    pub solver: bool,
    /// Searches of at least 128 trees spread each simulation's per-tree work over this many
    /// threads kept awake beside the caller for the whole search (`device.search_helper_threads`,
    /// see `crate::threads::with_helpers`); 0 uses the rayon pool. For searches whose network
    /// runs on a GPU: the pool's threads fall asleep during each device call, and waking them
    /// costs about what splitting the work saves. The helpers spin, so they take their cores
    /// for the length of each search. The result does not depend on it.
    #[serde(default)]
    pub helper_threads: usize,
    /// Ask the model for its network calls in bf16 where it can
    /// ([`crate::model::Model::set_bf16_inference`]; `mcts.inference_dtype`). The search
    /// itself computes nothing in bf16.
    #[serde(default)]
    pub bf16_inference: bool,
}

impl Default for SearchConfig {
    fn default() -> Self {
        Self {
            num_simulations: DEFAULT_NUM_SIMULATIONS,
            discount: DEFAULT_DISCOUNT,
            c1: puct::DEFAULT_C1,
            c2: puct::DEFAULT_C2,
            dirichlet_alpha: DEFAULT_DIRICHLET_ALPHA,
            exploration_fraction: DEFAULT_EXPLORATION_FRACTION,
            two_player: false,
            policy: SearchPolicy::Puct,
            symmetries: Vec::new(),
            exact_rules: false,
            sampling_moves: None,
            value_bounds: None,
            unvisited_value: UnvisitedValue::Min,
            decisive_moves: false,
            solver: false,
            helper_threads: 0,
            bf16_inference: false,
        }
    }
}

impl SearchConfig {
    /// Check the parameters (noise parameters only when `add_noise` and pUCT).
    pub fn validate(&self, add_noise: bool) -> Result<(), SearchError> {
        let bad = |msg: String| Err(SearchError::InvalidConfig(msg));
        if self.num_simulations == 0 || self.num_simulations >= u32::MAX as usize - 1 {
            return bad(format!(
                "num_simulations must be in 1..{}, got {}",
                u32::MAX - 1,
                self.num_simulations
            ));
        }
        if !(0.0..=1.0).contains(&self.discount) {
            return bad(format!("discount must be in [0, 1], got {}", self.discount));
        }
        if !(self.c1.is_finite() && self.c1 >= 0.0) {
            return bad(format!("c1 must be finite and >= 0, got {}", self.c1));
        }
        if !(self.c2.is_finite() && self.c2 > 0.0) {
            return bad(format!("c2 must be finite and > 0, got {}", self.c2));
        }
        if let Some((lo, hi)) = self.value_bounds {
            if !(lo.is_finite() && hi.is_finite() && lo < hi) {
                return bad(format!(
                    "value_bounds must be two finite numbers [min, max] with min < max, got [{lo}, {hi}]"
                ));
            }
        }
        match self.policy {
            SearchPolicy::Puct => {
                if add_noise {
                    if !(self.dirichlet_alpha.is_finite() && self.dirichlet_alpha > 0.0) {
                        return bad(format!(
                            "dirichlet_alpha must be finite and > 0, got {}",
                            self.dirichlet_alpha
                        ));
                    }
                    if !(0.0..=1.0).contains(&self.exploration_fraction) {
                        return bad(format!(
                            "exploration_fraction must be in [0, 1], got {}",
                            self.exploration_fraction
                        ));
                    }
                }
            }
            SearchPolicy::Gumbel {
                max_considered_actions,
                c_visit,
                c_scale,
                noise_scale,
            } => {
                if max_considered_actions == 0 {
                    return bad("max_considered_actions must be at least 1".into());
                }
                if !(c_visit.is_finite() && c_visit >= 0.0) {
                    return bad(format!("c_visit must be finite and >= 0, got {c_visit}"));
                }
                if !(c_scale.is_finite() && c_scale >= 0.0) {
                    return bad(format!("c_scale must be finite and >= 0, got {c_scale}"));
                }
                if !(noise_scale.is_finite() && noise_scale >= 0.0) {
                    return bad(format!(
                        "noise_scale must be finite and >= 0, got {noise_scale}"
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A pUCT config with `num_simulations` and `discount`, defaults otherwise.
    pub(crate) fn puct_config(num_simulations: usize, discount: f32) -> SearchConfig {
        SearchConfig {
            num_simulations,
            discount,
            policy: SearchPolicy::Puct,
            ..SearchConfig::default()
        }
    }

    /// A Gumbel MuZero config (paper defaults) with `num_simulations` and `discount`.
    pub(crate) fn gumbel_config(num_simulations: usize, discount: f32) -> SearchConfig {
        SearchConfig {
            num_simulations,
            discount,
            policy: SearchPolicy::default_gumbel(),
            ..SearchConfig::default()
        }
    }

    #[test]
    fn config_serde_round_trip() {
        let config = SearchConfig {
            policy: SearchPolicy::default_gumbel(),
            two_player: true,
            ..SearchConfig::default()
        };
        let json = serde_json::to_string(&config).unwrap();
        let back: SearchConfig = serde_json::from_str(&json).unwrap();
        assert_eq!(back, config);
        // Missing fields take their defaults.
        let partial: SearchConfig = serde_json::from_str(r#"{"num_simulations": 8}"#).unwrap();
        assert_eq!(partial.num_simulations, 8);
        assert_eq!(partial.c2, 19652.0);
    }

    #[test]
    fn validate_names_the_parameter_out_of_range() {
        let puct = SearchConfig::default();
        let gumbel = SearchConfig {
            policy: SearchPolicy::default_gumbel(),
            ..SearchConfig::default()
        };
        for config in [&puct, &gumbel] {
            for add_noise in [false, true] {
                assert!(config.validate(add_noise).is_ok(), "{config:?}");
            }
        }
        let rejected =
            |config: SearchConfig, add_noise: bool, field: &str| match config.validate(add_noise) {
                Err(SearchError::InvalidConfig(msg)) => assert!(msg.contains(field), "{msg}"),
                other => panic!("{field}: expected InvalidConfig, got {other:?}"),
            };
        let with = |f: fn(&mut SearchConfig), base: &SearchConfig| {
            let mut config = base.clone();
            f(&mut config);
            config
        };
        rejected(
            with(|c| c.num_simulations = 0, &puct),
            false,
            "num_simulations",
        );
        rejected(with(|c| c.discount = 1.5, &puct), false, "discount");
        rejected(with(|c| c.discount = f32::NAN, &gumbel), false, "discount");
        rejected(with(|c| c.c1 = -1.0, &puct), false, "c1");
        rejected(with(|c| c.c2 = 0.0, &puct), false, "c2");
        // The pUCT noise parameters matter only with noise, and never to Gumbel.
        let no_alpha = with(|c| c.dirichlet_alpha = 0.0, &puct);
        assert!(no_alpha.validate(false).is_ok());
        rejected(no_alpha, true, "dirichlet_alpha");
        let bad_fraction = with(|c| c.exploration_fraction = 2.0, &puct);
        assert!(bad_fraction.validate(false).is_ok());
        rejected(bad_fraction, true, "exploration_fraction");
        let gumbel_no_alpha = with(|c| c.dirichlet_alpha = 0.0, &gumbel);
        assert!(gumbel_no_alpha.validate(true).is_ok());
        let gumbel_with = |m: usize, c_visit: f32, c_scale: f32, noise_scale: f32| SearchConfig {
            policy: SearchPolicy::Gumbel {
                max_considered_actions: m,
                c_visit,
                c_scale,
                noise_scale,
            },
            ..gumbel.clone()
        };
        rejected(
            gumbel_with(0, 50.0, 1.0, 1.0),
            false,
            "max_considered_actions",
        );
        rejected(gumbel_with(16, -1.0, 1.0, 1.0), false, "c_visit");
        rejected(gumbel_with(16, 50.0, f32::INFINITY, 1.0), true, "c_scale");
        rejected(gumbel_with(16, 50.0, 1.0, -0.5), true, "noise_scale");
        rejected(gumbel_with(16, 50.0, 1.0, f32::NAN), false, "noise_scale");
        assert!(gumbel_with(16, 50.0, 1.0, 0.0).validate(true).is_ok());
    }
}
