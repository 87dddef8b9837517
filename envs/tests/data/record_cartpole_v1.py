#!/usr/bin/env python3
"""Records CartPole-v1 episodes from Gymnasium itself, as reference data for the Rust port
(envs/tests/cartpole_reference.rs replays them and compares every step).

    python3 -m venv /tmp/gym && /tmp/gym/bin/pip install gymnasium==1.4.0 numpy==2.4.6
    /tmp/gym/bin/python envs/tests/data/record_cartpole_v1.py > cartpole_v1_reference.json

Seeds 0-19 play pre-drawn random actions, numpy.random.default_rng(seed).integers(0, 2,
size=500), until the episode ends; seeds 100-104 play a balancing rule, action 1 when
3 * theta + theta_dot > 0 (read from the observation), which reaches the 500-step truncation.
Each episode keeps the seed, the internal float64 state after reset, the float32 observation,
the actions, and per step the observation, the state, the reward and the two end flags.
"""

import json
import platform
import sys

import gymnasium as gym
import numpy as np

MAX_STEPS = 500
N_ACTIONS = 2


def floats(values):
    return [float(v) for v in values]


def episode(env, seed, policy):
    obs, _ = env.reset(seed=seed)
    record = {
        "seed": seed,
        "policy": policy,
        "initial_state": floats(env.unwrapped.state),
        "initial_obs": floats(obs),
    }
    drawn = np.random.default_rng(seed).integers(0, N_ACTIONS, size=MAX_STEPS)
    actions, steps, total = [], [], 0.0
    for t in range(MAX_STEPS):
        if policy == "random":
            action = int(drawn[t])
        else:
            action = int(3.0 * obs[2] + obs[3] > 0)
        obs, reward, terminated, truncated, _ = env.step(action)
        actions.append(action)
        total += float(reward)
        steps.append(
            {
                "obs": floats(obs),
                "state": floats(env.unwrapped.state),
                "reward": float(reward),
                "terminated": bool(terminated),
                "truncated": bool(truncated),
            }
        )
        if terminated or truncated:
            break
    record.update(actions=actions, steps=steps, length=len(steps), **{"return": total})
    return record


def main():
    env = gym.make("CartPole-v1", max_episode_steps=MAX_STEPS)
    space = env.observation_space
    meta = {
        "env_id": "CartPole-v1",
        "gymnasium_version": gym.__version__,
        "numpy_version": np.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "max_episode_steps": MAX_STEPS,
        "n_actions": N_ACTIONS,
        "obs_dtype": str(space.dtype),
        "observation_space_low": floats(space.low),
        "observation_space_high": floats(space.high),
        "random_actions": "numpy.random.default_rng(seed).integers(0, n_actions, "
        "size=max_episode_steps)[:length]",
        "notes": "internal state float64 (x, x_dot, theta, theta_dot); obs = state cast to "
        "float32; euler integrator, tau=0.02, force_mag=10, reward 1.0 every step incl. the "
        "terminating one; heuristic: a = int(3*theta + theta_dot > 0)",
    }
    episodes = [episode(env, s, "random") for s in range(20)]
    episodes += [episode(env, s, "heuristic") for s in range(100, 105)]
    json.dump({"meta": meta, "episodes": episodes}, sys.stdout)


if __name__ == "__main__":
    main()
