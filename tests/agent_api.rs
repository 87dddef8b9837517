//! The library API: `Agent` on an in-memory network and on a checkpoint; bad input is an
//! error that says what was expected.

use candle_core::{DType, Device};
use cumind::agent::Agent;
use cumind::components::{self, EnvInfo};
use cumind::config::{Config, ConfigSources};
use cumind::network::MuZeroNetwork;

fn agent(env: &str) -> Agent {
    agent_with(env, &[])
}

/// An agent on a fresh network for `env`, 8 simulations, with `extra` `section.key=value` sets.
fn agent_with(env: &str, extra: &[&str]) -> Agent {
    let mut sets = vec![
        format!("environment.env_name={env}"),
        "mcts.num_simulations=8".into(),
    ];
    sets.extend(extra.iter().map(|s| s.to_string()));
    let config = Config::load(&ConfigSources {
        sets,
        ..Default::default()
    })
    .unwrap();
    let info = EnvInfo::of(&config).unwrap();
    let net = MuZeroNetwork::new(
        components::network_spec(&config, &info),
        1,
        &Device::Cpu,
        DType::F32,
    )
    .unwrap();
    Agent::from_network(net, config)
}

#[test]
fn selects_valid_actions_single_and_batched() {
    let mut agent = agent("CartPole-v1");
    let a = agent.select_action(&[0.0, 0.1, -0.02, 0.3], false).unwrap();
    assert!(a < 2);
    let obs = [
        [0.0f32, 0.1, -0.02, 0.3],
        [0.5, -0.1, 0.02, -0.3],
        [0.0, 0.0, 0.0, 0.0],
    ];
    let refs: Vec<&[f32]> = obs.iter().map(|o| o.as_slice()).collect();
    let actions = agent.select_actions(&refs, true).unwrap();
    assert_eq!(actions.len(), 3);
    assert!(actions.iter().all(|&a| a < 2));
    // Greedy selection is deterministic.
    let again = agent.select_action(&[0.0, 0.1, -0.02, 0.3], false).unwrap();
    assert_eq!(a, again);
}

#[test]
fn symmetric_search_applies_to_greedy_play_and_to_training_play_as_configured() {
    // CartPole has one symmetry, its mirror image.
    for (mode, greedy, training) in [("off", 0, 0), ("evaluation", 1, 0), ("always", 1, 1)] {
        let mut agent = agent_with("CartPole-v1", &[&format!("mcts.symmetric_search={mode}")]);
        assert_eq!(agent.search_config().symmetries.len(), greedy, "{mode}");
        assert_eq!(
            agent.training_search_config().symmetries.len(),
            training,
            "{mode}"
        );
        assert!(agent.select_action(&[0.0, 0.1, -0.02, 0.3], true).unwrap() < 2);
        assert!(agent.select_action(&[0.0, 0.1, -0.02, 0.3], false).unwrap() < 2);
    }
}

#[test]
fn masks_are_respected_for_games() {
    let mut agent = agent("TicTacToe");
    let obs = vec![0.0f32; 27];
    for legal_cell in 0..9 {
        let mut mask = [false; 9];
        mask[legal_cell] = true;
        let a = agent
            .select_actions_masked(&[&obs], &[&mask], true)
            .unwrap()[0];
        assert_eq!(a, legal_cell);
    }
}

#[test]
fn wrong_shapes_and_missing_checkpoints_are_clear_errors() {
    let mut agent = agent("CartPole-v1");
    let err = agent
        .select_action(&[0.0, 1.0, 2.0], false)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("3 values") && err.contains("expected 4"),
        "{err}"
    );
    let obs = [0.0f32; 4];
    let err = agent
        .select_actions_masked(&[&obs], &[&[true]], false)
        .unwrap_err()
        .to_string();
    assert!(err.contains("expected 2"), "{err}");

    let dir = tempfile::tempdir().unwrap();
    let err = Agent::load(dir.path()).err().unwrap().to_string();
    assert!(err.contains("no checkpoint"), "{err}");
}

/// An agent whose search steps the real game takes the games themselves: with an untrained
/// network it still takes Connect Four's win in one and makes the only block, with the
/// network's evaluations pooled over the mirror or not; the observation-only form refuses it
/// with an error that names the form to call.
#[test]
fn an_exact_rules_agent_plays_from_the_games_and_refuses_bare_observations() {
    use cumind::testing::games::after_moves;
    use cumind_envs::{ConnectFour, Environment};
    let position = |moves: &[usize]| after_moves(ConnectFour::new(), moves);
    let (win, win_obs) = position(&[0, 0, 1, 1, 2, 6]);
    let (block, block_obs) = position(&[0, 0, 1, 1, 2]);
    let games: [&dyn Environment; 2] = [&win, &block];
    for symmetric in ["evaluation", "off"] {
        let mut agent = agent_with(
            "ConnectFour",
            &[
                "mcts.model=exact",
                "mcts.num_simulations=200",
                "mcts.search_policy=puct",
                &format!("mcts.symmetric_search={symmetric}"),
            ],
        );
        let chosen = agent
            .select_actions_in_games(&games, &[&win_obs, &block_obs], false)
            .unwrap();
        assert_eq!(chosen, vec![3, 3], "{symmetric}");
    }
    let mut agent = agent_with(
        "ConnectFour",
        &["mcts.model=exact", "mcts.search_policy=puct"],
    );
    let mask = win.legal_action_mask();
    let err = agent
        .select_actions_masked(&[&win_obs], &[&mask], false)
        .unwrap_err()
        .to_string();
    assert!(err.contains("select_actions_in_games"), "{err}");
    let err = agent
        .select_actions_in_games(&games, &[&win_obs], false)
        .unwrap_err()
        .to_string();
    assert!(err.contains("2 games for 1 observations"), "{err}");
}

/// A checkpoint of a Gymnasium environment that this process cannot make (an object the
/// training program registered, or any `gymnasium:` name in a build without Python) loads
/// and acts: the stored network holds what the agent observes.
#[test]
fn a_checkpoint_of_a_gymnasium_object_loads_where_the_environment_cannot_be_made() {
    let mut config = Config::default_config();
    let spec = components::network_spec(&config, &EnvInfo::of(&config).unwrap());
    config.environment.env_name = "gymnasium:NotMakeableHere-v0".into();
    let net = MuZeroNetwork::new(spec.clone(), 1, &Device::Cpu, DType::F32).unwrap();
    let tensors = net.params().to_tensors().unwrap();
    let dir = tempfile::tempdir().unwrap();
    cumind::checkpoint::save(
        dir.path(),
        &cumind::checkpoint::CheckpointData {
            config: &config,
            network: &spec,
            counters: Default::default(),
            model: tensors.clone(),
            target: tensors,
            optimizer: Default::default(),
            optimizer_step: 0,
            replay: None,
            replay_shards: &[],
        },
    )
    .unwrap();
    let mut agent = Agent::load(dir.path()).unwrap();
    assert_eq!(agent.observation_shape(), &[4]);
    assert_eq!(agent.num_actions(), 2);
    assert!(agent.select_action(&[0.0, 0.1, 0.0, -0.1], false).unwrap() < 2);
    // Training needs the environment: a run on that configuration says which one it lacks.
    let err = Config::load(&ConfigSources {
        text: Some(("a test".into(), config.to_json())),
        ..Default::default()
    })
    .unwrap_err()
    .to_string();
    assert!(err.contains("NotMakeableHere"), "{err}");
}
