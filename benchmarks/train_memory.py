"""Training memory: peak resident memory and time of ``trl_sft`` steps, per setting, side by side.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/train_memory.py \\
        [--data runs/miniature/sand/seed0/iter1/deliberation.sharegpt.json] [--steps 1] \\
        [--settings 'per_device_batch_size=4' 'per_device_batch_size=4,gradient_checkpointing=true' ...]

Each setting trains SmolLM2-135M with the trainer section of ``--recipe``
(default ``repro/sand``: LoRA, max_length 1536, 4 sequences per step) plus the
setting's ``key=value`` pairs, for ``--steps`` optimizer steps on the same trajectories in a fresh
child process, and reports that child's peak RSS (``ru_maxrss``) and wall
seconds. A fresh process per setting is the only way to get a clean peak:
freed memory is not always returned to the OS. Without ``--data`` it uses the
expert trajectories of the first 10 TextWorld-Express training games.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time


def trainer_params(recipe: str, setting: str, steps: int) -> dict:
    """The recipe's ``trainer`` section with the setting's ``key=value`` pairs applied, as ``sand run`` would."""
    from sand_framework.config import load_recipe

    data, _ = load_recipe(recipe, [f"trainer.{kv.strip()}" for kv in setting.split(",") if kv.strip()])
    params = {k: v for k, v in data.get("trainer", {}).items() if k != "name"}
    return {**params, "max_steps": steps}


def child(args: argparse.Namespace) -> None:
    """Train once with ``args.setting`` and print one JSON line."""
    from sand_framework.components import TrainRequest
    from sand_framework.engine.context import cache_dir
    from sand_framework.formats import read_sharegpt
    from sand_framework.plugins import load_plugins

    plugins = load_plugins()
    regs = plugins.registries()
    model = plugins.resolve_model(args.model, cache_dir())
    if args.data:
        trajs = read_sharegpt(args.data, "textworld_express")
    else:
        from sand_framework.engine.expert import expert_trajectory

        env = regs.build("environment", "textworld_express", {"max_steps": 10})
        trajs = [expert_trajectory(env, t) for t in env.tasks("train")[:10]]
        env.close()
    trainer = regs.build("trainer", "trl_sft", trainer_params(args.recipe, args.setting, args.steps))
    with tempfile.TemporaryDirectory() as out:
        t = time.perf_counter()
        trainer.train(TrainRequest(trajectories=trajs, base_model=model, init_weights=None, output_dir=out,
                                   epochs=1, seed=0))
        wall = time.perf_counter() - t
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"setting": args.setting or "(defaults)", "peak_rss_mb": round(peak_mb),
                      "seconds": round(wall, 1), "trajectories": len(trajs), "steps": args.steps}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--recipe", default="repro/sand", help="recipe whose trainer section is the baseline")
    ap.add_argument("--data", default="", help="ShareGPT file (e.g. a run's iter1/deliberation.sharegpt.json)")
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--settings", nargs="*", default=["", "gradient_checkpointing=true",
                                                      "per_device_batch_size=1",
                                                      "per_device_batch_size=1,gradient_checkpointing=true"])
    ap.add_argument("--setting", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.setting is not None:
        child(args)
        return
    rows = []
    for setting in args.settings:
        cmd = [sys.executable, __file__, "--model", args.model, "--recipe", args.recipe, "--steps", str(args.steps),
               "--setting", setting]
        if args.data:
            cmd += ["--data", args.data]
        print(f"[bench] {setting or '(defaults)'} ...", file=sys.stderr, flush=True)
        proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "SAND_NO_PROGRESS": "1"})
        line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith("{")), None)
        if proc.returncode != 0 or line is None:
            rows.append({"setting": setting or "(defaults)", "error": proc.stderr.strip().splitlines()[-1:]})
        else:
            rows.append(json.loads(line))
        print(json.dumps(rows[-1]), flush=True)
    base = rows[0].get("peak_rss_mb")
    for r in rows:
        if base and "peak_rss_mb" in r:
            print(f"{r['setting']:<55} peak {r['peak_rss_mb']:>6} MB ({r['peak_rss_mb'] / base:.2f}x)  "
                  f"{r['seconds']:>7} s")


if __name__ == "__main__":
    main()
