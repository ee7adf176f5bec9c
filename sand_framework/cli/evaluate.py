"""``sand eval``: greedy evaluation of any model or trained run with a recipe's environment and evaluator."""

from __future__ import annotations

from pathlib import Path

import click

from sand_framework.cli.common import PLUGINS_DIR, echo_eval, friendly


@click.command("eval")
@click.argument("model")
@click.argument("overrides", nargs=-1)
@click.option("--recipe", "recipe_ref", help="Recipe whose environment, policy and evaluator to use "
              "(a path or bundled name; default for a run directory: the run's own recipe).")
@click.option("--split", "splits", multiple=True,
              help="Split to evaluate (repeatable; default: the recipe's eval.splits).")
@click.option("--limit", type=click.IntRange(min=1),
              help="First K tasks of each split (default: the recipe's eval.limit).")
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False),
              help="Output folder (default: evals/<label>); rerun with the same folder to resume.")
@click.option("--label", help="Name of this model in metrics.json and reports (default: derived from MODEL).")
@PLUGINS_DIR
@friendly
def command(model, overrides, recipe_ref, splits, limit, out_dir, label, plugin_dirs):
    """Evaluate MODEL greedily and write metrics.json (resumable per task).

    MODEL is a run directory's weights (RUN:sft, RUN:final, RUN:iter1, RUN:base; RUN alone means RUN:final),
    a LoRA adapter folder (its base model from adapter_config.json, else the recipe's model.base), a full
    model folder, a model alias (smollm2-135m, tiny-random) or a hub id. OVERRIDES are key=value recipe
    overrides, e.g. evaluator.max_new_tokens=64.
    """
    from sand_framework.app.model_eval import evaluate_model

    if out_dir is None:
        out_dir = str(Path("evals") / _default_name(model, label))
    metrics = evaluate_model(model, recipe_ref, out_dir, list(splits), limit, list(overrides), list(plugin_dirs),
                             label)
    echo_eval(metrics, out_dir)


def _default_name(model: str, label: str | None) -> str:
    if label:
        return label
    run, _, name = model.rpartition(":")
    stem = Path(run or model.rstrip("/")).name or "model"
    return f"{stem}-{name}" if run else stem
