"""``report_to``: the Hugging Face tracker names a TRL trainer accepts, checked once for every trainer.

``sand validate`` checks the names (:func:`tracker_problems`, each trainer's
``Params.validate``); a stage checks their installation when training starts
(:func:`parse_trackers`), so a typo stops the run before any stage and a
missing package before any step.
"""

from __future__ import annotations

from sand_framework.errors import TrainingInputError

TRACKERS = ("azure_ml", "clearml", "codecarbon", "comet_ml", "dagshub", "dvclive", "flyte", "kubeflow", "mlflow",
            "neptune", "swanlab", "tensorboard", "trackio", "wandb")
"""Hugging Face ``report_to`` integrations (``transformers.integrations``); each reads its own env vars."""


def tracker_problems(report_to: str) -> list[str]:
    """``report_to``'s names that no Hugging Face integration has (the validator both trainers declare)."""
    names = [t.strip().lower() for t in report_to.split(",") if t.strip()]
    unknown = [t for t in names if t not in TRACKERS and t != "none"]
    if unknown:
        return [f"report_to: unknown tracker(s) {', '.join(unknown)}; use none or a comma-separated list of "
                f"{', '.join(TRACKERS)}"]
    if "none" in names and len(names) > 1:
        return [f"report_to: {report_to!r} lists none with other trackers; use none alone"]
    return []


def parse_trackers(report_to: str) -> list[str]:
    """``report_to`` as a list of integration names; raises ``ValueError`` naming the valid ones."""
    names = [t.strip().lower() for t in report_to.split(",") if t.strip()]
    if names in ([], ["none"]):
        return []
    unknown = [t for t in names if t not in TRACKERS]
    if unknown:
        raise TrainingInputError(f"trl_sft: unknown report_to {', '.join(unknown)}; use none or any of "
                                 f"{', '.join(TRACKERS)}")
    from transformers.integrations import get_available_reporting_integrations

    missing = sorted(set(names) - set(get_available_reporting_integrations()))
    if missing:
        raise TrainingInputError(f"trl_sft: report_to {', '.join(missing)} is not installed; "
                         f"pip install {' '.join(missing)} (or report_to: none)")
    return names
