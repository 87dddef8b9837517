//! The Gymnasium bridge's cost per environment step, against the built-in CartPole-v1 and
//! against Python stepping the same environment itself.
//!
//! ```sh
//! . .venv/bin/activate   # a virtual environment with gymnasium
//! cargo run --release --features python --example gymnasium_bridge_bench
//! ```
//!
//! Four loops of the same random actions (resetting at each episode's end), each timed over
//! `STEPS` steps, best of `ROUNDS`:
//! 1. the built-in `CartPole-v1` (Rust);
//! 2. `gymnasium:CartPole-v1` through the bridge (an embedded interpreter, one call per step);
//! 3. Python's own loop over `env.step` (what a Python program pays anyway);
//! 4. Python stepping the environment in a worker process over a pipe (the other design of a
//!    bridge: environments in `multiprocessing` workers, one round trip per step).

use std::time::Instant;

use cumind::envs::gymnasium::pyo3::prelude::*;
use cumind::envs::{make, Environment};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const STEPS: usize = 20_000;
const ROUNDS: usize = 5;

fn rust_loop(env: &mut dyn Environment) -> f64 {
    let mut rng = StdRng::seed_from_u64(1);
    env.reset(Some(0));
    let start = Instant::now();
    for _ in 0..STEPS {
        let step = env.step(rng.random_range(0..2)).expect("a legal step");
        if step.terminated || step.truncated {
            env.reset(None);
        }
    }
    start.elapsed().as_secs_f64() / STEPS as f64
}

const PYTHON_LOOPS: &std::ffi::CStr = cr#"
import multiprocessing as mp
import random
import time

import gymnasium as gym


def own_loop(steps):
    env = gym.make("CartPole-v1")
    env.reset(seed=0)
    rng = random.Random(1)
    actions = [rng.randrange(2) for _ in range(steps)]
    start = time.perf_counter()
    for action in actions:
        _, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            env.reset()
    return (time.perf_counter() - start) / steps


def _worker(conn):
    env = gym.make("CartPole-v1")
    env.reset(seed=0)
    while True:
        action = conn.recv()
        if action is None:
            return
        obs, reward, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            obs, info = env.reset()
        conn.send((obs, reward, terminated, truncated, info))


def worker_loop(steps):
    ctx = mp.get_context("fork")
    here, there = ctx.Pipe()
    proc = ctx.Process(target=_worker, args=(there,), daemon=True)
    proc.start()
    rng = random.Random(1)
    actions = [rng.randrange(2) for _ in range(steps)]
    start = time.perf_counter()
    for action in actions:
        here.send(action)
        here.recv()
    took = (time.perf_counter() - start) / steps
    here.send(None)
    proc.join()
    return took
"#;

fn best(mut f: impl FnMut() -> f64) -> f64 {
    (0..ROUNDS).map(|_| f()).fold(f64::INFINITY, f64::min)
}

fn main() -> anyhow::Result<()> {
    let mut built_in = make("CartPole-v1")?;
    let mut bridged = make("gymnasium:CartPole-v1")?;
    let rust = best(|| rust_loop(built_in.as_mut()));
    let bridge = best(|| rust_loop(bridged.as_mut()));
    let (own, worker) = Python::attach(|py| -> PyResult<(f64, f64)> {
        let loops = PyModule::from_code(py, PYTHON_LOOPS, c"bench_loops.py", c"bench_loops")?;
        let own = best(|| {
            loops
                .getattr("own_loop")
                .and_then(|f| f.call1((STEPS,)))
                .and_then(|t| t.extract::<f64>())
                .expect("the Python loop runs")
        });
        let worker = best(|| {
            loops
                .getattr("worker_loop")
                .and_then(|f| f.call1((STEPS,)))
                .and_then(|t| t.extract::<f64>())
                .expect("the worker loop runs")
        });
        Ok((own, worker))
    })?;
    let us = |s: f64| s * 1e6;
    println!("CartPole-v1, {STEPS} random steps, best of {ROUNDS} rounds (microseconds per step):");
    println!("  built-in (Rust)                         {:8.3}", us(rust));
    println!(
        "  gymnasium:CartPole-v1 through the bridge {:8.3}",
        us(bridge)
    );
    println!("  Python's own loop over env.step         {:8.3}", us(own));
    println!(
        "  a worker process over a pipe            {:8.3}",
        us(worker)
    );
    println!(
        "bridge overhead over Python's own loop: {:.3} us per step ({:.2}x); a worker process: {:.3} us ({:.2}x)",
        us(bridge - own),
        bridge / own,
        us(worker - own),
        worker / own
    );
    Ok(())
}
