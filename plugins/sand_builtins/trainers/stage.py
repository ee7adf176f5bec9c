"""One training stage around TRL's trainer, written once for ``trl_sft`` and ``trl_dpo``.

The two trainers differ in what they optimize (TRL's ``SFTTrainer`` on chats,
``DPOTrainer`` on preference pairs) and in how they load the weights. What
surrounds that is the same and lives here, so a fix to resume, to the atomic
``final/`` or to the summary reaches both:

* set-up: the stage's folder, torch threads and seed, the model's own chat
  format with a pad token (:meth:`TrlStage._prepare`), the weights dtype
  (:meth:`TrlStage._device`), a fresh LoRA adapter's config, and the
  ``TrainingArguments`` keywords both configs share: batch geometry, integer
  warm-up, checkpoints, logging, trackers with TensorBoard events in
  ``logs/``, precision (:meth:`TrlStage._arguments`);
* the stage (:meth:`TrlStage.train`): an existing ``final/`` is returned at
  once; ``launch.num_processes > 1`` hands it to :mod:`.launch`; otherwise
  :meth:`TrlStage.train_in_process` resumes from the newest complete
  checkpoint, trains, writes the weights, tokenizer and
  ``sand_chat_format.json`` into ``final.tmp`` and renames it to ``final/``,
  writes ``training_summary.json``, deletes ``checkpoints/`` unless kept, and
  hands the memory back (:func:`release_memory`). A stop signal while it trains ends the step in progress,
  which is saved as a checkpoint, and then stops the run (:func:`~sand_framework.stopping.stop_at_safe_point`).

A trainer lists :class:`TrlStage` before its component kind and supplies
``build`` (the configured TRL trainer); it overrides :meth:`TrlStage._save_weights`
and :meth:`TrlStage._stage_facts` where its output or summary differ.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from annotated_types import Ge, Gt, Interval

from sand_framework.accelerator import hand_back
from sand_framework.chat_format import ChatFormat, has_tokenizer
from sand_framework.components import PreferenceTrainRequest, TrainRequest
from sand_framework.cpu_threads import cpu_threads
from sand_framework.config.paramdoc import CHECKPOINTS, LOGGING, THREADS
from sand_framework.logs import adopt_library_loggers
from sand_framework.stopping import stop_at_safe_point
from sand_builtins.trainers import launch as launching
from sand_builtins.trainers.checkpoints import latest_checkpoint
from sand_builtins.trainers.host_memory import load_host_ram
from sand_builtins.trainers.launch import LaunchParams
from sand_builtins.trainers.loading import optimizer_steps, warmup_steps
from sand_builtins.trainers.progress import RichProgress, SaveAndStop, quiet
from sand_builtins.trainers.trackers import parse_trackers, tracker_problems


StageRequest = TrainRequest | PreferenceTrainRequest
"""What a stage trains on: trajectories (``trl_sft``) or pairs (``trl_dpo``)."""

MAX_BATCH = 65536
"""Largest effective batch (examples per optimizer step) a trainer accepts: more is a typo, not a setting."""
MAX_DEVICE_BATCH = 4096
"""Largest per-device batch (sequences per forward pass) a trainer accepts."""


@dataclass
class StageParams:
    """The parameters both trainers' ``Params`` extend: those declared the same way (type, default, range, help)
    for ``trl_sft`` and ``trl_dpo``, and checked the same way (:meth:`validate`). They come first in ``sand
    components``; every other one, where the two trainers' help or default differ (``lora``, ``learning_rate``,
    ``lr_scheduler_type``, ``warmup_ratio``, ``batch_size``, ``max_length``), is declared in each trainer's own
    ``Params``, which :class:`TrlStage` also reads."""

    lora_r: Annotated[int, Ge(1)] = 16
    """LoRA rank of a fresh adapter (an init adapter that is continued keeps its own rank)."""
    lora_alpha: Annotated[int, Gt(0)] = 32
    """LoRA scaling numerator of a fresh adapter (effective scale ``lora_alpha / lora_r``)."""
    lora_dropout: Annotated[float, Interval(ge=0, lt=1)] = 0.05
    """Dropout on a fresh adapter's LoRA branch (``trl_dpo`` turns dropout off unless ``disable_dropout`` is
    False)."""
    target_modules: str = "all-linear"
    """Modules a fresh adapter wraps: ``all-linear`` or a comma-separated list (``q_proj,v_proj``)."""
    per_device_batch_size: Annotated[int, Interval(ge=1, le=MAX_DEVICE_BATCH)] = 1
    """Examples per forward pass (a ``trl_dpo`` pair is two sequences), at most 4096; gradient accumulation makes
    up the rest of ``batch_size``."""
    max_steps: Annotated[int, Ge(-1)] = -1
    """Stop after this many optimizer steps; -1 trains for ``request.epochs`` epochs (``run.epochs``; 0 is
    refused)."""
    logging_steps: Annotated[int, Ge(1), LOGGING] = 5
    """Log the training metrics (loss and learning rate; ``trl_dpo`` also rewards and margins) every this many
    optimizer steps."""
    report_to: Annotated[str, LOGGING] = "tensorboard"
    """Trackers, comma-separated: ``tensorboard`` (events in ``output_dir/logs``), any other Hugging Face
    integration (``wandb``, ``trackio``, ``mlflow``, ...: each configured by its own environment variables), or
    ``none``; each name is checked by ``sand validate``, its installation when training starts."""
    threads: Annotated[int, Ge(0), THREADS] = 0
    """torch CPU threads during training; 0 = one per core free when training starts
    (:func:`sand_framework.cpu_threads.cpu_threads`; under ``launch``, shared among its processes)."""
    launch: LaunchParams = field(default_factory=LaunchParams)
    """Multi-process training: ``{num_processes: 8, config: fsdp}``. The default trains in the run's process."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass instead of keeping them: less memory, more compute
    (``benchmarks/train_memory.py`` measures both); the trained weights are the same."""

    weight_decay: Annotated[float, Ge(0)] = 0.0
    """AdamW weight decay."""
    save_steps: Annotated[int, Ge(1), CHECKPOINTS] = 50
    """Write a resumable checkpoint every this many optimizer steps."""
    save_total_limit: Annotated[int, Ge(1), CHECKPOINTS] = 2
    """Checkpoints kept in ``checkpoints/`` while training."""
    keep_checkpoints: Annotated[bool, CHECKPOINTS] = False
    """Keep ``checkpoints/`` after ``final/`` is written (False deletes them to save disk)."""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """Weights dtype: ``auto`` (fp32 on CPU; bf16 on GPU for LoRA, fp32 + bf16 autocast for full), ``float32``,
    ``bfloat16``, ``float16``."""

    def validate(self) -> list[str]:
        """The shared checks (a subclass adds its own to these)."""
        problems = []
        if self.max_steps == 0:
            problems.append(f"max_steps: must be -1 (train for the epochs) or >= 1, got {self.max_steps}")
        return problems + tracker_problems(self.report_to)


def release_memory() -> None:
    """Hand the training stage's memory back before sampling/evaluation start in the same process.

    Host memory: activations and optimizer state of a CPU run stay in glibc's
    arenas after the trainer is gone (a 135M-parameter SFT left ~7 GB
    resident). Device memory: PyTorch's CUDA caching allocator keeps what the
    stage used reserved, and a vLLM engine refuses to start or wake on a GPU
    whose free memory is below ``gpu_memory_utilization`` x total. Both are
    handed back by :func:`sand_framework.accelerator.hand_back`, the one place
    that does it (the run calls it again before its policy starts).
    """
    hand_back("after training")


def logged(trainer: Any, key: str) -> list[float]:
    """Every value of ``key`` the TRL trainer logged, in order (``loss``, ``rewards/margins`` ...)."""
    return [h[key] for h in trainer.state.log_history if key in h]


class TrlStage:
    """The part of a TRL trainer component that does not depend on its objective (see the module docstring).

    The subclass's ``Params`` extends :class:`StageParams` (the shared fields) with the six whose meaning differs
    by objective: ``lora``, ``learning_rate``, ``lr_scheduler_type``, ``warmup_ratio``, ``batch_size`` and
    ``max_length``; its ``build`` sets ``self.examples`` (cut / dropped counts) and ``self.loading``.
    """

    summary_unit: ClassVar[str] = "examples"
    """What the summary's cut and dropped counts count: ``truncated_<unit>``, ``dropped_<unit>``."""

    name: ClassVar[str]
    params: Any
    chat_format: Any
    examples: Any

    def __init__(self, params: Any = None):
        super().__init__(params)
        self.extra_callbacks: list[Any] = []
        """``transformers.TrainerCallback`` objects added to every run (tests, progress bars)."""
        self.loading: Any = None
        """How the last :meth:`build` loaded the model (:class:`~sand_builtins.trainers.loading.LoadingMode`)."""

    def build(self, request: StageRequest) -> Any:
        """The configured TRL trainer for ``request`` (not yet trained)."""
        raise NotImplementedError

    @classmethod
    def weights_kind(cls, params: Any) -> str:
        """What :meth:`train` writes: ``adapter`` (LoRA) or ``full``; the policy lays its engines out by it."""
        return "adapter" if params.lora else "full"

    @classmethod
    def device_plan(cls, params: Any, node: Any) -> list[str]:
        """``sand plan``: where training runs on ``node`` (:class:`sand_framework.accelerator.Node`) and, on GPUs,
        the host RAM its load takes (:func:`~sand_builtins.trainers.host_memory.load_host_ram`)."""
        n, config, slot = int(params.launch.num_processes), params.launch.config, cls.kind
        what = "LoRA adapter" if params.lora else "full fine-tune"
        if node.gpus == 0:
            return [f"train ({what}): {n} CPU process(es)" + (f" under accelerate ({config})" if n > 1 else
                                                              " in the run's process")]
        if n <= 1:
            lines = [f"train ({what}): GPU 0, in the run's process; its cached memory is handed back before the "
                     f"engines wake (sand_framework.accelerator.hand_back)"]
            if node.gpus > 1:
                lines.append(f"note: {node.gpus - 1} GPU(s) idle while training; use {slot}.launch.num_processes="
                             f"{node.gpus} {slot}.launch.config={'ddp' if params.lora else 'fsdp'}")
            return lines + cls._host_ram_lines(params, node)
        if n > node.gpus:
            raise ValueError(f"{slot}.launch.num_processes={n} but the node has {node.gpus} GPU(s)")
        lines = [f"train ({what}): GPUs 0-{n - 1}, {n} processes under accelerate launch ({config}); the run's "
                 f"process holds no model meanwhile, every engine sleeps"]
        if n < node.gpus:
            lines.append(f"note: {node.gpus - n} GPU(s) idle while training")
        return lines + cls._host_ram_lines(params, node)

    loads_reference: ClassVar[bool] = False
    """A full fine-tune loads an explicit reference model beside the policy (DPO): twice the host RAM."""

    @classmethod
    def _host_ram_lines(cls, params: Any, node: Any) -> list[str]:
        from sand_builtins.policies.engine_plan import model_parameters

        parameters = model_parameters(node.base_model) if node.base_model else None
        if parameters is None:
            return []
        return [load_host_ram(parameters, params, cls.loads_reference, slot=cls.kind).line()]

    # ------------------------------------------------------------------ setup

    def _device(self) -> tuple[bool, Any, bool]:
        """(use_cuda, weights dtype, bf16 autocast)."""
        import torch

        cuda = torch.cuda.is_available()
        p = self.params
        names = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
        if p.dtype == "auto":
            if not cuda:
                return False, torch.float32, False
            bf16_ok = torch.cuda.is_bf16_supported()
            dtype = torch.bfloat16 if (p.lora and bf16_ok) else torch.float32
            return True, dtype, bf16_ok
        if p.dtype not in names:
            raise ValueError(f"{self.name}: unknown dtype {p.dtype!r}; use auto, float32, bfloat16 or float16")
        dtype = names[p.dtype]
        return cuda, dtype, cuda and dtype == torch.bfloat16

    def _lora_config(self) -> Any:
        """A fresh LoRA adapter's config from ``lora_r``, ``lora_alpha``, ``lora_dropout``, ``target_modules``."""
        from peft import LoraConfig

        tm = self.params.target_modules
        targets: Any = tm if tm == "all-linear" else [t.strip() for t in tm.split(",") if t.strip()]
        return LoraConfig(r=self.params.lora_r, lora_alpha=self.params.lora_alpha,
                          lora_dropout=self.params.lora_dropout, target_modules=targets, bias="none",
                          task_type="CAUSAL_LM")

    def _prepare(self, request: StageRequest) -> Path:
        """The stage's folder (made), torch threads and seed set, ``self.chat_format`` loaded with a pad token."""
        import torch
        from transformers import set_seed

        out = Path(request.output_dir)
        out.mkdir(parents=True, exist_ok=True)
        torch.set_num_threads(cpu_threads(self.params.threads))
        set_seed(request.seed)
        fmt_src = request.init_weights if has_tokenizer(request.init_weights) else request.base_model
        self.chat_format = ChatFormat.from_pretrained(fmt_src)
        tokenizer = self.chat_format.tokenizer
        if tokenizer.pad_token is None:  # the collators pad; padded positions never carry loss
            tokenizer.pad_token = tokenizer.eos_token
        return out

    def _arguments(self, request: StageRequest, examples: int, progress: str, use_cuda: bool,
                   bf16: bool) -> tuple[dict[str, Any], list[Any]]:
        """(the ``TrainingArguments`` keywords both configs share, the callbacks) for ``examples`` rows.

        Gradient accumulation makes ``per_device_batch_size`` x devices up to
        ``batch_size``; the warm-up is whole steps of the stage's optimizer
        steps (:mod:`.loading`); TensorBoard writes into ``output_dir/logs``
        through an explicit callback, every other tracker goes to transformers.
        """
        p = self.params
        out = Path(request.output_dir)
        world = int(os.environ.get("WORLD_SIZE", "1"))
        accum = max(1, p.batch_size // max(1, p.per_device_batch_size * world))
        total = optimizer_steps(examples, p.per_device_batch_size, world, accum, float(request.epochs), p.max_steps)
        callbacks = [*self.extra_callbacks, RichProgress(f"{progress} {out.name}")]
        trackers = parse_trackers(p.report_to)
        if "tensorboard" in trackers:
            from torch.utils.tensorboard import SummaryWriter
            from transformers.integrations import TensorBoardCallback

            callbacks.append(TensorBoardCallback(tb_writer=SummaryWriter(log_dir=str(out / "logs"))))
        others = [t for t in trackers if t != "tensorboard"]
        return dict(
            output_dir=str(out / "checkpoints"),
            num_train_epochs=float(request.epochs),
            max_steps=p.max_steps,
            per_device_train_batch_size=p.per_device_batch_size,
            gradient_accumulation_steps=accum,
            lr_scheduler_type=p.lr_scheduler_type,
            warmup_steps=warmup_steps(float(p.warmup_ratio), total),  # an int: read alike by transformers 4 and 5
            weight_decay=p.weight_decay,
            save_strategy="steps",
            save_steps=p.save_steps,
            save_total_limit=p.save_total_limit,
            logging_steps=p.logging_steps,
            logging_first_step=True,
            report_to=others or "none",
            run_name=f"{out.parent.parent.name}/{out.name}",
            seed=request.seed,
            data_seed=request.seed,
            bf16=bf16,
            fp16=False,
            use_cpu=not use_cuda,
            gradient_checkpointing=bool(p.gradient_checkpointing),
            dataloader_num_workers=0,
            dataset_num_proc=None,
            disable_tqdm=True,
        ), callbacks

    # ------------------------------------------------------------------ train

    def train(self, request: StageRequest) -> str:
        final = Path(request.output_dir) / "final"
        if final.is_dir():
            return str(final)
        if self.params.launch.num_processes > 1:
            launching.launch(request, self.params, type(self))
            return str(final)
        return self.train_in_process(request)

    def train_in_process(self, request: StageRequest) -> str:
        """Train in this process: alone, or as one rank of ``accelerate launch`` (every rank runs this)."""
        import torch

        out = Path(request.output_dir)
        final = out / "final"
        prev_threads = torch.get_num_threads()
        start = time.time()
        trainer = None
        try:
            trainer = self.build(request)
            quiet(trainer)
            adopt_library_loggers()  # transformers, datasets and TRL are imported by now
            resume = latest_checkpoint(out / "checkpoints")
            if resume:
                logging.getLogger(type(self).__module__).info("%s: resuming from %s", self.name, resume)
            # A stop signal ends the step in progress, which is saved as a checkpoint; the stop is raised when the
            # block ends. One that comes after the last step waits for final/ instead, so nothing is trained twice.
            with stop_at_safe_point() as stop:
                trainer.add_callback(SaveAndStop(stop))
                result = trainer.train(resume_from_checkpoint=resume)
                if stop.signum is None or trainer.state.global_step >= trainer.state.max_steps:
                    self._write_final(trainer, result, request, time.time() - start, resume)
        finally:
            torch.set_num_threads(prev_threads)
            trainer = None
            release_memory()
        return str(final)

    def _write_final(self, trainer: Any, result: Any, request: StageRequest, wall: float, resume: str | None) -> None:
        """``final/`` (weights, tokenizer, chat format, written into ``final.tmp`` and renamed), the summary, and
        ``checkpoints/`` deleted unless kept; every rank calls it."""
        out = Path(request.output_dir)
        tmp = out / "final.tmp"  # one name for every rank: they all write into it
        if trainer.is_world_process_zero() and tmp.exists():
            shutil.rmtree(tmp)
        trainer.accelerator.wait_for_everyone()
        self._save_weights(trainer, tmp)
        trainer.accelerator.wait_for_everyone()
        if trainer.is_world_process_zero():
            self.chat_format.save(tmp)
            os.replace(tmp, out / "final")
            self._write_summary(out, self._summary(trainer, result, request, wall, resume))
            if not self.params.keep_checkpoints:
                shutil.rmtree(out / "checkpoints", ignore_errors=True)
        trainer.accelerator.wait_for_everyone()

    def _save_weights(self, trainer: Any, folder: Path) -> None:
        """Write the trained weights into ``folder``; every rank calls it.

        Under FSDP / ZeRO-3 gathering the full weights is a collective, and only the main process writes.
        """
        trainer.save_model(str(folder))

    def _stage_facts(self, trainer: Any, request: StageRequest, wall: float) -> dict[str, Any]:
        """The summary's entries between the losses and the model: wall time and rows trained on at least."""
        return {"wall_seconds": wall, "examples": len(trainer.train_dataset)}

    def _summary(self, trainer: Any, result: Any, request: StageRequest, wall: float,
                 resumed: str | None) -> dict[str, Any]:
        """``training_summary.json``: steps and losses, :meth:`_stage_facts`, the model, cut rows, resume, loading."""
        losses = logged(trainer, "loss")
        model = trainer.model
        return {
            "steps": trainer.state.global_step,
            "epochs": trainer.state.epoch,
            "train_loss_first": losses[0] if losses else None,
            "train_loss_last": losses[-1] if losses else None,
            "train_loss_mean": getattr(result, "training_loss", None),
            "losses": losses,
            **self._stage_facts(trainer, request, round(wall, 2)),
            "trainable_params": sum(p.numel() for p in model.parameters() if p.requires_grad),
            "total_params": sum(p.numel() for p in model.parameters()),
            "lora": self.params.lora,
            "chat_format": dataclasses.asdict(self.chat_format.info),
            f"truncated_{self.summary_unit}": self.examples.truncated,
            f"dropped_{self.summary_unit}": self.examples.dropped,
            "resumed_from": resumed,
            "loading": dataclasses.asdict(self.loading) if self.loading is not None else None,
        }

    @staticmethod
    def _write_summary(out: Path, summary: dict[str, Any]) -> None:
        tmp = out / "training_summary.json.tmp"
        tmp.write_text(json.dumps(summary, indent=2))
        os.replace(tmp, out / "training_summary.json")
