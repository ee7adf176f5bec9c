"""A DPO stage under ``accelerate launch``; each rank runs ``python -m sand_builtins.trainers.dpo_rank REQUEST``.

The same scheme as the SFT trainer's (:mod:`.launch`, whose accelerate
configs ``ddp``, ``fsdp``, ``zero3`` and errors it reuses): the parent writes
the request (pairs, params) into the stage's folder, starts
``launch.num_processes`` ranks, each rebuilds the ``trl_dpo`` trainer from
the file and trains in process; ``final/`` appearing is the success signal,
so resume behaves as in one process.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from sand_framework.components import TrainRequest
from sand_framework.cpu_threads import cpu_threads
from sand_framework.types import PreferencePair, Trajectory
from sand_builtins.trainers.launch import LaunchError, _free_port, config_path

REQUEST_FILE = "launch_request.json"


def write_request(request: TrainRequest, params: Any, path: Path) -> None:
    req = {f.name: getattr(request, f.name) for f in dataclasses.fields(request)
           if f.name not in ("trajectories", "pairs")}
    req["trajectories"] = [t.to_dict() for t in request.trajectories]
    req["pairs"] = [p.to_dict() for p in request.pairs]
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"params": dataclasses.asdict(params), "request": req}))
    os.replace(tmp, path)


def read_request(path: Path) -> tuple[dict[str, Any], TrainRequest]:
    body = json.loads(Path(path).read_text())
    req = dict(body["request"])
    req["trajectories"] = [Trajectory.from_dict(t) for t in req.get("trajectories", [])]
    req["pairs"] = [PreferencePair.from_dict(p) for p in req.get("pairs", [])]
    return body["params"], TrainRequest(**req)


def launch(request: TrainRequest, params: Any) -> None:
    """Run the DPO stage in ``params.launch.num_processes`` processes and wait for them."""
    out = Path(request.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    req_file = out / REQUEST_FILE
    threads = params.threads or max(1, cpu_threads() // params.launch.num_processes)
    params = dataclasses.replace(params, threads=threads)
    write_request(request, params, req_file)
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
           str(config_path(params.launch.config)), "--num_processes", str(params.launch.num_processes),
           "--num_machines", "1", "--main_process_port", str(_free_port()),
           "-m", "sand_builtins.trainers.dpo_rank", str(req_file)]
    proc = subprocess.run(cmd, env={**os.environ, "OMP_NUM_THREADS": str(threads)})
    if proc.returncode != 0 or not (out / "final").is_dir():
        raise LaunchError(
            f"DPO training under `accelerate launch` ({params.launch.num_processes} processes, config "
            f"{params.launch.config}) exited with status {proc.returncode}; the ranks' output is above. "
            f"Fix the cause and resume the run: checkpoints in {out / 'checkpoints'} are kept.")
