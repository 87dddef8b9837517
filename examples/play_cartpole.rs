//! Load a trained CartPole agent and play episodes with `Agent::select_action`, and say how
//! each episode ended: the time limit, the pole falling past 12 degrees, or the cart leaving
//! the track (|x| > 2.4), with the last observation.
//!
//! ```sh
//! cargo run --release -- train                     # writes checkpoints/<run-name>/
//! cargo run --release --example play_cartpole -- checkpoints/<run-name> 5
//! ```

use cumind::agent::Agent;
use cumind::envs::{make, Environment};

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let checkpoint = args
        .next()
        .ok_or_else(|| anyhow::anyhow!("usage: play_cartpole CHECKPOINT_DIR [EPISODES]"))?;
    let episodes: u64 = args.next().map(|s| s.parse()).transpose()?.unwrap_or(3);

    let mut agent = Agent::load(&checkpoint)?;
    let mut env: Box<dyn Environment> = make(&agent.config().environment.env_name)?;
    for episode in 0..episodes {
        let (mut observation, _) = env.reset(Some(episode));
        let mut total = 0.0;
        loop {
            let action = agent.select_action(&observation, false)?;
            let step = env.step(action)?;
            total += step.reward;
            observation = step.observation;
            if step.terminated || step.truncated {
                break;
            }
        }
        // CartPole's observation: cart position, cart velocity, pole angle, pole velocity.
        let (x, angle) = (observation[0], observation[2]);
        let ending = if x.abs() > 2.4 {
            "the cart left the track"
        } else if angle.abs() > 12f32.to_radians() {
            "the pole fell"
        } else {
            "the time limit"
        };
        println!(
            "episode {episode}: return {total}, ended by {ending} (x {x:.2}, angle {angle:.3} rad)"
        );
    }
    Ok(())
}
