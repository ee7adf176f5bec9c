"""The viewer's page of evaluated episodes: every task of every split, each series' episode side by side."""

from __future__ import annotations

from typing import Any

from sand_framework.report.data import model_order, split_order
from sand_framework.view.site_data import SiteData


def collect_eval(site: SiteData) -> dict[str, Any]:
    """Every evaluated episode, grouped by (split, task): each task one item whose chunk holds every series'
    episode (a series: one model of one run), so they can be read side by side."""
    series = []
    for run in site.runs:
        for model in sorted(run.evals, key=model_order):
            label = f"{run.label}: {model}" if len(site.runs) > 1 else model
            series.append({"id": len(series), "run": run.label, "model": model, "label": label})
    keys: dict[tuple[str, str], dict[int, Any]] = {}
    bands: dict[tuple[str, str], str] = {}
    j = 0
    for run in site.runs:
        for model in sorted(run.evals, key=model_order):
            for split, results in run.evals[model].items():
                for res in results:
                    key = (split, res.trajectory.task_id)
                    keys.setdefault(key, {})[j] = res
                    if key in run.bands:
                        bands.setdefault(key, run.bands[key])
            j += 1
    tasks = []
    for i, key in enumerate(sorted(keys, key=lambda k: (split_order(k[0]), k[1]))):
        split, task_id = key
        per = keys[key]
        summary, episodes = [], {}
        for s in series:
            res = per.get(s["id"])
            if res is None:
                summary.append(None)
                continue
            t = res.trajectory
            summary.append([t.reward, int(t.success), len(t.steps), sum(st.deliberated for st in t.steps)])
            episodes[str(s["id"])] = {**t.to_dict(), "prompt_tokens": res.prompt_tokens,
                                      "completion_tokens": res.completion_tokens}
        site.chunks[f"e/{i}"] = {"split": split, "task_id": task_id, "band": bands.get(key), "episodes": episodes}
        tasks.append([i, split, task_id, bands.get(key), summary])
    return {"series": series, "splits": sorted({k[0] for k in keys}, key=split_order), "tasks": tasks}
