//! AlphaZero's search: a [`Model`] that steps copies of the real game instead of a learned
//! dynamics network (`mcts.model = "exact"`).
//!
//! Each tree keeps a copy of its environment per node. A recurrent inference steps the
//! parent's copy with the action: the game itself gives the reward, whether the game ended and
//! the legal moves; the network (any [`Model`], asked for initial inferences on the new
//! positions' observations, batched over the trees) gives only the policy and the value. A
//! node past the end of the game is absorbing (reward 0, value 0, below it too), and an
//! illegal move inside the tree (the search masks illegal moves at the root only) ends the
//! game as a loss for its mover (reward -1); illegal moves also get a logit of
//! [`ILLEGAL_LOGIT`], so they keep a prior of about 0 below the root.
//!
//! With decisive moves on (`mcts.decisive_moves`), every position in play, the roots included,
//! is also looked at one move ahead with the real rules ([`one_move_ahead`]), as Teytaud and
//! Teytaud's decisive and anti-decisive moves ("On the huge benefit of decisive moves in
//! Monte-Carlo Tree Search algorithms", 2010): a move that wins at once gets the whole prior
//! (the winning moves share it) and the position's value is that win's reward; otherwise moves
//! that leave the opponent a win at once get the illegal logit when other moves do not, and a
//! position where every move does is valued at the discounted loss. A network that has not
//! learned these one-move tactics then cannot hide them from a search too short to visit them.
//!
//! With symmetric evaluation (`mcts.symmetric_search` with the exact model), every position
//! the network is asked about is also asked through each of the game's symmetries, in the same
//! batch, and the answers are pooled: the value is the mean of the copies' values and the
//! prior the mean of their move probabilities, each mapped back to the position's own moves.
//! The network's view then no longer depends on which of two mirror images it is shown, at
//! `1 + symmetries` times the network's cost (the tree and the game's copies are not
//! repeated). It is the exact-rules counterpart of the learned model's symmetric search, which
//! pools whole searches because a latent state has no mirror image.

use cumind_envs::{Environment, Symmetry};
use rand::Rng;

use crate::model::{Model, ModelError, Prediction};
use crate::search::gumbel::softmax_in_place;
use crate::search::symmetric;
use crate::search::{SearchConfig, SearchError, SearchInput, SearchOutput, Searcher};

/// One batched search of `input` through `model`, or with `search.exact_rules` through
/// copies of `games` (one per position; unread otherwise) with `model` as the evaluator.
pub fn search_games<M: Model + ?Sized, R: Rng + ?Sized>(
    model: &mut M,
    search: &SearchConfig,
    games: &[&dyn Environment],
    input: &SearchInput<'_>,
    rng: &mut R,
) -> Result<SearchOutput, SearchError> {
    let mut searcher = Searcher::new();
    if search.exact_rules {
        let mut exact = ExactModel::new(model, games);
        if search.decisive_moves {
            exact = exact.with_decisive_moves(search.discount);
        }
        if search.symmetries.is_empty() {
            searcher.run(&mut exact, search, input, rng)
        } else {
            // The symmetries act on the network's evaluations, not on whole searches.
            let mut plain = search.clone();
            exact = exact.with_symmetric_evaluation(std::mem::take(&mut plain.symmetries));
            searcher.run(&mut exact, &plain, input, rng)
        }
    } else {
        searcher.run(model, search, input, rng)
    }
}

/// The policy logit given to illegal moves.
pub const ILLEGAL_LOGIT: f32 = -1e9;

enum Node {
    /// A position of the game, still going.
    Live(Box<dyn Environment>),
    /// Past the end of the game.
    Ended,
}

/// The exact-rules model over `evaluator` (see the module's docs) for the trees whose roots
/// are copies of `roots`, one per batch element, in order.
pub struct ExactModel<'a, M: Model + ?Sized> {
    evaluator: &'a mut M,
    roots: Vec<Box<dyn Environment>>,
    nodes: Vec<Vec<Option<Node>>>,
    /// With decisive moves: the search's discount (a lost position's value is minus the
    /// discounted reward of the opponent's win).
    decisive: Option<f32>,
    /// Whether the game had ended at each node of the last recurrent inference.
    ended: Vec<bool>,
    /// The game's symmetries the network's evaluations are pooled over (empty: none).
    symmetries: Vec<Symmetry>,
}

impl<'a, M: Model + ?Sized> ExactModel<'a, M> {
    pub fn new(evaluator: &'a mut M, roots: &[&dyn Environment]) -> Self {
        Self {
            evaluator,
            roots: roots.iter().map(|env| env.clone_box()).collect(),
            nodes: Vec::new(),
            decisive: None,
            ended: Vec::new(),
            symmetries: Vec::new(),
        }
    }

    /// Pool every evaluation of the network over these symmetries of the game (see the
    /// module's docs).
    pub fn with_symmetric_evaluation(mut self, symmetries: Vec<Symmetry>) -> Self {
        self.symmetries = symmetries;
        self
    }

    /// The network's prediction for `batch` positions (`observations`, flattened), pooled
    /// over the symmetries when there are any.
    fn evaluate(&mut self, observations: &[f32], batch: usize) -> Result<Prediction, ModelError> {
        if self.symmetries.is_empty() {
            return self.evaluator.initial_inference(observations, batch, 1);
        }
        let copies = 1 + self.symmetries.len();
        let all = symmetric::with_images(observations, batch, &self.symmetries);
        let seen = self.evaluator.initial_inference(&all, copies * batch, 1)?;
        Ok(pool_over_symmetries(
            &seen,
            &self.symmetries,
            batch,
            self.num_actions(),
        ))
    }

    /// Look at every position in play one move ahead (see the module's docs), in a search
    /// with this `discount`.
    pub fn with_decisive_moves(mut self, discount: f32) -> Self {
        self.decisive = Some(discount);
        self
    }

    /// The network's policy logits and value of a position in play, with illegal moves
    /// masked and, with decisive moves on, what one move ahead shows applied.
    fn adjust(&self, logits: &mut [f32], value: &mut f32, env: &dyn Environment) {
        Self::mask_illegal(logits, env);
        let Some(discount) = self.decisive else {
            return;
        };
        match one_move_ahead(env) {
            OneMoveAhead::Wins { moves, reward } => {
                for (action, logit) in logits.iter_mut().enumerate() {
                    *logit = if moves.contains(&action) {
                        0.0
                    } else {
                        ILLEGAL_LOGIT
                    };
                }
                *value = reward;
            }
            OneMoveAhead::Threatened { unsafe_moves } => {
                for action in unsafe_moves {
                    logits[action] = ILLEGAL_LOGIT;
                }
            }
            OneMoveAhead::Lost { reward } => *value = -discount * reward,
            OneMoveAhead::Quiet => {}
        }
    }

    fn mask_illegal(logits: &mut [f32], env: &dyn Environment) {
        for (logit, legal) in logits.iter_mut().zip(env.legal_action_mask()) {
            if !legal {
                *logit = ILLEGAL_LOGIT;
            }
        }
    }
}

impl<M: Model + ?Sized> Model for ExactModel<'_, M> {
    fn num_actions(&self) -> usize {
        self.evaluator.num_actions()
    }

    fn initial_inference(
        &mut self,
        observations: &[f32],
        batch: usize,
        capacity: usize,
    ) -> Result<Prediction, ModelError> {
        if batch != self.roots.len() {
            return Err(ModelError::Backend(format!(
                "the exact-rules model holds {} games, the search asked for {batch} roots",
                self.roots.len()
            )));
        }
        let mut prediction = self.evaluate(observations, batch)?;
        let a = self.num_actions();
        self.nodes = self
            .roots
            .iter()
            .map(|root| {
                let mut tree: Vec<Option<Node>> = (0..capacity).map(|_| None).collect();
                tree[0] = Some(Node::Live(root.clone_box()));
                tree
            })
            .collect();
        for (b, root) in self.roots.iter().enumerate() {
            self.adjust(
                &mut prediction.policy_logits[b * a..(b + 1) * a],
                &mut prediction.values[b],
                root.as_ref(),
            );
        }
        Ok(prediction)
    }

    fn recurrent_inference(
        &mut self,
        parents: &[usize],
        actions: &[usize],
        new_node: usize,
    ) -> Result<Prediction, ModelError> {
        let batch = parents.len();
        let a = self.num_actions();
        let mut rewards = vec![0f32; batch];
        let mut children = Vec::with_capacity(batch);
        for b in 0..batch {
            let child = match self.nodes[b].get(parents[b]) {
                Some(Some(Node::Live(env))) => {
                    let mut next = env.clone_box();
                    match next.step(actions[b]) {
                        Ok(step) => {
                            rewards[b] = step.reward as f32;
                            if step.terminated || step.truncated {
                                (Node::Ended, None)
                            } else {
                                (Node::Live(next), Some(step.observation))
                            }
                        }
                        // An illegal move loses the game for its mover.
                        Err(_) => {
                            rewards[b] = -1.0;
                            (Node::Ended, None)
                        }
                    }
                }
                Some(Some(Node::Ended)) => (Node::Ended, None),
                _ => {
                    return Err(ModelError::Backend(format!(
                        "the exact-rules model has no node {} in tree {b}",
                        parents[b]
                    )))
                }
            };
            children.push(child);
        }
        self.ended.clear();
        self.ended.extend(
            children
                .iter()
                .map(|(_, observation)| observation.is_none()),
        );
        // One network call for every position still in play.
        let live: Vec<usize> = (0..batch).filter(|&b| children[b].1.is_some()).collect();
        let observations: Vec<f32> = live
            .iter()
            .flat_map(|&b| children[b].1.iter().flatten().copied())
            .collect();
        let evaluated = if live.is_empty() {
            Prediction::default()
        } else {
            self.evaluate(&observations, live.len())?
        };
        let mut prediction = Prediction {
            policy_logits: vec![0.0; batch * a],
            values: vec![0.0; batch],
            rewards,
        };
        for (i, &b) in live.iter().enumerate() {
            let logits = &mut prediction.policy_logits[b * a..(b + 1) * a];
            logits.copy_from_slice(&evaluated.policy_logits[i * a..(i + 1) * a]);
            prediction.values[b] = evaluated.values[i];
            if let Node::Live(env) = &children[b].0 {
                self.adjust(logits, &mut prediction.values[b], env.as_ref());
            }
        }
        for (b, (node, _)) in children.into_iter().enumerate() {
            match self.nodes[b].get_mut(new_node) {
                Some(slot) => *slot = Some(node),
                None => {
                    return Err(ModelError::Backend(format!(
                        "node {new_node} is past the capacity of tree {b}"
                    )))
                }
            }
        }
        Ok(prediction)
    }

    fn ended(&self) -> Option<&[bool]> {
        Some(&self.ended)
    }

    fn set_bf16_inference(&mut self, on: bool) {
        self.evaluator.set_bf16_inference(on)
    }
}

/// The predictions of `batch` positions from `seen`, the network's predictions of those
/// positions followed by their images under each of `symmetries` in turn: per position the
/// mean value and, as logits, the log of the mean move probabilities (an image's probability
/// of move `symmetry.actions[a]` counted for move `a`). Rewards are the originals'.
fn pool_over_symmetries(
    seen: &Prediction,
    symmetries: &[Symmetry],
    batch: usize,
    num_actions: usize,
) -> Prediction {
    let a = num_actions;
    let copies = (1 + symmetries.len()) as f32;
    let mut pooled = Prediction {
        policy_logits: vec![0.0; batch * a],
        values: vec![0.0; batch],
        rewards: seen.rewards.iter().take(batch).copied().collect(),
    };
    let mut probabilities = vec![0f32; a];
    for b in 0..batch {
        let mut mean = vec![0f32; a];
        let mut value = 0.0;
        for c in 0..=symmetries.len() {
            let i = c * batch + b;
            probabilities.copy_from_slice(&seen.policy_logits[i * a..(i + 1) * a]);
            softmax_in_place(&mut probabilities, None);
            for (action, p) in mean.iter_mut().enumerate() {
                let image = if c == 0 {
                    action
                } else {
                    symmetries[c - 1].actions[action]
                };
                *p += probabilities[image];
            }
            value += seen.values[i];
        }
        pooled.values[b] = value / copies;
        for (logit, p) in pooled.policy_logits[b * a..(b + 1) * a]
            .iter_mut()
            .zip(&mean)
        {
            *logit = (p / copies).max(f32::MIN_POSITIVE).ln();
        }
    }
    pooled
}

/// What the real rules show one move ahead of a position in play, for its mover.
#[derive(Debug, Clone, PartialEq)]
pub enum OneMoveAhead {
    /// These moves win at once; `reward` is the largest of their rewards.
    Wins { moves: Vec<usize>, reward: f32 },
    /// No move wins at once; these moves leave the opponent a win at once, and at least one
    /// other move does not.
    Threatened { unsafe_moves: Vec<usize> },
    /// No move wins at once and every move leaves the opponent a win at once; `reward` is
    /// the largest reward such a win brings the opponent.
    Lost { reward: f32 },
    /// None of the above.
    Quiet,
}

/// The legal moves of `env` that win at once, each with its reward: moves that end the game
/// with a positive reward for the player to move, tried on clones.
pub fn wins_at_once(env: &dyn Environment) -> Vec<(usize, f64)> {
    env.legal_actions()
        .into_iter()
        .filter_map(|action| {
            let mut next = env.clone_box();
            let step = next.step(action).ok()?;
            (step.terminated && step.reward > 0.0).then_some((action, step.reward))
        })
        .collect()
}

/// The largest reward among `wins`.
fn largest_reward(wins: &[(usize, f64)], start: f32) -> f32 {
    wins.iter().map(|w| w.1 as f32).fold(start, f32::max)
}

/// The mover's wins at once in `env` ([`wins_at_once`]), or else the opponent's wins at once
/// after each move (a move that ends the game in a draw or a loss leaves the opponent nothing).
pub fn one_move_ahead(env: &dyn Environment) -> OneMoveAhead {
    let legal = env.legal_actions();
    let own = wins_at_once(env);
    if !own.is_empty() {
        let reward = largest_reward(&own, f32::MIN);
        return OneMoveAhead::Wins {
            moves: own.into_iter().map(|w| w.0).collect(),
            reward,
        };
    }
    let mut unsafe_moves = Vec::new();
    let mut worst = f32::MIN;
    for &action in &legal {
        let mut next = env.clone_box();
        let Ok(step) = next.step(action) else {
            continue;
        };
        if step.terminated || step.truncated {
            continue;
        }
        let replies = wins_at_once(next.as_ref());
        if !replies.is_empty() {
            unsafe_moves.push(action);
            worst = largest_reward(&replies, worst);
        }
    }
    if unsafe_moves.is_empty() {
        OneMoveAhead::Quiet
    } else if unsafe_moves.len() == legal.len() {
        OneMoveAhead::Lost { reward: worst }
    } else {
        OneMoveAhead::Threatened { unsafe_moves }
    }
}

#[cfg(test)]
mod tests {
    use cumind_envs::{ConnectFour, TicTacToe};
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    use super::*;
    use crate::search::{run_search, SearchConfig};
    use crate::testing::games::after_moves;

    /// A network for the tests: `judge` gives one position's policy logits and value.
    struct Judge {
        actions: usize,
        judge: fn(&[f32], usize) -> (Vec<f32>, f32),
    }

    impl Model for Judge {
        fn num_actions(&self) -> usize {
            self.actions
        }

        fn initial_inference(
            &mut self,
            observations: &[f32],
            batch: usize,
            _capacity: usize,
        ) -> Result<Prediction, ModelError> {
            let mut prediction = Prediction {
                rewards: vec![0.0; batch],
                ..Prediction::default()
            };
            for position in observations.chunks_exact(observations.len() / batch) {
                let (logits, value) = (self.judge)(position, self.actions);
                prediction.policy_logits.extend(logits);
                prediction.values.push(value);
            }
            Ok(prediction)
        }

        fn recurrent_inference(
            &mut self,
            _parents: &[usize],
            _actions: &[usize],
            _new_node: usize,
        ) -> Result<Prediction, ModelError> {
            unreachable!("the exact-rules model asks for initial inferences only")
        }
    }

    /// A network that knows nothing: uniform priors, every value 0.
    fn uniform(actions: usize) -> Judge {
        Judge {
            actions,
            judge: |_, actions| (vec![0.0; actions], 0.0),
        }
    }

    /// The most visited root move of each position, with a uniform network.
    fn search(
        envs: &[&dyn Environment],
        observations: &[Vec<f32>],
        simulations: usize,
    ) -> Vec<usize> {
        search_with(envs, observations, simulations, false)
    }

    /// [`search`], with decisive moves or not.
    fn search_with(
        envs: &[&dyn Environment],
        observations: &[Vec<f32>],
        simulations: usize,
        decisive: bool,
    ) -> Vec<usize> {
        searched(envs, observations, simulations, decisive, false).0
    }

    /// [`search`]'s moves and the roots' values, with decisive moves and the solver or not.
    fn searched(
        envs: &[&dyn Environment],
        observations: &[Vec<f32>],
        simulations: usize,
        decisive: bool,
        solver: bool,
    ) -> (Vec<usize>, Vec<f32>) {
        let a = envs[0].legal_action_mask().len();
        let mut network = uniform(a);
        let mut model = ExactModel::new(&mut network, envs);
        if decisive {
            model = model.with_decisive_moves(1.0);
        }
        let config = SearchConfig {
            num_simulations: simulations,
            two_player: true,
            discount: 1.0,
            solver,
            ..SearchConfig::default()
        };
        let masks: Vec<bool> = envs.iter().flat_map(|e| e.legal_action_mask()).collect();
        let flat: Vec<f32> = observations.concat();
        let mut rng = StdRng::seed_from_u64(3);
        let out = run_search(
            &mut model,
            &config,
            &flat,
            envs.len(),
            &masks,
            false,
            &mut rng,
        )
        .unwrap();
        let moves = (0..envs.len())
            .map(|b| {
                let visits = &out.visit_counts[b * a..(b + 1) * a];
                (0..a).max_by_key(|&i| visits[i]).unwrap()
            })
            .collect();
        (moves, out.root_values)
    }

    /// The solver proves a Connect Four fork three plies deep (X plays 3 beside its 1 and 2,
    /// leaving 0 and 4 open) and a lost position (O to move against that fork): the roots'
    /// values are exactly the win and the loss, and X plays the fork. Without the solver the
    /// same searches only sample those values.
    #[test]
    fn the_solver_proves_a_fork_and_a_lost_position() {
        let (fork, fork_obs) = after_moves(ConnectFour::new(), &[1, 1, 2, 2]);
        let (lost, lost_obs) = after_moves(ConnectFour::new(), &[1, 1, 2, 2, 3]);
        let envs: [&dyn Environment; 2] = [&fork, &lost];
        let observations = [fork_obs, lost_obs];
        let (moves, values) = searched(&envs, &observations, 600, false, true);
        assert_eq!(moves[0], 3, "X plays the fork");
        assert_eq!(values, vec![1.0, -1.0], "proven win and loss");
        let (_, sampled) = searched(&envs, &observations, 600, false, false);
        assert!(
            sampled[0] < 1.0 && sampled[1] > -1.0,
            "without the solver the values are means of samples: {sampled:?}"
        );
    }

    /// With a network that knows nothing, the real rules alone find the win in one and the
    /// only block, in Connect Four and tic-tac-toe, searched as one batch.
    #[test]
    fn a_uniform_network_finds_the_win_in_one_and_the_only_block() {
        // Connect Four: X (to move) has 0, 1, 2 on the bottom row: 3 wins.
        let (win, win_obs) = after_moves(ConnectFour::new(), &[0, 0, 1, 1, 2, 6]);
        // O to move must block at 3.
        let (block, block_obs) = after_moves(ConnectFour::new(), &[0, 0, 1, 1, 2]);
        // A vertical threat: X has three in column 5; O must play 5.
        let (column, column_obs) = after_moves(ConnectFour::new(), &[5, 0, 5, 1, 5]);
        let chosen = search(
            &[&win, &block, &column],
            &[win_obs, block_obs, column_obs],
            200,
        );
        assert_eq!(chosen, vec![3, 3, 5]);
        // Tic-tac-toe: X has 0 and 1 (O: 4, 8): X wins at 2; O to move after X: 0, 1 blocks 2.
        let (t_win, t_win_obs) = after_moves(TicTacToe::new(), &[0, 4, 1, 8]);
        let (t_block, t_block_obs) = after_moves(TicTacToe::new(), &[0, 4, 1]);
        let chosen = search(&[&t_win, &t_block], &[t_win_obs, t_block_obs], 100);
        assert_eq!(chosen, vec![2, 2]);
    }

    /// One move ahead: a win at once, the only block of a threat, a threat in a column, two
    /// threats at once (lost), and a quiet opening; in tic-tac-toe too.
    #[test]
    fn one_move_ahead_sees_wins_threats_and_lost_positions() {
        let look = |moves: &[usize]| {
            let (env, _) = after_moves(ConnectFour::new(), moves);
            one_move_ahead(&env)
        };
        assert_eq!(
            look(&[0, 0, 1, 1, 2, 6]),
            OneMoveAhead::Wins {
                moves: vec![3],
                reward: 1.0
            }
        );
        assert_eq!(
            look(&[0, 0, 1, 1, 2]),
            OneMoveAhead::Threatened {
                unsafe_moves: vec![0, 1, 2, 4, 5, 6]
            }
        );
        assert_eq!(
            look(&[5, 0, 5, 1, 5]),
            OneMoveAhead::Threatened {
                unsafe_moves: vec![0, 1, 2, 3, 4, 6]
            }
        );
        // X holds 1, 2, 3 of the bottom row with 0 and 4 open: O cannot block both.
        assert_eq!(look(&[1, 1, 2, 2, 3]), OneMoveAhead::Lost { reward: 1.0 });
        assert_eq!(look(&[]), OneMoveAhead::Quiet);
        let (t, _) = after_moves(TicTacToe::new(), &[0, 4, 1, 8]);
        assert_eq!(
            one_move_ahead(&t),
            OneMoveAhead::Wins {
                moves: vec![2],
                reward: 1.0
            }
        );
    }

    /// With decisive moves, a root that wins at once is valued at the win with the whole
    /// prior on the winning move, a child position where the mover must block keeps its prior
    /// on the block only, and a lost child is valued at the discounted loss.
    #[test]
    fn decisive_moves_set_values_and_priors() {
        let (win, win_obs) = after_moves(ConnectFour::new(), &[0, 0, 1, 1, 2, 6]);
        let mut network = uniform(7);
        let mut model = ExactModel::new(&mut network, &[&win]).with_decisive_moves(0.9);
        let root = model.initial_inference(&win_obs, 1, 4).unwrap();
        assert_eq!(root.values, vec![1.0]);
        for (action, logit) in root.policy_logits.iter().enumerate() {
            assert_eq!(*logit == 0.0, action == 3, "logit of {action}: {logit}");
        }
        // After X plays 6 instead, O must block at 3 (X threatens it).
        let blocked = model.recurrent_inference(&[0], &[6], 1).unwrap();
        let logits = &blocked.policy_logits;
        assert!(logits[3] > ILLEGAL_LOGIT / 2.0);
        assert!((0..7)
            .filter(|&m| m != 3)
            .all(|m| logits[m] == ILLEGAL_LOGIT));
        assert_eq!(blocked.values, vec![0.0], "the network's value stays");
        // A position where O cannot block both of X's threats.
        let (lost, lost_obs) = after_moves(ConnectFour::new(), &[1, 1, 2, 2, 3]);
        let mut model = ExactModel::new(&mut network, &[&lost]).with_decisive_moves(0.9);
        let root = model.initial_inference(&lost_obs, 1, 2).unwrap();
        assert_eq!(root.values, vec![-0.9]);
        // Without decisive moves the network's view is untouched (illegal moves aside).
        let mut model = ExactModel::new(&mut network, &[&win]);
        let root = model.initial_inference(&win_obs, 1, 2).unwrap();
        assert_eq!(root.values, vec![0.0]);
        assert!(root.policy_logits.iter().all(|&l| l == 0.0));
    }

    /// Two simulations are enough to play the win, the block and the column block when the
    /// rules are looked at one move ahead.
    #[test]
    fn decisive_moves_find_the_win_and_the_block_with_two_simulations() {
        let (win, win_obs) = after_moves(ConnectFour::new(), &[0, 0, 1, 1, 2, 6]);
        let (block, block_obs) = after_moves(ConnectFour::new(), &[0, 0, 1, 1, 2]);
        let (column, column_obs) = after_moves(ConnectFour::new(), &[5, 0, 5, 1, 5]);
        let chosen = search_with(
            &[&win, &block, &column],
            &[win_obs, block_obs, column_obs],
            2,
            true,
        );
        assert_eq!(chosen, vec![3, 3, 5]);
    }

    /// A Connect Four network that prefers the right-hand moves and the columns that hold
    /// stones, and values a position by the columns its stones are in, so that it judges a
    /// position and its mirror image differently.
    fn lopsided() -> Judge {
        Judge {
            actions: 7,
            judge: |position, actions| {
                let logits = (0..actions)
                    .map(|column| {
                        let stones: f32 = position.iter().skip(column).step_by(actions).sum();
                        column as f32 * 0.5 + stones
                    })
                    .collect();
                // The stones of the first two planes (the players'), weighted by their column
                // (the observation is [plane, row, column], 6 x 7).
                let weighted: f32 = position
                    .iter()
                    .take(2 * 42)
                    .enumerate()
                    .map(|(i, x)| (i % 7) as f32 * x)
                    .sum();
                (logits, (weighted / 7.0 - 1.0).tanh())
            },
        }
    }

    /// The priors and the value the exact-rules model gives a root and a child.
    fn root_and_child(
        env: &ConnectFour,
        obs: &[f32],
        column: usize,
        symmetric: bool,
    ) -> (Vec<f32>, f32, Vec<f32>, f32) {
        let mut network = lopsided();
        let mut model = ExactModel::new(&mut network, &[env]);
        if symmetric {
            model = model.with_symmetric_evaluation(env.symmetries());
        }
        let root = model.initial_inference(obs, 1, 3).unwrap();
        let child = model.recurrent_inference(&[0], &[column], 1).unwrap();
        let prior = |logits: &[f32]| {
            let mut p = logits.to_vec();
            softmax_in_place(&mut p, None);
            p
        };
        (
            prior(&root.policy_logits),
            root.values[0],
            prior(&child.policy_logits),
            child.values[0],
        )
    }

    /// Pooled over the mirror, the network's view of a position and of its mirror image are
    /// mirror images of each other (priors mirrored, values equal), at the root and inside the
    /// tree; without it they are not. The pooled value is the mean of the two copies' values.
    #[test]
    fn symmetric_evaluation_judges_mirror_images_alike() {
        // X on 0, O on 2; and the mirror image: X on 6, O on 4.
        let (left, left_obs) = after_moves(ConnectFour::new(), &[0, 2]);
        let (right, right_obs) = after_moves(ConnectFour::new(), &[6, 4]);
        let mirrored = |p: &[f32]| -> Vec<f32> { p.iter().rev().copied().collect() };
        let close = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-6);
        // The child: the mover plays column 1 in the position, 5 in its mirror image.
        let (lp, lv, lcp, lcv) = root_and_child(&left, &left_obs, 1, true);
        let (rp, rv, rcp, rcv) = root_and_child(&right, &right_obs, 5, true);
        assert!(close(&lp, &mirrored(&rp)), "{lp:?} vs {rp:?}");
        assert!(close(&lcp, &mirrored(&rcp)), "{lcp:?} vs {rcp:?}");
        assert!((lv - rv).abs() < 1e-6 && (lcv - rcv).abs() < 1e-6);
        let mut network = lopsided();
        let both = network
            .initial_inference(&[left_obs.clone(), right_obs.clone()].concat(), 2, 1)
            .unwrap();
        assert!((lv - (both.values[0] + both.values[1]) / 2.0).abs() < 1e-6);
        // The plain model's views differ.
        let (lp, lv, _, _) = root_and_child(&left, &left_obs, 1, false);
        let (rp, rv, _, _) = root_and_child(&right, &right_obs, 5, false);
        assert!(!close(&lp, &mirrored(&rp)) && (lv - rv).abs() > 1e-3);
    }

    /// The pooled prediction by hand: two positions, two moves, a symmetry that swaps them.
    #[test]
    fn pooling_averages_values_and_move_probabilities() {
        let swap = Symmetry {
            observation: vec![0],
            negate: vec![false],
            actions: vec![1, 0],
        };
        let ln = |p: f32| p.ln();
        // Positions 0 and 1, then their images.
        let seen = Prediction {
            policy_logits: vec![
                ln(0.8),
                ln(0.2),
                0.0,
                0.0,
                ln(0.4),
                ln(0.6),
                ln(0.1),
                ln(0.9),
            ],
            values: vec![0.5, -0.2, 0.1, 0.4],
            rewards: vec![0.0; 4],
        };
        let pooled = pool_over_symmetries(&seen, &[swap], 2, 2);
        let probabilities: Vec<f32> = pooled.policy_logits.iter().map(|l| l.exp()).collect();
        // Position 0: (0.8, 0.2) and the image's (0.6, 0.4) mapped back; position 1: (0.5,
        // 0.5) and (0.9, 0.1).
        let expected = [0.7, 0.3, 0.7, 0.3];
        assert!(probabilities
            .iter()
            .zip(expected)
            .all(|(p, e)| (p - e).abs() < 1e-6));
        assert!((pooled.values[0] - 0.3).abs() < 1e-6 && (pooled.values[1] - 0.1).abs() < 1e-6);
    }

    /// Moves past the end of the game and illegal moves inside the tree: absorbing nodes
    /// with reward 0, and a loss for the mover of an illegal move.
    #[test]
    fn ended_games_absorb_and_illegal_moves_lose() {
        let (env, obs) = after_moves(TicTacToe::new(), &[0, 4, 1, 8]);
        let mut network = uniform(9);
        let mut model = ExactModel::new(&mut network, &[&env]);
        let root = model.initial_inference(&obs, 1, 4).unwrap();
        // Occupied squares get the illegal logit at the root.
        for square in [0, 1, 4, 8] {
            assert_eq!(root.policy_logits[square], ILLEGAL_LOGIT);
        }
        let won = model.recurrent_inference(&[0], &[2], 1).unwrap();
        assert_eq!(won.rewards, vec![1.0]);
        let past = model.recurrent_inference(&[1], &[3], 2).unwrap();
        assert_eq!((past.rewards[0], past.values[0]), (0.0, 0.0));
        let illegal = model.recurrent_inference(&[0], &[4], 3).unwrap();
        assert_eq!(illegal.rewards, vec![-1.0]);
    }
}
