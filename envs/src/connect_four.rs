//! Connect Four for two players.

use crate::env::{check_range, EnvError, Environment, Info, Space, StepResult};

const ROWS: usize = 6;
const COLS: usize = 7;

/// Connect Four on a board of 6 rows and 7 columns. Player 0 (`X`) moves first.
///
/// * Actions: the column `0..7` to drop a stone into; it falls to the lowest empty row. A full
///   column is [`EnvError::IllegalAction`].
/// * Observation, shape `[3, 6, 7]` with row 0 at the top, from the point of view of the player
///   to move: plane 0 holds that player's stones, plane 1 the opponent's, plane 2 is all ones
///   when player 0 is to move and all zeros otherwise.
/// * Reward, from the point of view of the player who just moved: `+1` for a move that makes four
///   in a row (horizontally, vertically or diagonally), `0` otherwise (a draw is 0).
/// * Termination on a win or a full board; no truncation. On the terminating step `info` holds
///   `"winner"`: the winning player (0.0 or 1.0), or -1.0 for a draw.
/// * The turn passes after every move, the last one included. Once the game is over there are no
///   legal actions. The game has no randomness: the seed given to `reset` is ignored.
#[derive(Debug, Clone, Default)]
pub struct ConnectFour {
    /// `board[row][column]`, row 0 at the top: 0 empty, 1 player 0, 2 player 1.
    board: [[u8; COLS]; ROWS],
    /// Stones in each column.
    heights: [usize; COLS],
    to_play: usize,
    winner: Option<usize>,
    done: bool,
}

impl ConnectFour {
    /// An empty board with player 0 to move.
    pub fn new() -> Self {
        Self::default()
    }

    /// The owner of the stone at `row` (0 at the top) and `column`, if any.
    pub fn cell(&self, row: usize, column: usize) -> Option<usize> {
        match self.board[row][column] {
            0 => None,
            v => Some(v as usize - 1),
        }
    }

    /// The winner, once someone has won.
    pub fn winner(&self) -> Option<usize> {
        self.winner
    }

    /// Whether the game has ended (win or draw).
    pub fn is_over(&self) -> bool {
        self.done
    }

    fn observation(&self) -> Vec<f32> {
        const PLANE: usize = ROWS * COLS;
        let me = self.to_play as u8 + 1;
        let mut obs = vec![0.0; 3 * PLANE];
        for (i, &v) in self.board.iter().flatten().enumerate() {
            if v == me {
                obs[i] = 1.0;
            } else if v != 0 {
                obs[PLANE + i] = 1.0;
            }
        }
        if self.to_play == 0 {
            obs[2 * PLANE..].fill(1.0);
        }
        obs
    }

    /// Whether the stone at (`row`, `col`) is part of four in a row.
    fn wins_through(&self, row: usize, col: usize) -> bool {
        let stone = self.board[row][col];
        // Count matching stones walking from (row, col) in direction (dr, dc), excluding it.
        let run = |dr: isize, dc: isize| {
            let (mut r, mut c, mut n) = (row as isize, col as isize, 0);
            loop {
                r += dr;
                c += dc;
                if r < 0
                    || c < 0
                    || r >= ROWS as isize
                    || c >= COLS as isize
                    || self.board[r as usize][c as usize] != stone
                {
                    return n;
                }
                n += 1;
            }
        };
        [(0, 1), (1, 0), (1, 1), (1, -1)]
            .iter()
            .any(|&(dr, dc)| 1 + run(dr, dc) + run(-dr, -dc) >= 4)
    }
}

impl Environment for ConnectFour {
    fn name(&self) -> &str {
        "ConnectFour"
    }

    fn reset(&mut self, _seed: Option<u64>) -> (Vec<f32>, Info) {
        *self = Self::new();
        (self.observation(), Info::new())
    }

    fn step(&mut self, action: usize) -> Result<StepResult, EnvError> {
        if self.done {
            return Err(EnvError::EpisodeOver);
        }
        check_range(action, COLS)?;
        if self.heights[action] == ROWS {
            return Err(EnvError::IllegalAction {
                action,
                legal: self.legal_actions(),
            });
        }

        let mover = self.to_play;
        let row = ROWS - 1 - self.heights[action];
        self.board[row][action] = mover as u8 + 1;
        self.heights[action] += 1;
        let won = self.wins_through(row, action);
        let full = self.heights.iter().all(|&h| h == ROWS);
        let mut info = Info::new();
        if won {
            self.winner = Some(mover);
            info.insert("winner".into(), mover as f64);
        } else if full {
            info.insert("winner".into(), -1.0);
        }
        self.done = won || full;
        self.to_play = 1 - mover;

        Ok(StepResult {
            observation: self.observation(),
            reward: if won { 1.0 } else { 0.0 },
            terminated: self.done,
            truncated: false,
            info,
        })
    }

    fn action_space(&self) -> Space {
        Space::Discrete { n: COLS }
    }

    fn observation_space(&self) -> Space {
        Space::uniform_box(0.0, 1.0, vec![3, ROWS, COLS])
    }

    fn num_players(&self) -> usize {
        2
    }

    fn to_play(&self) -> usize {
        self.to_play
    }

    fn legal_actions(&self) -> Vec<usize> {
        if self.done {
            return Vec::new();
        }
        (0..COLS).filter(|&c| self.heights[c] < ROWS).collect()
    }

    fn max_episode_steps(&self) -> Option<usize> {
        None
    }

    fn render(&self) -> String {
        let mut lines: Vec<String> = self
            .board
            .iter()
            .map(|row| {
                row.iter()
                    .map(|&v| match v {
                        1 => "X",
                        2 => "O",
                        _ => ".",
                    })
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect();
        lines.push(
            (0..COLS)
                .map(|c| c.to_string())
                .collect::<Vec<_>>()
                .join(" "),
        );
        lines.join("\n")
    }

    /// The left-right mirror image (gravity rules out the others).
    fn symmetries(&self) -> Vec<crate::Symmetry> {
        vec![crate::Symmetry::of_board(3, ROWS, COLS, COLS, |r, c| {
            (r, COLS - 1 - c)
        })]
    }

    /// Each move's column.
    fn action_planes(&self) -> Option<Vec<f32>> {
        Some(crate::board_action_planes(ROWS, COLS, COLS))
    }

    fn clone_box(&self) -> Box<dyn Environment> {
        Box::new(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Plays `moves`, checking that only the last one ends the game; returns the last result.
    fn play(moves: &[usize]) -> (ConnectFour, StepResult) {
        let mut env = ConnectFour::new();
        let mut last = None;
        for (k, &m) in moves.iter().enumerate() {
            let r = env.step(m).unwrap();
            assert_eq!(r.terminated, k + 1 == moves.len(), "move {k} of {moves:?}");
            last = Some(r);
        }
        (env, last.unwrap())
    }

    fn assert_win(moves: &[usize], winner: usize) {
        let (env, r) = play(moves);
        assert_eq!(r.reward, 1.0, "{moves:?}");
        assert_eq!(env.winner(), Some(winner), "{moves:?}\n{}", env.render());
        assert_eq!(r.info["winner"], winner as f64);
        assert!(env.legal_actions().is_empty());
        assert!(env.legal_action_mask().iter().all(|&m| !m));
    }

    #[test]
    fn horizontal_win() {
        assert_win(&[0, 0, 1, 1, 2, 2, 3], 0);
        // Completed in the middle of the run, at the right edge, by player 1.
        assert_win(&[0, 6, 0, 5, 1, 3, 0, 4], 1);
    }

    #[test]
    fn vertical_win() {
        assert_win(&[3, 4, 3, 4, 3, 4, 3], 0);
        assert_win(&[0, 6, 1, 6, 2, 6, 4, 6], 1);
    }

    #[test]
    fn diagonal_wins() {
        // Rising to the right: X at (column, height) (0,0) (1,1) (2,2) (3,3).
        let (env, _) = play(&[0, 1, 1, 2, 2, 3, 2, 3, 3, 5, 3]);
        assert_eq!(env.winner(), Some(0));
        assert_eq!(env.render().lines().nth(2).unwrap(), ". . . X . . .");
        // Falling to the right (mirror image), finished by the top stone.
        assert_win(&[6, 5, 5, 4, 4, 3, 4, 3, 3, 1, 3], 0);
        // Rising diagonal (1,0) (2,1) (3,2) (4,3) completed from its lowest stone.
        assert_win(&[6, 2, 2, 3, 3, 4, 3, 4, 4, 0, 4, 0, 1], 0);
    }

    #[test]
    fn draw_on_full_board() {
        // Columns filled in pairs with alternating bands; nobody ever gets four.
        let order = [0, 1, 0, 1, 0, 1, 1, 0, 1, 0, 1, 0];
        let mut moves = Vec::new();
        for pair in [0, 2, 4] {
            moves.extend(order.iter().map(|c| c + pair));
        }
        moves.extend([6; 6]);
        let (env, r) = play(&moves);
        assert_eq!(r.reward, 0.0);
        assert!(r.terminated);
        assert_eq!(env.winner(), None);
        assert_eq!(r.info["winner"], -1.0);
        assert_eq!(moves.len(), 42);
    }

    #[test]
    fn full_column_is_illegal_and_changes_nothing() {
        let mut env = ConnectFour::new();
        for _ in 0..6 {
            env.step(2).unwrap();
        }
        let before = env.clone();
        let err = env.step(2).unwrap_err();
        assert_eq!(
            err,
            EnvError::IllegalAction {
                action: 2,
                legal: vec![0, 1, 3, 4, 5, 6]
            }
        );
        assert_eq!(
            env.step(7),
            Err(EnvError::ActionOutOfRange { action: 7, n: 7 })
        );
        assert_eq!(env.board, before.board);
        assert_eq!(env.to_play(), before.to_play());
        assert_eq!(
            env.legal_action_mask(),
            vec![true, true, false, true, true, true, true]
        );
    }

    #[test]
    fn stones_fall_and_observation_follows_the_player_to_move() {
        let mut env = ConnectFour::new();
        let (obs, _) = env.reset(None);
        assert_eq!(obs.len(), 3 * 42);
        assert!(obs[84..].iter().all(|&v| v == 1.0));

        let r = env.step(3).unwrap();
        assert_eq!(env.cell(5, 3), Some(0));
        assert_eq!(env.to_play(), 1);
        // Player 1 to move: the X at the bottom of column 3 is in the opponent plane.
        let bottom = 5 * 7 + 3;
        assert_eq!(r.observation[bottom], 0.0);
        assert_eq!(r.observation[42 + bottom], 1.0);
        assert!(r.observation[84..].iter().all(|&v| v == 0.0));

        let r = env.step(3).unwrap();
        assert_eq!(env.cell(4, 3), Some(1));
        assert_eq!(env.to_play(), 0);
        assert_eq!(r.observation[bottom], 1.0);
        assert_eq!(r.observation[42 + bottom - 7], 1.0);
        assert!(env.observation_space().contains(&r.observation));
        let picture = env.render();
        assert_eq!(picture.lines().count(), 7);
        assert_eq!(picture.lines().last(), Some("0 1 2 3 4 5 6"));
        assert_eq!(picture.lines().nth(4), Some(". . . O . . ."));
        assert_eq!(picture.lines().nth(5), Some(". . . X . . ."));
    }
}
