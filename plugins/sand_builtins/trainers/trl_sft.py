"""Supervised fine-tuning of the agent with TRL's ``SFTTrainer`` (LoRA or full), on one or many processes.

The agent is trained on exactly the chats it is later sampled from
(:func:`sand_framework.prompting.trajectory_chat`), rendered with the base
model's own chat template (:class:`sand_framework.chat_format.ChatFormat`),
with the loss on assistant replies and their end-of-turn token only: the
environment instruction, the task and every observation are masked out. No
other template is ever substituted, so every policy renders its prompts as
token prefixes of these training sequences.

With ``launch.num_processes > 1`` the stage runs under ``accelerate launch``
(DDP, FSDP or DeepSpeed ZeRO-3 configs shipped; see :mod:`.launch`).

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

from sand_framework import hookimpl
from sand_framework.accelerator import hand_back
from sand_framework.chat_format import ChatFormat, has_tokenizer
from sand_framework.components import Trainer, TrainRequest
from sand_framework.cpu_threads import cpu_threads
from sand_builtins.models import is_adapter
from sand_builtins.trainers import launch as launching
from sand_builtins.trainers.checkpoints import latest_checkpoint
from sand_builtins.trainers.loading import optimizer_steps, prepare_loading, warmup_steps
from sand_builtins.trainers.progress import RichProgress
from sand_builtins.trainers.sft_data import build_dataset

log = logging.getLogger(__name__)


TRACKERS = ("azure_ml", "clearml", "codecarbon", "comet_ml", "dagshub", "dvclive", "flyte", "kubeflow", "mlflow",
            "neptune", "swanlab", "tensorboard", "trackio", "wandb")
"""Hugging Face ``report_to`` integrations (``transformers.integrations``); each reads its own env vars."""
MAX_BATCH = 65536
"""Largest effective batch (examples per optimizer step) a trainer accepts: more is a typo, not a setting."""
MAX_DEVICE_BATCH = 4096
"""Largest per-device batch (sequences per forward pass) a trainer accepts."""


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


@dataclass
class LaunchParams:
    num_processes: int = 1
    """Training processes (one per GPU). Above 1 the stage runs under ``accelerate launch``."""
    config: str = "ddp"
    """Accelerate config: ``ddp``, ``fsdp`` (FSDP v2, full state dict saved), ``zero3`` (DeepSpeed ZeRO-3; needs
    ``deepspeed``), or a path to your own accelerate config file."""


def parse_trackers(report_to: str) -> list[str]:
    """``report_to`` as a list of integration names; raises ``ValueError`` naming the valid ones."""
    names = [t.strip().lower() for t in report_to.split(",") if t.strip()]
    if names in ([], ["none"]):
        return []
    unknown = [t for t in names if t not in TRACKERS]
    if unknown:
        raise ValueError(f"trl_sft: unknown report_to {', '.join(unknown)}; use none or any of {', '.join(TRACKERS)}")
    from transformers.integrations import get_available_reporting_integrations

    missing = sorted(set(names) - set(get_available_reporting_integrations()))
    if missing:
        raise ValueError(f"trl_sft: report_to {', '.join(missing)} is not installed; "
                         f"pip install {' '.join(missing)} (or report_to: none)")
    return names


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


class TrlSftTrainer(Trainer["TrlSftTrainer.Params"]):
    """Assistant-only-loss SFT with TRL; LoRA by default, full fine-tune with ``lora: false``."""

    name: ClassVar[str] = "trl_sft"
    description: ClassVar[str] = "TRL SFTTrainer on the agent's chats, loss on assistant turns only (LoRA or full)."

    @dataclass
    class Params:
        lora: bool = True
        """Train a LoRA adapter (True) or fine-tune every weight (False)."""
        lora_r: Annotated[int, Ge(1)] = 16
        """LoRA rank."""
        lora_alpha: Annotated[int, Gt(0)] = 32
        """LoRA scaling numerator (effective scale ``lora_alpha / lora_r``)."""
        lora_dropout: Annotated[float, Interval(ge=0, lt=1)] = 0.05
        """Dropout on the LoRA branch."""
        target_modules: str = "all-linear"
        """Modules LoRA wraps: ``all-linear`` or a comma-separated list (``q_proj,v_proj``)."""
        learning_rate: Annotated[float, Gt(0)] = 2e-4
        """Peak learning rate. 2e-4 suits LoRA on short runs; the paper's full fine-tune uses 1e-5."""
        lr_scheduler_type: str = "cosine"
        """Any ``transformers`` scheduler name (``cosine``, ``linear``, ``constant``, ...)."""
        warmup_ratio: Annotated[float, Interval(ge=0, lt=1)] = 0.03
        """Fraction of the total steps spent warming the learning rate up, in [0, 1)."""
        weight_decay: Annotated[float, Ge(0)] = 0.0
        """AdamW weight decay."""
        batch_size: Annotated[int, Interval(ge=1, le=MAX_BATCH)] = 8
        """Effective batch size: ``per_device_batch_size`` × gradient accumulation × devices; at most 65536."""
        per_device_batch_size: Annotated[int, Interval(ge=1, le=MAX_DEVICE_BATCH)] = 1
        """Sequences per forward pass, at most 4096; gradient accumulation makes up the rest of ``batch_size``."""
        max_length: Annotated[int, Ge(1)] = 4096
        """Tokens kept per trajectory (the start is kept); examples left without assistant tokens are dropped."""
        max_steps: Annotated[int, Ge(-1)] = -1
        """Stop after this many optimizer steps; -1 trains for ``request.epochs`` epochs (0 is refused)."""
        save_steps: Annotated[int, Ge(1)] = 50
        """Write a resumable checkpoint every this many optimizer steps."""
        save_total_limit: Annotated[int, Ge(1)] = 2
        """Checkpoints kept in ``checkpoints/`` while training."""
        keep_checkpoints: bool = False
        """Keep ``checkpoints/`` after ``final/`` is written (False deletes them to save disk)."""
        logging_steps: Annotated[int, Ge(1)] = 5
        """Log loss and learning rate every this many optimizer steps."""
        report_to: str = "tensorboard"
        """Trackers, comma-separated: ``tensorboard`` (events in ``output_dir/logs``), any other Hugging Face
        integration (``wandb``, ``trackio``, ``mlflow``, ...: each configured by its own environment variables), or
        ``none``; each name is checked by ``sand validate``, its installation when training starts."""
        threads: Annotated[int, Ge(0)] = 0
        """torch CPU threads during training; 0 = one per core free when training starts
        (:func:`sand_framework.cpu_threads.cpu_threads`; under ``launch``, shared among its processes)."""
        dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
        """Weights dtype: ``auto`` (fp32 on CPU; bf16 on GPU for LoRA, fp32 + bf16 autocast for full), ``float32``,
        ``bfloat16``, ``float16``."""
        launch: LaunchParams = field(default_factory=LaunchParams)
        """Multi-process training: ``{num_processes: 8, config: fsdp}``. The default trains in the run's process."""
        gradient_checkpointing: bool = False
        """Recompute activations in the backward pass instead of keeping them: less memory, more compute
        (``benchmarks/train_memory.py`` measures both); the trained weights are the same."""

        def validate(self) -> list[str]:
            problems = []
            if self.max_steps == 0:
                problems.append(f"max_steps: must be -1 (train for the epochs) or >= 1, got {self.max_steps}")
            return problems + tracker_problems(self.report_to)

    def __init__(self, params: Any = None):
        super().__init__(params)
        self.extra_callbacks: list[Any] = []
        """``transformers.TrainerCallback`` objects added to every run (tests, progress bars)."""
        self.loading: Any = None
        """How the last :meth:`build` loaded the model (:class:`~sand_builtins.trainers.loading.LoadingMode`)."""

    @classmethod
    def device_plan(cls, params: Params, node: Any) -> list[str]:
        """``sand plan``: where training runs on ``node`` (:class:`sand_framework.accelerator.Node`)."""
        n, config = int(params.launch.num_processes), params.launch.config
        what = "LoRA adapter" if params.lora else "full fine-tune"
        if node.gpus == 0:
            return [f"train ({what}): {n} CPU process(es)" + (f" under accelerate ({config})" if n > 1 else
                                                              " in the run's process")]
        if n <= 1:
            lines = [f"train ({what}): GPU 0, in the run's process; its cached memory is handed back before the "
                     f"engines wake (sand_framework.accelerator.hand_back)"]
            if node.gpus > 1:
                lines.append(f"note: {node.gpus - 1} GPU(s) idle while training; use trainer.launch.num_processes="
                             f"{node.gpus} trainer.launch.config={'ddp' if params.lora else 'fsdp'}")
            return lines
        if n > node.gpus:
            raise ValueError(f"trainer.launch.num_processes={n} but the node has {node.gpus} GPU(s)")
        lines = [f"train ({what}): GPUs 0-{n - 1}, {n} processes under accelerate launch ({config}); the run's "
                 f"process holds no model meanwhile, every engine sleeps"]
        if n < node.gpus:
            lines.append(f"note: {node.gpus - n} GPU(s) idle while training")
        return lines

    @classmethod
    def weights_kind(cls, params: Params) -> str:
        """What :meth:`train` writes: ``adapter`` (LoRA) or ``full``; the policy lays its engines out by it."""
        return "adapter" if params.lora else "full"

    @classmethod
    def context_token_budget(cls, params: Params) -> dict[str, tuple[str, int]]:
        """The context the agent is trained on; ``sand validate`` checks the policy's engine and prompts hold it."""
        return {"train": ("max_length", int(params.max_length))}

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
            raise ValueError(f"trl_sft: unknown dtype {p.dtype!r}; use auto, float32, bfloat16 or float16")
        dtype = names[p.dtype]
        return cuda, dtype, cuda and dtype == torch.bfloat16

    def _load_model(self, request: TrainRequest, dtype):
        """The model to train: base, base + trainable adapter, or a full checkpoint."""
        from transformers import AutoModelForCausalLM

        init = request.init_weights
        if init and not Path(init).exists():
            raise FileNotFoundError(f"trl_sft: init_weights {init!r} does not exist")
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
        from peft import LoraConfig, PeftModel

        if not self.params.lora or isinstance(model, PeftModel):
            return None
        tm = self.params.target_modules
        targets: Any = tm if tm == "all-linear" else [t.strip() for t in tm.split(",") if t.strip()]
        return LoraConfig(
            r=self.params.lora_r,
            lora_alpha=self.params.lora_alpha,
            lora_dropout=self.params.lora_dropout,
            target_modules=targets,
            bias="none",
            task_type="CAUSAL_LM",
        )

    def build(self, request: TrainRequest):
        """The configured ``trl.SFTTrainer`` for ``request`` (not yet trained)."""
        import torch
        from transformers import AutoTokenizer, set_seed
        from trl import SFTConfig, SFTTrainer

        p = self.params
        if not request.trajectories:
            raise ValueError("trl_sft: no trajectories to train on")
        out = Path(request.output_dir)
        out.mkdir(parents=True, exist_ok=True)
        torch.set_num_threads(cpu_threads(p.threads))
        set_seed(request.seed)

        use_cuda, dtype, bf16 = self._device()
        fmt_src = request.init_weights if has_tokenizer(request.init_weights) else request.base_model
        self.chat_format = ChatFormat.from_pretrained(fmt_src)
        tokenizer = self.chat_format.tokenizer
        if tokenizer.pad_token is None:  # the collator pads; padded positions never carry loss
            tokenizer.pad_token = tokenizer.eos_token
        dataset, self.examples = build_dataset(request.trajectories, self.chat_format, p.max_length)
        if self.examples.truncated:
            log.warning("trl_sft: %d of %d training examples are longer than max_length=%d tokens and were cut at the "
                        "end (%d left without an assistant token were dropped); the agent never learns their last "
                        "turns. Raise trainer.max_length (and the policy's context with it) to keep them.",
                        self.examples.truncated, len(request.trajectories), p.max_length, self.examples.dropped)

        world = int(os.environ.get("WORLD_SIZE", "1"))
        accum = max(1, p.batch_size // max(1, p.per_device_batch_size * world))
        total_steps = optimizer_steps(len(dataset), p.per_device_batch_size, world, accum, float(request.epochs),
                                      p.max_steps)
        callbacks = [*self.extra_callbacks, RichProgress(f"train {out.name}")]
        trackers = parse_trackers(p.report_to)
        if "tensorboard" in trackers:  # an explicit callback, to put the events in output_dir/logs
            from torch.utils.tensorboard import SummaryWriter
            from transformers.integrations import TensorBoardCallback

            callbacks.append(TensorBoardCallback(tb_writer=SummaryWriter(log_dir=str(out / "logs"))))
        others = [t for t in trackers if t != "tensorboard"]

        config = SFTConfig(
            output_dir=str(out / "checkpoints"),
            num_train_epochs=float(request.epochs),
            max_steps=p.max_steps,
            per_device_train_batch_size=p.per_device_batch_size,
            gradient_accumulation_steps=accum,
            learning_rate=p.learning_rate,
            lr_scheduler_type=p.lr_scheduler_type,
            warmup_steps=warmup_steps(float(p.warmup_ratio), total_steps),  # an int: read alike by transformers 4 and 5
            weight_decay=p.weight_decay,
            max_length=p.max_length,
            assistant_only_loss=False,  # the dataset's assistant_masks (our own template's masks) apply as is
            packing=False,
            save_strategy="steps",
            save_steps=p.save_steps,
            save_total_limit=p.save_total_limit,
            logging_steps=p.logging_steps,
            logging_first_step=True,
            report_to=others or "none",
            run_name=f"{Path(request.output_dir).parent.parent.name}/{out.name}",
            seed=request.seed,
            data_seed=request.seed,
            bf16=bf16,
            fp16=False,
            use_cpu=not use_cuda,
            gradient_checkpointing=bool(p.gradient_checkpointing),
            dataloader_num_workers=0,
            dataset_num_proc=None,
            disable_tqdm=True,
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

    # ------------------------------------------------------------------ train

    def train(self, request: TrainRequest) -> str:
        final = Path(request.output_dir) / "final"
        if final.is_dir():
            return str(final)
        if self.params.launch.num_processes > 1:
            launching.launch(request, self.params)
            return str(final)
        return self.train_in_process(request)

    def train_in_process(self, request: TrainRequest) -> str:
        """Train in this process: alone, or as one rank of ``accelerate launch`` (every rank runs this)."""
        out = Path(request.output_dir)
        final = out / "final"
        import torch

        prev_threads = torch.get_num_threads()
        start = time.time()
        trainer = None
        try:
            trainer = self.build(request)
            resume = latest_checkpoint(out / "checkpoints")
            if resume:
                log.info("trl_sft: resuming from %s", resume)
            result = trainer.train(resume_from_checkpoint=resume)
            tmp = out / "final.tmp"  # one name for every rank: they all write into it
            if trainer.is_world_process_zero() and tmp.exists():
                shutil.rmtree(tmp)
            trainer.accelerator.wait_for_everyone()
            # every rank calls save_model: under FSDP / ZeRO-3 gathering the full weights is a collective,
            # and only the main process writes
            trainer.save_model(str(tmp))
            trainer.accelerator.wait_for_everyone()
            if trainer.is_world_process_zero():
                self.chat_format.save(tmp)
                os.replace(tmp, final)
                self._write_summary(out, trainer, result, time.time() - start, resume)
                if not self.params.keep_checkpoints:
                    shutil.rmtree(out / "checkpoints", ignore_errors=True)
            trainer.accelerator.wait_for_everyone()
        finally:
            torch.set_num_threads(prev_threads)
            trainer = None
            release_memory()
        return str(final)

    def _write_summary(self, out: Path, trainer, result, wall: float, resumed: str | None) -> None:
        losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
        model = trainer.model
        summary = {
            "steps": trainer.state.global_step,
            "epochs": trainer.state.epoch,
            "train_loss_first": losses[0] if losses else None,
            "train_loss_last": losses[-1] if losses else None,
            "train_loss_mean": getattr(result, "training_loss", None),
            "losses": losses,
            "wall_seconds": round(wall, 2),
            "examples": len(trainer.train_dataset),
            "trainable_params": sum(p.numel() for p in model.parameters() if p.requires_grad),
            "total_params": sum(p.numel() for p in model.parameters()),
            "lora": self.params.lora,
            "chat_format": dataclasses.asdict(self.chat_format.info),
            "truncated_examples": self.examples.truncated,
            "dropped_examples": self.examples.dropped,
            "resumed_from": resumed,
            "loading": dataclasses.asdict(self.loading) if self.loading is not None else None,
        }
        tmp = out / "training_summary.json.tmp"
        tmp.write_text(json.dumps(summary, indent=2))
        os.replace(tmp, out / "training_summary.json")


Params = TrlSftTrainer.Params
"""The name older code imports (the parameters are declared in the class)."""


@hookimpl
def sand_register_trainers(register):
    register(TrlSftTrainer)
