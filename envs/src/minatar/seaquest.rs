//! MinAtar Seaquest.

use super::{board_text, cell, Game, NumpyRandom, SIZE};

const SUB_FRONT: usize = 0;
const SUB_BACK: usize = 1;
const FRIENDLY_BULLET: usize = 2;
const TRAIL: usize = 3;
const ENEMY_BULLET: usize = 4;
const ENEMY_FISH: usize = 5;
const ENEMY_SUB: usize = 6;
const OXYGEN_GAUGE: usize = 7;
const DIVER_GAUGE: usize = 8;
const DIVER: usize = 9;
const CHANNELS: usize = 10;
const MAX_OXYGEN: i32 = 200;
const INITIAL_SPAWN_SPEED: i32 = 20;
const DIVER_SPAWN_SPEED: i32 = 30;
const INITIAL_MOVE_SPEED: i32 = 5;
const SHOT_COOL_DOWN: i32 = 5;
const ENEMY_SHOT_INTERVAL: i32 = 10;
const DIVER_MOVE_INTERVAL: i32 = 5;

/// A bullet: `[x, y, moving right]`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Bullet {
    x: i32,
    y: i32,
    right: bool,
}

/// A fish, a diver or an enemy submarine: position, direction, steps to its next move and (a
/// submarine's) steps to its next shot.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Mover {
    x: i32,
    y: i32,
    right: bool,
    timer: i32,
    shot_timer: i32,
}

impl Mover {
    fn step_x(&mut self) {
        self.x += if self.right { 1 } else { -1 };
    }

    fn off_board(&self) -> bool {
        !(0..SIZE as i32).contains(&self.x)
    }

    fn at(&self, x: i32, y: i32) -> bool {
        self.x == x && self.y == y
    }
}

/// Removes the first element equal to `value`, as Python's `list.remove` does (the games'
/// lists can hold equal elements, and which one goes changes the iteration that follows).
fn remove_first<T: PartialEq + Copy>(list: &mut Vec<T>, value: T) {
    if let Some(i) = list.iter().position(|&v| v == value) {
        list.remove(i);
    }
}

/// The element at `i` of a reversed walk over a list that may shrink under it, as Python's
/// reverse list iterator gives it: `None` once the index leaves the list.
fn reverse_walk_at<T: Copy>(list: &[T], i: isize) -> Option<T> {
    (i >= 0 && (i as usize) < list.len()).then(|| list[i as usize])
}

/// MinAtar Seaquest (`MinAtar/Seaquest-v1`): a two-cell submarine (front and back, so its
/// heading shows) moves in four directions under the surface (row 0) and fires bullets ahead
/// of it. Enemy fish and submarines (which shoot) cross the rows from either side; shooting one
/// gives +1, touching one or its bullet ends the episode. Divers cross too; the submarine
/// picks them up (6 at most). Oxygen (200) runs down under the surface and its end ends the
/// episode; surfacing with at least one diver refills it and drops a diver (all six with a
/// reward of one per tenth of the oxygen left, when full), surfacing with none ends the
/// episode. Each surfacing ramps the difficulty: enemies spawn more often and move faster.
/// Actions: left (1), up (2), right (3), down (4), fire (5, every 5 steps at most). Channels:
/// submarine front, back, its bullets, trail (the cell a fish, submarine or diver came
/// from), enemy bullets, fish, enemy submarines, oxygen gauge and diver gauge (row 9), divers.
#[derive(Debug, Clone)]
pub struct SeaquestGame {
    oxygen: i32,
    diver_count: i32,
    sub_x: i32,
    sub_y: i32,
    facing_right: bool,
    f_bullets: Vec<Bullet>,
    e_bullets: Vec<Bullet>,
    fish: Vec<Mover>,
    subs: Vec<Mover>,
    divers: Vec<Mover>,
    spawn_speed: i32,
    spawn_timer: i32,
    diver_spawn_timer: i32,
    move_speed: i32,
    ramp_index: i32,
    shot_timer: i32,
    surfaced: bool,
    ramping: bool,
    terminal: bool,
}

impl SeaquestGame {
    /// The steps the difficulty ramp has taken.
    pub fn difficulty(&self) -> i32 {
        self.ramp_index
    }

    /// A fish or submarine on a random row from a random side, unless an enemy already on that
    /// row heads the other way.
    fn spawn_enemy(&mut self, rng: &mut NumpyRandom) {
        let right = rng.rand() < 0.5;
        let is_sub = rng.rand() < 1.0 / 3.0;
        let x = if right { 0 } else { SIZE as i32 - 1 };
        let y = rng.randint(1, 9) as i32;
        if self
            .subs
            .iter()
            .chain(&self.fish)
            .any(|z| z.y == y && z.right != right)
        {
            return;
        }
        let mover = Mover {
            x,
            y,
            right,
            timer: self.move_speed,
            shot_timer: ENEMY_SHOT_INTERVAL,
        };
        if is_sub {
            self.subs.push(mover);
        } else {
            self.fish.push(mover);
        }
    }

    fn spawn_diver(&mut self, rng: &mut NumpyRandom) {
        let right = rng.rand() < 0.5;
        let x = if right { 0 } else { SIZE as i32 - 1 };
        let y = rng.randint(1, 9) as i32;
        self.divers.push(Mover {
            x,
            y,
            right,
            timer: DIVER_MOVE_INTERVAL,
            shot_timer: 0,
        });
    }

    /// Surfacing with divers on board: the reward.
    fn surface(&mut self) -> f64 {
        self.surfaced = true;
        let reward = if self.diver_count == 6 {
            self.diver_count = 0;
            f64::from(self.oxygen * 10 / MAX_OXYGEN)
        } else {
            0.0
        };
        self.oxygen = MAX_OXYGEN;
        self.diver_count -= 1;
        if self.ramping && (self.spawn_speed > 1 || self.move_speed > 2) {
            if self.move_speed > 2 && self.ramp_index % 2 == 1 {
                self.move_speed -= 1;
            }
            if self.spawn_speed > 1 {
                self.spawn_speed -= 1;
            }
            self.ramp_index += 1;
        }
        reward
    }

    fn update_friendly_bullets(&mut self) -> f64 {
        let mut reward = 0.0;
        let mut i = self.f_bullets.len() as isize - 1;
        while reverse_walk_at(&self.f_bullets, i).is_some() {
            let at = i as usize;
            i -= 1;
            self.f_bullets[at].x += if self.f_bullets[at].right { 1 } else { -1 };
            let bullet = self.f_bullets[at];
            if !(0..SIZE as i32).contains(&bullet.x) {
                remove_first(&mut self.f_bullets, bullet);
                continue;
            }
            if let Some(f) = self.fish.iter().position(|f| f.at(bullet.x, bullet.y)) {
                let fish = self.fish[f];
                remove_first(&mut self.fish, fish);
                remove_first(&mut self.f_bullets, bullet);
                reward += 1.0;
            } else if let Some(s) = self.subs.iter().position(|s| s.at(bullet.x, bullet.y)) {
                let sub = self.subs[s];
                remove_first(&mut self.subs, sub);
                remove_first(&mut self.f_bullets, bullet);
                reward += 1.0;
            }
        }
        reward
    }

    fn update_divers(&mut self) {
        let (x, y) = (self.sub_x, self.sub_y);
        let mut i = self.divers.len() as isize - 1;
        while let Some(diver) = reverse_walk_at(&self.divers, i) {
            let at = i as usize;
            i -= 1;
            if diver.at(x, y) && self.diver_count < 6 {
                remove_first(&mut self.divers, diver);
                self.diver_count += 1;
            } else if diver.timer == 0 {
                self.divers[at].timer = DIVER_MOVE_INTERVAL;
                self.divers[at].step_x();
                let diver = self.divers[at];
                if diver.off_board() {
                    remove_first(&mut self.divers, diver);
                } else if diver.at(x, y) && self.diver_count < 6 {
                    remove_first(&mut self.divers, diver);
                    self.diver_count += 1;
                }
            } else {
                self.divers[at].timer -= 1;
            }
        }
    }

    /// Fish (`subs` false) or enemy submarines: collisions, moves, being shot, and the
    /// submarines' own shots; the reward.
    fn update_enemies(&mut self, subs: bool) -> f64 {
        let mut reward = 0.0;
        let (x, y) = (self.sub_x, self.sub_y);
        let mut i = self.enemies(subs).len() as isize - 1;
        while let Some(enemy) = reverse_walk_at(self.enemies(subs), i) {
            let at = i as usize;
            i -= 1;
            if enemy.at(x, y) {
                self.terminal = true;
            }
            // Python keeps a reference to the element: after a removal below the later
            // updates still change it (harmlessly, since it is out of the list).
            let mut current = enemy;
            let mut in_list = true;
            if current.timer == 0 {
                current.timer = self.move_speed;
                current.step_x();
                self.enemies_mut(subs)[at] = current;
                if current.off_board() {
                    remove_first(self.enemies_mut(subs), current);
                    in_list = false;
                } else if current.at(x, y) {
                    self.terminal = true;
                } else if let Some(b) = self
                    .f_bullets
                    .iter()
                    .position(|b| b.x == current.x && b.y == current.y)
                {
                    let bullet = self.f_bullets[b];
                    remove_first(self.enemies_mut(subs), current);
                    remove_first(&mut self.f_bullets, bullet);
                    reward += 1.0;
                    in_list = false;
                }
            } else {
                current.timer -= 1;
                self.enemies_mut(subs)[at] = current;
            }
            if subs {
                if current.shot_timer == 0 {
                    current.shot_timer = ENEMY_SHOT_INTERVAL;
                    self.e_bullets.push(Bullet {
                        x: current.x,
                        y: current.y,
                        right: current.right,
                    });
                } else {
                    current.shot_timer -= 1;
                }
                if in_list {
                    self.subs[at] = current;
                }
            }
        }
        reward
    }

    fn enemies(&self, subs: bool) -> &[Mover] {
        if subs {
            &self.subs
        } else {
            &self.fish
        }
    }

    fn enemies_mut(&mut self, subs: bool) -> &mut Vec<Mover> {
        if subs {
            &mut self.subs
        } else {
            &mut self.fish
        }
    }

    fn update_enemy_bullets(&mut self) {
        let (x, y) = (self.sub_x, self.sub_y);
        let mut i = self.e_bullets.len() as isize - 1;
        while let Some(bullet) = reverse_walk_at(&self.e_bullets, i) {
            let at = i as usize;
            i -= 1;
            if bullet.x == x && bullet.y == y {
                self.terminal = true;
            }
            self.e_bullets[at].x += if bullet.right { 1 } else { -1 };
            let bullet = self.e_bullets[at];
            if !(0..SIZE as i32).contains(&bullet.x) {
                remove_first(&mut self.e_bullets, bullet);
            } else if bullet.x == x && bullet.y == y {
                self.terminal = true;
            }
        }
    }
}

impl Game for SeaquestGame {
    const NAME: &'static str = "Seaquest";
    const CHANNELS: usize = CHANNELS;
    const MINIMAL_ACTIONS: &'static [usize] = &[0, 1, 2, 3, 4, 5];

    fn blank() -> Self {
        Self {
            oxygen: 0,
            diver_count: 0,
            sub_x: 0,
            sub_y: 0,
            facing_right: false,
            f_bullets: Vec::new(),
            e_bullets: Vec::new(),
            fish: Vec::new(),
            subs: Vec::new(),
            divers: Vec::new(),
            spawn_speed: 0,
            spawn_timer: 0,
            diver_spawn_timer: 0,
            move_speed: 0,
            ramp_index: 0,
            shot_timer: 0,
            surfaced: true,
            ramping: true,
            terminal: false,
        }
    }

    fn reset(&mut self, _rng: &mut NumpyRandom) {
        self.oxygen = MAX_OXYGEN;
        self.diver_count = 0;
        self.sub_x = 5;
        self.sub_y = 0;
        self.facing_right = false;
        self.f_bullets.clear();
        self.e_bullets.clear();
        self.fish.clear();
        self.subs.clear();
        self.divers.clear();
        self.spawn_speed = INITIAL_SPAWN_SPEED;
        self.spawn_timer = self.spawn_speed;
        self.diver_spawn_timer = DIVER_SPAWN_SPEED;
        self.move_speed = INITIAL_MOVE_SPEED;
        self.ramp_index = 0;
        self.shot_timer = 0;
        self.surfaced = true;
        self.terminal = false;
    }

    /// The game's own step, after the sticky action is resolved: the reward.
    fn act(&mut self, action: usize, rng: &mut NumpyRandom) -> f64 {
        let mut reward = 0.0;
        if self.spawn_timer == 0 {
            self.spawn_enemy(rng);
            self.spawn_timer = self.spawn_speed;
        }
        if self.diver_spawn_timer == 0 {
            self.spawn_diver(rng);
            self.diver_spawn_timer = DIVER_SPAWN_SPEED;
        }
        match action {
            5 if self.shot_timer == 0 => {
                self.f_bullets.push(Bullet {
                    x: self.sub_x,
                    y: self.sub_y,
                    right: self.facing_right,
                });
                self.shot_timer = SHOT_COOL_DOWN;
            }
            1 => {
                self.sub_x = (self.sub_x - 1).max(0);
                self.facing_right = false;
            }
            3 => {
                self.sub_x = (self.sub_x + 1).min(SIZE as i32 - 1);
                self.facing_right = true;
            }
            2 => self.sub_y = (self.sub_y - 1).max(0),
            4 => self.sub_y = (self.sub_y + 1).min(SIZE as i32 - 2),
            _ => {}
        }
        reward += self.update_friendly_bullets();
        self.update_divers();
        reward += self.update_enemies(true);
        self.update_enemy_bullets();
        reward += self.update_enemies(false);
        if self.spawn_timer > 0 {
            self.spawn_timer -= 1;
        }
        if self.diver_spawn_timer > 0 {
            self.diver_spawn_timer -= 1;
        }
        if self.shot_timer > 0 {
            self.shot_timer -= 1;
        }
        if self.oxygen <= 0 {
            self.terminal = true;
        }
        if self.sub_y > 0 {
            self.oxygen -= 1;
            self.surfaced = false;
        } else if !self.surfaced {
            if self.diver_count == 0 {
                self.terminal = true;
            } else {
                reward += self.surface();
            }
        }
        reward
    }

    fn terminal(&self) -> bool {
        self.terminal
    }

    fn observation(&self) -> Vec<f32> {
        let mut obs = vec![0.0; CHANNELS * SIZE * SIZE];
        let mut set = |channel: usize, row: i32, column: i32| {
            obs[cell(
                channel,
                row as usize,
                column.rem_euclid(SIZE as i32) as usize,
            )] = 1.0;
        };
        set(SUB_FRONT, self.sub_y, self.sub_x);
        // numpy's negative index -1 is the last column (the sub at column 0 facing left).
        let back = if self.facing_right {
            self.sub_x - 1
        } else {
            self.sub_x + 1
        };
        if back < SIZE as i32 {
            set(SUB_BACK, self.sub_y, back);
        }
        for c in 0..(self.oxygen.max(0) * 10 / MAX_OXYGEN) {
            set(OXYGEN_GAUGE, SIZE as i32 - 1, c);
        }
        for c in (9 - self.diver_count)..9 {
            set(DIVER_GAUGE, SIZE as i32 - 1, c);
        }
        for b in &self.f_bullets {
            set(FRIENDLY_BULLET, b.y, b.x);
        }
        for b in &self.e_bullets {
            set(ENEMY_BULLET, b.y, b.x);
        }
        for (channel, movers) in [
            (ENEMY_FISH, &self.fish),
            (ENEMY_SUB, &self.subs),
            (DIVER, &self.divers),
        ] {
            for m in movers {
                set(channel, m.y, m.x);
                let back = if m.right { m.x - 1 } else { m.x + 1 };
                if (0..SIZE as i32).contains(&back) {
                    set(TRAIL, m.y, back);
                }
            }
        }
        obs
    }

    fn render(&self) -> String {
        let mut rows = vec![vec!['.'; SIZE]; SIZE];
        for (symbol, movers) in [('f', &self.fish), ('s', &self.subs), ('d', &self.divers)] {
            for m in movers {
                rows[m.y as usize][m.x as usize] = symbol;
            }
        }
        rows[self.sub_y as usize][self.sub_x as usize] = if self.facing_right { '>' } else { '<' };
        board_text(&rows)
    }
}
