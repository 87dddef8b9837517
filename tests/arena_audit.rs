//! `eval --opponent all`: the exhaustive audit of an agent against every opponent line, checked
//! against a separate brute-force walk (no memo, every path replayed) on an untrained agent,
//! which makes plenty of mistakes to count.

use std::collections::{HashMap, HashSet};

use candle_core::{DType, Device};
use cumind::agent::Agent;
use cumind::arena::audit::{audit_side, Audit};
use cumind::arena::search::exact_move_values;
use cumind::components::{self, EnvInfo};
use cumind::config::{Config, ConfigSources};
use cumind::envs::{Environment, TicTacToe};
use cumind::network::MuZeroNetwork;

fn untrained_agent(seed: u64) -> Agent {
    let config = Config::load(&ConfigSources {
        sets: vec![
            "environment.env_name=TicTacToe".into(),
            "mcts.num_simulations=4".into(),
        ],
        ..Default::default()
    })
    .unwrap();
    let info = EnvInfo::of(&config).unwrap();
    let net = MuZeroNetwork::new(
        components::network_spec(&config, &info),
        seed,
        &Device::Cpu,
        DType::F32,
    )
    .unwrap();
    Agent::from_network(net, config)
}

#[derive(Default)]
struct Brute {
    wins: u64,
    draws: u64,
    losses: u64,
    /// Boards (as rendered) where the agent's move was worse than the best.
    mistakes: HashSet<String>,
    positions: HashSet<String>,
}

/// Every game path against every opponent, replayed from scratch; returns the worst result.
fn brute(
    agent: &mut Agent,
    env: &dyn Environment,
    observation: &[f32],
    player: usize,
    memo: &mut HashMap<(Vec<u32>, usize), f32>,
    out: &mut Brute,
) -> f32 {
    let mover = env.to_play();
    let moves = if mover == player {
        let mask = env.legal_action_mask();
        let action = agent
            .select_actions_masked(&[observation], &[&mask], false)
            .unwrap()[0];
        let values = exact_move_values(env, memo);
        let best = values.iter().map(|m| m.1).fold(f32::MIN, f32::max);
        let mine = values.iter().find(|m| m.0 == action).unwrap().1;
        out.positions.insert(env.render());
        if mine < best {
            out.mistakes.insert(env.render());
        }
        vec![action]
    } else {
        env.legal_actions()
    };
    let mut worst = f32::MAX;
    for action in moves {
        let mut next = env.clone_box();
        let step = next.step(action).unwrap();
        let result = if step.terminated || step.truncated {
            let r = if mover == player {
                step.reward as f32
            } else {
                -step.reward as f32
            };
            match r {
                r if r > 0.0 => out.wins += 1,
                r if r < 0.0 => out.losses += 1,
                _ => out.draws += 1,
            }
            r
        } else {
            brute(agent, next.as_ref(), &step.observation, player, memo, out)
        };
        worst = worst.min(result);
    }
    worst
}

fn audit(agent: &mut Agent, player: usize) -> Audit {
    let mut env = TicTacToe::new();
    audit_side(agent, &mut env, player).unwrap()
}

#[test]
fn the_audit_agrees_with_a_brute_force_walk_of_every_game() {
    for (seed, player) in [(1, 0), (2, 1)] {
        let mut agent = untrained_agent(seed);
        let found = audit(&mut agent, player);

        let mut env = TicTacToe::new();
        let (observation, _) = env.reset(Some(0));
        let mut out = Brute::default();
        let worst = brute(
            &mut agent,
            &env,
            &observation,
            player,
            &mut HashMap::new(),
            &mut out,
        );
        assert_eq!(found.worst_result, worst, "player {player}");
        assert_eq!(
            (found.lines.wins, found.lines.draws, found.lines.losses),
            (out.wins, out.draws, out.losses),
            "player {player}"
        );
        assert_eq!(found.positions, out.positions.len(), "player {player}");
        let boards: HashSet<String> = found.mistakes.iter().map(|m| m.board.clone()).collect();
        assert_eq!(boards, out.mistakes, "player {player}");
        // An untrained agent makes mistakes, and the audit's bound holds: nobody does better
        // against every opponent than perfect play.
        assert!(!found.mistakes.is_empty());
        assert_eq!(found.exact_value, 0.0, "tic-tac-toe is a draw");
        assert!(found.worst_result <= found.exact_value);
    }
}

#[test]
fn each_mistake_replays_to_the_move_the_agent_makes_and_a_better_one_exists() {
    let mut agent = untrained_agent(3);
    let found = audit(&mut agent, 1);
    let mut memo = HashMap::new();
    for mistake in &found.mistakes {
        let mut env = TicTacToe::new();
        let (mut observation, _) = env.reset(Some(0));
        for &a in &mistake.line {
            observation = env.step(a).unwrap().observation;
        }
        assert_eq!(env.render(), mistake.board);
        assert_eq!(env.to_play(), 1, "a mistake is the agent's move");
        let mask = env.legal_action_mask();
        let action = agent
            .select_actions_masked(&[&observation], &[&mask], false)
            .unwrap()[0];
        assert_eq!(action, mistake.action);
        let values: HashMap<usize, f32> = exact_move_values(&env, &mut memo).into_iter().collect();
        assert_eq!(values[&mistake.action], mistake.value);
        assert!(mistake.value < mistake.best_value);
        for a in &mistake.best_actions {
            assert_eq!(values[a], mistake.best_value);
        }
    }
}
