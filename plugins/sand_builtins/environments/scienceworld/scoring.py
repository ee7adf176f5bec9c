"""ScienceWorld's 0-100 scores turned into SAND's episode reward, as ETO computes it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable


@dataclass
class ScoreBook:
    """Reward bookkeeping for one episode, from ScienceWorld's 0-100 scores.

    ``add(score)`` after every step. ``reward`` is the maximum score seen / 100
    clipped to [0, 1]; a negative score fails the episode: ``done``, and the
    reward drops to 0 unless ``keep_max_on_failure``. ``success`` is a score of
    100 (the task completed).
    """

    keep_max_on_failure: bool = False
    best: float = 0.0
    failed: bool = False
    success: bool = False

    def add(self, score: float, completed: bool = False) -> None:
        if self.failed or self.success:
            return
        score = float(score)
        if score < 0:
            self.failed = True
            return
        self.best = max(self.best, score)
        if score >= 100:
            self.success = True

    @property
    def done(self) -> bool:
        return self.failed or self.success

    @property
    def reward(self) -> float:
        if self.failed and not self.keep_max_on_failure:
            return 0.0
        return min(1.0, max(0.0, self.best / 100.0))


def episode_reward(scores: Iterable[float], keep_max_on_failure: bool = False) -> tuple[float, bool, bool]:
    """``(reward, done, success)`` after a recorded score sequence (0-100, one per step)."""
    book = ScoreBook(keep_max_on_failure)
    for s in scores:
        book.add(s)
    return book.reward, book.done, book.success
