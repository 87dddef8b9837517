"""CuMind from Python: train MuZero agents on Gymnasium environments, and act with them.

    import cumind
    run = cumind.train("agents/cartpole.json", env="CartPole-v1")   # or env=gymnasium.make(...)
    agent = cumind.Agent.load(run)
    action = agent.select_action(observation)

``cumind.connect_four_move(observation, "alphabeta:4")`` gives the move of one of the
Connect Four opponents of ``cumind eval --opponent``, for programs that play against them.

The training runs in Rust (the same run as the ``cumind train`` command: progress bar,
evaluations, checkpoints, ``curves.png``); a Gymnasium environment is stepped in this
interpreter. See docs/python.md.
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Optional, Sequence, Union

from . import _cumind
from ._cumind import Agent, connect_four_move, version

__all__ = ["Agent", "connect_four_move", "train", "version"]


def train(
    config: Union[None, str, os.PathLike, Mapping[str, Any]] = None,
    env: Any = None,
    *,
    sets: Optional[Sequence[str]] = None,
    seed: Optional[int] = None,
    progress: bool = True,
) -> str:
    """Train an agent and return its run's checkpoint directory.

    config: a configuration as a dict (the sections of ``configuration.json``, e.g.
        ``{"training": {"training_steps": 5000}}``), or the path of a JSON file such as a
        preset in ``agents/``; layered over the embedded defaults. None: the defaults.
    env: the environment, overriding ``environment.env_name``:
        - a built-in name (``"CartPole-v1"``, ``"ConnectFour"``, ...: the Rust environment);
        - a Gymnasium id (``"Acrobot-v1"`` or ``"gymnasium:Acrobot-v1"``), made with
          ``gymnasium.make`` (keyword arguments go in ``environment.env_kwargs``);
        - a Gymnasium environment object: the run steps ``copy.deepcopy`` copies of it.
        The action space must be Discrete, the observation space a Box or Discrete.
    sets: overrides as on the command line, e.g. ``["training.batch_size=64"]``.
    seed: the run's seed (``other.seed``).
    progress: show the progress bar on stderr.

    Ctrl-C stops the run after its current step and saves a checkpoint, then returns; a
    second Ctrl-C stops waiting. An exception inside the environment stops the run with its
    traceback; the last checkpoint stays intact.
    """
    if config is not None and not isinstance(config, Mapping):
        config = os.fspath(config)
    if isinstance(config, Mapping):
        config = dict(config)
    return _cumind.train(
        config, env, sets=list(sets) if sets is not None else None, seed=seed, progress=progress
    )
