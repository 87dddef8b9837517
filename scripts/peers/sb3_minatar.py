"""A peer baseline for the MinAtar games: stable-baselines3's DQN or PPO on one game.

Trains one algorithm (``--algo dqn|ppo``) on one game of the ``minatar`` package for ``--steps``
environment steps, evaluates the greedy policy every ``--eval-interval`` steps and writes the
learning curve as a CSV that ``cumind plot`` draws beside CuMind's runs:

    env_steps,wall_seconds,mean_return,std_return

One row per evaluation, the last one at the budget (also when the budget is not a multiple of
the interval). ``env_steps`` is the number of training environment steps taken so far (with
PPO's 8 environments it moves in steps of 8, so a row lands on the first multiple of 8 at or
past its target). ``wall_seconds`` is the monotonic clock since training started, evaluations
included. ``mean_return`` and ``std_return`` are the mean and the population standard
deviation of the undiscounted returns of ``--eval-episodes`` episodes. Each row is printed as it
is written.

Environments
    The package's Gymnasium registrations ``MinAtar/<Game>-v1`` (``minatar.gym.register_envs``):
    the game's minimal action set, sticky actions with the package's default probability 0.1
    and the difficulty ramp on, for training and evaluation alike, as in CuMind's MinAtar
    environments. No time limit (the package sets none, nor does CuMind); only evaluation
    episodes stop after ``--eval-max-steps`` steps, a guard against a greedy policy that keeps
    a game going forever.
    Observations are the package's (10, 10, C) boolean grids, given to stable-baselines3 as a
    float32 ``Box`` in [0, 1], channel-last; the feature extractor moves channels first.
    Seeds: the training environments get ``--seed`` (PPO's 8 get ``seed`` .. ``seed + 7``), the
    networks and the exploration draws are seeded with ``--seed`` too, and the single
    evaluation environment gets ``seed + 10000``, seeded once, so successive evaluations play
    fresh episodes.

Network (both algorithms)
    The network of the MinAtar paper's baselines (Young & Tian 2019, "MinAtar: An Atari-Inspired
    Testbed for Thorough and Reproducible Reinforcement Learning Experiments"): one 3x3
    convolution with 16 channels, stride 1, no padding, ReLU, flatten (16 x 8 x 8), a 128-unit
    linear layer, ReLU. stable-baselines3's default NatureCNN needs inputs of at least 36x36,
    hence this extractor. The heads are linear on the 128 features (``net_arch=[]``, what
    stable-baselines3 itself uses with its image extractor): DQN's Q-values; PPO's policy
    logits and value, sharing the extractor.

DQN (values of the MinAtar paper's DQN, as far as stable-baselines3 allows)
    replay buffer 100,000 transitions; batch 32; centered RMSProp with learning rate 2.5e-4,
    gradient momentum 0.95 (``momentum``), squared gradient momentum 0.95 (``alpha``), minimum
    squared gradient 0.01 (``eps``), as in the paper and in the PyTorch DQN example of the
    MinAtar project; target network copied every 1,000 environment steps;
    epsilon-greedy from 1.0 down to 0.1, linearly over the paper's first 100,000 steps or the
    first 10% of the budget, whichever is smaller (50,000 steps for a 500,000-step budget: the
    paper's 100,000 were 2% of its 5,000,000 frames, so a short run keeps a tenth of its budget
    for exploration rather than a fifth or more); learning starts after 5,000 steps (the
    paper's replay start size; stable-baselines3 acts uniformly at random until then and
    starts its epsilon schedule at step 0, where the paper starts it after those 5,000 steps);
    one gradient step per environment step (``train_freq=1``); gamma 0.99; Huber loss
    (stable-baselines3's DQN loss, as in the paper). The paper's agents act with all six
    actions; here, as in CuMind, the v1 environments' minimal action sets.
    Left at stable-baselines3's defaults: gradient-norm clipping at 10, hard target updates
    (``tau=1``), no double Q-learning (stable-baselines3's DQN has none, nor has the paper's).
    The replay buffer holds float32 observations: 100,000 x 2 x 10 x 10 x C x 4 bytes, about
    0.3 GB for Breakout (C = 4) and 0.8 GB for Seaquest (C = 10).

PPO (stable-baselines3's defaults except where noted)
    8 environments in a ``DummyVecEnv`` (noted), 128 steps each per rollout (noted; 1,024
    transitions), minibatch 256 (noted), 10 epochs, learning rate 3e-4, gamma 0.99, GAE lambda
    0.95, clip range 0.2, entropy coefficient 0, value coefficient 0.5, gradient-norm clipping
    at 0.5, advantage normalisation on. A run stops at the budget, mid-rollout if need be, so
    the last evaluation's policy has been trained on every complete rollout before it.

Evaluation
    The deterministic policy (DQN: greedy in Q, no epsilon; PPO: the most likely action) on
    the separate evaluation environment, ``--eval-episodes`` whole episodes one after another.
    Sticky actions stay on, as CuMind's MinAtar environments always apply them.

Runs on the CPU by default (``--device``); ``--threads`` sets ``torch.set_num_threads`` (default:
every core this process may use).

    python scripts/peers/sb3_minatar.py --algo dqn --game breakout --steps 500000 --seed 1 \\
        --out benchmarks/sb3-minatar/breakout-dqn-seed1.csv
"""

from __future__ import annotations

import argparse
import csv
import os
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

import minatar.gym
from stable_baselines3 import DQN, PPO
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from stable_baselines3.common.vec_env import DummyVecEnv

GAME_IDS: dict[str, str] = {
    "breakout": "MinAtar/Breakout-v1",
    "asterix": "MinAtar/Asterix-v1",
    "freeway": "MinAtar/Freeway-v1",
    "seaquest": "MinAtar/Seaquest-v1",
    "space_invaders": "MinAtar/SpaceInvaders-v1",
}
CSV_HEADER = ["env_steps", "wall_seconds", "mean_return", "std_return"]
EVAL_SEED_OFFSET = 10_000

# The MinAtar paper's DQN: epsilon reaches its final value after this many steps.
DQN_EXPLORATION_STEPS = 100_000
PPO_N_ENVS = 8


class FloatGrid(gym.ObservationWrapper):
    """The package's (10, 10, C) boolean grid as float32 in [0, 1], channel-last."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        shape = env.observation_space.shape
        assert shape is not None and len(shape) == 3, shape
        self.observation_space = gym.spaces.Box(0.0, 1.0, shape=shape, dtype=np.float32)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return observation.astype(np.float32)


class MinAtarCNN(BaseFeaturesExtractor):
    """The MinAtar paper's network body: conv 3x3, 16 channels, ReLU, linear 128, ReLU."""

    def __init__(self, observation_space: gym.spaces.Box, features_dim: int = 128) -> None:
        super().__init__(observation_space, features_dim)
        height, width, channels = observation_space.shape
        self.conv = nn.Sequential(nn.Conv2d(channels, 16, kernel_size=3, stride=1), nn.ReLU())
        flat = 16 * (height - 2) * (width - 2)
        self.linear = nn.Sequential(nn.Flatten(), nn.Linear(flat, features_dim), nn.ReLU())

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        # Channel-last (batch, 10, 10, C) to channel-first (batch, C, 10, 10).
        return self.linear(self.conv(observations.permute(0, 3, 1, 2)))


def make_env(game: str) -> gym.Env:
    return FloatGrid(gym.make(GAME_IDS[game]))


def evaluate(model: BaseAlgorithm, env: gym.Env, episodes: int, max_steps: int,
             first_seed: int | None) -> tuple[float, float]:
    """Mean and population standard deviation of the deterministic policy's returns."""
    returns = []
    for episode in range(episodes):
        # The evaluation environment is seeded at its first reset only.
        obs, _ = env.reset(seed=first_seed if episode == 0 else None)
        first_seed = None
        total, steps, done = 0.0, 0, False
        while not done and steps < max_steps:
            action, _ = model.predict(obs, deterministic=True)
            obs, reward, terminated, truncated, _ = env.step(int(action))
            total += float(reward)
            steps += 1
            done = terminated or truncated
        returns.append(total)
    return float(np.mean(returns)), float(np.std(returns))


class EvalCurve(BaseCallback):
    """Evaluates every `interval` training steps and at the budget, then stops training there."""

    def __init__(self, args: argparse.Namespace, eval_env: gym.Env, writer: Any,
                 out_file: Any, start: float) -> None:
        super().__init__()
        self.args = args
        self.eval_env = eval_env
        self.writer = writer
        self.out_file = out_file
        self.start = start
        self.next_eval = min(args.eval_interval, args.steps)
        self.eval_seed: int | None = args.seed + EVAL_SEED_OFFSET
        self.rows = 0

    def _on_step(self) -> bool:
        if self.num_timesteps < self.next_eval:
            return True
        self.record()
        if self.num_timesteps >= self.args.steps:
            return False  # the budget is spent: stop here, mid-rollout for PPO
        while self.next_eval <= self.num_timesteps:
            self.next_eval += self.args.eval_interval
        self.next_eval = min(self.next_eval, self.args.steps)
        return True

    def record(self) -> None:
        mean, std = evaluate(self.model, self.eval_env, self.args.eval_episodes,
                             self.args.eval_max_steps, self.eval_seed)
        self.eval_seed = None
        row = [self.num_timesteps, f"{time.monotonic() - self.start:.2f}", f"{mean:.4f}",
               f"{std:.4f}"]
        self.writer.writerow(row)
        self.out_file.flush()
        self.rows += 1
        print(",".join(str(v) for v in row), flush=True)


def build_model(args: argparse.Namespace) -> BaseAlgorithm:
    policy_kwargs: dict[str, Any] = dict(
        features_extractor_class=MinAtarCNN,
        features_extractor_kwargs=dict(features_dim=128),
        net_arch=[],
        normalize_images=False,
    )
    if args.algo == "dqn":
        env = make_vec_env(lambda: make_env(args.game), n_envs=1, seed=args.seed,
                           vec_env_cls=DummyVecEnv)
        # Epsilon falls over the paper's 100,000 steps or over the first 10% of the budget,
        # whichever is smaller (the 10% for budgets below 1,000,000 steps); exploration_fraction
        # is that span as a fraction of the budget.
        exploration_steps = min(DQN_EXPLORATION_STEPS, 0.1 * args.steps)
        policy_kwargs.update(
            optimizer_class=torch.optim.RMSprop,
            optimizer_kwargs=dict(alpha=0.95, eps=0.01, momentum=0.95, centered=True),
        )
        return DQN(
            "CnnPolicy",
            env,
            learning_rate=2.5e-4,
            buffer_size=100_000,
            learning_starts=5_000,
            batch_size=32,
            gamma=0.99,
            train_freq=1,
            gradient_steps=1,
            target_update_interval=1_000,
            exploration_fraction=exploration_steps / args.steps,
            exploration_initial_eps=1.0,
            exploration_final_eps=0.1,
            policy_kwargs=policy_kwargs,
            seed=args.seed,
            device=args.device,
            verbose=0,
        )
    env = make_vec_env(lambda: make_env(args.game), n_envs=PPO_N_ENVS, seed=args.seed,
                       vec_env_cls=DummyVecEnv)
    return PPO(
        "CnnPolicy",
        env,
        n_steps=128,
        batch_size=256,
        policy_kwargs=policy_kwargs,
        seed=args.seed,
        device=args.device,
        verbose=0,
    )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Train stable-baselines3's DQN or PPO on a MinAtar game and write the "
                    "evaluation curve as CSV (env_steps,wall_seconds,mean_return,std_return).")
    parser.add_argument("--algo", choices=["dqn", "ppo"], required=True,
                        help="the algorithm")
    parser.add_argument("--game", choices=sorted(GAME_IDS), required=True,
                        help="the MinAtar game (the package's MinAtar/<Game>-v1)")
    parser.add_argument("--steps", type=int, required=True,
                        help="training budget in environment steps")
    parser.add_argument("--seed", type=int, default=1,
                        help="seed of the training environments and of the agent; the "
                             f"evaluation environment gets seed + {EVAL_SEED_OFFSET}")
    parser.add_argument("--eval-interval", type=int, default=25_000,
                        help="environment steps between evaluations (one more at the budget)")
    parser.add_argument("--eval-episodes", type=int, default=10,
                        help="episodes per evaluation")
    parser.add_argument("--eval-max-steps", type=int, default=100_000,
                        help="an evaluation episode still running after this many steps is "
                             "cut there (a guard against endless greedy play)")
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)),
                        help="torch.set_num_threads (default: every core available)")
    parser.add_argument("--device", default="cpu",
                        help="torch device for the networks (default: cpu)")
    parser.add_argument("--out", type=Path, required=True,
                        help="the CSV file to write")
    args = parser.parse_args()
    for name in ("steps", "eval_interval", "eval_episodes", "eval_max_steps", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    minatar.gym.register_envs()

    args.out.parent.mkdir(parents=True, exist_ok=True)
    eval_env = make_env(args.game)
    eval_env.action_space.seed(args.seed + EVAL_SEED_OFFSET)
    with args.out.open("w", newline="") as out_file:
        writer = csv.writer(out_file)
        writer.writerow(CSV_HEADER)
        out_file.flush()
        print(",".join(CSV_HEADER), flush=True)
        start = time.monotonic()
        model = build_model(args)
        callback = EvalCurve(args, eval_env, writer, out_file, start)
        # PPO rounds its own stop up to a whole rollout; the callback stops it at the budget.
        model.learn(total_timesteps=args.steps, callback=callback)
        if callback.num_timesteps < args.steps or callback.rows == 0:
            raise SystemExit(f"training stopped at {callback.num_timesteps} of {args.steps} steps")
    eval_env.close()
    model.get_env().close()


if __name__ == "__main__":
    main()
