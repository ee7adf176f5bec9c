"""A training stage's optimizer steps on a rich progress bar, as every other SAND stage shows its work."""

from __future__ import annotations

import os


def _rich_progress_callback():
    from transformers import TrainerCallback

    class _RichProgress(TrainerCallback):
        """Optimizer steps with loss and ETA on a rich progress bar (TRL's own tqdm is off)."""

        def __init__(self, label: str):
            self.label, self.progress, self.task = label, None, None

        def on_train_begin(self, args, state, control, **kwargs):
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                     TextColumn("{task.fields[loss]}"), TextColumn("eta"), TimeRemainingColumn(),
                                     disable=os.environ.get("SAND_NO_PROGRESS") == "1")
            self.progress.start()
            self.task = self.progress.add_task(self.label, total=state.max_steps, completed=state.global_step, loss="")

        def on_step_end(self, args, state, control, **kwargs):
            self.progress.update(self.task, completed=state.global_step)

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "loss" in logs:
                self.progress.update(self.task, loss=f"loss {logs['loss']:.3f}")

        def on_train_end(self, args, state, control, **kwargs):
            self.progress.stop()

    return _RichProgress


def RichProgress(label: str):  # noqa: N802 - a class factory; transformers is imported lazily
    return _rich_progress_callback()(label)
