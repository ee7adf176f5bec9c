"""One rank of a multi-process training stage: ``python -m sand_builtins.trainers.rank REQUEST``.

:mod:`.launch` starts every rank with this entry point under ``accelerate
launch``; each rebuilds the trainer the request file names (``trl_sft``'s,
``trl_dpo``'s or a subclass) with its params and trains in its own process.
It lives apart from :mod:`.launch` so the trainer modules use the launcher
without the two importing each other; the class is imported by the name the
request records, so this module depends on no trainer.
"""

from __future__ import annotations

import sys
from pathlib import Path

from sand_builtins.trainers.launch import LaunchParams, read_request
from sand_framework.config.typecheck import build


def main(argv: list[str] | None = None) -> int:
    """Entry point of every rank: rebuild the trainer from the request file and train in this process."""
    (path,) = argv if argv is not None else sys.argv[1:]
    trainer, raw_params, request = read_request(Path(path))
    params = build(trainer.Params, raw_params)
    params.launch = LaunchParams()  # this process trains; it must not launch again
    trainer(params).train_in_process(request)
    return 0


if __name__ == "__main__":
    sys.exit(main())
