//! MinAtar Freeway.

use super::{board_text, cell, Game, NumpyRandom, SIZE};

const CHICKEN: usize = 0;
const CAR: usize = 1;
/// The trail of a car that moves every `s` steps is in channel `SPEED + s - 1` (s = 1..5).
const SPEED: usize = 2;
const CHANNELS: usize = 7;
/// Steps between two moves of the chicken.
const PLAYER_SPEED: i32 = 3;
/// The episode ends after this many steps and one more.
const TIME_LIMIT: i32 = 2500;

/// A car on one of rows 1 to 8.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Car {
    x: i32,
    y: i32,
    /// Steps until its next move.
    timer: i32,
    /// Steps between moves, signed by direction (positive: to the right).
    speed: i32,
}

/// MinAtar Freeway (`MinAtar/Freeway-v1`): a chicken on column 4 crosses eight lanes of cars,
/// one car a lane, each moving every 1 to 5 steps to the left or right and wrapping around.
/// Up (2) and down (4) move the chicken a row, at most once every three steps; reaching row 0
/// gives +1, sends it back to row 9 and draws new speeds and directions for every car; a car
/// on its cell sends it back to row 9. The episode ends after 2,501 steps (the package reports
/// it as the end of the episode, not as a time-limit truncation). Channels: chicken, car, and
/// five trail channels, one per speed, on the cell behind each car.
#[derive(Debug, Clone)]
pub struct FreewayGame {
    chicken: i32,
    cars: [Car; 8],
    move_timer: i32,
    terminate_timer: i32,
    terminal: bool,
}

impl FreewayGame {
    /// New speeds (1 to 5 steps a move) and directions for every car, in the package's order
    /// of draws (eight speeds, then eight directions); with `initialize`, cars at column 0.
    fn randomize_cars(&mut self, rng: &mut NumpyRandom, initialize: bool) {
        let speeds: Vec<i32> = (0..8).map(|_| rng.randint(1, 6) as i32).collect();
        let directions: Vec<i32> = (0..8)
            .map(|_| {
                let d = rng.rand() - 0.5;
                if d > 0.0 {
                    1
                } else if d < 0.0 {
                    -1
                } else {
                    0
                }
            })
            .collect();
        for (i, car) in self.cars.iter_mut().enumerate() {
            let speed = speeds[i] * directions[i];
            if initialize {
                car.x = 0;
                car.y = i as i32 + 1;
            }
            car.timer = speed.abs();
            car.speed = speed;
        }
    }
}

impl Game for FreewayGame {
    const NAME: &'static str = "Freeway";
    const CHANNELS: usize = CHANNELS;
    const MINIMAL_ACTIONS: &'static [usize] = &[0, 2, 4];

    fn blank() -> Self {
        let idle = Car {
            x: 0,
            y: 0,
            timer: 0,
            speed: 1,
        };
        Self {
            chicken: 0,
            cars: [idle; 8],
            move_timer: 0,
            terminate_timer: 0,
            terminal: false,
        }
    }

    fn reset(&mut self, rng: &mut NumpyRandom) {
        self.randomize_cars(rng, true);
        self.chicken = SIZE as i32 - 1;
        self.move_timer = PLAYER_SPEED;
        self.terminate_timer = TIME_LIMIT;
        self.terminal = false;
    }

    /// The game's own step, after the sticky action is resolved: the reward.
    fn act(&mut self, action: usize, rng: &mut NumpyRandom) -> f64 {
        let mut reward = 0.0;
        if self.move_timer == 0 && matches!(action, 2 | 4) {
            self.move_timer = PLAYER_SPEED;
            self.chicken = if action == 2 {
                (self.chicken - 1).max(0)
            } else {
                (self.chicken + 1).min(SIZE as i32 - 1)
            };
        }
        if self.chicken == 0 {
            reward += 1.0;
            self.randomize_cars(rng, false);
            self.chicken = SIZE as i32 - 1;
        }
        for car in &mut self.cars {
            if car.x == 4 && car.y == self.chicken {
                self.chicken = SIZE as i32 - 1;
            }
            if car.timer == 0 {
                car.timer = car.speed.abs();
                car.x = (car.x + if car.speed > 0 { 1 } else { -1 }).rem_euclid(SIZE as i32);
                if car.x == 4 && car.y == self.chicken {
                    self.chicken = SIZE as i32 - 1;
                }
            } else {
                car.timer -= 1;
            }
        }
        if self.move_timer > 0 {
            self.move_timer -= 1;
        }
        self.terminate_timer -= 1;
        if self.terminate_timer < 0 {
            self.terminal = true;
        }
        reward
    }

    fn terminal(&self) -> bool {
        self.terminal
    }

    fn observation(&self) -> Vec<f32> {
        let mut obs = vec![0.0; CHANNELS * SIZE * SIZE];
        obs[cell(CHICKEN, self.chicken as usize, 4)] = 1.0;
        for car in &self.cars {
            obs[cell(CAR, car.y as usize, car.x as usize)] = 1.0;
            let back = (if car.speed > 0 { car.x - 1 } else { car.x + 1 }).rem_euclid(SIZE as i32);
            if (1..=5).contains(&car.speed.abs()) {
                let trail = SPEED + car.speed.unsigned_abs() as usize - 1;
                obs[cell(trail, car.y as usize, back as usize)] = 1.0;
            }
        }
        obs
    }

    fn render(&self) -> String {
        let mut rows = vec![vec!['.'; SIZE]; SIZE];
        for car in &self.cars {
            rows[car.y as usize][car.x as usize] = if car.speed > 0 { '>' } else { '<' };
        }
        rows[self.chicken as usize][4] = '@';
        board_text(&rows)
    }
}
