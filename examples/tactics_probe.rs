//! What a two-player checkpoint's networks know about one-move tactics, without a search.
//!
//! Positions come from uniformly random play of the checkpoint's game. For each one the
//! program finds, with the real rules, the moves that win at once and the moves that do not
//! leave the opponent a win at once, then asks the networks:
//!
//! * **win in one** (the mover has a winning move): the predicted value, the reward the
//!   dynamics predicts for the winning moves against the other legal moves, the prior on the
//!   winning moves, and how often the move with the highest predicted reward is a winning one;
//! * **must block** (exactly one legal move keeps the opponent from winning next): the value
//!   and the prior on that move;
//! * **other** positions: the value.
//!
//! A model that has learned the game's tactics predicts a reward near 1 for winning moves and
//! near 0 for the rest; one that has not shows no gap. docs/results.md uses it on Connect Four
//! (where the MLP preset shows no gap) and tic-tac-toe (where it does).
//!
//! ```sh
//! cargo run --release --example tactics_probe -- CHECKPOINT_DIR [POSITIONS_PER_KIND]
//! ```

use cumind::agent::Agent;
use cumind::arena::search::winning_moves;
use cumind::op_count::read_f32;
use rand::{Rng, SeedableRng};

#[path = "common/predicted_rewards.rs"]
mod predicted_rewards;

/// A position, with the moves that matter in it.
struct Position {
    observation: Vec<f32>,
    legal: Vec<usize>,
    /// Moves that win at once (win in one), or the one move that blocks (must block).
    key_moves: Vec<usize>,
}

/// Positions of random play: (win in one, must block, other), `n` of each at most.
fn positions(env_name: &str, n: usize, seed: u64) -> [Vec<Position>; 3] {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let [mut win, mut block, mut other]: [Vec<Position>; 3] = Default::default();
    let mut games = 0;
    while (win.len() < n || block.len() < n || other.len() < n) && games < 100 * n {
        games += 1;
        let mut env = cumind::envs::make(env_name).expect("a registered game");
        let (mut observation, _) = env.reset(Some(games as u64));
        loop {
            let legal = env.legal_actions();
            if legal.is_empty() {
                break;
            }
            let winning = winning_moves(env.as_ref());
            let position = |key_moves| Position {
                observation: observation.clone(),
                legal: legal.clone(),
                key_moves,
            };
            if !winning.is_empty() {
                if win.len() < n {
                    win.push(position(winning));
                }
            } else {
                // Moves after which the opponent has no win at once.
                let safe: Vec<usize> = legal
                    .iter()
                    .copied()
                    .filter(|&a| {
                        let mut e = env.clone_box();
                        e.step(a).expect("a legal move");
                        winning_moves(e.as_ref()).is_empty()
                    })
                    .collect();
                if safe.len() == 1 && legal.len() > 1 {
                    if block.len() < n {
                        block.push(position(safe));
                    }
                } else if other.len() < n && rng.random_bool(0.2) {
                    other.push(position(Vec::new()));
                }
            }
            let a = legal[rng.random_range(0..legal.len())];
            let step = env.step(a).expect("a legal move");
            if step.terminated {
                break;
            }
            observation = step.observation;
        }
    }
    [win, block, other]
}

/// The networks' view of `positions`: values, policy priors `[n][A]`, and the reward the
/// dynamics predicts for every action `[n][A]`.
type Predictions = (Vec<f32>, Vec<Vec<f32>>, Vec<Vec<f32>>);

fn predict(agent: &Agent, positions: &[Position]) -> Predictions {
    let net = agent.network();
    let spec = net.spec();
    let a = spec.num_actions;
    let flat: Vec<f32> = positions
        .iter()
        .flat_map(|p| p.observation.iter().copied())
        .collect();
    let latent = net
        .represent(&net.observation_tensor(&flat).unwrap())
        .unwrap();
    let (policy_logits, value_logits) = net.predict(&latent).unwrap();
    let values = spec
        .value_support
        .logits_to_scalars(&read_f32(&value_logits).unwrap());
    let priors = read_f32(&policy_logits)
        .unwrap()
        .chunks(a)
        .map(|row| {
            let max = row.iter().copied().fold(f32::MIN, f32::max);
            let e: Vec<f32> = row.iter().map(|x| (x - max).exp()).collect();
            let total: f32 = e.iter().sum();
            e.iter().map(|x| x / total).collect()
        })
        .collect();
    let rewards = predicted_rewards::for_every_action(net, &latent, positions.len());
    (values, priors, rewards)
}

fn mean(v: impl IntoIterator<Item = f32>) -> f32 {
    let (sum, n) = v.into_iter().fold((0.0, 0), |(s, n), x| (s + x, n + 1));
    if n == 0 {
        f32::NAN
    } else {
        sum / n as f32
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = args
        .next()
        .expect("usage: tactics_probe CHECKPOINT_DIR [POSITIONS_PER_KIND]");
    let n: usize = args.next().map_or(500, |s| s.parse().expect("a count"));
    let agent = Agent::load(&dir).expect("a checkpoint");
    let name = agent.config().environment.env_name.clone();
    let [win, block, other] = positions(&name, n, 1);
    println!("{name}, {dir}: positions of random play, from the mover's side");

    let (values, priors, rewards) = predict(&agent, &win);
    let on_key = |i: usize, of: &Vec<Vec<f32>>| mean(win[i].key_moves.iter().map(|&m| of[i][m]));
    let argmax_wins = (0..win.len())
        .filter(|&i| {
            let p = &win[i];
            let best = p
                .legal
                .iter()
                .copied()
                .max_by(|&x, &y| rewards[i][x].total_cmp(&rewards[i][y]))
                .expect("legal moves");
            p.key_moves.contains(&best)
        })
        .count();
    println!(
        "win in one ({}): value {:.3}; predicted reward of the winning moves {:.3}, of the other \
         legal moves {:.3}; prior on the winning moves {:.3}; highest predicted reward on a \
         winning move in {argmax_wins} of {}",
        win.len(),
        mean(values.iter().copied()),
        mean((0..win.len()).map(|i| on_key(i, &rewards))),
        mean_reward(&win, &rewards, |p, m| !p.key_moves.contains(&m)),
        mean((0..win.len()).map(|i| win[i].key_moves.iter().map(|&m| priors[i][m]).sum())),
        win.len()
    );

    let (values, priors, rewards) = predict(&agent, &block);
    println!(
        "must block ({}): value {:.3}; prior on the blocking move {:.3} (uniform over the legal \
         moves: {:.3}); predicted reward of the legal moves (none wins) {:.3}",
        block.len(),
        mean(values.iter().copied()),
        mean((0..block.len()).map(|i| priors[i][block[i].key_moves[0]])),
        mean(block.iter().map(|p| 1.0 / p.legal.len() as f32)),
        mean_reward(&block, &rewards, |_, _| true),
    );

    let (values, _, rewards) = predict(&agent, &other);
    println!(
        "other ({}): value {:.3}; predicted reward of the legal moves (none wins) {:.3}",
        other.len(),
        mean(values.iter().copied()),
        mean_reward(&other, &rewards, |_, _| true),
    );
}

/// The mean predicted reward over the legal moves of `positions` that `keep` selects. Where no
/// move wins at once (every move of must-block and other positions, the non-winning moves of
/// win-in-one positions), a model that reads the move, not only the position, predicts about 0.
fn mean_reward(
    positions: &[Position],
    rewards: &[Vec<f32>],
    keep: impl Fn(&Position, usize) -> bool,
) -> f32 {
    mean(positions.iter().zip(rewards).flat_map(|(p, r)| {
        p.legal
            .iter()
            .filter(|&&m| keep(p, m))
            .map(|&m| r[m])
            .collect::<Vec<_>>()
    }))
}
