"""How `sand view` scales: build time, page weight and open time for synthetic runs of 100 / 1,000 / 10,000
deliberated steps, side by side in one run.

    OMP_NUM_THREADS=1 python benchmarks/view_scale.py [--sizes 100 1000 10000] [--out /tmp/view-scale]

Each synthetic run has 10 deliberated steps per trajectory (of 15 steps), every deliberated step with 3
candidates (the expert's among them) rolled out for 3 steps, 3 critiques and a synthesized thought, observations
of ~250 characters (an ALFWorld-sized run), plus 2 evaluated models on 200 tasks. It has no weights, so the
training target is shown as chat turns (rendering it with a tokenizer adds that tokenizer's time per trajectory).

Columns: ``build s`` (``build_site``), ``open KB`` (what the page loads when it opens: index.html, CSS, JS and
data/index.js), ``data MB`` (every data file), ``largest chunk KB`` (the biggest file a click loads), and, in
headless Chromium (skipped without it): ``open ms`` (navigation start to the synthesis list drawn, from
``file://``), ``trajectory ms`` (a click to its 15 steps drawn), ``filter ms`` (re-filtering the whole list).
Figures on a shared 2-core machine vary between runs; compare the rows of one run. ``--figure PATH`` also writes
the three curves side by side as a PNG.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

STEPS, DELIB, CANDS, ROLLOUT = 15, 10, 3, 3
WORDS = ("kitchen pantry drawer cabinet countertop apple knife mug sink fridge microwave shelf desk lamp "
         "towel soap bowl plate spoon bread lettuce tomato potato egg cup vase statue").split()


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


def step(rng: random.Random, deliberated: bool = False) -> dict:
    return {"thought": sentence(rng, 25 if deliberated else 12), "action": f"go to {rng.choice(WORDS)} {rng.randint(1, 9)}",
            "observation": sentence(rng, 40), "deliberated": deliberated}


def synthetic_run(path: Path, deliberated: int, seed: int = 0) -> Path:
    from sand_framework.store import RunLayout as L, UnitLog, atomic_write_json

    rng = random.Random(seed)
    trajectories = max(1, deliberated // DELIB)
    path.mkdir(parents=True)
    (path / L.RECIPE).write_text(f"run: {{name: scale-{deliberated}, iterations: 1}}\nsampler: {{name: self_consistency, n: 5}}\n"
                                 "detector: {name: set_size}\nmethod: {name: sand}\n")
    log = UnitLog(path / L.synthesis_units(1))
    for t in range(trajectories):
        steps = [step(rng, i < DELIB) for i in range(STEPS)]
        records = []
        for i in range(min(DELIB, deliberated - t * DELIB)):
            cands = [{"action": steps[i]["action"], "thought": steps[i]["thought"], "count": 2, "is_expert": True}]
            cands += [{"action": f"take {rng.choice(WORDS)}", "thought": sentence(rng, 10), "count": 1,
                       "is_expert": False} for _ in range(CANDS - 1)]
            records.append({
                "task_id": f"task-{t}", "step_index": i, "expert_action": steps[i]["action"],
                "expert_thought": sentence(rng, 12), "candidates": cands, "detector_score": 3.0,
                "rollouts": [{"task_id": f"task-{t}", "prefix_len": i, "candidate": c["action"],
                              "steps": [step(rng) for _ in range(ROLLOUT)], "reward": rng.random(),
                              "success": rng.random() < 0.3, "done": True, "error": None} for c in cands],
                "critiques": [{"candidate": c["action"], "text": sentence(rng, 45), "rollout_reward": 0.5}
                              for c in cands],
                "synthesis": {"thought": sentence(rng, 60), "status": "fallback" if rng.random() < 0.1 else "ok",
                              "attempts": 1}})
        traj = {"task_id": f"task-{t}", "env": "synthetic", "instruction": sentence(rng, 60),
                "task": sentence(rng, 50), "steps": steps, "reward": 1.0, "success": True, "meta": {}}
        log.append(f"task-{t}", {"trajectory": traj, "records": records,
                                 "stats": {"steps": STEPS, "deliberated": len(records)}})
    for model in ("sft", "final"):
        ev = UnitLog(path / L.eval_units(model, "unseen"))
        for t in range(200):
            success = rng.random() < 0.4
            ev.append(f"eval-{t}", {"trajectory": {
                "task_id": f"eval-{t}", "env": "synthetic", "instruction": "", "task": sentence(rng, 40),
                "steps": [step(rng, model == "final" and rng.random() < 0.3) for _ in range(rng.randint(3, 15))],
                "reward": float(success), "success": success, "meta": {}}, "prompt_tokens": 3000,
                "completion_tokens": 400})
    atomic_write_json(path / L.STATE, {"done": {"synth/iter1": {"method": "sand", "deliberated": deliberated}}})
    return path


def browser():
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        return None
    if not shutil.which("chromedriver") or not (shutil.which("chromium") or shutil.which("chromium-browser")):
        return None
    opts = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1366,850"):
        opts.add_argument(arg)
    return webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=opts)


def wait(driver, script: str, timeout: float = 30.0) -> None:
    end = time.time() + timeout
    while not driver.execute_script(script):
        if time.time() > end:
            raise TimeoutError(script)
        time.sleep(0.005)


def measure_browser(driver, index: Path) -> dict[str, float]:
    opens = []
    for _ in range(3):  # the first open also warms the browser's caches; keep the median
        driver.get("about:blank")
        driver.get(index.resolve().as_uri() + "#synth")
        wait(driver, "return document.body.dataset.ready === '1'")
        opens.append(driver.execute_script("return window.SAND_READY_MS"))
    driver.execute_script("window.__t0 = performance.now(); location.hash = '#synth/s0/0/0'")
    wait(driver, "return document.body.dataset.loaded === 's0/0'")
    traj = driver.execute_script("return performance.now() - window.__t0")
    driver.execute_script("location.hash = '#synth'")
    filt = driver.execute_script(
        "var s = document.getElementById('s-fallback'); s.value = 'yes'; var t0 = performance.now();"
        "s.dispatchEvent(new Event('change')); return performance.now() - t0;")
    return {"open_ms": sorted(opens)[1], "trajectory_ms": traj, "filter_ms": filt}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 10000])
    ap.add_argument("--out", type=Path, default=Path("/tmp/sand-view-scale"))
    ap.add_argument("--figure", type=Path, help="write the curves side by side as a PNG here")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON too")
    args = ap.parse_args()
    from sand_framework.view import build_site

    if args.out.exists():
        shutil.rmtree(args.out)
    driver = browser()
    rows = []
    try:
        for n in args.sizes:
            run = synthetic_run(args.out / f"run-{n}", n)
            info = build_site(run, args.out / f"site-{n}")
            b = info["bytes"]
            row = {"deliberated": n, "trajectories": max(1, n // DELIB), "build_s": info["seconds"],
                   "open_kb": info["open_bytes"] / 1e3, "data_mb": (b["chunks"] + b["index.js"]) / 1e6,
                   "largest_chunk_kb": info["largest_chunk"] / 1e3, "files": info["chunks"] + 4}
            if driver is not None:
                row.update(measure_browser(driver, info["index"]))
            rows.append(row)
    finally:
        if driver is not None:
            driver.quit()
    cols = [("deliberated", "deliberated steps", "{:d}"), ("trajectories", "trajectories", "{:d}"),
            ("build_s", "build s", "{:.1f}"), ("open_kb", "open KB", "{:.0f}"), ("data_mb", "data MB", "{:.1f}"),
            ("largest_chunk_kb", "largest chunk KB", "{:.0f}"), ("files", "files", "{:d}"),
            ("open_ms", "open ms", "{:.0f}"), ("trajectory_ms", "trajectory ms", "{:.0f}"),
            ("filter_ms", "filter ms", "{:.1f}")]
    cols = [c for c in cols if c[0] in rows[0]]
    print("| " + " | ".join(c[1] for c in cols) + " |")
    print("|" + "|".join("---:" for _ in cols) + "|")
    for r in rows:
        print("| " + " | ".join(fmt.format(r[k]) for k, _, fmt in cols) + " |")
    if driver is None:
        print("(no headless Chromium + chromedriver + selenium here: open/trajectory/filter times not measured)")
    if args.json:
        print(json.dumps(rows, indent=1))
    if args.figure:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        xs = [r["deliberated"] for r in rows]
        fig, axes = plt.subplots(1, 3, figsize=(11, 3.2))
        axes[0].plot(xs, [r["build_s"] for r in rows], "o-")
        axes[0].set_title("build time (s)")
        axes[1].plot(xs, [r["open_kb"] for r in rows], "o-", label="loaded at open")
        axes[1].plot(xs, [r["data_mb"] * 1e3 for r in rows], "s--", label="all data files")
        axes[1].plot(xs, [r["largest_chunk_kb"] for r in rows], "^:", label="largest chunk")
        axes[1].set_title("page weight (KB)")
        axes[1].legend()
        if "open_ms" in rows[0]:
            for key, label in (("open_ms", "open"), ("trajectory_ms", "open a trajectory"), ("filter_ms", "filter")):
                axes[2].plot(xs, [r[key] for r in rows], "o-", label=label)
            axes[2].legend()
        axes[2].set_title("in headless Chromium (ms)")
        for ax in axes:
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("deliberated steps")
        fig.tight_layout()
        fig.savefig(args.figure, dpi=100)
        print(f"figure: {args.figure}")


if __name__ == "__main__":
    main()
