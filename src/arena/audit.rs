//! The agent against every opponent at once, for games small enough to solve exactly
//! (tic-tac-toe): at each opponent turn every legal reply is tried, at each agent turn the
//! agent's own (greedy, deterministic) move is played and compared with the exact values of all
//! its moves. What comes out is a proof, not a sample: the agent's worst result against any
//! opponent, the number of distinct games it can be drawn into with their outcomes, and every
//! position where its move gives away part of the exact value (a mistake).
//!
//! Positions are memoised (transpositions are searched once), so a tic-tac-toe audit asks the
//! agent for a few hundred moves.

use std::collections::HashMap;

use cumind_envs::Environment;

use super::search::exact_move_values;
use super::ArenaError;
use crate::agent::Agent;

/// Positions (agent turns) beyond which the audit stops: the game is too large to enumerate.
pub const MAX_AUDIT_POSITIONS: usize = 200_000;

/// A position where the agent's move is worse than the best one, by exact values.
#[derive(Debug, Clone, PartialEq)]
pub struct Mistake {
    /// The moves from the start that first reached the position.
    pub line: Vec<usize>,
    /// The board, as the environment renders it.
    pub board: String,
    /// The agent's move and its exact value (for the agent: +1 win, 0 draw, -1 loss).
    pub action: usize,
    pub value: f32,
    /// The best moves' exact value and the moves that reach it.
    pub best_value: f32,
    pub best_actions: Vec<usize>,
}

/// Distinct games (move sequences) ending in each result, from the agent's point of view.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Lines {
    pub wins: u64,
    pub draws: u64,
    pub losses: u64,
}

impl Lines {
    fn add(&mut self, other: Lines) {
        self.wins += other.wins;
        self.draws += other.draws;
        self.losses += other.losses;
    }

    fn of_result(result: f32) -> Lines {
        let mut lines = Lines::default();
        if result > 0.0 {
            lines.wins = 1;
        } else if result < 0.0 {
            lines.losses = 1;
        } else {
            lines.draws = 1;
        }
        lines
    }
}

/// What an audit of one side found.
#[derive(Debug, Clone, Default)]
pub struct Audit {
    /// The agent's result against the strongest opponent (+1 win, 0 draw, -1 loss): the
    /// minimum over all opponent replies of the game its fixed play leads to.
    pub worst_result: f32,
    /// The exact value of the start for the agent's side (what perfect play guarantees).
    pub exact_value: f32,
    /// Distinct positions where the agent moved.
    pub positions: usize,
    /// All distinct games against every opponent line.
    pub lines: Lines,
    /// Positions where the agent's move was worse than the best, in the order found.
    pub mistakes: Vec<Mistake>,
}

type Key = (Vec<u32>, usize);

struct Walk<'a> {
    agent: &'a mut Agent,
    agent_player: usize,
    exact: HashMap<Key, f32>,
    /// Position -> (worst result for the agent, lines from here).
    seen: HashMap<Key, (f32, Lines)>,
    audit: Audit,
}

/// Audit `agent` playing `agent_player` (0: first, 1: second) in a fresh `env`.
pub fn audit_side(
    agent: &mut Agent,
    env: &mut dyn Environment,
    agent_player: usize,
) -> Result<Audit, ArenaError> {
    let (observation, _) = env.reset(Some(0));
    let mut walk = Walk {
        agent,
        agent_player,
        exact: HashMap::new(),
        seen: HashMap::new(),
        audit: Audit::default(),
    };
    let start_values = exact_move_values(env, &mut walk.exact);
    let best = start_values
        .iter()
        .map(|&(_, v)| v)
        .fold(f32::NEG_INFINITY, f32::max);
    walk.audit.exact_value = if env.to_play() == agent_player {
        best
    } else {
        -best
    };
    let mut line = Vec::new();
    let (worst, lines) = walk.visit(env, &observation, &mut line)?;
    walk.audit.worst_result = worst;
    walk.audit.lines = lines;
    Ok(walk.audit)
}

impl Walk<'_> {
    /// The worst result for the agent from this position, and the lines below it.
    fn visit(
        &mut self,
        env: &dyn Environment,
        observation: &[f32],
        line: &mut Vec<usize>,
    ) -> Result<(f32, Lines), ArenaError> {
        let key: Key = (
            observation.iter().map(|x| x.to_bits()).collect(),
            env.to_play(),
        );
        if let Some(&found) = self.seen.get(&key) {
            return Ok(found);
        }
        let mover = env.to_play();
        let moves = if mover == self.agent_player {
            let action = self
                .agent
                .select_actions_in_games(&[env], &[observation], false)?[0];
            self.audit.positions += 1;
            if self.audit.positions > MAX_AUDIT_POSITIONS {
                return Err(ArenaError::TooLarge(MAX_AUDIT_POSITIONS));
            }
            self.check_move(env, action, line);
            vec![action]
        } else {
            env.legal_actions()
        };
        let mut worst = f32::INFINITY;
        let mut lines = Lines::default();
        for action in moves {
            let mut next = env.clone_box();
            let step = next.step(action)?;
            line.push(action);
            let (result, below) = if step.terminated || step.truncated {
                // The reward belongs to the player who just moved.
                let result = if mover == self.agent_player {
                    step.reward as f32
                } else {
                    -(step.reward as f32)
                };
                (result, Lines::of_result(result))
            } else {
                self.visit(next.as_ref(), &step.observation, line)?
            };
            line.pop();
            worst = worst.min(result);
            lines.add(below);
        }
        self.seen.insert(key, (worst, lines));
        Ok((worst, lines))
    }

    fn check_move(&mut self, env: &dyn Environment, action: usize, line: &[usize]) {
        let values = exact_move_values(env, &mut self.exact);
        let best_value = values
            .iter()
            .map(|&(_, v)| v)
            .fold(f32::NEG_INFINITY, f32::max);
        let value = values
            .iter()
            .find(|&&(a, _)| a == action)
            .map_or(f32::NEG_INFINITY, |&(_, v)| v);
        if value < best_value {
            self.audit.mistakes.push(Mistake {
                line: line.to_vec(),
                board: env.render(),
                action,
                value,
                best_value,
                best_actions: values
                    .iter()
                    .filter(|&&(_, v)| v == best_value)
                    .map(|&(a, _)| a)
                    .collect(),
            });
        }
    }
}
