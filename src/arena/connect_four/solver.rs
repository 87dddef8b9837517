//! An exact Connect Four solver for [`super::perfect_move`] and the exact move values: a
//! negamax on integer scores with a null-window search, so that most of its work only asks
//! "is the score above this bound?".
//!
//! Scores are from the player to move: a win scores more the sooner it comes, `(e + 2) / 2`
//! for a win whose last stone leaves `e` empty cells, a loss the same negated, a draw 0.
//! What makes it fast enough to answer from the first moves of a game:
//! - it never plays a move that lets the opponent win at once, and answers a single threat
//!   by blocking it, so each node knows it cannot lose before the opponent's second stone and
//!   cannot win before its own second one: the window shrinks before any move is tried;
//! - moves are tried in the order of how many cells they leave that would complete the
//!   mover's four, ties centre first;
//! - a transposition table of bounds (an upper bound where every move failed low, a lower one
//!   where a move failed high), kept for the whole thread, so that the moves of one
//!   game, and the games after it, reuse each other's work (a bound holds for a position
//!   wherever it comes from);
//! - the exact score is found by halving its range with null-window searches, nearest to a
//!   draw first.
//!
//! The ideas are the classic ones of Connect Four solvers (Allis's and Tromp's work, and
//! Pascal Pons's write-up of a solver built step by step); this code is CuMind's own.

use std::cell::RefCell;

use super::{column_mask, threats, Board, BOARD_MASK, ORDER};

/// Entries of the transposition table (a prime, so keys spread over it): 64 MiB.
const TABLE_SIZE: usize = 8_388_593;

/// Empty cells of the mover's wins: cells that would complete four and hold no stone.
fn open_threats(stones: u64, every_stone: u64) -> u64 {
    threats(stones) & !every_stone & BOARD_MASK
}

impl Board {
    /// The playable cells that do not let the opponent win at its next stone: the one cell
    /// that blocks when the opponent threatens to win at once, none when it threatens twice,
    /// and never the cell just below one of the opponent's threats.
    fn non_losing_cells(&self) -> u64 {
        let mut playable = self.playable();
        let theirs = open_threats(self.mover ^ self.stones, self.stones);
        let forced = playable & theirs;
        if forced != 0 {
            if forced & (forced - 1) != 0 {
                return 0;
            }
            playable = forced;
        }
        playable & !(theirs >> 1)
    }
}

/// The score of a win at the mover's next stone, on a board with `empty` empty cells.
fn win_now(empty: i32) -> i32 {
    (empty + 1) / 2
}

/// The solver's value of a score as the arena's searchers write values (wins above 1, more the
/// sooner; losses below -1; draws 0), for the player to move on a board with `empty` empty
/// cells.
pub(super) fn to_value(score: i32, empty: usize) -> f32 {
    let empty = empty as i32;
    match score {
        0 => 0.0,
        s if s > 0 => super::win_value((2 * s - 2 + (empty - 1).rem_euclid(2)) as usize),
        s => -super::win_value((-2 * s - 2 + empty.rem_euclid(2)) as usize),
    }
}

/// What the table knows of a position's score.
#[derive(Clone, Copy)]
enum Bound {
    AtMost(i32),
    AtLeast(i32),
}

/// A solver with its transposition table.
pub(super) struct Solver {
    /// Each entry: the position's key above 8 bits holding a bound of its score plus 64, the
    /// top bit set for a lower bound; 0 when empty.
    table: Vec<u64>,
}

thread_local! {
    static SOLVER: RefCell<Option<Solver>> = const { RefCell::new(None) };
}

/// Runs `f` with this thread's solver, made (and its table allocated) on first use.
pub(super) fn with_solver<T>(f: impl FnOnce(&mut Solver) -> T) -> T {
    SOLVER.with(|cell| f(cell.borrow_mut().get_or_insert_with(Solver::new)))
}

impl Solver {
    fn new() -> Self {
        Self {
            table: vec![0; TABLE_SIZE],
        }
    }

    fn bound(&self, key: u64) -> Option<Bound> {
        let entry = self.table[(key % TABLE_SIZE as u64) as usize];
        if entry == 0 || entry >> 8 != key {
            return None;
        }
        let value = (entry & 0x7f) as i32 - 64;
        Some(if entry & 0x80 != 0 {
            Bound::AtLeast(value)
        } else {
            Bound::AtMost(value)
        })
    }

    fn store(&mut self, key: u64, bound: Bound) {
        let byte = match bound {
            Bound::AtMost(v) => (v + 64) as u64,
            Bound::AtLeast(v) => (v + 64) as u64 | 0x80,
        };
        self.table[(key % TABLE_SIZE as u64) as usize] = (key << 8) | byte;
    }

    /// The exact score of `board` for its mover (see the module's docs). The game must not be
    /// over.
    pub(super) fn score(&mut self, board: &Board) -> i32 {
        let empty = board.empty_cells() as i32;
        if empty == 0 {
            return 0;
        }
        if board.can_win_at_once() {
            return win_now(empty);
        }
        let (mut low, mut high) = (-empty / 2, win_now(empty));
        while low < high {
            // Halve the range, but try the bounds nearest a draw first: most positions are
            // decided by whether they are won, drawn or lost, and those searches are cheaper.
            let mut middle = low + (high - low) / 2;
            if middle <= 0 && low / 2 < middle {
                middle = low / 2;
            } else if middle >= 0 && high / 2 > middle {
                middle = high / 2;
            }
            let found = self.negamax(board, middle, middle + 1);
            if found <= middle {
                high = found;
            } else {
                low = found;
            }
        }
        low
    }

    /// Whether `board` is won (1), drawn (0) or lost (-1) for its mover: one null-window
    /// search on each side of a draw at most. The game must not be over.
    pub(super) fn outcome(&mut self, board: &Board) -> i32 {
        let empty = board.empty_cells() as i32;
        if empty == 0 {
            return 0;
        }
        if board.can_win_at_once() {
            return 1;
        }
        let found = self.negamax(board, -1, 1);
        found.signum()
    }

    /// The score of `board` for its mover if it lies in (`alpha`, `beta`); otherwise a bound
    /// on the same side of the window (fail-soft). The mover must not be able to win at once.
    fn negamax(&mut self, board: &Board, mut alpha: i32, mut beta: i32) -> i32 {
        let empty = board.empty_cells() as i32;
        let moves = board.non_losing_cells();
        if moves == 0 {
            // Every move lets the opponent win with its next stone.
            return -empty / 2;
        }
        if empty <= 2 {
            // One stone each at most, neither of them a win.
            return 0;
        }
        // Not lost before the opponent's second stone from now.
        let lowest = -(empty - 2) / 2;
        if alpha < lowest {
            alpha = lowest;
            if alpha >= beta {
                return alpha;
            }
        }
        // Not won before the mover's second stone from now.
        let highest = (empty - 1) / 2;
        if beta > highest {
            beta = highest;
            if alpha >= beta {
                return beta;
            }
        }
        let key = board.key();
        match self.bound(key) {
            Some(Bound::AtMost(v)) if v < beta => {
                beta = v;
                if alpha >= beta {
                    return beta;
                }
            }
            Some(Bound::AtLeast(v)) if v > alpha => {
                alpha = v;
                if alpha >= beta {
                    return alpha;
                }
            }
            _ => {}
        }
        let mut ordered = [(0u64, 0u32); 7];
        let mut count = 0;
        for &column in ORDER.iter() {
            let cell = moves & column_mask(column);
            if cell == 0 {
                continue;
            }
            let mine = board.mover | cell;
            let rank = open_threats(mine, board.stones | cell).count_ones();
            // Insertion: stable, so equal ranks keep the centre-first order.
            let mut at = count;
            while at > 0 && ordered[at - 1].1 < rank {
                ordered[at] = ordered[at - 1];
                at -= 1;
            }
            ordered[at] = (cell, rank);
            count += 1;
        }
        for &(cell, _) in &ordered[..count] {
            let found = -self.negamax(&board.play_cell(cell), -beta, -alpha);
            if found >= beta {
                self.store(key, Bound::AtLeast(found));
                return found;
            }
            if found > alpha {
                alpha = found;
            }
        }
        self.store(key, Bound::AtMost(alpha));
        alpha
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::board;
    use super::super::{
        exact_move_result, exact_move_value, exact_move_values, win_value, COLUMNS,
    };
    use super::*;

    /// The exact score by plain negamax over every move, no pruning and no table.
    fn brute_force(board: &Board) -> i32 {
        let empty = board.empty_cells() as i32;
        if empty == 0 {
            return 0;
        }
        if board.can_win_at_once() {
            return win_now(empty);
        }
        (0..COLUMNS)
            .filter(|&c| board.can_play(c))
            .map(|c| -brute_force(&board.play(c)))
            .max()
            .expect("a legal move")
    }

    /// Positions 3-11 cells from the end, reached by a fixed line of moves that ends no game.
    fn late_positions() -> Vec<Board> {
        let mut out = Vec::new();
        'lines: for (stones, stride) in (31..=39).flat_map(|n| (1..=6).map(move |s| (n, s))) {
            let mut board = Board {
                mover: 0,
                stones: 0,
            };
            for ply in 0..stones {
                let quiet: Vec<usize> = (0..COLUMNS)
                    .filter(|&c| board.can_play(c) && !board.is_winning_move(c))
                    .collect();
                if quiet.is_empty() {
                    // Every move ends the game: no position of this line.
                    continue 'lines;
                }
                board = board.play(quiet[(ply * stride + 3) % quiet.len()]);
            }
            out.push(board);
        }
        out
    }

    #[test]
    fn scores_and_outcomes_match_a_search_without_pruning() {
        let mut solver = Solver::new();
        let mut signs = [0; 3];
        for board in late_positions() {
            for column in (0..COLUMNS).filter(|&c| board.can_play(c) && !board.is_winning_move(c)) {
                let next = board.play(column);
                let expected = brute_force(&next);
                assert_eq!(solver.score(&next), expected, "{next:?}");
                assert_eq!(solver.outcome(&next), expected.signum(), "{next:?}");
                signs[(expected.signum() + 1) as usize] += 1;
                // The same again, now from the table.
                assert_eq!(solver.score(&next), expected, "{next:?} (second time)");
            }
        }
        // The positions hold losses, draws and wins alike, so every branch was compared.
        assert!(
            signs.iter().all(|&n| n > 0),
            "losses, draws, wins: {signs:?}"
        );
    }

    #[test]
    fn a_score_reads_back_as_the_searchers_value() {
        for empty in 2..=42 {
            // A win at the mover's next stone, and a loss at the opponent's next stone.
            assert_eq!(to_value(win_now(empty as i32), empty), win_value(empty - 1));
            assert_eq!(to_value(-(empty as i32) / 2, empty), -win_value(empty - 2));
        }
        // X holds columns 1-3 of the bottom row with both ends open: O, to move, loses at
        // X's next stone.
        let lost = board(&[1, 1, 2, 2, 3]);
        let empty = lost.empty_cells();
        assert_eq!(Solver::new().score(&lost), -(empty as i32) / 2);
    }

    /// Each move's exact value, as the arena reads it, equals a search without pruning that
    /// scores wins and losses the way the alpha-beta searcher does.
    #[test]
    fn move_values_match_a_search_without_pruning() {
        fn exhaustive(board: &Board) -> f32 {
            let empty = board.empty_cells();
            if empty == 0 {
                return 0.0;
            }
            if (0..COLUMNS).any(|c| board.can_play(c) && board.is_winning_move(c)) {
                return win_value(empty - 1);
            }
            (0..COLUMNS)
                .filter(|&c| board.can_play(c))
                .map(|c| -exhaustive(&board.play(c)))
                .fold(f32::NEG_INFINITY, f32::max)
        }
        // A value's result: 1 won, 0 drawn, -1 lost.
        let result = |v: f32| (v > 0.0) as i32 - (v < 0.0) as i32;
        for board in late_positions() {
            let values = exact_move_values(&board).expect("a late position");
            let full = (0..COLUMNS).find(|&c| !board.can_play(c));
            assert_eq!(full.and_then(|c| exact_move_result(&board, c)), None);
            assert_eq!(exact_move_result(&board, COLUMNS), None);
            let best = values.iter().map(|v| v.1).fold(f32::MIN, f32::max);
            for (column, value) in values {
                let expected = if board.is_winning_move(column) {
                    win_value(board.empty_cells() - 1)
                } else {
                    -exhaustive(&board.play(column))
                };
                let one = exact_move_value(&board, column).expect("a legal move");
                assert_eq!(
                    exact_move_result(&board, column),
                    Some(result(expected)),
                    "column {column}"
                );
                assert!(
                    (one - expected).abs() < 1e-6,
                    "column {column}: {one} against {expected}"
                );
                if value >= best {
                    assert!(
                        (value - expected).abs() < 1e-6,
                        "best {column}: {value} against {expected}"
                    );
                } else {
                    // A worse move carries its result, an upper bound of its value.
                    assert_eq!(result(value), result(expected), "column {column}");
                    assert!(
                        value >= expected,
                        "column {column}: {value} against {expected}"
                    );
                }
            }
        }
    }
}
