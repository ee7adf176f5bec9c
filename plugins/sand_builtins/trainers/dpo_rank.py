"""One rank of a multi-process DPO stage: ``python -m sand_builtins.trainers.dpo_rank REQUEST``.

:mod:`.dpo_launch` starts every rank with this entry point under ``accelerate launch``; each rebuilds the
``trl_dpo`` trainer from the request file and trains in its own process. Apart from :mod:`.dpo_launch` so the
trainer module can use the launcher without the two importing each other.
"""

from __future__ import annotations

import sys
from pathlib import Path

from sand_builtins.trainers.dpo_launch import read_request
from sand_builtins.trainers.trl_dpo import DpoTrainer, LaunchParams
from sand_framework.config.typecheck import build


def main(argv: list[str] | None = None) -> int:
    """Entry point of every rank: rebuild the trainer from the request file and train in this process."""
    (path,) = argv if argv is not None else sys.argv[1:]
    raw_params, request = read_request(Path(path))
    params = build(DpoTrainer.Params, raw_params)
    params.launch = LaunchParams()  # this process trains; it must not launch again
    DpoTrainer(params).train_in_process(request)
    return 0


if __name__ == "__main__":
    sys.exit(main())
