//! MinAtar Asterix.

use super::{board_text, cell, Game, NumpyRandom, SIZE};

const PLAYER: usize = 0;
const ENEMY: usize = 1;
const TRAIL: usize = 2;
const GOLD: usize = 3;
const CHANNELS: usize = 4;
/// Steps between two steps of the difficulty ramp.
const RAMP_INTERVAL: i32 = 100;
const INITIAL_SPAWN_SPEED: i32 = 10;
const INITIAL_MOVE_SPEED: i32 = 5;

/// Something crossing one of rows 1 to 8: an enemy or treasure.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Entity {
    x: i32,
    y: i32,
    /// Moving right (it came in on the left).
    right: bool,
    gold: bool,
}

/// MinAtar Asterix (`MinAtar/Asterix-v1`): the player moves in four directions on rows 1 to
/// 8; enemies and treasure enter from either side, one per row at most, and cross the board.
/// Treasure gives +1 when the player touches it; touching an enemy ends the episode. Every
/// `spawn speed` steps something new enters (a random side, treasure with probability 1/3, a
/// random free row), and everything moves every `move speed` steps. The difficulty ramp
/// (every 100 steps) lowers the spawn interval by one step each time and the move interval by
/// one every second time, down to 1. Actions: left (1), up (2), right (3), down (4) move the
/// player; no-op (0) and fire (5) do nothing. Channels: player, enemy, trail (the cell an
/// entity came from), gold.
#[derive(Debug, Clone)]
pub struct AsterixGame {
    player_x: i32,
    player_y: i32,
    entities: [Option<Entity>; 8],
    spawn_speed: i32,
    spawn_timer: i32,
    move_speed: i32,
    move_timer: i32,
    ramp_timer: i32,
    ramp_index: i32,
    ramping: bool,
    terminal: bool,
}

impl AsterixGame {
    /// The steps the difficulty ramp has taken.
    pub fn difficulty(&self) -> i32 {
        self.ramp_index
    }

    /// Something new on a random free row from a random side (two draws even when every row
    /// is taken, then none).
    fn spawn(&mut self, rng: &mut NumpyRandom) {
        let right = rng.rand() < 0.5;
        let gold = rng.rand() < 1.0 / 3.0;
        let free: Vec<usize> = (0..self.entities.len())
            .filter(|&i| self.entities[i].is_none())
            .collect();
        if free.is_empty() {
            return;
        }
        let slot = free[rng.randint(0, free.len() as i64) as usize];
        self.entities[slot] = Some(Entity {
            x: if right { 0 } else { SIZE as i32 - 1 },
            y: slot as i32 + 1,
            right,
            gold,
        });
    }

    /// What touching entity `i` does: treasure is taken (+1), an enemy ends the episode.
    fn touch(&mut self, i: usize) -> f64 {
        match self.entities[i] {
            Some(e) if e.x == self.player_x && e.y == self.player_y => {
                if e.gold {
                    self.entities[i] = None;
                    1.0
                } else {
                    self.terminal = true;
                    0.0
                }
            }
            _ => 0.0,
        }
    }
}

impl Game for AsterixGame {
    const NAME: &'static str = "Asterix";
    const CHANNELS: usize = CHANNELS;
    const MINIMAL_ACTIONS: &'static [usize] = &[0, 1, 2, 3, 4];

    fn blank() -> Self {
        Self {
            player_x: 0,
            player_y: 0,
            entities: [None; 8],
            spawn_speed: 0,
            spawn_timer: 0,
            move_speed: 0,
            move_timer: 0,
            ramp_timer: 0,
            ramp_index: 0,
            ramping: true,
            terminal: false,
        }
    }

    fn reset(&mut self, _rng: &mut NumpyRandom) {
        self.player_x = 5;
        self.player_y = 5;
        self.entities = [None; 8];
        self.spawn_speed = INITIAL_SPAWN_SPEED;
        self.spawn_timer = self.spawn_speed;
        self.move_speed = INITIAL_MOVE_SPEED;
        self.move_timer = self.move_speed;
        self.ramp_timer = RAMP_INTERVAL;
        self.ramp_index = 0;
        self.terminal = false;
    }

    /// The game's own step, after the sticky action is resolved: the reward.
    fn act(&mut self, action: usize, rng: &mut NumpyRandom) -> f64 {
        let mut reward = 0.0;
        if self.spawn_timer == 0 {
            self.spawn(rng);
            self.spawn_timer = self.spawn_speed;
        }
        match action {
            1 => self.player_x = (self.player_x - 1).max(0),
            3 => self.player_x = (self.player_x + 1).min(SIZE as i32 - 1),
            2 => self.player_y = (self.player_y - 1).max(1),
            4 => self.player_y = (self.player_y + 1).min(SIZE as i32 - 2),
            _ => {}
        }
        for i in 0..self.entities.len() {
            reward += self.touch(i);
        }
        if self.move_timer == 0 {
            self.move_timer = self.move_speed;
            for i in 0..self.entities.len() {
                if let Some(e) = &mut self.entities[i] {
                    e.x += if e.right { 1 } else { -1 };
                    if !(0..SIZE as i32).contains(&e.x) {
                        self.entities[i] = None;
                    }
                }
                reward += self.touch(i);
            }
        }
        self.spawn_timer -= 1;
        self.move_timer -= 1;
        if self.ramping && (self.spawn_speed > 1 || self.move_speed > 1) {
            if self.ramp_timer >= 0 {
                self.ramp_timer -= 1;
            } else {
                if self.move_speed > 1 && self.ramp_index % 2 == 1 {
                    self.move_speed -= 1;
                }
                if self.spawn_speed > 1 {
                    self.spawn_speed -= 1;
                }
                self.ramp_index += 1;
                self.ramp_timer = RAMP_INTERVAL;
            }
        }
        reward
    }

    fn terminal(&self) -> bool {
        self.terminal
    }

    fn observation(&self) -> Vec<f32> {
        let mut obs = vec![0.0; CHANNELS * SIZE * SIZE];
        obs[cell(PLAYER, self.player_y as usize, self.player_x as usize)] = 1.0;
        for e in self.entities.iter().flatten() {
            let channel = if e.gold { GOLD } else { ENEMY };
            obs[cell(channel, e.y as usize, e.x as usize)] = 1.0;
            let back = if e.right { e.x - 1 } else { e.x + 1 };
            if (0..SIZE as i32).contains(&back) {
                obs[cell(TRAIL, e.y as usize, back as usize)] = 1.0;
            }
        }
        obs
    }

    fn render(&self) -> String {
        let mut rows = vec![vec!['.'; SIZE]; SIZE];
        for e in self.entities.iter().flatten() {
            rows[e.y as usize][e.x as usize] = if e.gold { '$' } else { 'x' };
        }
        rows[self.player_y as usize][self.player_x as usize] = '@';
        board_text(&rows)
    }
}
