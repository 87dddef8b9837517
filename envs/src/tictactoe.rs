//! Tic-tac-toe for two players.

use crate::env::{check_range, EnvError, Environment, Info, Space, StepResult};

/// The eight lines of three squares, by square index `3 * row + column`.
const LINES: [[usize; 3]; 8] = [
    [0, 1, 2],
    [3, 4, 5],
    [6, 7, 8],
    [0, 3, 6],
    [1, 4, 7],
    [2, 5, 8],
    [0, 4, 8],
    [2, 4, 6],
];

/// Tic-tac-toe on a 3×3 board. Player 0 (`X`) moves first.
///
/// * Actions: the square `3 * row + column`, `0..9`, row 0 at the top. Playing an occupied
///   square is [`EnvError::IllegalAction`].
/// * Observation, shape `[3, 3, 3]`, from the point of view of the player to move: plane 0 holds
///   that player's stones, plane 1 the opponent's, plane 2 is all ones when player 0 is to move
///   and all zeros otherwise.
/// * Reward, from the point of view of the player who just moved: `+1` for a winning move, `0`
///   otherwise (a draw is 0).
/// * Termination on a win or a full board; no truncation. On the terminating step `info` holds
///   `"winner"`: the winning player (0.0 or 1.0), or -1.0 for a draw.
/// * The turn passes after every move, the last one included. Once the game is over there are no
///   legal actions. The game has no randomness: the seed given to `reset` is ignored.
#[derive(Debug, Clone, Default)]
pub struct TicTacToe {
    /// 0 empty, 1 player 0, 2 player 1.
    board: [u8; 9],
    to_play: usize,
    winner: Option<usize>,
    done: bool,
}

impl TicTacToe {
    /// An empty board with player 0 to move.
    pub fn new() -> Self {
        Self::default()
    }

    /// The owner of square `3 * row + column`, if any.
    pub fn cell(&self, row: usize, column: usize) -> Option<usize> {
        match self.board[3 * row + column] {
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
        let me = self.to_play as u8 + 1;
        let mut obs = vec![0.0; 27];
        for (i, &v) in self.board.iter().enumerate() {
            if v == me {
                obs[i] = 1.0;
            } else if v != 0 {
                obs[9 + i] = 1.0;
            }
        }
        if self.to_play == 0 {
            obs[18..].fill(1.0);
        }
        obs
    }

    fn has_line(&self, stone: u8) -> bool {
        LINES
            .iter()
            .any(|line| line.iter().all(|&i| self.board[i] == stone))
    }
}

impl Environment for TicTacToe {
    fn name(&self) -> &str {
        "TicTacToe"
    }

    fn reset(&mut self, _seed: Option<u64>) -> (Vec<f32>, Info) {
        *self = Self::new();
        (self.observation(), Info::new())
    }

    fn step(&mut self, action: usize) -> Result<StepResult, EnvError> {
        if self.done {
            return Err(EnvError::EpisodeOver);
        }
        check_range(action, 9)?;
        if self.board[action] != 0 {
            return Err(EnvError::IllegalAction {
                action,
                legal: self.legal_actions(),
            });
        }

        let mover = self.to_play;
        let stone = mover as u8 + 1;
        self.board[action] = stone;
        let won = self.has_line(stone);
        let full = self.board.iter().all(|&v| v != 0);
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
        Space::Discrete { n: 9 }
    }

    fn observation_space(&self) -> Space {
        Space::uniform_box(0.0, 1.0, vec![3, 3, 3])
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
        (0..9).filter(|&i| self.board[i] == 0).collect()
    }

    fn max_episode_steps(&self) -> Option<usize> {
        None
    }

    fn render(&self) -> String {
        self.board
            .chunks(3)
            .map(|row| {
                row.iter()
                    .map(|&v| match v {
                        1 => 'X',
                        2 => 'O',
                        _ => '.',
                    })
                    .collect::<String>()
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The 7 non-identity symmetries of the square: 3 rotations and 4 reflections.
    fn symmetries(&self) -> Vec<crate::Symmetry> {
        /// Where cell (row, column) goes, on a board whose last index is `n`.
        type CellMap = fn(usize, usize, usize) -> (usize, usize);
        let n = 2;
        let maps: [CellMap; 7] = [
            |r, c, n| (c, n - r),
            |r, c, n| (n - r, n - c),
            |r, c, n| (n - c, r),
            |r, c, n| (r, n - c),
            |r, c, n| (n - r, c),
            |r, c, _| (c, r),
            |r, c, n| (n - c, n - r),
        ];
        maps.iter()
            .map(|f| crate::Symmetry::of_board(3, 3, 3, 9, |r, c| f(r, c, n)))
            .collect()
    }

    /// Each move's cell.
    fn action_planes(&self) -> Option<Vec<f32>> {
        Some(crate::board_action_planes(3, 3, 9))
    }

    fn clone_box(&self) -> Box<dyn Environment> {
        Box::new(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Plays `moves`, checking that only the last one ends the game; returns the last result.
    fn play(moves: &[usize]) -> (TicTacToe, StepResult) {
        let mut env = TicTacToe::new();
        let mut last = None;
        for (k, &m) in moves.iter().enumerate() {
            let r = env.step(m).unwrap();
            assert_eq!(r.terminated, k + 1 == moves.len(), "move {k} of {moves:?}");
            last = Some(r);
        }
        (env, last.unwrap())
    }

    #[test]
    fn every_line_wins_for_either_player() {
        for line in LINES {
            let others: Vec<usize> = (0..9).filter(|i| !line.contains(i)).collect();
            // Player 0 takes the line; player 1 plays squares off it that make no line.
            let (env, r) = play(&[line[0], others[0], line[1], others[1], line[2]]);
            assert_eq!(r.reward, 1.0, "{line:?}");
            assert_eq!(env.winner(), Some(0));
            assert_eq!(r.info["winner"], 0.0);
            assert!(env.legal_actions().is_empty());
            assert_eq!(env.clone().step(others[2]), Err(EnvError::EpisodeOver));

            // Player 1 takes the line; player 0 plays three squares off it that make no line.
            let p0 = find_non_line_triple(&others);
            let (env, r) = play(&[p0[0], line[0], p0[1], line[1], p0[2], line[2]]);
            assert_eq!(r.reward, 1.0, "{line:?} vs {p0:?}");
            assert_eq!(env.winner(), Some(1));
            assert_eq!(r.info["winner"], 1.0);
        }
    }

    /// Three of `squares` that do not form a line.
    fn find_non_line_triple(squares: &[usize]) -> [usize; 3] {
        for a in 0..squares.len() {
            for b in a + 1..squares.len() {
                for c in b + 1..squares.len() {
                    let t = [squares[a], squares[b], squares[c]];
                    if !LINES.iter().any(|l| l.iter().all(|s| t.contains(s))) {
                        return t;
                    }
                }
            }
        }
        panic!("no triple in {squares:?}");
    }

    #[test]
    fn draw_on_full_board() {
        // X O X / X O O / O X X
        let (env, r) = play(&[0, 1, 2, 4, 3, 5, 7, 6, 8]);
        assert_eq!(r.reward, 0.0);
        assert!(r.terminated && !r.truncated);
        assert_eq!(env.winner(), None);
        assert_eq!(r.info["winner"], -1.0);
        assert_eq!(env.render(), "XOX\nXOO\nOXX");
    }

    #[test]
    fn illegal_move_leaves_game_unchanged() {
        let mut env = TicTacToe::new();
        env.step(4).unwrap();
        let before = env.clone();
        let err = env.step(4).unwrap_err();
        assert_eq!(
            err,
            EnvError::IllegalAction {
                action: 4,
                legal: vec![0, 1, 2, 3, 5, 6, 7, 8]
            }
        );
        assert!(err.to_string().contains("[0, 1, 2, 3, 5, 6, 7, 8]"));
        assert_eq!(
            env.step(9),
            Err(EnvError::ActionOutOfRange { action: 9, n: 9 })
        );
        assert_eq!(env.board, before.board);
        assert_eq!(env.to_play(), 1);
        assert_eq!(env.observation(), before.observation());
        let mask = env.legal_action_mask();
        assert_eq!(mask.iter().filter(|&&m| m).count(), 8);
        assert!(!mask[4]);
    }

    #[test]
    fn observation_is_from_the_point_of_view_of_the_player_to_move() {
        let mut env = TicTacToe::new();
        let (obs, _) = env.reset(None);
        assert_eq!(env.to_play(), 0);
        assert!(obs[..18].iter().all(|&v| v == 0.0));
        assert!(obs[18..].iter().all(|&v| v == 1.0));

        let r = env.step(0).unwrap();
        assert_eq!(env.to_play(), 1);
        // Player 1 to move: X at square 0 is the opponent's stone (plane 1).
        assert_eq!(r.observation[0], 0.0);
        assert_eq!(r.observation[9], 1.0);
        assert!(r.observation[18..].iter().all(|&v| v == 0.0));

        let r = env.step(8).unwrap();
        assert_eq!(env.to_play(), 0);
        // Player 0 to move again: own X in plane 0, opponent's O in plane 1.
        assert_eq!(r.observation[0], 1.0);
        assert_eq!(r.observation[9 + 8], 1.0);
        assert_eq!(r.observation[8], 0.0);
        assert_eq!(r.observation.iter().filter(|&&v| v == 1.0).count(), 2 + 9);
        assert!(env.observation_space().contains(&r.observation));
        assert_eq!(env.render(), "X..\n...\n..O");
        assert_eq!(env.cell(0, 0), Some(0));
        assert_eq!(env.cell(2, 2), Some(1));
        assert_eq!(env.cell(1, 1), None);
    }

    #[test]
    fn reset_clears_the_board() {
        let (mut env, _) = play(&[0, 3, 1, 4, 2]);
        let (obs, _) = env.reset(Some(1));
        assert_eq!(obs, TicTacToe::new().observation());
        assert_eq!(env.legal_actions().len(), 9);
        assert_eq!(env.to_play(), 0);
        assert_eq!(env.num_players(), 2);
    }
}
