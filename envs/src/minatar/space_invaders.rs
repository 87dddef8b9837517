//! MinAtar Space Invaders.

use super::{cell, Game, NumpyRandom, SIZE};

const CANNON: usize = 0;
const ALIEN: usize = 1;
const ALIEN_LEFT: usize = 2;
const ALIEN_RIGHT: usize = 3;
const FRIENDLY_BULLET: usize = 4;
const ENEMY_BULLET: usize = 5;
const CHANNELS: usize = 6;
const SHOT_COOL_DOWN: i32 = 5;
const ENEMY_MOVE_INTERVAL: i32 = 12;
const ENEMY_SHOT_INTERVAL: i32 = 10;

type Grid = [[bool; SIZE]; SIZE];

/// `grid` shifted by `by` rows (down for positive), wrapping around, as `numpy.roll` does.
fn roll_rows(grid: &Grid, by: i32) -> Grid {
    let mut out = [[false; SIZE]; SIZE];
    for (r, row) in grid.iter().enumerate() {
        out[(r as i32 + by).rem_euclid(SIZE as i32) as usize] = *row;
    }
    out
}

/// `grid` shifted by `by` columns (right for positive), wrapping around.
fn roll_columns(grid: &Grid, by: i32) -> Grid {
    let mut out = [[false; SIZE]; SIZE];
    for (r, row) in grid.iter().enumerate() {
        for (c, &v) in row.iter().enumerate() {
            out[r][(c as i32 + by).rem_euclid(SIZE as i32) as usize] = v;
        }
    }
    out
}

fn count(grid: &Grid) -> usize {
    grid.iter().flatten().filter(|&&v| v).count()
}

/// MinAtar Space Invaders (`MinAtar/SpaceInvaders-v1`): a cannon on the bottom row shoots up
/// at a block of aliens (4 rows of 6) that marches sideways and steps down and turns at the
/// edges; each alien shot gives +1. The aliens move every `min(aliens left, move interval)`
/// steps and shoot every 10 steps from the lowest alien of the column nearest the cannon. The
/// episode ends when an alien or an alien's bullet reaches the cannon, or aliens reach the
/// bottom row as they turn. A cleared wave comes back, and with the difficulty ramp the next
/// marches one step faster (from every 12 steps down to every 6). Actions: left (1), right (3)
/// and fire (5, every 5 steps at most); the others do nothing. Channels: cannon, alien, alien
/// moving left, alien moving right, the cannon's bullets, the aliens' bullets.
#[derive(Debug, Clone)]
pub struct SpaceInvadersGame {
    pos: i32,
    friendly: Grid,
    enemy: Grid,
    aliens: Grid,
    alien_dir: i32,
    move_interval: i32,
    move_timer: i32,
    shot_timer: i32,
    alien_shot_timer: i32,
    ramp_index: i32,
    ramping: bool,
    terminal: bool,
}

impl SpaceInvadersGame {
    /// The steps the difficulty ramp has taken.
    pub fn difficulty(&self) -> i32 {
        self.ramp_index
    }

    fn fill_wave(&mut self) {
        for row in &mut self.aliens[0..4] {
            for v in &mut row[2..8] {
                *v = true;
            }
        }
    }

    /// The lowest alien of the column nearest `pos` (ties: the lower column first).
    fn nearest_alien(&self, pos: i32) -> Option<(usize, usize)> {
        let mut order: Vec<usize> = (0..SIZE).collect();
        order.sort_by_key(|&c| (c as i32 - pos).abs());
        order
            .into_iter()
            .find_map(|c| (0..SIZE).rev().find(|&r| self.aliens[r][c]).map(|r| (r, c)))
    }
}

impl Game for SpaceInvadersGame {
    const NAME: &'static str = "SpaceInvaders";
    const CHANNELS: usize = CHANNELS;
    const MINIMAL_ACTIONS: &'static [usize] = &[0, 1, 3, 5];

    fn blank() -> Self {
        Self {
            pos: 0,
            friendly: [[false; SIZE]; SIZE],
            enemy: [[false; SIZE]; SIZE],
            aliens: [[false; SIZE]; SIZE],
            alien_dir: -1,
            move_interval: 0,
            move_timer: 0,
            shot_timer: 0,
            alien_shot_timer: 0,
            ramp_index: 0,
            ramping: true,
            terminal: false,
        }
    }

    fn reset(&mut self, _rng: &mut NumpyRandom) {
        self.pos = 5;
        self.friendly = [[false; SIZE]; SIZE];
        self.enemy = [[false; SIZE]; SIZE];
        self.aliens = [[false; SIZE]; SIZE];
        self.fill_wave();
        self.alien_dir = -1;
        self.move_interval = ENEMY_MOVE_INTERVAL;
        self.move_timer = self.move_interval;
        self.alien_shot_timer = ENEMY_SHOT_INTERVAL;
        self.ramp_index = 0;
        self.shot_timer = 0;
        self.terminal = false;
    }

    /// The game's own step, after the sticky action is resolved: the reward.
    fn act(&mut self, action: usize, _rng: &mut NumpyRandom) -> f64 {
        let bottom = SIZE - 1;
        let pos = |env: &Self| env.pos as usize;
        match action {
            5 if self.shot_timer == 0 => {
                self.friendly[bottom][pos(self)] = true;
                self.shot_timer = SHOT_COOL_DOWN;
            }
            1 => self.pos = (self.pos - 1).max(0),
            3 => self.pos = (self.pos + 1).min(SIZE as i32 - 1),
            _ => {}
        }
        self.friendly = roll_rows(&self.friendly, -1);
        self.friendly[bottom] = [false; SIZE];
        self.enemy = roll_rows(&self.enemy, 1);
        self.enemy[0] = [false; SIZE];
        if self.enemy[bottom][pos(self)] {
            self.terminal = true;
        }
        if self.aliens[bottom][pos(self)] {
            self.terminal = true;
        }
        if self.move_timer == 0 {
            self.move_timer = (count(&self.aliens) as i32).min(self.move_interval);
            let at_left = self.aliens.iter().any(|row| row[0]);
            let at_right = self.aliens.iter().any(|row| row[SIZE - 1]);
            if (at_left && self.alien_dir < 0) || (at_right && self.alien_dir > 0) {
                self.alien_dir = -self.alien_dir;
                if self.aliens[bottom].iter().any(|&v| v) {
                    self.terminal = true;
                }
                self.aliens = roll_rows(&self.aliens, 1);
            } else {
                self.aliens = roll_columns(&self.aliens, self.alien_dir);
            }
            if self.aliens[bottom][pos(self)] {
                self.terminal = true;
            }
        }
        if self.alien_shot_timer == 0 {
            self.alien_shot_timer = ENEMY_SHOT_INTERVAL;
            if let Some((r, c)) = self.nearest_alien(self.pos) {
                self.enemy[r][c] = true;
            }
        }
        let mut reward = 0.0;
        for r in 0..SIZE {
            for c in 0..SIZE {
                if self.aliens[r][c] && self.friendly[r][c] {
                    reward += 1.0;
                    self.aliens[r][c] = false;
                    self.friendly[r][c] = false;
                }
            }
        }
        if self.shot_timer > 0 {
            self.shot_timer -= 1;
        }
        self.move_timer -= 1;
        self.alien_shot_timer -= 1;
        if count(&self.aliens) == 0 {
            if self.move_interval > 6 && self.ramping {
                self.move_interval -= 1;
                self.ramp_index += 1;
            }
            self.fill_wave();
        }
        reward
    }

    fn terminal(&self) -> bool {
        self.terminal
    }

    fn observation(&self) -> Vec<f32> {
        let mut obs = vec![0.0; CHANNELS * SIZE * SIZE];
        obs[cell(CANNON, SIZE - 1, self.pos as usize)] = 1.0;
        let direction = if self.alien_dir < 0 {
            ALIEN_LEFT
        } else {
            ALIEN_RIGHT
        };
        for r in 0..SIZE {
            for c in 0..SIZE {
                if self.aliens[r][c] {
                    obs[cell(ALIEN, r, c)] = 1.0;
                    obs[cell(direction, r, c)] = 1.0;
                }
                if self.friendly[r][c] {
                    obs[cell(FRIENDLY_BULLET, r, c)] = 1.0;
                }
                if self.enemy[r][c] {
                    obs[cell(ENEMY_BULLET, r, c)] = 1.0;
                }
            }
        }
        obs
    }

    fn render(&self) -> String {
        (0..SIZE)
            .map(|r| {
                (0..SIZE)
                    .map(|c| {
                        if r == SIZE - 1 && c as i32 == self.pos {
                            'A'
                        } else if self.aliens[r][c] {
                            'W'
                        } else if self.friendly[r][c] {
                            '|'
                        } else if self.enemy[r][c] {
                            '!'
                        } else {
                            '.'
                        }
                    })
                    .collect::<String>()
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}
