"""Record seeded trajectories of the MinAtar games (the `minatar` package, 1.0.15) with random
actions, as reference data for CuMind's own implementations.

    python3 envs/tests/data/record_minatar.py [OUT_DIR]   # default: envs/tests/data/minatar

For each game and seed: `Environment(game, sticky_action_prob=0.1, difficulty_ramping=True)`
seeded with `seed(seed)`, then episodes of random actions (drawn from Python's
`random.Random(seed + 1000)`, a stream of its own: uniform over all 6, except in Freeway, where
"up" comes 8 times in 13 so that the chicken crosses) until `EPISODES` episodes have ended or
`MAX_STEPS` steps were taken, `reset()` after each end. Each record holds the
requested action, the reward, the terminal flag and the observation after the step; the
observation is stored as the indices of its set cells in channel-major order (channel, row,
column: the layout of CuMind's board planes, where MinAtar's own state is row, column,
channel). Writes one JSON file per game.
"""

import json
import random
import sys
from pathlib import Path

import numpy as np
from minatar import Environment

GAMES = ["breakout", "asterix", "freeway", "seaquest", "space_invaders"]
SEEDS = [1, 7]
EPISODES = 20
MAX_STEPS = 3000


def planes(state):
    """Indices of the set cells, channel-major (C, H, W)."""
    chw = np.transpose(state, (2, 0, 1))
    return [int(i) for i in np.flatnonzero(chw)]


def record(game, seed):
    env = Environment(game, sticky_action_prob=0.1, difficulty_ramping=True)
    env.seed(seed)
    env.reset()
    actions = random.Random(seed + 1000)
    # Freeway rewards only a crossing, which uniform actions almost never make.
    weights = [1, 1, 8, 1, 1, 1] if game == "freeway" else [1] * 6
    episodes = []
    current = {"initial": planes(env.state()), "steps": []}
    steps = 0
    while len(episodes) < EPISODES and steps < MAX_STEPS:
        action = actions.choices(range(6), weights=weights)[0]
        reward, terminal = env.act(action)
        current["steps"].append([action, float(reward), bool(terminal), planes(env.state())])
        steps += 1
        if terminal:
            episodes.append(current)
            env.reset()
            current = {"initial": planes(env.state()), "steps": []}
    if current["steps"]:
        episodes.append(current)
    shape = env.state_shape()
    return {
        "seed": seed,
        "channels": shape[2],
        "rows": shape[0],
        "columns": shape[1],
        "episodes": episodes,
    }


def main():
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "envs/tests/data/minatar")
    out.mkdir(parents=True, exist_ok=True)
    for game in GAMES:
        runs = [record(game, seed) for seed in SEEDS]
        path = out / f"{game}.json"
        path.write_text(json.dumps({"game": game, "package": "minatar 1.0.15", "runs": runs}))
        lengths = [len(e["steps"]) for r in runs for e in r["episodes"]]
        print(f"{game}: episodes of {lengths} steps -> {path} ({path.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
