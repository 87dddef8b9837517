"""Type stubs of the native module (python/src/lib.rs)."""

from os import PathLike
from typing import Any, Optional, Sequence, Union

import numpy as np
import numpy.typing as npt

class Agent:
    """A trained agent: its networks and search, loaded from a checkpoint."""

    @staticmethod
    def load(path: Union[str, PathLike[str]], device: str = "cpu") -> Agent:
        """Load the latest checkpoint of a run directory (or a ``step-*`` directory)."""
    def select_action(
        self, observation: npt.ArrayLike, legal_actions: Optional[Sequence[int]] = None
    ) -> int:
        """One greedy action, from a search; only among ``legal_actions`` if given."""
    def select_actions(
        self, observations: npt.ArrayLike, legal_mask: Optional[npt.ArrayLike] = None
    ) -> npt.NDArray[np.int64]:
        """Greedy actions for a batch ``[B, *observation_shape]``, searched together;
        ``legal_mask`` ``[B, num_actions]`` (true where legal) if given."""
    @property
    def num_actions(self) -> int: ...
    @property
    def observation_shape(self) -> list[int]: ...
    def config_json(self) -> str:
        """The configuration the agent was trained with, as JSON."""

def train(
    config: Union[None, str, dict[str, Any]] = None,
    env: Any = None,
    *,
    sets: Optional[list[str]] = None,
    seed: Optional[int] = None,
    progress: bool = True,
) -> str: ...
def connect_four_move(
    observation: npt.ArrayLike, opponent: str, seed: Optional[int] = None
) -> int:
    """The column that a Connect Four opponent of ``cumind eval --opponent`` plays.

    observation: the environment's observation, 126 values flat or ``[3][6][7]``: the mover's
    stones, the opponent's stones, the to-play plane; row 0 at the top.
    opponent: ``"random"``, ``"alphabeta:DEPTH"`` (the bitboard alpha-beta) or ``"perfect"``
    (the exact solver, for positions with at most 36 empty cells).
    seed: seeds the choice among equally good moves; fresh entropy when None.

    Raises ValueError for an observation of another size, a full board or stones above an
    empty cell, an opponent that is not one of these, and ``perfect`` too early to solve.
    """
def version() -> str:
    """The version and the features of this build."""
