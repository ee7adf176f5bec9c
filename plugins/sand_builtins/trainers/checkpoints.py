"""Which of a training stage's Hugging Face checkpoints a resumed stage continues from."""

from __future__ import annotations

import os
import re
from pathlib import Path

_CKPT_RE = re.compile(r"^checkpoint-(\d+)$")


def latest_checkpoint(ckpt_dir: str | os.PathLike) -> str | None:
    """The newest complete ``checkpoint-N`` (one with ``trainer_state.json``, written last), or None."""
    root = Path(ckpt_dir)
    if not root.is_dir():
        return None
    found = sorted(
        (int(m.group(1)), p) for p in root.iterdir() if p.is_dir() and (m := _CKPT_RE.match(p.name))
    )
    for _, path in reversed(found):
        if (path / "trainer_state.json").exists():
            return str(path)
    return None
