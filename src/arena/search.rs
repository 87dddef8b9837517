//! Game-tree opponents for two-player games, written against the [`Environment`] trait: they
//! look ahead on clones of the environment, so they follow the game's own rules.
//!
//! Values are from the point of view of the player to move (negamax): a move's value is its
//! reward to the mover (+1 for a winning move) plus, unless the game ended, minus the value of
//! the position it leads to.

use std::collections::HashMap;

use cumind_envs::Environment;
use rand::Rng;

/// The exact value of every legal move of `env` for the player to move (+1 win, 0 draw, -1
/// loss with best play on both sides), memoised on the observation and the player to move.
/// Exhaustive: for small games such as tic-tac-toe.
pub fn exact_move_values(
    env: &dyn Environment,
    memo: &mut HashMap<(Vec<u32>, usize), f32>,
) -> Vec<(usize, f32)> {
    env.legal_actions()
        .into_iter()
        .map(|a| (a, exact_move_value(env, a, memo)))
        .collect()
}

fn exact_move_value(
    env: &dyn Environment,
    action: usize,
    memo: &mut HashMap<(Vec<u32>, usize), f32>,
) -> f32 {
    let mut next = env.clone_box();
    let Ok(step) = next.step(action) else {
        return f32::NEG_INFINITY;
    };
    let reward = step.reward as f32;
    if step.terminated || step.truncated {
        return reward;
    }
    let key = (
        step.observation.iter().map(|x| x.to_bits()).collect(),
        next.to_play(),
    );
    let value = match memo.get(&key) {
        Some(&v) => v,
        None => {
            let v = exact_move_values(next.as_ref(), memo)
                .into_iter()
                .map(|(_, v)| v)
                .fold(f32::NEG_INFINITY, f32::max);
            memo.insert(key, v);
            v
        }
    };
    reward - value
}

/// A static estimate of a board position for the player to move, in (-1, 1): the open lines
/// (windows of `n` cells holding stones of one side only) of the mover minus the opponent's,
/// longer lines weighing more. The observation must be `[3, H, W]` planes (the mover's stones,
/// the opponent's stones, a to-play plane), as TicTacToe and ConnectFour give; `n` is
/// `min(H, W, 4)`.
pub fn line_heuristic(observation: &[f32], shape: &[usize]) -> f32 {
    let [_, h, w] = shape else {
        return 0.0;
    };
    let (h, w) = (*h as isize, *w as isize);
    let n = h.min(w).min(4);
    let plane = (h * w) as usize;
    let stone = |p: usize, r: isize, c: isize| observation[p * plane + (r * w + c) as usize] > 0.5;
    let mut score = 0.0f32;
    for (dr, dc) in [(0, 1), (1, 0), (1, 1), (1, -1)] {
        for r in 0..h {
            for c in 0..w {
                let (er, ec) = (r + dr * (n - 1), c + dc * (n - 1));
                if er < 0 || er >= h || ec < 0 || ec >= w {
                    continue;
                }
                let (mut mine, mut theirs) = (0, 0);
                for k in 0..n {
                    let (rr, cc) = (r + dr * k, c + dc * k);
                    mine += stone(0, rr, cc) as i32;
                    theirs += stone(1, rr, cc) as i32;
                }
                if theirs == 0 && mine > 0 {
                    score += (mine * mine) as f32;
                } else if mine == 0 && theirs > 0 {
                    score -= (theirs * theirs) as f32;
                }
            }
        }
    }
    (score / 64.0).tanh() * 0.9
}

/// Depth-limited alpha-beta (negamax) with [`line_heuristic`] at the horizon: the value of
/// every legal move of `env` for the player to move. Wins found sooner score a little higher,
/// so the searcher takes a win at once and delays a loss.
pub fn alphabeta_move_values(env: &dyn Environment, depth: usize) -> Vec<(usize, f32)> {
    env.legal_actions()
        .into_iter()
        .map(|a| (a, move_value(env, a, depth, -2.0, 2.0)))
        .collect()
}

fn move_value(env: &dyn Environment, action: usize, depth: usize, alpha: f32, beta: f32) -> f32 {
    let mut next = env.clone_box();
    let Ok(step) = next.step(action) else {
        return f32::NEG_INFINITY;
    };
    // A win now is worth slightly more than a win later.
    let reward = step.reward as f32 * (1.0 + 0.01 * depth as f32);
    if step.terminated || step.truncated {
        return reward;
    }
    if depth <= 1 {
        let shape = next.observation_space().shape();
        return reward - line_heuristic(&step.observation, &shape);
    }
    // This move's value lies in [alpha, beta] exactly when the opponent's best reply lies in
    // [reward - beta, reward - alpha]: the window for every reply's value.
    let mut best = f32::NEG_INFINITY;
    let (mut a, b) = (reward - beta, reward - alpha);
    for reply in next.legal_actions() {
        let v = move_value(next.as_ref(), reply, depth - 1, a, b);
        best = best.max(v);
        a = a.max(v);
        if a >= b {
            break;
        }
    }
    reward - best
}

/// The legal moves of `env` that end the game with a win for the player to move (a
/// terminating step with a reward above 0.5), tried on clones.
pub fn winning_moves(env: &dyn Environment) -> Vec<usize> {
    crate::exact_model::wins_at_once(env)
        .into_iter()
        .filter(|&(_, reward)| reward > 0.5)
        .map(|(action, _)| action)
        .collect()
}

/// One of the moves whose value is within `tolerance` of the best, uniformly at random.
pub fn pick_best<R: Rng + ?Sized>(values: &[(usize, f32)], tolerance: f32, rng: &mut R) -> usize {
    let best = values
        .iter()
        .map(|&(_, v)| v)
        .fold(f32::NEG_INFINITY, f32::max);
    let top: Vec<usize> = values
        .iter()
        .filter(|&&(_, v)| v >= best - tolerance)
        .map(|&(a, _)| a)
        .collect();
    top[rng.random_range(0..top.len())]
}

#[cfg(test)]
mod tests {
    use super::*;
    use cumind_envs::{ConnectFour, TicTacToe};

    fn play(env: &mut dyn Environment, moves: &[usize]) {
        for &m in moves {
            env.step(m).unwrap();
        }
    }

    #[test]
    fn the_exact_solver_knows_tictactoe_is_a_draw_and_sees_wins_and_forced_blocks() {
        let mut memo = HashMap::new();
        let env = TicTacToe::new();
        let values = exact_move_values(&env, &mut memo);
        let best = values.iter().map(|v| v.1).fold(f32::MIN, f32::max);
        assert_eq!(best, 0.0, "tic-tac-toe is a draw: {values:?}");
        // X: 0, 1 (O: 4, 8): X to move wins at 2.
        let mut env = TicTacToe::new();
        play(&mut env, &[0, 4, 1, 8]);
        let values = exact_move_values(&env, &mut memo);
        assert_eq!(values.iter().find(|v| v.0 == 2).unwrap().1, 1.0);
        // X: 0, 1; O: 4 to move must block at 2, every other move loses.
        let mut env = TicTacToe::new();
        play(&mut env, &[0, 4, 1]);
        for (a, v) in exact_move_values(&env, &mut memo) {
            if a == 2 {
                assert_eq!(v, 0.0);
            } else {
                assert_eq!(v, -1.0, "move {a}");
            }
        }
    }

    #[test]
    fn alphabeta_takes_a_win_and_blocks_a_threat_in_connect_four() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(0);
        // First player stacks column 0 three times (second player plays column 6).
        let mut env = ConnectFour::new();
        play(&mut env, &[0, 6, 0, 6, 0]);
        // Second player to move: must block column 0.
        let values = alphabeta_move_values(&env, 4);
        assert_eq!(pick_best(&values, 0.0, &mut rng), 0, "{values:?}");
        // First player to move with three in column 0 wins there.
        let mut env = ConnectFour::new();
        play(&mut env, &[0, 6, 0, 6, 0, 5]);
        let values = alphabeta_move_values(&env, 2);
        assert_eq!(pick_best(&values, 0.0, &mut rng), 0, "{values:?}");
    }

    #[test]
    fn winning_moves_are_the_moves_that_end_the_game_with_a_win() {
        let mut env = ConnectFour::new();
        assert!(winning_moves(&env).is_empty());
        // First player to move with three in column 0: only column 0 wins.
        play(&mut env, &[0, 6, 0, 6, 0, 5]);
        assert_eq!(winning_moves(&env), vec![0]);
        // Second player to move after that threat: no win of its own.
        let mut env = ConnectFour::new();
        play(&mut env, &[0, 6, 0, 6, 0]);
        assert!(winning_moves(&env).is_empty());
    }

    /// The same scoring as `move_value` without pruning.
    fn plain_value(env: &dyn Environment, action: usize, depth: usize) -> f32 {
        let mut next = env.clone_box();
        let step = next.step(action).unwrap();
        let reward = step.reward as f32 * (1.0 + 0.01 * depth as f32);
        if step.terminated || step.truncated {
            return reward;
        }
        if depth <= 1 {
            let shape = next.observation_space().shape();
            return reward - line_heuristic(&step.observation, &shape);
        }
        let best = next
            .legal_actions()
            .into_iter()
            .map(|r| plain_value(next.as_ref(), r, depth - 1))
            .fold(f32::NEG_INFINITY, f32::max);
        reward - best
    }

    #[test]
    fn pruning_does_not_change_the_root_move_values() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        for game in 0..12 {
            let mut env = ConnectFour::new();
            env.reset(Some(game));
            for _ in 0..(2 + game as usize * 2) {
                let legal = env.legal_actions();
                if env
                    .step(legal[rng.random_range(0..legal.len())])
                    .unwrap()
                    .terminated
                {
                    break;
                }
            }
            for (action, value) in alphabeta_move_values(&env, 5) {
                let plain = plain_value(&env, action, 5);
                assert!(
                    (value - plain).abs() < 1e-5,
                    "game {game} move {action}: {value} vs {plain}"
                );
            }
        }
    }

    #[test]
    fn the_heuristic_prefers_the_side_with_more_open_lines() {
        let mut env = ConnectFour::new();
        let shape = env.observation_space().shape();
        let (empty, _) = env.reset(Some(0));
        assert_eq!(line_heuristic(&empty, &shape), 0.0, "empty board");
        env.step(3).unwrap();
        // First player (centre) to move after the reply in the corner: more open lines.
        let obs = env.step(0).unwrap().observation;
        assert!(line_heuristic(&obs, &shape) > 0.0);
    }

    use rand::SeedableRng;
}
