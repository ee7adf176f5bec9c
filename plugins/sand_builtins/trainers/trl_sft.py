"""Supervised fine-tuning of the agent with TRL's ``SFTTrainer`` (LoRA or full), on one or many processes.

The agent is trained on exactly the chats it is later sampled from
(:func:`sand_framework.prompting.trajectory_chat`), rendered with the base
model's own chat template (:class:`sand_framework.chat_format.ChatFormat`),
with the loss on assistant replies and their end-of-turn token only: the
environment instruction, the task and every observation are masked out. No
other template is ever substituted, so every policy renders its prompts as
token prefixes of these training sequences.

With ``launch.num_processes > 1`` the stage runs under ``accelerate launch``
(DDP, FSDP or DeepSpeed ZeRO-3 configs shipped; see :mod:`.launch`). What
this trainer shares with ``trl_dpo`` around TRL's trainer (set-up, resume,
the atomic ``final/``, the summary's common entries) is :mod:`.stage`; the
``report_to`` names are :mod:`.trackers`'.

Outputs, all in standard Hugging Face format under ``request.output_dir``:

* ``checkpoints/checkpoint-N``  — resumable checkpoints (a killed stage
  continues from the newest complete one);
* ``final/``                    — the weights (LoRA adapter or full model), the
  tokenizer with its chat template and ``sand_chat_format.json``, written to a
  temporary directory and renamed, so its existence means training finished;
  a second call returns it at once;
* ``logs/``                     — TensorBoard events (``report_to``);
* ``training_summary.json``     — steps, first/last loss, wall time, examples.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, ClassVar

from annotated_types import Ge, Gt, Interval

from sand_framework import hookimpl
from sand_framework.components import Trainer, TrainRequest
from sand_framework.errors import TrainingInputError
from sand_builtins.models import is_adapter
from sand_builtins.trainers.launch import LaunchParams
from sand_builtins.trainers.loading import prepare_loading
from sand_builtins.trainers.sft_data import build_dataset
from sand_builtins.trainers.stage import MAX_BATCH, MAX_DEVICE_BATCH, StageParams, TrlStage, release_memory
from sand_builtins.trainers.trackers import TRACKERS, parse_trackers, tracker_problems

__all__ = ["MAX_BATCH", "MAX_DEVICE_BATCH", "TRACKERS", "LaunchParams", "Params", "TrlSftTrainer", "parse_trackers",
           "release_memory", "tracker_problems"]
"""Names other modules import from here; the shared ones live in :mod:`.stage`, :mod:`.trackers`, :mod:`.launch`."""

log = logging.getLogger(__name__)


class TrlSftTrainer(TrlStage, Trainer["TrlSftTrainer.Params"]):
    """Assistant-only-loss SFT with TRL; LoRA by default, full fine-tune with ``lora: false``."""

    name: ClassVar[str] = "trl_sft"
    description: ClassVar[str] = "TRL SFTTrainer on the agent's chats, loss on assistant turns only (LoRA or full)."

    @dataclass
    class Params(StageParams):
        lora: bool = True
        """Train a LoRA adapter (True) or fine-tune every weight (False)."""
        learning_rate: Annotated[float, Gt(0)] = 2e-4
        """Peak learning rate. 2e-4 suits LoRA on short runs; the paper's full fine-tune uses 1e-5."""
        lr_scheduler_type: str = "cosine"
        """Any ``transformers`` scheduler name (``cosine``, ``linear``, ``constant``, ...)."""
        warmup_ratio: Annotated[float, Interval(ge=0, lt=1)] = 0.03
        """Fraction of the total steps spent warming the learning rate up, in [0, 1)."""
        batch_size: Annotated[int, Interval(ge=1, le=MAX_BATCH)] = 8
        """Effective batch size: ``per_device_batch_size`` × gradient accumulation × devices; at most 65536."""
        max_length: Annotated[int, Ge(1)] = 4096
        """Tokens kept per trajectory (the start is kept); examples left without assistant tokens are dropped."""

    @classmethod
    def context_token_budget(cls, params: Params) -> dict[str, tuple[str, int]]:
        """The context the agent is trained on; ``sand validate`` checks the policy's engine and prompts hold it."""
        return {"train": ("max_length", int(params.max_length))}

    # ------------------------------------------------------------------ setup

    def _load_model(self, request: TrainRequest, dtype):
        """The model to train: base, base + trainable adapter, or a full checkpoint."""
        from transformers import AutoModelForCausalLM

        init = request.init_weights
        if init and not Path(init).exists():
            raise TrainingInputError(f"trl_sft: init_weights {init!r} does not exist")
        if is_adapter(init):
            from peft import PeftModel

            base = AutoModelForCausalLM.from_pretrained(request.base_model, dtype=dtype)
            model = PeftModel.from_pretrained(base, init, is_trainable=True)
            if not self.params.lora:  # full fine-tune from base + previous adapter
                model = model.merge_and_unload()
            return model
        src = init or request.base_model
        return AutoModelForCausalLM.from_pretrained(src, dtype=dtype)

    def _peft_config(self, model):
        from peft import PeftModel

        if not self.params.lora or isinstance(model, PeftModel):
            return None
        return self._lora_config()

    def build(self, request: TrainRequest):
        """The configured ``trl.SFTTrainer`` for ``request`` (not yet trained)."""
        from trl import SFTConfig, SFTTrainer

        p = self.params
        if not request.trajectories:
            raise TrainingInputError("trl_sft: no trajectories to train on")
        self._prepare(request)
        use_cuda, dtype, bf16 = self._device()
        tokenizer = self.chat_format.tokenizer
        dataset, self.examples = build_dataset(request.trajectories, self.chat_format, p.max_length)
        if self.examples.truncated:
            log.warning("trl_sft: %d of %d training examples are longer than max_length=%d tokens and were cut at the "
                        "end (%d left without an assistant token were dropped); the agent never learns their last "
                        "turns. Raise trainer.max_length (and the policy's context with it) to keep them.",
                        self.examples.truncated, len(request.trajectories), p.max_length, self.examples.dropped)
        args, callbacks = self._arguments(request, len(dataset), "train", use_cuda, bf16)
        config = SFTConfig(
            **args,
            learning_rate=p.learning_rate,
            max_length=p.max_length,
            assistant_only_loss=False,  # the dataset's assistant_masks (our own template's masks) apply as is
            packing=False,
        )
        # The arguments exist before the weights load, so the load is ZeRO-3 / FSDP-aware (.loading)
        self.loading = prepare_loading(config)
        model = self._load_model(request, dtype)
        model.config.use_cache = False
        return SFTTrainer(
            model=model,
            args=config,
            train_dataset=dataset,
            processing_class=tokenizer,
            peft_config=self._peft_config(model),
            callbacks=callbacks,
        )


Params = TrlSftTrainer.Params
"""An alias of :class:`TrlSftTrainer.Params` (a third-party trainer or test may import it by this name)."""


@hookimpl
def sand_register_trainers(register):
    register(TrlSftTrainer)
