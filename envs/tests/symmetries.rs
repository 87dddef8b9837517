//! A declared symmetry must commute with the rules: playing the transformed moves from the
//! start gives the transformed observations, the same rewards and the same ends.
//!
//! This plays from the reset position, so it covers the games whose start is its own mirror
//! image (the boards). CartPole's random start is not: its mirror is checked from mirrored
//! states in `envs/src/cartpole.rs`.

use cumind_envs::{make, names, Environment};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

#[test]
fn every_declared_symmetry_commutes_with_the_rules() {
    let mut checked = 0;
    for &name in names().iter().filter(|&&n| n != "CartPole-v1") {
        let symmetries = make(name).unwrap().symmetries();
        for (s, symmetry) in symmetries.iter().enumerate() {
            let mut rng = StdRng::seed_from_u64(s as u64);
            for game in 0..20 {
                let mut plain: Box<dyn Environment> = make(name).unwrap();
                let mut mirrored: Box<dyn Environment> = make(name).unwrap();
                let (a, _) = plain.reset(Some(game));
                let (b, _) = mirrored.reset(Some(game));
                assert_eq!(symmetry.apply_to_observation(&a), b, "{name} #{s} start");
                loop {
                    let legal = plain.legal_actions();
                    let action = legal[rng.random_range(0..legal.len())];
                    let mut expected_mask = vec![false; symmetry.actions.len()];
                    for (a, &ok) in plain.legal_action_mask().iter().enumerate() {
                        expected_mask[symmetry.actions[a]] = ok;
                    }
                    assert_eq!(mirrored.legal_action_mask(), expected_mask, "{name} #{s}");
                    let x = plain.step(action).unwrap();
                    let y = mirrored.step(symmetry.actions[action]).unwrap();
                    assert_eq!(symmetry.apply_to_observation(&x.observation), y.observation);
                    assert_eq!(
                        (x.reward, x.terminated, x.truncated),
                        (y.reward, y.terminated, y.truncated)
                    );
                    if x.terminated || x.truncated {
                        break;
                    }
                }
                checked += 1;
            }
        }
    }
    // TicTacToe declares 7 symmetries, ConnectFour 1.
    assert_eq!(checked, 8 * 20);
}
