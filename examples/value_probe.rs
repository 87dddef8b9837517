//! What a one-player checkpoint's networks know about the value of its own play, measured
//! against the real environment, without a search.
//!
//! The program plays greedy episodes with the policy head alone (the most likely action) and
//! asks, at every position:
//!
//! * **value**: the value head's prediction against the discounted return the episode then
//!   collected (their means, correlation and mean absolute difference);
//! * **one-step Q** (every `EVERY`-th position): for each action, the model's
//!   `r(s, a) + discount * v(g(s, a))` (the dynamics' reward and the value of its next
//!   latent: what a search's first level sees) against a Monte Carlo estimate from the real
//!   game: a copy of the environment steps that action, then the policy head for `HORIZON`
//!   steps, and the value head closes the sum if the episode has not ended. Where the actions'
//!   Monte Carlo values differ by more than `SPREAD`, it counts how often the model's best
//!   action and the policy's are a best one (within `SPREAD` of the Monte Carlo best), beside
//!   the count a uniformly random pick would expect. The same count for the one-step Q on
//!   the real next observation (`r + discount * v(h(o'))`, the environment in place of the
//!   dynamics network) tells a dynamics network that misses what an action does from a value
//!   head that cannot tell the positions apart. It says little where an action shows only
//!   steps later (Freeway's chicken moves at most every third step, so most next observations
//!   are the same whatever the action; ties go to the lowest action).
//!
//! A model whose one-step Q picks the Monte Carlo best where the action matters gives the
//! search something to improve on; one that does not makes a search follow noise, and
//! docs/results.md uses it on MinAtar Breakout to show which.
//!
//! ```sh
//! cargo run --release --example value_probe -- CHECKPOINT_DIR [EPISODES] [HORIZON] [SPREAD] [EVERY]
//! ```
//!
//! The environment is the checkpoint's; the episodes are seeded 1000, 1001, ...

use candle_core::Tensor;
use cumind::agent::Agent;
use cumind::op_count::read_f32;

/// The first index of the largest value.
fn argmax(values: &[f32]) -> usize {
    (0..values.len()).fold(0, |best, i| if values[i] > values[best] { i } else { best })
}

/// The networks' view of one observation.
struct View {
    value: f32,
    logits: Vec<f32>,
    /// One-step Q per action: predicted reward plus the discounted value of the next latent.
    q: Vec<f32>,
}

/// The latent of one observation, with its policy and value logits.
fn predict(agent: &Agent, observation: &[f32]) -> (Tensor, Tensor, Tensor) {
    let net = agent.network();
    let latent = net
        .represent(&net.observation_tensor(observation).expect("an observation"))
        .expect("representation");
    let (policy_logits, value_logits) = net.predict(&latent).expect("prediction");
    (latent, policy_logits, value_logits)
}

/// The policy head's most likely action.
fn policy_action(agent: &Agent, observation: &[f32]) -> usize {
    let (_, policy_logits, _) = predict(agent, observation);
    argmax(&read_f32(&policy_logits).expect("a read"))
}

fn view(agent: &Agent, observation: &[f32], discount: f32) -> View {
    let net = agent.network();
    let spec = net.spec();
    let a = spec.num_actions;
    let (latent, policy_logits, value_logits) = predict(agent, observation);
    let value = spec
        .value_support
        .logits_to_scalars(&read_f32(&value_logits).expect("a read"))[0];
    let mut dims = vec![a];
    dims.extend(std::iter::repeat_n(1, latent.rank() - 1));
    let latents = latent.repeat(dims).expect("one latent per action");
    let actions = net
        .action_tensor(&(0..a).collect::<Vec<_>>())
        .expect("actions");
    let (next, reward_logits) = net.dynamics(&latents, &actions).expect("dynamics");
    let rewards = spec
        .reward_support
        .logits_to_scalars(&read_f32(&reward_logits).expect("a read"));
    let (_, next_value_logits) = net.predict(&next).expect("prediction");
    let next_values = spec
        .value_support
        .logits_to_scalars(&read_f32(&next_value_logits).expect("a read"));
    View {
        value,
        logits: read_f32(&policy_logits).expect("a read"),
        q: (0..a)
            .map(|i| rewards[i] + discount * next_values[i])
            .collect(),
    }
}

/// Pearson's correlation of two equally long series.
fn correlation(x: &[f64], y: &[f64]) -> f64 {
    let n = x.len() as f64;
    let (mx, my) = (x.iter().sum::<f64>() / n, y.iter().sum::<f64>() / n);
    let cov: f64 = x.iter().zip(y).map(|(a, b)| (a - mx) * (b - my)).sum();
    let sx = x.iter().map(|a| (a - mx).powi(2)).sum::<f64>().sqrt();
    let sy = y.iter().map(|b| (b - my).powi(2)).sum::<f64>().sqrt();
    cov / (sx * sy)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(dir) = args.get(1) else {
        eprintln!("usage: value_probe CHECKPOINT_DIR [EPISODES] [HORIZON] [SPREAD] [EVERY]");
        std::process::exit(2);
    };
    let number = |i: usize, default: f64| -> f64 {
        args.get(i).map_or(default, |s| {
            s.parse()
                .unwrap_or_else(|_| panic!("argument {i} is not a number: {s}"))
        })
    };
    let (episodes, horizon) = (number(2, 10.0) as u64, number(3, 60.0) as usize);
    let (spread, every) = (number(4, 0.5) as f32, number(5, 3.0) as usize);
    let agent = Agent::load(dir).expect("a checkpoint");
    let env_spec = agent.config().environment.spec();
    let discount = agent.config().self_play.discount as f32;

    let (mut values, mut returns) = (Vec::new(), Vec::new());
    let (mut probed, mut matter, mut q_best, mut policy_best) = (0, 0, 0, 0);
    let mut real_q_best = 0;
    let mut chance = 0.0;
    for episode in 0..episodes {
        let mut env = env_spec.make().expect("the checkpoint's environment");
        let (mut observation, _) = env.reset(Some(1000 + episode));
        let mut rewards = Vec::new();
        for t in 0.. {
            let here = view(&agent, &observation, discount);
            values.push(here.value as f64);
            if t % every == 0 {
                probed += 1;
                // One-step Q on the real next observation: the value head's view of where
                // the action really leads, with the dynamics network left out.
                let mut real_q = vec![0.0f32; here.q.len()];
                let monte_carlo: Vec<f32> = (0..here.q.len())
                    .map(|a| {
                        let mut copy = env.clone_box();
                        let mut step = copy.step(a).expect("an action of the space");
                        real_q[a] = step.reward as f32
                            + if step.terminated {
                                0.0
                            } else {
                                let next = agent.network().values(&step.observation);
                                discount * next.expect("a value")[0]
                            };
                        let (mut sum, mut weight) = (step.reward as f32, discount);
                        for _ in 0..horizon {
                            if step.terminated || step.truncated {
                                return sum;
                            }
                            step = copy
                                .step(policy_action(&agent, &step.observation))
                                .expect("an action of the space");
                            sum += weight * step.reward as f32;
                            weight *= discount;
                        }
                        if step.terminated || step.truncated {
                            sum
                        } else {
                            let tail = agent.network().values(&step.observation).expect("a value");
                            sum + weight * tail[0]
                        }
                    })
                    .collect();
                let lo = monte_carlo.iter().copied().fold(f32::INFINITY, f32::min);
                let hi = monte_carlo
                    .iter()
                    .copied()
                    .fold(f32::NEG_INFINITY, f32::max);
                if hi - lo > spread {
                    // A best action: within SPREAD of the Monte Carlo best (ties are common:
                    // two moves that both keep the ball in play).
                    let good = |a: usize| monte_carlo[a] >= hi - spread;
                    matter += 1;
                    q_best += usize::from(good(argmax(&here.q)));
                    real_q_best += usize::from(good(argmax(&real_q)));
                    policy_best += usize::from(good(argmax(&here.logits)));
                    chance += (0..monte_carlo.len()).filter(|&a| good(a)).count() as f64
                        / monte_carlo.len() as f64;
                }
            }
            let step = env
                .step(argmax(&here.logits))
                .expect("an action of the space");
            rewards.push(step.reward);
            if step.terminated || step.truncated {
                break;
            }
            observation = step.observation;
        }
        println!(
            "episode {episode}: {} steps, return {}",
            rewards.len(),
            rewards.iter().sum::<f64>()
        );
        let mut tail = 0.0;
        let mut discounted: Vec<f64> = rewards
            .iter()
            .rev()
            .map(|r| {
                tail = r + discount as f64 * tail;
                tail
            })
            .collect();
        discounted.reverse();
        returns.extend(discounted);
    }
    let n = values.len() as f64;
    let mean_abs = values
        .iter()
        .zip(&returns)
        .map(|(v, g)| (v - g).abs())
        .sum::<f64>()
        / n;
    println!(
        "value: {n} positions, mean prediction {:.2}, mean discounted return {:.2}, correlation {:.3}, mean absolute difference {mean_abs:.2}",
        values.iter().sum::<f64>() / n,
        returns.iter().sum::<f64>() / n,
        correlation(&values, &returns)
    );
    println!(
        "one-step Q: {probed} positions probed, the action matters (Monte Carlo spread > {spread}) in {matter}; a best action (within {spread} of the Monte Carlo best) is the model's pick in {q_best}, the value head's on the real next observations' in {real_q_best}, the policy's in {policy_best}, a uniform pick's in {chance:.1} on average"
    );
}
