//! The agent's moves in a match checked against exact values, where a solver answers: every
//! position of tic-tac-toe, and Connect Four positions with at most [`CHECK_MAX_EMPTY`] empty
//! cells (the last stretch of a game).
//!
//! It splits a match's losses in two: games already lost (with best play) when the solver
//! first sees an agent move, which were decided earlier by play the solver cannot judge, and
//! moves that threw a won or drawn position away, which the solver can name.

use std::collections::HashMap;

use cumind_envs::Environment;

use super::{connect_four, connect_four_board, search};

/// The most empty cells of a Connect Four position whose moves are checked: the exact solver
/// answers earlier positions too, but from the opening a move can take it seconds, and the
/// check is meant to cost a match little.
pub const CHECK_MAX_EMPTY: usize = 24;

/// What the exact check found in one side's games, from the agent's point of view.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MoveCheck {
    /// Agent moves in positions the solver answered.
    pub checked: usize,
    /// Checked moves from a won position (with best play) to a drawn or lost one.
    pub threw_win: usize,
    /// Checked moves from a drawn position to a lost one.
    pub threw_draw: usize,
    /// Games by the exact value of the position at the agent's first checked move.
    pub first_won: usize,
    pub first_drawn: usize,
    pub first_lost: usize,
    /// Games that ended before the solver answered at an agent move.
    pub never_checked: usize,
}

/// The exact result of a position or move for the player to move, from its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    Loss,
    Draw,
    Win,
}

impl Outcome {
    /// Solver values: above 0 a win, 0 a draw, below 0 a loss (Connect Four's solver scores
    /// sooner wins higher; only the sign is used).
    fn of(value: f32) -> Self {
        if value > 0.0 {
            Outcome::Win
        } else if value < 0.0 {
            Outcome::Loss
        } else {
            Outcome::Draw
        }
    }
}

/// The exact values, for the player to move in `env` (current observation `observation`),
/// of the best move and of `action`, where a solver answers: tic-tac-toe always (exhaustive,
/// memoised in `memo`), Connect Four from [`CHECK_MAX_EMPTY`] empty cells on; else `None`.
pub fn exact_values(
    env: &dyn Environment,
    observation: &[f32],
    action: usize,
    memo: &mut HashMap<(Vec<u32>, usize), f32>,
) -> Option<(f32, f32)> {
    let best = |values: &[(usize, f32)]| {
        values
            .iter()
            .map(|&(_, v)| v)
            .fold(f32::NEG_INFINITY, f32::max)
    };
    if let Some(board) = connect_four_board(env, observation) {
        if board.empty_cells() > CHECK_MAX_EMPTY {
            return None;
        }
        let played = connect_four::exact_move_value(&board, action)?;
        let values = connect_four::exact_move_values(&board)?;
        return Some((best(&values), played));
    }
    if env.name() != "TicTacToe" {
        return None;
    }
    let values = search::exact_move_values(env, memo);
    let played = values.iter().find(|&&(a, _)| a == action)?.1;
    Some((best(&values), played))
}

/// One side's games, checked as they are played.
#[derive(Debug, Default)]
pub struct SideCheck {
    pub check: MoveCheck,
    /// Whether the current game has had a checked agent move.
    seen: bool,
}

impl SideCheck {
    /// The agent moved where the best move's exact value is `best` and its own move's
    /// `played` (for the agent).
    pub fn agent_move(&mut self, best: f32, played: f32) {
        let (best, played) = (Outcome::of(best), Outcome::of(played));
        let c = &mut self.check;
        c.checked += 1;
        if !self.seen {
            self.seen = true;
            match best {
                Outcome::Win => c.first_won += 1,
                Outcome::Draw => c.first_drawn += 1,
                Outcome::Loss => c.first_lost += 1,
            }
        }
        match (best, played) {
            (Outcome::Win, Outcome::Draw | Outcome::Loss) => c.threw_win += 1,
            (Outcome::Draw, Outcome::Loss) => c.threw_draw += 1,
            _ => {}
        }
    }

    /// The current game ended.
    pub fn game_over(&mut self) {
        if !self.seen {
            self.check.never_checked += 1;
        }
        self.seen = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::games::after_moves;
    use cumind_envs::ConnectFour;

    #[test]
    fn a_side_check_counts_thrown_results_and_the_first_checked_position() {
        let mut side = SideCheck::default();
        // Game 1: first checked position won; the agent throws it to a draw, then (from a
        // drawn position) to a loss; a later move in a lost position counts as checked only.
        side.agent_move(2.5, 0.0);
        side.agent_move(0.0, -2.0);
        side.agent_move(-1.2, -1.2);
        side.game_over();
        // Game 2: lost at the first check, then a won position kept.
        side.agent_move(-1.0, -1.0);
        side.agent_move(1.5, 1.1);
        side.game_over();
        // Game 3: never checked.
        side.game_over();
        assert_eq!(
            side.check,
            MoveCheck {
                checked: 5,
                threw_win: 1,
                threw_draw: 1,
                first_won: 1,
                first_drawn: 0,
                first_lost: 1,
                never_checked: 1,
            }
        );
    }

    #[test]
    fn exact_values_answer_for_solvable_positions_only() {
        let mut memo = HashMap::new();
        let mut c4 = cumind_envs::make("ConnectFour").unwrap();
        let (obs, _) = c4.reset(Some(0));
        assert_eq!(exact_values(c4.as_ref(), &obs, 3, &mut memo), None);
        // Columns 0-2 filled with alternating stones (no line): 24 empty cells, solved.
        // Column 3 completes the first player's bottom row at once; the value of every other
        // move is exact, not a bound.
        let moves: Vec<usize> = (0..18).map(|i| i / 6).collect();
        let (c4, obs) = after_moves(ConnectFour::new(), &moves);
        let board = connect_four_board(&c4, &obs).unwrap();
        let (best, played) = exact_values(&c4, &obs, 3, &mut memo).unwrap();
        assert!(best > 1.0 && played == best, "{best} {played}");
        for action in 4..7 {
            let (best, played) = exact_values(&c4, &obs, action, &mut memo).unwrap();
            assert!(played <= best);
            let after = board.play(action);
            let replies = connect_four::exact_move_values(&after).unwrap();
            let reply = replies
                .iter()
                .map(|&(_, v)| v)
                .fold(f32::NEG_INFINITY, f32::max);
            assert_eq!(played, -reply, "move {action}");
        }
        assert_eq!(exact_values(&c4, &obs, 0, &mut memo), None, "a full column");
        let mut ttt = cumind_envs::make("TicTacToe").unwrap();
        let (obs, _) = ttt.reset(Some(0));
        assert_eq!(
            exact_values(ttt.as_ref(), &obs, 4, &mut memo),
            Some((0.0, 0.0))
        );
        // After X in a corner, O on an edge loses.
        ttt.step(0).unwrap();
        let obs = ttt.step(1).unwrap().observation;
        let (best, _) = exact_values(ttt.as_ref(), &obs, 4, &mut memo).unwrap();
        assert_eq!(best, 1.0);
        let mut cart = cumind_envs::make("CartPole-v1").unwrap();
        let (obs, _) = cart.reset(Some(0));
        assert_eq!(exact_values(cart.as_ref(), &obs, 0, &mut memo), None);
    }
}
