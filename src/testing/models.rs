//! Fake [`Model`]s for search tests: tiny games whose right answer is known (bandits, fixed
//! trees), a deterministic pseudo-random model and models that fail on purpose.
//!
//! Every fake follows the node-index protocol of [`Model`]: `initial_inference` predicts at the
//! roots (node 0), and `recurrent_inference` creates node `new_node` of every tree from
//! `parents[b]` and `actions[b]`. Shapes: logits `[B * A]`, values and rewards `[B]`.
//! Nothing here depends on anything but the [`Model`] trait.

use crate::model::{Model, ModelError, Prediction};

/// SplitMix64's finaliser: a well-mixed 64-bit hash of `z`.
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A uniform value in `[-1, 1)` from a hash (its top 24 bits).
pub fn unit(z: u64) -> f32 {
    (z >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
}

/// A one-step bandit: from the root, action `best` gives reward 1, the others 0; every value
/// is 0, every prior uniform and nothing below the root gives any reward. The right answer is
/// `best`, worth 1. Asserts the call protocol (one observation per tree, node `s + 1` at
/// simulation `s`, parents already created) and counts the calls.
#[derive(Clone, Debug)]
pub struct Bandit {
    pub num_actions: usize,
    /// The rewarding root action.
    pub best: usize,
    /// Batch of the last `initial_inference`.
    pub batch: usize,
    /// Nodes per tree announced by the last `initial_inference`.
    pub capacity: usize,
    /// `recurrent_inference` calls since the last `initial_inference`.
    pub recurrent_calls: usize,
    /// `initial_inference` calls in all.
    pub initial_calls: usize,
}

impl Bandit {
    /// A bandit with `num_actions` arms where `best` pays 1.
    pub fn new(num_actions: usize, best: usize) -> Self {
        Self {
            num_actions,
            best,
            batch: 0,
            capacity: 0,
            recurrent_calls: 0,
            initial_calls: 0,
        }
    }
}

impl Model for Bandit {
    fn num_actions(&self) -> usize {
        self.num_actions
    }

    fn initial_inference(
        &mut self,
        observations: &[f32],
        batch: usize,
        capacity: usize,
    ) -> Result<Prediction, ModelError> {
        assert_eq!(observations.len(), batch);
        self.batch = batch;
        self.capacity = capacity;
        self.initial_calls += 1;
        self.recurrent_calls = 0;
        Ok(Prediction {
            policy_logits: vec![0.0; batch * self.num_actions],
            values: vec![0.0; batch],
            rewards: vec![0.0; batch],
        })
    }

    fn recurrent_inference(
        &mut self,
        parents: &[usize],
        actions: &[usize],
        new_node: usize,
    ) -> Result<Prediction, ModelError> {
        assert_eq!(parents.len(), self.batch);
        assert_eq!(actions.len(), self.batch);
        self.recurrent_calls += 1;
        assert_eq!(new_node, self.recurrent_calls, "node s + 1 at simulation s");
        assert!(new_node < self.capacity);
        assert!(parents.iter().all(|&p| p < new_node));
        assert!(actions.iter().all(|&a| a < self.num_actions));
        let rewards = parents
            .iter()
            .zip(actions)
            .map(|(&p, &a)| if p == 0 && a == self.best { 1.0 } else { 0.0 })
            .collect();
        Ok(Prediction {
            policy_logits: vec![0.0; self.batch * self.num_actions],
            values: vec![0.0; self.batch],
            rewards,
        })
    }
}

/// One action only: the simulations build the chain root -> 1 -> 2 -> ... with reward `n` into
/// node `n`, value 0.5 at the root and `10 * n` at node `n`, so every backed-up return can be
/// computed by hand. Asserts that each parent is the previous node.
#[derive(Clone, Debug, Default)]
pub struct Chain {
    batch: usize,
}

impl Model for Chain {
    fn num_actions(&self) -> usize {
        1
    }

    fn initial_inference(
        &mut self,
        _: &[f32],
        batch: usize,
        _: usize,
    ) -> Result<Prediction, ModelError> {
        self.batch = batch;
        Ok(Prediction {
            policy_logits: vec![0.0; batch],
            values: vec![0.5; batch],
            rewards: vec![0.0; batch],
        })
    }

    fn recurrent_inference(
        &mut self,
        parents: &[usize],
        _: &[usize],
        new_node: usize,
    ) -> Result<Prediction, ModelError> {
        assert!(parents.iter().all(|&p| p + 1 == new_node), "a chain");
        Ok(Prediction {
            policy_logits: vec![0.0; self.batch],
            values: vec![10.0 * new_node as f32; self.batch],
            rewards: vec![new_node as f32; self.batch],
        })
    }
}

/// Two actions, discount 1, every value 0. From the root, action 0 pays the mover 1 and action
/// 1 pays 0; one level down, every action pays the mover 5 after root action 0 and 0 after root
/// action 1; deeper transitions pay nothing. One player: action 0 is worth 6. Two players:
/// `1 - 5 = -4`, so action 1 (worth 0) is better.
#[derive(Clone, Debug, Default)]
pub struct Trap {
    batch: usize,
    capacity: usize,
    /// Root action leading to each node, `[B * capacity]`.
    branch: Vec<usize>,
    /// Depth of each node, `[B * capacity]`.
    depth: Vec<usize>,
}

impl Model for Trap {
    fn num_actions(&self) -> usize {
        2
    }

    fn initial_inference(
        &mut self,
        _: &[f32],
        batch: usize,
        capacity: usize,
    ) -> Result<Prediction, ModelError> {
        self.batch = batch;
        self.capacity = capacity;
        self.branch = vec![0; batch * capacity];
        self.depth = vec![0; batch * capacity];
        Ok(Prediction {
            policy_logits: vec![0.0; batch * 2],
            values: vec![0.0; batch],
            rewards: vec![0.0; batch],
        })
    }

    fn recurrent_inference(
        &mut self,
        parents: &[usize],
        actions: &[usize],
        new_node: usize,
    ) -> Result<Prediction, ModelError> {
        let mut rewards = vec![0.0; self.batch];
        for b in 0..self.batch {
            let (p, n) = (b * self.capacity + parents[b], b * self.capacity + new_node);
            self.depth[n] = self.depth[p] + 1;
            self.branch[n] = if self.depth[n] == 1 {
                actions[b]
            } else {
                self.branch[p]
            };
            rewards[b] = match (self.depth[n], self.branch[n]) {
                (1, 0) => 1.0,
                (2, 0) => 5.0,
                _ => 0.0,
            };
        }
        Ok(Prediction {
            policy_logits: vec![0.0; self.batch * 2],
            values: vec![0.0; self.batch],
            rewards,
        })
    }
}

/// The constants of a [`HashModel`]. With `s` the state of a node:
/// - logit of action `a`: `logit_scale * unit(mix(s ^ (a + 1)))`
/// - value: `unit(mix(s ^ value_salt))`
/// - reward into the node (0 at the root): `reward_scale * unit(mix(s ^ REWARD_SALT))`
/// - state of the child through `a`: `mix(s ^ mix(a + action_salt))`
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HashParams {
    pub logit_scale: f32,
    pub value_salt: u64,
    pub reward_scale: f32,
    pub action_salt: u64,
}

impl HashParams {
    /// The search unit tests' constants: logits in `[-2, 2)`, rewards in `[-0.5, 0.5)`.
    pub const UNIT_TESTS: HashParams = HashParams {
        logit_scale: 2.0,
        value_salt: 0xdead,
        reward_scale: 0.5,
        action_salt: 17,
    };
}

/// Salt of the reward hash of a [`HashModel`].
const REWARD_SALT: u64 = 0xbeef;
/// What a tempting [`HashModel`] adds to the root logits of illegal actions.
const TEMPTATION: f32 = 8.0;

/// A deterministic pseudo-random model: the root state is a hash of the observation's bits,
/// each node's state a hash of its parent's state and the action, and logits, values and
/// rewards are hashes of the state (see [`HashParams`]). One observation value per tree; a
/// wrong observation length is a [`ModelError::ObservationShape`].
///
/// A *tempting* model ([`HashModel::tempting`]) also adds a large bonus to the root logits of
/// the actions its mask marks illegal, to tempt a search that ignores the mask.
#[derive(Clone, Debug)]
pub struct HashModel {
    num_actions: usize,
    params: HashParams,
    /// `[B * A]` root mask whose illegal actions get [`TEMPTATION`]; empty for none.
    tempt: Vec<bool>,
    batch: usize,
    capacity: usize,
    /// `[B * capacity]` node states.
    states: Vec<u64>,
}

impl HashModel {
    /// A hash model with `num_actions` actions.
    pub fn new(num_actions: usize, params: HashParams) -> Self {
        Self {
            num_actions,
            params,
            tempt: Vec::new(),
            batch: 0,
            capacity: 0,
            states: Vec::new(),
        }
    }

    /// [`HashParams::UNIT_TESTS`] with large root logits on the actions that `legal`
    /// (`[B * A]`, the masks the search will get) marks illegal.
    pub fn tempting(num_actions: usize, legal: Vec<bool>) -> Self {
        Self {
            tempt: legal,
            ..Self::new(num_actions, HashParams::UNIT_TESTS)
        }
    }

    /// Predict at node `node` of every tree.
    fn predict(&self, node: usize, root: bool) -> Prediction {
        let p = self.params;
        let mut pred = Prediction::default();
        for b in 0..self.batch {
            let s = self.states[b * self.capacity + node];
            for a in 0..self.num_actions {
                let l = p.logit_scale * unit(mix(s ^ (a as u64 + 1)));
                let tempted =
                    root && !self.tempt.is_empty() && !self.tempt[b * self.num_actions + a];
                pred.policy_logits
                    .push(if tempted { l + TEMPTATION } else { l });
            }
            pred.values.push(unit(mix(s ^ p.value_salt)));
            pred.rewards.push(if root {
                0.0
            } else {
                p.reward_scale * unit(mix(s ^ REWARD_SALT))
            });
        }
        pred
    }
}

impl Model for HashModel {
    fn num_actions(&self) -> usize {
        self.num_actions
    }

    fn initial_inference(
        &mut self,
        observations: &[f32],
        batch: usize,
        capacity: usize,
    ) -> Result<Prediction, ModelError> {
        if observations.len() != batch {
            return Err(ModelError::ObservationShape {
                got: observations.len(),
                expected: batch,
                batch,
                per_observation: 1,
            });
        }
        self.batch = batch;
        self.capacity = capacity;
        self.states = vec![0; batch * capacity];
        for (b, o) in observations.iter().enumerate() {
            self.states[b * capacity] = mix(u64::from(o.to_bits()));
        }
        Ok(self.predict(0, true))
    }

    fn recurrent_inference(
        &mut self,
        parents: &[usize],
        actions: &[usize],
        new_node: usize,
    ) -> Result<Prediction, ModelError> {
        let cap = self.capacity;
        for b in 0..self.batch {
            let parent = self.states[b * cap + parents[b]];
            let salt = mix(actions[b] as u64 + self.params.action_salt);
            self.states[b * cap + new_node] = mix(parent ^ salt);
        }
        Ok(self.predict(new_node, false))
    }
}

/// Four actions, uniform priors, every value 0 and every transition costs 1: all Q-values equal
/// -1, so min-max statistics never widen and the Q term stays at -1 (unnormalised), below the 0
/// score of an unvisited zero-prior action.
#[derive(Clone, Copy, Debug, Default)]
pub struct Costly;

impl Model for Costly {
    fn num_actions(&self) -> usize {
        4
    }

    fn initial_inference(
        &mut self,
        _: &[f32],
        batch: usize,
        _: usize,
    ) -> Result<Prediction, ModelError> {
        Ok(Prediction {
            policy_logits: vec![0.0; batch * 4],
            values: vec![0.0; batch],
            rewards: vec![0.0; batch],
        })
    }

    fn recurrent_inference(
        &mut self,
        parents: &[usize],
        _: &[usize],
        _: usize,
    ) -> Result<Prediction, ModelError> {
        let n = parents.len();
        Ok(Prediction {
            policy_logits: vec![0.0; n * 4],
            values: vec![0.0; n],
            rewards: vec![-1.0; n],
        })
    }
}

/// Three actions and no usable logits: `-inf` at the root (the priors must fall back to
/// uniform over the legal actions), NaN below it; values and rewards 0. Its root prediction
/// carries no rewards at all (the search must not read them).
#[derive(Clone, Copy, Debug, Default)]
pub struct DeadLogits;

impl Model for DeadLogits {
    fn num_actions(&self) -> usize {
        3
    }

    fn initial_inference(
        &mut self,
        _: &[f32],
        batch: usize,
        _: usize,
    ) -> Result<Prediction, ModelError> {
        Ok(Prediction {
            policy_logits: vec![f32::NEG_INFINITY; batch * 3],
            values: vec![0.0; batch],
            rewards: vec![],
        })
    }

    fn recurrent_inference(
        &mut self,
        parents: &[usize],
        _: &[usize],
        _: usize,
    ) -> Result<Prediction, ModelError> {
        let n = parents.len();
        Ok(Prediction {
            policy_logits: vec![f32::NAN; n * 3],
            values: vec![0.0; n],
            rewards: vec![0.0; n],
        })
    }
}

/// Two actions, all zeros, until node `fail_at`: there `recurrent_inference` fails with
/// [`ModelError::Backend`], or with `short` returns an empty (wrongly shaped) prediction.
#[derive(Clone, Copy, Debug)]
pub struct Flaky {
    pub fail_at: usize,
    pub short: bool,
}

impl Model for Flaky {
    fn num_actions(&self) -> usize {
        2
    }

    fn initial_inference(
        &mut self,
        _: &[f32],
        batch: usize,
        _: usize,
    ) -> Result<Prediction, ModelError> {
        Ok(Prediction {
            policy_logits: vec![0.0; batch * 2],
            values: vec![0.0; batch],
            rewards: vec![0.0; batch],
        })
    }

    fn recurrent_inference(
        &mut self,
        parents: &[usize],
        _: &[usize],
        new_node: usize,
    ) -> Result<Prediction, ModelError> {
        if new_node == self.fail_at {
            if self.short {
                return Ok(Prediction::default());
            }
            return Err(ModelError::Backend("device lost".into()));
        }
        let n = parents.len();
        Ok(Prediction {
            policy_logits: vec![0.0; n * 2],
            values: vec![0.0; n],
            rewards: vec![0.0; n],
        })
    }
}
