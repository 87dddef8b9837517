//! Matches between a trained agent and an opponent in a two-player game, with a win/draw/loss
//! count per side: how `cumind eval --opponent ...` measures strength.
//!
//! Opponents ([`OpponentSpec`], written as on the command line):
//! - `random`: a uniformly random legal move;
//! - `perfect`: an exact solver that picks uniformly among the optimal moves, so the games
//!   vary: exhaustive negamax ([`search::exact_move_values`]) for small games such as
//!   tic-tac-toe; on Connect Four an exact bitboard solver ([`connect_four::exact_move_values`]:
//!   null-window searches, threat-ordered moves, a table kept across moves), for positions
//!   with at most [`connect_four::PERFECT_MAX_EMPTY`] empty cells (an error before that);
//! - `alphabeta:DEPTH`: depth-limited alpha-beta, uniformly among equally good moves: on
//!   Connect Four the bitboard searcher of [`connect_four`] (transposition table, iterative
//!   deepening, centre-first ordering, a threat-counting heuristic); on other games the
//!   generic search on clones with a line-counting heuristic ([`search::line_heuristic`]);
//! - `checkpoint:DIR`: another trained agent, greedy, so two runs can be compared;
//! - `all`: not a player but every opponent at once ([`audit`]): each legal reply at every
//!   opponent turn, with the agent's moves checked against exact values; small games only.
//!
//! The agent plays greedily (no noise, its search's chosen move). With
//! [`MatchConfig::check_moves`] its moves are also checked against exact values where a
//! solver answers ([`move_check`]).

pub mod audit;
pub mod connect_four;
pub mod move_check;
pub mod search;

use std::collections::HashMap;
use std::path::PathBuf;

use candle_core::Device;
use cumind_envs::{EnvError, Environment};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use thiserror::Error;

use crate::agent::{Agent, AgentError};
use move_check::{exact_values, MoveCheck, SideCheck};

/// Errors of a match.
#[derive(Debug, Error)]
pub enum ArenaError {
    #[error("unknown opponent {0:?}: use random, perfect, alphabeta:DEPTH (DEPTH >= 1), checkpoint:DIR or all")]
    UnknownOpponent(String),
    #[error("{0} has one player: matches are for two-player games (use a plain `cumind eval`)")]
    OnePlayer(String),
    #[error("the opponent checkpoint plays {found}, the agent {expected}")]
    DifferentGame { expected: String, found: String },
    #[error("the exhaustive audit (`all`) stopped after {0} positions: the game is too large to enumerate; play matches instead")]
    TooLarge(usize),
    #[error("`all` is every opponent at once, not a player: it is an audit (`cumind eval --opponent all`)")]
    NotAPlayer,
    #[error("agent")]
    Agent(#[from] AgentError),
    #[error("environment")]
    Env(#[from] EnvError),
    #[error("`perfect` on Connect Four solves positions with at most {limit} empty cells; this one has {empty}: play alphabeta:DEPTH instead (depth 8 or more is strong)")]
    TooEarlyToSolve { empty: usize, limit: usize },
}

/// An opponent as written on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpponentSpec {
    Random,
    Perfect,
    AlphaBeta(usize),
    Checkpoint(PathBuf),
    /// Every opponent at once: the exhaustive audit.
    All,
}

impl std::str::FromStr for OpponentSpec {
    type Err = ArenaError;

    fn from_str(text: &str) -> Result<Self, ArenaError> {
        let bad = || ArenaError::UnknownOpponent(text.to_string());
        Ok(match text.trim() {
            "random" => OpponentSpec::Random,
            "perfect" => OpponentSpec::Perfect,
            "all" => OpponentSpec::All,
            other => match other.split_once(':') {
                Some(("alphabeta", depth)) => {
                    let depth: usize = depth.parse().map_err(|_| bad())?;
                    if depth == 0 {
                        return Err(bad());
                    }
                    OpponentSpec::AlphaBeta(depth)
                }
                Some(("checkpoint", dir)) if !dir.is_empty() => {
                    OpponentSpec::Checkpoint(PathBuf::from(dir))
                }
                _ => return Err(bad()),
            },
        })
    }
}

impl std::fmt::Display for OpponentSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpponentSpec::Random => write!(f, "random"),
            OpponentSpec::Perfect => write!(f, "perfect"),
            OpponentSpec::AlphaBeta(d) => write!(f, "alphabeta:{d}"),
            OpponentSpec::Checkpoint(dir) => write!(f, "checkpoint:{}", dir.display()),
            OpponentSpec::All => write!(f, "all"),
        }
    }
}

/// The bitboard of `env` when it is Connect Four on its 6 x 7 board.
fn connect_four_board(env: &dyn Environment, observation: &[f32]) -> Option<connect_four::Board> {
    if env.name() != "ConnectFour" {
        return None;
    }
    connect_four::Board::from_observation(observation, &env.observation_space().shape())
}

/// A ready opponent.
pub enum Opponent {
    Random,
    Perfect(HashMap<(Vec<u32>, usize), f32>),
    AlphaBeta(usize),
    Agent(Box<Agent>),
}

impl Opponent {
    /// Build the opponent `spec` (a checkpoint is loaded onto `device`).
    pub fn new(spec: &OpponentSpec, device: &Device) -> Result<Self, ArenaError> {
        Ok(match spec {
            OpponentSpec::Random => Opponent::Random,
            OpponentSpec::Perfect => Opponent::Perfect(HashMap::new()),
            OpponentSpec::AlphaBeta(depth) => Opponent::AlphaBeta(*depth),
            OpponentSpec::Checkpoint(dir) => {
                Opponent::Agent(Box::new(Agent::load_on(dir, device)?))
            }
            OpponentSpec::All => return Err(ArenaError::NotAPlayer),
        })
    }

    /// The opponent's move in `env`, whose current observation is `observation`.
    pub fn choose(
        &mut self,
        env: &dyn Environment,
        observation: &[f32],
        rng: &mut StdRng,
    ) -> Result<usize, ArenaError> {
        Ok(match self {
            Opponent::Random => random_move(env, rng),
            Opponent::Perfect(memo) => match connect_four_board(env, observation) {
                Some(board) => connect_four::perfect_move(&board, rng)?,
                None => search::pick_best(&search::exact_move_values(env, memo), 0.0, rng),
            },
            Opponent::AlphaBeta(depth) => match connect_four_board(env, observation) {
                Some(board) => connect_four::alphabeta_move(&board, *depth, rng),
                None => search::pick_best(&search::alphabeta_move_values(env, *depth), 1e-6, rng),
            },
            Opponent::Agent(agent) => {
                agent.select_actions_in_games(&[env], &[observation], false)?[0]
            }
        })
    }
}

fn random_move(env: &dyn Environment, rng: &mut StdRng) -> usize {
    let legal = env.legal_actions();
    legal[rng.random_range(0..legal.len())]
}

/// Which side the agent takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    First,
    Second,
}

/// Results of the games on one side, from the agent's point of view.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Record {
    pub wins: usize,
    pub draws: usize,
    pub losses: usize,
    /// The agent's moves checked against exact values (with [`MatchConfig::check_moves`]).
    pub moves: Option<MoveCheck>,
}

/// How a match is played.
#[derive(Debug, Clone)]
pub struct MatchConfig {
    /// Games per side.
    pub games: usize,
    pub sides: Vec<Side>,
    /// Plies played at random (by both) before the agent and the opponent take over, to vary
    /// the games between deterministic players (0: none).
    pub random_opening: usize,
    pub seed: u64,
    /// Check the agent's moves against exact values where a solver answers
    /// ([`move_check`]): tic-tac-toe, and Connect Four's last 24 empty cells.
    pub check_moves: bool,
}

/// Play `config.games` games per side of `agent` against `opponent`; one record per side, in
/// the order of `config.sides`.
pub fn play_match(
    agent: &mut Agent,
    opponent: &mut Opponent,
    config: &MatchConfig,
) -> Result<Vec<(Side, Record)>, ArenaError> {
    let name = agent.config().environment.env_name.clone();
    let mut env = agent.config().environment.spec().make()?;
    if env.num_players() < 2 {
        return Err(ArenaError::OnePlayer(name));
    }
    if let Opponent::Agent(other) = opponent {
        let found = &other.config().environment.env_name;
        if *found != name {
            return Err(ArenaError::DifferentGame {
                expected: name,
                found: found.clone(),
            });
        }
    }
    let mut rng = StdRng::seed_from_u64(config.seed);
    let mut out = Vec::new();
    for &side in &config.sides {
        let agent_player = match side {
            Side::First => 0,
            Side::Second => 1,
        };
        let mut record = Record::default();
        let mut checks = SideCheck::default();
        let mut memo = HashMap::new();
        for game in 0..config.games {
            let (mut observation, _) = env.reset(Some(config.seed.wrapping_add(game as u64)));
            let mut ply = 0;
            loop {
                let mover = env.to_play();
                let action = if ply < config.random_opening {
                    random_move(env.as_ref(), &mut rng)
                } else if mover == agent_player {
                    let action =
                        agent.select_actions_in_games(&[env.as_ref()], &[&observation], false)?[0];
                    if config.check_moves {
                        if let Some((best, played)) =
                            exact_values(env.as_ref(), &observation, action, &mut memo)
                        {
                            checks.agent_move(best, played);
                        }
                    }
                    action
                } else {
                    opponent.choose(env.as_ref(), &observation, &mut rng)?
                };
                let step = env.step(action)?;
                ply += 1;
                observation = step.observation;
                if step.terminated || step.truncated {
                    // The reward belongs to the player who just moved (+1 for a win).
                    match (step.reward > 0.0, mover == agent_player) {
                        (false, _) => record.draws += 1,
                        (true, true) => record.wins += 1,
                        (true, false) => record.losses += 1,
                    }
                    checks.game_over();
                    break;
                }
            }
        }
        record.moves = config.check_moves.then_some(checks.check);
        out.push((side, record));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opponent_specs_parse_and_print_back() {
        for text in [
            "random",
            "perfect",
            "alphabeta:4",
            "checkpoint:runs/x",
            "all",
        ] {
            let spec: OpponentSpec = text.parse().unwrap();
            assert_eq!(spec.to_string(), text);
        }
        for bad in [
            "",
            "minimax",
            "alphabeta:",
            "alphabeta:0",
            "alphabeta:x",
            "checkpoint:",
        ] {
            let err = bad.parse::<OpponentSpec>().unwrap_err().to_string();
            assert!(err.contains("alphabeta:DEPTH"), "{bad}: {err}");
        }
    }

    #[test]
    fn perfect_never_loses_to_random_and_always_draws_itself() {
        let mut rng = StdRng::seed_from_u64(3);
        let mut perfect = Opponent::Perfect(HashMap::new());
        let mut other = Opponent::Perfect(HashMap::new());
        for game in 0..40 {
            let mut env = cumind_envs::make("TicTacToe").unwrap();
            let (mut obs, _) = env.reset(Some(game));
            let perfect_player = (game % 2) as usize;
            loop {
                let mover = env.to_play();
                let action = if mover == perfect_player {
                    perfect.choose(env.as_ref(), &obs, &mut rng).unwrap()
                } else if game < 20 {
                    random_move(env.as_ref(), &mut rng)
                } else {
                    other.choose(env.as_ref(), &obs, &mut rng).unwrap()
                };
                let step = env.step(action).unwrap();
                obs = step.observation;
                if step.terminated || step.truncated {
                    if step.reward > 0.0 {
                        assert_eq!(mover, perfect_player, "perfect lost game {game}");
                    }
                    if game >= 20 {
                        assert_eq!(step.reward, 0.0, "perfect against perfect must draw");
                    }
                    break;
                }
            }
        }
    }
}
