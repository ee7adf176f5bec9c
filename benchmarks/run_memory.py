"""Peak memory of a whole run with the policy kept resident during training ("before") and released ("after").

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/run_memory.py [--recipe quickstart] [overrides ...]

Runs the same recipe twice, each in a fresh child process and run directory:
once with ``SAND_KEEP_POLICY_RESIDENT=1`` (the engine's behaviour before the
policy was released for training: the base model stays loaded while the
trainer loads its own copy) and once as shipped. Reports each run's peak RSS
(``ru_maxrss`` of the child), the training stages' wall time and the ratio,
side by side. Default: the quickstart recipe cut to 4 expert games and one
evaluation game per split, which keeps every stage (SmolLM2-135M, real
TextWorld-Express) at a few minutes on 2 CPU cores. Run it on an idle machine.
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
from pathlib import Path

DEFAULT_OVERRIDES = ["data.limit=4", "eval.limit=1", "eval.splits=[unseen]", "run.synthesis_batch=4"]


def one_run(recipe: str, overrides: list[str], keep_resident: bool, root: Path) -> dict:
    run_dir = root / ("resident" if keep_resident else "released")
    env = dict(os.environ, SAND_NO_PROGRESS="1", SAND_KEEP_POLICY_RESIDENT="1" if keep_resident else "0")
    code = ("import resource, sys; from sand_framework.cli.main import main\n"
            "try:\n    main()\nexcept SystemExit as e:\n    code = e.code\nelse:\n    code = 0\n"
            "print('MAXRSS_KB', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n"
            "sys.exit(code)")
    t0 = time.time()
    proc = subprocess.run([sys.executable, "-c", code, "run", recipe, *overrides, "--run-dir", str(run_dir)],
                          env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    rss_kb = int(proc.stderr.rsplit("MAXRSS_KB", 1)[1].split()[0])
    state = json.loads((run_dir / "state.json").read_text())
    train_s = sum(float((v or {}).get("seconds", 0)) for k, v in state["done"].items() if k.startswith("train/"))
    return {"policy during training": "resident" if keep_resident else "released",
            "peak_rss_gb": round(rss_kb / 2**20, 2), "training_seconds": round(train_s, 1),
            "wall_seconds": round(time.time() - t0, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--recipe", default="quickstart")
    ap.add_argument("overrides", nargs="*", default=DEFAULT_OVERRIDES)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="sand-run-memory-") as tmp:
        rows = [one_run(args.recipe, args.overrides, keep, Path(tmp)) for keep in (True, False)]
    print(f"recipe {args.recipe} {' '.join(args.overrides)}")
    print(f"{'policy during training':<24}{'peak RSS (GB)':>15}{'training (s)':>14}{'wall (s)':>10}")
    for r in rows:
        print(f"{r['policy during training']:<24}{r['peak_rss_gb']:>15}{r['training_seconds']:>14}"
              f"{r['wall_seconds']:>10}")
    print(f"released / resident peak RSS: {rows[1]['peak_rss_gb'] / rows[0]['peak_rss_gb']:.2f}")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
