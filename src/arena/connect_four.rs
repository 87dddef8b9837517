//! A Connect Four searcher on bitboards, for the arena's `alphabeta:DEPTH` and `perfect`
//! opponents on the 6 x 7 board: negamax with alpha-beta, a transposition table, iterative
//! deepening (the previous depth's best move tried first, then the centre columns before the
//! edges) and, at the horizon, a heuristic that counts threats (empty cells that would complete
//! four) and open lines. From the opening, depth 8 answers in about 4 ms, depth 12 in about
//! 40 ms. `perfect` and the exact values come from an exact solver (the `solver` module), which refuses
//! positions with more than [`PERFECT_MAX_EMPTY`] empty cells.
//!
//! The board is two 64-bit masks with one 7-bit column after another (six cells and a guard
//! bit), bit 0 the bottom of column 0: the stones of the player to move, and every stone.

use std::collections::HashMap;

use rand::Rng;

use super::{search::pick_best, ArenaError};

mod solver;

const ROWS: usize = 6;
const COLUMNS: usize = 7;
/// Bits per column: the rows and a guard bit that keeps lines from wrapping.
const STRIDE: usize = ROWS + 1;
const CELLS: usize = ROWS * COLUMNS;
/// Columns in the order they are tried: centre first.
const ORDER: [usize; COLUMNS] = [3, 2, 4, 1, 5, 0, 6];

/// The most empty cells `perfect` solves (the exact solver): the exact values of
/// all seven moves took 5.8 s in a position with 36 empty cells (one core), 10.4 s with 38 and
/// 22.6 s with 39, and the time grows about twofold with each further cell.
pub const PERFECT_MAX_EMPTY: usize = 36;

const fn bottom(column: usize) -> u64 {
    1 << (column * STRIDE)
}

const fn top(column: usize) -> u64 {
    1 << (column * STRIDE + ROWS - 1)
}

const fn column_mask(column: usize) -> u64 {
    ((1 << ROWS) - 1) << (column * STRIDE)
}

const BOARD_MASK: u64 = {
    let mut mask = 0;
    let mut c = 0;
    while c < COLUMNS {
        mask |= column_mask(c);
        c += 1;
    }
    mask
};

/// A position: the mover's stones and every stone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Board {
    mover: u64,
    stones: u64,
}

impl Board {
    /// The position an observation of the environment shows: `[3, 6, 7]` planes, the
    /// mover's stones, the opponent's, a to-play plane, row 0 at the top. `None` for any
    /// other shape.
    pub fn from_observation(observation: &[f32], shape: &[usize]) -> Option<Self> {
        if shape != [3, ROWS, COLUMNS] || observation.len() != 3 * CELLS {
            return None;
        }
        let (mut mover, mut stones) = (0u64, 0u64);
        for row in 0..ROWS {
            for column in 0..COLUMNS {
                let bit = 1u64 << (column * STRIDE + (ROWS - 1 - row));
                let i = row * COLUMNS + column;
                if observation[i] > 0.5 {
                    mover |= bit;
                    stones |= bit;
                } else if observation[CELLS + i] > 0.5 {
                    stones |= bit;
                }
            }
        }
        Some(Self { mover, stones })
    }

    pub fn empty_cells(&self) -> usize {
        CELLS - self.stones.count_ones() as usize
    }

    fn can_play(&self, column: usize) -> bool {
        self.stones & top(column) == 0
    }

    /// The cell a stone dropped into `column` lands on.
    fn landing(&self, column: usize) -> u64 {
        (self.stones + bottom(column)) & column_mask(column)
    }

    fn is_winning_move(&self, column: usize) -> bool {
        aligned(self.mover | self.landing(column))
    }

    /// The position after the mover drops a stone into `column`, seen by the next mover.
    pub(super) fn play(&self, column: usize) -> Self {
        self.play_cell(self.landing(column))
    }

    /// The position after the mover drops a stone on `cell` (one of [`Board::playable`]).
    fn play_cell(&self, cell: u64) -> Self {
        Self {
            mover: self.mover ^ self.stones,
            stones: self.stones | cell,
        }
    }

    /// The cells a stone can be dropped on now, one per column that is not full.
    fn playable(&self) -> u64 {
        (self.stones + BOTTOM_ROW) & BOARD_MASK
    }

    /// Whether the mover has a move that completes four.
    fn can_win_at_once(&self) -> bool {
        threats(self.mover) & !self.stones & self.playable() != 0
    }

    /// A key unique to the position (the mover's stones plus every stone).
    fn key(&self) -> u64 {
        self.mover + self.stones
    }

    /// A static estimate for the player to move, in (-0.9, 0.9): threats (empty cells that
    /// would complete four) weigh most, those the mover could fill at once more still, then
    /// open lines (windows of four holding stones of one side only), longer ones more.
    fn heuristic(&self) -> f32 {
        let opponent = self.mover ^ self.stones;
        let empty = BOARD_MASK & !self.stones;
        let playable = self.playable();
        let mine = threats(self.mover) & empty;
        let theirs = threats(opponent) & empty;
        let mut score = 4.0 * (mine.count_ones() as f32 - theirs.count_ones() as f32)
            + 8.0 * (mine & playable).count_ones() as f32;
        for &window in windows() {
            let (m, t) = (
                (self.mover & window).count_ones(),
                (opponent & window).count_ones(),
            );
            if t == 0 && m > 0 {
                score += (m * m) as f32 / 4.0;
            } else if m == 0 && t > 0 {
                score -= (t * t) as f32 / 4.0;
            }
        }
        (score / 32.0).tanh() * 0.9
    }
}

const BOTTOM_ROW: u64 = {
    let mut mask = 0;
    let mut c = 0;
    while c < COLUMNS {
        mask |= bottom(c);
        c += 1;
    }
    mask
};

/// Whether `stones` hold four in a row.
fn aligned(stones: u64) -> bool {
    [1, STRIDE, STRIDE - 1, STRIDE + 1].iter().any(|&shift| {
        let pairs = stones & (stones >> shift);
        pairs & (pairs >> (2 * shift)) != 0
    })
}

/// Every cell (filled or not) that would give `stones` four in a row.
fn threats(stones: u64) -> u64 {
    let mut out = 0;
    for shift in [1, STRIDE, STRIDE - 1, STRIDE + 1] {
        // Cells with three stones on one side, or two on one side and one on the other.
        let two_up = (stones << shift) & (stones << (2 * shift));
        out |= two_up & (stones << (3 * shift));
        out |= two_up & (stones >> shift);
        let two_down = (stones >> shift) & (stones >> (2 * shift));
        out |= two_down & (stones >> (3 * shift));
        out |= two_down & (stones << shift);
    }
    out & BOARD_MASK
}

/// The 69 windows of four cells in a line.
fn windows() -> &'static [u64] {
    static WINDOWS: std::sync::OnceLock<Vec<u64>> = std::sync::OnceLock::new();
    WINDOWS.get_or_init(|| {
        let mut out = Vec::new();
        for (dr, dc) in [(0isize, 1isize), (1, 0), (1, 1), (1, -1)] {
            for r in 0..ROWS as isize {
                for c in 0..COLUMNS as isize {
                    let cells: Vec<(isize, isize)> =
                        (0..4).map(|k| (r + dr * k, c + dc * k)).collect();
                    if cells.iter().all(|&(r, c)| {
                        (0..ROWS as isize).contains(&r) && (0..COLUMNS as isize).contains(&c)
                    }) {
                        out.push(
                            cells
                                .iter()
                                .map(|&(r, c)| 1u64 << (c as usize * STRIDE + r as usize))
                                .sum(),
                        );
                    }
                }
            }
        }
        out
    })
}

/// The value of a win that leaves `empty` cells: above 1, more the sooner it comes.
fn win_value(empty: usize) -> f32 {
    1.0 + 0.01 * empty as f32
}

#[derive(Clone, Copy)]
enum Bound {
    Exact,
    Lower,
    Upper,
}

#[derive(Clone, Copy)]
struct Entry {
    depth: u8,
    value: f32,
    bound: Bound,
    best: u8,
}

/// A search with its transposition table.
pub struct Searcher {
    table: HashMap<u64, Entry>,
}

impl Searcher {
    fn new() -> Self {
        Self {
            table: HashMap::new(),
        }
    }

    /// Negamax value of `board` for its mover, searching `depth` more plies.
    fn negamax(&mut self, board: &Board, depth: usize, mut alpha: f32, mut beta: f32) -> f32 {
        let empty = board.empty_cells();
        if empty == 0 {
            return 0.0;
        }
        if board.can_win_at_once() {
            return win_value(empty - 1);
        }
        if depth == 0 {
            return board.heuristic();
        }
        let key = board.key();
        let mut first = None;
        if let Some(entry) = self.table.get(&key) {
            first = Some(entry.best as usize);
            if entry.depth as usize >= depth {
                match entry.bound {
                    Bound::Exact => return entry.value,
                    Bound::Lower => alpha = alpha.max(entry.value),
                    Bound::Upper => beta = beta.min(entry.value),
                }
                if alpha >= beta {
                    return entry.value;
                }
            }
        }
        let original_alpha = alpha;
        let mut best = f32::NEG_INFINITY;
        let mut best_move = ORDER[0];
        let moves = first
            .into_iter()
            .chain(ORDER.iter().copied().filter(|&c| Some(c) != first));
        for column in moves {
            if !board.can_play(column) {
                continue;
            }
            let value = -self.negamax(&board.play(column), depth - 1, -beta, -alpha);
            if value > best {
                best = value;
                best_move = column;
            }
            alpha = alpha.max(value);
            if alpha >= beta {
                break;
            }
        }
        let bound = if best <= original_alpha {
            Bound::Upper
        } else if best >= beta {
            Bound::Lower
        } else {
            Bound::Exact
        };
        self.table.insert(
            key,
            Entry {
                depth: depth.min(u8::MAX as usize) as u8,
                value: best,
                bound,
                best: best_move as u8,
            },
        );
        best
    }

    /// The value of every legal move of `board` searched `depth` plies deep (the move
    /// itself the first), by iterative deepening. Moves worse than the best by more than
    /// `tolerance` may carry only an upper bound of their value.
    fn move_values(&mut self, board: &Board, depth: usize, tolerance: f32) -> Vec<(usize, f32)> {
        let mut order: Vec<usize> = ORDER
            .iter()
            .copied()
            .filter(|&c| board.can_play(c))
            .collect();
        let mut values = Vec::new();
        for d in 1..=depth.max(1) {
            values.clear();
            let mut best = f32::NEG_INFINITY;
            for &column in &order {
                let value = if board.is_winning_move(column) {
                    win_value(board.empty_cells() - 1)
                } else {
                    let alpha = if best.is_finite() {
                        best - tolerance
                    } else {
                        -2.0
                    };
                    -self.negamax(&board.play(column), d - 1, -2.0, -alpha)
                };
                best = best.max(value);
                values.push((column, value));
            }
            // The next depth tries this depth's best moves first.
            let mut ranked = values.clone();
            ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
            order = ranked.iter().map(|&(c, _)| c).collect();
        }
        values.sort_by_key(|&(c, _)| c);
        values
    }
}

/// Depth-limited alpha-beta values of every legal move for the player to move (see the
/// module's docs): wins score above 1 (sooner more), losses below -1, and the heuristic
/// in between at the horizon.
pub fn alphabeta_move_values(board: &Board, depth: usize) -> Vec<(usize, f32)> {
    Searcher::new().move_values(board, depth, 1e-6)
}

/// The exact value of every legal move for the player to move (wins above 1, sooner more;
/// draws 0; losses below -1), from the exact solver; `None` with more than
/// [`PERFECT_MAX_EMPTY`] empty cells. The best moves' values are exact; a worse move carries
/// its result only: 0 for a draw, -1 for a loss (an upper bound of its value).
pub fn exact_move_values(board: &Board) -> Option<Vec<(usize, f32)>> {
    (board.empty_cells() <= PERFECT_MAX_EMPTY).then(|| solved_move_values(board))
}

/// [`exact_move_values`] for any position, however early: from the first moves slowly (all
/// seven values took 22.6 s with 39 empty cells, one core, and each further empty cell about
/// doubles the time). For studies of what perfect play reaches; the arena's `perfect` keeps
/// to [`PERFECT_MAX_EMPTY`].
pub fn solved_move_values(board: &Board) -> Vec<(usize, f32)> {
    solver::with_solver(|solver| {
        // Each move's result first (cheap: null windows around a draw), then the exact
        // value of the best ones.
        let results: Vec<(usize, i32)> = (0..COLUMNS)
            .filter(|&c| board.can_play(c))
            .map(|c| (c, solved_move_result(solver, board, c)))
            .collect();
        let best = results.iter().map(|r| r.1).max().unwrap_or(0);
        results
            .into_iter()
            .map(|(c, result)| {
                let value = if result < best {
                    result as f32
                } else if result == 0 {
                    0.0
                } else {
                    solved_move_value(solver, board, c)
                };
                (c, value)
            })
            .collect()
    })
}

/// The result of `board` for the player to move with best play on both sides: 1 a win, 0 a
/// draw, -1 a loss. Cheaper than the exact values (no distance to the end) and answered for
/// any position, but from the first moves slowly: a minute or more with 40 empty cells (one
/// core), more before.
pub fn exact_result(board: &Board) -> i32 {
    solver::with_solver(|solver| solver.outcome(board))
}

/// The result with best play on both sides after the player to move plays `column` on `board`:
/// 1 won, 0 drawn, -1 lost; `None` when the column is full. Like [`exact_result`], answered for
/// any position and slowly from the first moves. A player that keeps a won position only needs
/// one move whose result is 1: it wins whichever it plays.
pub fn exact_move_result(board: &Board, column: usize) -> Option<i32> {
    if column >= COLUMNS || !board.can_play(column) {
        return None;
    }
    Some(solver::with_solver(|solver| {
        solved_move_result(solver, board, column)
    }))
}

/// The result of playing the legal move `column` on `board`, for the player to move.
fn solved_move_result(solver: &mut solver::Solver, board: &Board, column: usize) -> i32 {
    if board.is_winning_move(column) {
        1
    } else {
        -solver.outcome(&board.play(column))
    }
}

/// The value of playing `column` on `board` for the player to move, `depth` plies deep (the
/// move itself the first), whether or not the move is the best. In [`alphabeta_move_values`]
/// a move worse than the best may carry only a bound of its value: enough to choose a move,
/// not to judge one. `None` when the column is full.
pub fn alphabeta_move_value(board: &Board, column: usize, depth: usize) -> Option<f32> {
    if column >= COLUMNS || !board.can_play(column) {
        return None;
    }
    if board.is_winning_move(column) {
        return Some(win_value(board.empty_cells() - 1));
    }
    let next = board.play(column);
    let mut searcher = Searcher::new();
    if depth <= 1 || next.empty_cells() == 0 {
        return Some(-searcher.negamax(&next, 0, -2.0, 2.0));
    }
    // The best reply's value is exact (the others may be bounds).
    let replies = searcher.move_values(&next, depth - 1, 0.0);
    Some(
        -replies
            .into_iter()
            .map(|(_, v)| v)
            .fold(f32::NEG_INFINITY, f32::max),
    )
}

/// The exact value of playing `column` on `board`, as [`exact_move_values`] scores the best
/// moves, for any move; `None` when the column is full or `board` has more than
/// [`PERFECT_MAX_EMPTY`] empty cells.
pub fn exact_move_value(board: &Board, column: usize) -> Option<f32> {
    if board.empty_cells() > PERFECT_MAX_EMPTY || column >= COLUMNS || !board.can_play(column) {
        return None;
    }
    Some(solver::with_solver(|solver| {
        solved_move_value(solver, board, column)
    }))
}

/// The exact value of the legal move `column` on `board`, as [`exact_move_value`] gives it.
fn solved_move_value(solver: &mut solver::Solver, board: &Board, column: usize) -> f32 {
    if board.is_winning_move(column) {
        return win_value(board.empty_cells() - 1);
    }
    let next = board.play(column);
    -solver::to_value(solver.score(&next), next.empty_cells())
}

/// The move `alphabeta:DEPTH` plays on `board`: uniformly among the moves whose values are
/// within 1e-6 of the best.
pub fn alphabeta_move<R: Rng + ?Sized>(board: &Board, depth: usize, rng: &mut R) -> usize {
    pick_best(&alphabeta_move_values(board, depth), 1e-6, rng)
}

/// The move `perfect` plays on `board`: uniformly among the optimal moves; an error with more
/// than [`PERFECT_MAX_EMPTY`] empty cells.
pub fn perfect_move<R: Rng + ?Sized>(board: &Board, rng: &mut R) -> Result<usize, ArenaError> {
    let values = exact_move_values(board).ok_or(ArenaError::TooEarlyToSolve {
        empty: board.empty_cells(),
        limit: PERFECT_MAX_EMPTY,
    })?;
    Ok(pick_best(&values, 0.0, rng))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::games::after_moves;
    use cumind_envs::{ConnectFour, Environment};

    pub(super) fn board(moves: &[usize]) -> Board {
        let (_, obs) = after_moves(ConnectFour::new(), moves);
        Board::from_observation(&obs, &[3, 6, 7]).unwrap()
    }

    fn best(values: &[(usize, f32)]) -> Vec<usize> {
        let top = values.iter().map(|v| v.1).fold(f32::MIN, f32::max);
        values
            .iter()
            .filter(|v| v.1 >= top - 1e-6)
            .map(|v| v.0)
            .collect()
    }

    #[test]
    fn the_board_follows_the_environment() {
        // X plays 3, O plays 3, X plays 4: from O's side (to move) O has one stone, X two.
        let b = board(&[3, 3, 4]);
        assert_eq!(b.empty_cells(), 39);
        assert_eq!(b.mover.count_ones(), 1);
        assert_eq!(b.mover, 1 << (3 * STRIDE + 1));
        assert_eq!((b.stones ^ b.mover).count_ones(), 2);
        assert_eq!(b.play(0), board(&[3, 3, 4, 0]));
    }

    #[test]
    fn threats_and_alignment_see_fours_in_every_direction() {
        // Three in a row at the bottom, columns 0-2: column 3 completes it.
        let row = bottom(0) | bottom(1) | bottom(2);
        assert!(!aligned(row));
        assert!(aligned(row | bottom(3)));
        assert_eq!(threats(row), bottom(3));
        // A diagonal with its third stone missing.
        let diag = bottom(0) | (bottom(1) << 1) | (bottom(3) << 3);
        assert_eq!(threats(diag), bottom(2) << 2);
        // Vertical: three in column 5 threaten the cell above.
        let column = bottom(5) | (bottom(5) << 1) | (bottom(5) << 2);
        assert_eq!(threats(column), bottom(5) << 3);
        assert_eq!(windows().len(), 69);
    }

    /// X has 0, 1, 2 on the bottom row and is to move: it wins at 3 at once; O to move
    /// must block at 3, and every other move loses.
    #[test]
    fn it_takes_the_win_and_makes_the_only_block() {
        let win = board(&[0, 0, 1, 1, 2, 6]);
        assert_eq!(best(&alphabeta_move_values(&win, 4)), vec![3]);
        let block = board(&[0, 0, 1, 1, 2]);
        let values = alphabeta_move_values(&block, 4);
        assert_eq!(best(&values), vec![3]);
        for (column, value) in values {
            if column != 3 {
                assert!(value < -1.0, "column {column}: {value}");
            }
        }
    }

    /// A double threat: X to move at 2 or 5? With X on 2, 3, 4 of the bottom row after
    /// its move, both ends are open; alpha-beta at depth 3 sees the forced win.
    #[test]
    fn it_sees_a_double_threat_coming() {
        // X: 3, 4 on the bottom row; O: stones far away. X to move.
        let b = board(&[3, 3, 4, 4]);
        let values = alphabeta_move_values(&b, 5);
        let winners = best(&values);
        assert!(winners.iter().all(|c| [2, 5].contains(c)), "{values:?}");
        assert!(values.iter().any(|v| v.1 > 1.0), "a forced win: {values:?}");
    }

    /// The exact solver against the generic exhaustive one on late positions, and its
    /// refusal of positions with more empty cells than it solves in time.
    #[test]
    fn the_exact_values_match_an_exhaustive_search_and_early_positions_are_refused() {
        assert!(exact_move_values(&board(&[])).is_none());
        assert!(exact_move_value(&board(&[]), 3).is_none());
        // Ours rank wins by how soon they come, and give moves worse than the best an
        // upper bound only; theirs are exact: +1, 0 or -1.
        let outcome = |v: f32| {
            if v >= 1.0 {
                1.0
            } else if v <= -1.0 {
                -1.0
            } else {
                0.0
            }
        };
        for (stones, stride) in [(26, 5), (27, 3), (29, 2), (30, 4)] {
            // A fixed line of moves that never ends the game.
            let mut env = ConnectFour::new();
            let mut obs = env.reset(None).0;
            for ply in 0..stones {
                let quiet: Vec<usize> = env
                    .legal_actions()
                    .into_iter()
                    .filter(|&a| !env.clone_box().step(a).unwrap().terminated)
                    .collect();
                obs = env
                    .step(quiet[(ply * stride + 3) % quiet.len()])
                    .unwrap()
                    .observation;
            }
            let b = Board::from_observation(&obs, &[3, 6, 7]).unwrap();
            assert!(b.empty_cells() <= PERFECT_MAX_EMPTY);
            let ours = exact_move_values(&b).unwrap();
            let mut memo = HashMap::new();
            let theirs = super::super::search::exact_move_values(&env, &mut memo);
            let their_best = theirs.iter().map(|v| v.1).fold(f32::MIN, f32::max);
            assert_eq!(ours.len(), theirs.len());
            for (&(a, v), &(ta, tv)) in ours.iter().zip(&theirs) {
                assert_eq!(a, ta);
                assert!(outcome(v) >= tv, "column {a}: {ours:?} against {theirs:?}");
                // One move at a time, every move's value is exact.
                assert_eq!(outcome(exact_move_value(&b, a).unwrap()), tv, "column {a}");
                if best(&ours).contains(&a) {
                    assert_eq!(tv, their_best, "column {a}: {ours:?} against {theirs:?}");
                    assert_eq!(outcome(v), tv, "column {a}: {ours:?} against {theirs:?}");
                }
            }
        }
    }

    /// Plain negamax without pruning or table, as [`Searcher::negamax`] scores positions.
    fn brute_force(b: &Board, depth: usize) -> f32 {
        let empty = b.empty_cells();
        if empty == 0 {
            return 0.0;
        }
        if (0..COLUMNS).any(|c| b.can_play(c) && b.is_winning_move(c)) {
            return win_value(empty - 1);
        }
        if depth == 0 {
            return b.heuristic();
        }
        (0..COLUMNS)
            .filter(|&c| b.can_play(c))
            .map(|c| -brute_force(&b.play(c), depth - 1))
            .fold(f32::NEG_INFINITY, f32::max)
    }

    /// Each move's value alone equals a search without pruning, at every depth, also for
    /// moves worse than the best; a full column has none.
    #[test]
    fn one_moves_value_equals_a_search_without_pruning() {
        for moves in [
            vec![3, 3, 4, 4],
            vec![0, 0, 1, 1, 2],
            vec![3, 2, 3, 4, 2, 5, 6, 3, 3],
            vec![0, 0, 0, 0, 0, 0, 6, 5, 4],
        ] {
            let b = board(&moves);
            for depth in 1..=4 {
                for column in 0..COLUMNS {
                    let Some(value) = alphabeta_move_value(&b, column, depth) else {
                        assert!(!b.can_play(column), "{moves:?} column {column}");
                        continue;
                    };
                    let expected = if b.is_winning_move(column) {
                        win_value(b.empty_cells() - 1)
                    } else {
                        -brute_force(&b.play(column), depth - 1)
                    };
                    assert!(
                        (value - expected).abs() < 1e-6,
                        "{moves:?} depth {depth} column {column}: {value} against {expected}"
                    );
                }
            }
        }
    }
}
