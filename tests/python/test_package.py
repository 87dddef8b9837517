"""Checks of the `cumind` Python package, run by `.ci/run` in a fresh virtual environment
after `pip install .` (plain asserts; `python tests/python/test_package.py`)."""

import os
import signal
import subprocess
import sys
import tempfile

import gymnasium as gym
import numpy as np
from gymnasium import spaces

import cumind


class Corridor(gym.Env):
    """Walk right along a corridor of 6 cells: reward 1 at the end, -0.01 per step."""

    action_space = spaces.Discrete(2)
    observation_space = spaces.Discrete(6)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.cell = 0
        return self.cell, {}

    def step(self, action):
        self.cell = max(0, self.cell + (1 if action == 1 else -1))
        done = self.cell == 5
        return self.cell, (1.0 if done else -0.01), done, False, {}


class Broken(Corridor):
    def step(self, action):
        raise RuntimeError("the corridor collapsed")


class LateBroken(Corridor):
    """Breaks after 400 steps of each copy."""

    steps = 0

    def step(self, action):
        self.steps += 1
        if self.steps > 400:
            raise RuntimeError("the corridor collapsed late")
        return super().step(action)


class WithDict(Corridor):
    observation_space = spaces.Dict({"cell": spaces.Discrete(6)})


def small(steps):
    return {
        "training": {"max_env_steps": steps, "eval_interval": steps, "eval_episodes": 4,
                     "stop_return": 0.9, "checkpoint_interval": 200},
        "memory": {"min_memory_size": 100},
        "environment": {"num_envs": 4},
        "mcts": {"num_simulations": 8},
    }


def expect_error(kind, call, *texts):
    try:
        call()
    except kind as err:
        for text in texts:
            assert text in str(err), f"{text!r} not in {err}"
        return
    raise AssertionError(f"no {kind.__name__}")


def connect_four_observation(moves):
    """The environment's observation after `moves` (columns, the first player first)."""
    board, heights = np.zeros((6, 7), int), [0] * 7
    for ply, column in enumerate(moves):
        board[5 - heights[column], column] = 1 + ply % 2
        heights[column] += 1
    mover = 1 + len(moves) % 2
    observation = np.zeros((3, 6, 7), np.float32)
    observation[0] = board == mover
    observation[1] = (board != mover) & (board != 0)
    observation[2] = 1.0 if mover == 1 else 0.0
    return observation


def connect_four_opponents():
    move = cumind.connect_four_move
    # The first player has three on the bottom row and plays the fourth; the second blocks it.
    win = connect_four_observation([0, 0, 1, 1, 2, 2])
    block = connect_four_observation([0, 6, 1, 6, 2])
    for seed in range(5):
        for depth in (1, 2, 4):
            assert move(win, f"alphabeta:{depth}", seed=seed) == 3
            assert move(block, f"alphabeta:{depth}", seed=seed) == 3
    # A flat list and nested lists work as well as an array; no seed draws fresh entropy.
    assert move(win.reshape(-1).tolist(), "alphabeta:3") == 3
    assert move(win.tolist(), "alphabeta:3", seed=1) == 3
    # The solver, once few enough cells are empty (18 stones: 24 empty), takes the win.
    late = connect_four_observation([0] * 6 + [1] * 6 + [2] * 6)
    assert move(late, "perfect", seed=0) == 3
    # Random plays only legal columns (column 3 is full).
    full_column = connect_four_observation([3] * 6)
    assert {move(full_column, "random", seed=s) for s in range(60)} == {0, 1, 2, 4, 5, 6}
    # What cannot be answered is refused with the reason.
    expect_error(ValueError, lambda: move(block, "perfect"), "at most 36", "has 37")
    expect_error(ValueError, lambda: move(np.zeros(125), "random"), "126", "125")
    expect_error(ValueError, lambda: move(np.zeros((3, 6, 6)).tolist(), "random"), "126", "108")
    full = np.zeros((3, 6, 7), np.float32)
    full[0] = np.indices((6, 7)).sum(0) % 2
    full[1] = 1 - full[0]
    expect_error(ValueError, lambda: move(full, "alphabeta:2"), "full")
    floating = np.zeros((3, 6, 7), np.float32)
    floating[0, 0, 4] = 1.0
    expect_error(ValueError, lambda: move(floating, "random"), "column 4")
    expect_error(ValueError, lambda: move(win, "checkpoint:runs/x"), "cumind.Agent.load")
    expect_error(ValueError, lambda: move(win, "all"), "audit")
    expect_error(ValueError, lambda: move(win, "alphabeta:0"), "unknown opponent")
    expect_error(ValueError, lambda: move(win, "minimax"), "unknown opponent")


def main():
    os.chdir(tempfile.mkdtemp())
    print(cumind.version())

    connect_four_opponents()

    # An environment object: trained, loaded, acted with.
    run = cumind.train(small(3000), env=Corridor(), seed=3, progress=False)
    agent = cumind.Agent.load(run)
    assert agent.num_actions == 2 and agent.observation_shape == [6], agent
    one_hot = np.eye(6, dtype=np.float32)
    action = agent.select_action(one_hot[2])
    assert action in (0, 1), action
    assert agent.select_action(one_hot[2], legal_actions=[0]) == 0
    batch = agent.select_actions(one_hot)
    assert batch.shape == (6,) and batch.dtype == np.int64, batch
    masked = agent.select_actions(one_hot, legal_mask=np.tile([True, False], (6, 1)))
    assert (masked == 0).all(), masked
    # The trained agent walks the corridor to its end well within the limit.
    env, steps = Corridor(), 0
    obs, _ = env.reset()
    done = False
    while not done and steps < 50:
        obs, _, done, _, _ = env.step(agent.select_action(one_hot[obs]))
        steps += 1
    assert done, "the agent did not reach the end of the corridor in 50 steps"
    # Another process loads it without the environment object.
    code = "import cumind; a = cumind.Agent.load(%r); print(a.select_action([0, 0, 1, 0, 0, 0]))"
    out = subprocess.run([sys.executable, "-c", code % run], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() in ("0", "1"), out
    expect_error(ValueError, lambda: agent.select_action(np.zeros(5)), "[6]")
    expect_error(ValueError, lambda: agent.select_action(one_hot[0], [7]), "out of range")

    # A Gymnasium id with keyword arguments, from a dict configuration.
    config = small(600)
    config["environment"]["env_kwargs"] = {"max_episode_steps": 50}
    run = cumind.train(config, env="CartPole-v0", progress=False)
    assert "gymnasium-CartPole-v0" in run, run

    # What cannot work is refused with the reason.
    expect_error(ValueError, lambda: cumind.train(small(100), env=WithDict()), "Dict")
    expect_error(ValueError, lambda: cumind.train(small(100), env="Pendulum-v1"),
                 "action space is Box")
    expect_error(ValueError, lambda: cumind.train({"training": {"batch_sise": 3}}), "batch_sise")
    expect_error(RuntimeError, lambda: cumind.train(small(300), env=Broken(), progress=False),
                 "the corridor collapsed", "Traceback")
    # An exception after checkpoints were written: raised with its traceback, and the last
    # checkpoint loads.
    expect_error(RuntimeError, lambda: cumind.train(small(5000), env=LateBroken(), progress=False),
                 "the corridor collapsed late")
    runs = [d for d in os.listdir("checkpoints") if d.startswith("gymnasium-LateBroken")]
    assert len(runs) == 1, runs
    agent = cumind.Agent.load(os.path.join("checkpoints", runs[0]))
    assert agent.select_action(one_hot[4]) in (0, 1)
    # Ctrl-C stops the run after its current step with a checkpoint, and train returns.
    code = (
        "import signal, cumind\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "print('run:', cumind.train({'training': {'max_env_steps': 10**8, 'stop_return': 0}},"
        " env='gymnasium:CartPole-v1', progress=False))\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("eval @"):
            break
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=300)
    text = "".join(lines) + rest
    assert proc.returncode == 0, text
    assert "stopped: interrupted" in text, text
    run = [l for l in text.splitlines() if l.startswith("run: ")][0][len("run: "):]
    assert any(d.startswith("step-") for d in os.listdir(run)), os.listdir(run)
    print("python package checks passed")


if __name__ == "__main__":
    main()
