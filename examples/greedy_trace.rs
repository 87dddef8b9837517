//! One greedy episode of a one-player checkpoint, step by step: how the actions and rewards
//! are spread over the episode, and the board (the environment's text rendering) where the
//! agent goes a long time without a reward, to see where a greedy policy gets stuck.
//!
//! ```sh
//! cargo run --release --example greedy_trace -- CHECKPOINT_DIR [SEED] [WINDOW] [BOARDS]
//! ```
//!
//! Prints, per window of `WINDOW` steps (default 100), the reward collected and how often each
//! action was chosen; then up to `BOARDS` (default 6) consecutive boards from the longest run
//! of steps without a reward.

use cumind::agent::Agent;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dir = args
        .get(1)
        .expect("usage: greedy_trace CHECKPOINT_DIR [SEED] [WINDOW] [BOARDS]");
    let arg = |i: usize, default: u64| {
        args.get(i)
            .map_or(default, |s| s.parse().expect("a number"))
    };
    let (seed, window, boards) = (arg(2, 1000), arg(3, 100) as usize, arg(4, 6) as usize);
    let mut agent = Agent::load(dir).expect("a checkpoint");
    let env_spec = agent.config().environment.spec();
    let mut env = env_spec.make().expect("the checkpoint's environment");
    let (mut observation, _) = env.reset(Some(seed));
    let actions = agent.num_actions();
    let mut counts = vec![0usize; actions];
    let (mut window_start, mut window_reward) = (0usize, 0.0);
    let mut total = 0.0;
    let (mut since_reward, mut longest, mut longest_end) = (0usize, 0usize, 0usize);
    let mut renders: Vec<(usize, usize, String)> = Vec::new();
    let mut step = 0usize;
    loop {
        let action = agent.select_action(&observation, false).expect("an action");
        counts[action] += 1;
        renders.push((step, action, env.render()));
        let result = env.step(action).expect("a step");
        step += 1;
        window_reward += result.reward;
        total += result.reward;
        if result.reward != 0.0 {
            since_reward = 0;
        } else {
            since_reward += 1;
            if since_reward > longest {
                longest = since_reward;
                longest_end = step;
            }
        }
        if step.is_multiple_of(window) || result.terminated || result.truncated {
            println!(
                "steps {window_start:>5}-{step:>5}: reward {window_reward:>5} actions {counts:?}"
            );
            counts.iter_mut().for_each(|c| *c = 0);
            (window_start, window_reward) = (step, 0.0);
        }
        if result.terminated || result.truncated {
            break;
        }
        observation = result.observation;
    }
    println!("return {total} in {step} steps; longest run without a reward: {longest} steps, ending at step {longest_end}");
    let start = longest_end.saturating_sub(longest / 2);
    for (s, a, board) in renders.iter().skip(start).take(boards) {
        println!("step {s}, action {a}:\n{board}\n");
    }
}
