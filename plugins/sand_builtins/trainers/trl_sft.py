"""Supervised fine-tuning of the agent with TRL's ``SFTTrainer`` (LoRA or full).

The agent is trained on exactly the chats it is later sampled from
(:func:`sand_framework.prompting.trajectory_chat`), with the loss on assistant
turns only: the environment instruction, the task and every observation are
masked out.

Loss masking uses TRL's ``assistant_only_loss``, which needs a chat template
with ``{% generation %}`` markers. In order of preference the trainer uses:

1. the tokenizer's own template, when it already has the markers;
2. TRL's render-identical training variant of a template TRL knows (Qwen,
   Llama 3, ...), applied in memory only;
3. SAND's ChatML template (:data:`sand_framework.chat_template.CHAT_TEMPLATE`)
   when the tokenizer has ChatML's ``<|im_start|>``/``<|im_end|>`` tokens
   (SmolLM2 and friends). That template is installed on the tokenizer and
   saved with the final weights, so the agent is sampled with the template it
   was trained on;
4. otherwise a :class:`ValueError` naming the fix.

Outputs, all in standard Hugging Face format under ``request.output_dir``:

* ``checkpoints/checkpoint-N``  — resumable checkpoints (a killed stage
  continues from the newest complete one);
* ``final/``                    — the weights (LoRA adapter + tokenizer, or a
  full model + tokenizer), written to a temporary directory and renamed, so
  its existence means training finished; a second call returns it at once;
* ``logs/``                     — TensorBoard events (``report_to``);
* ``training_summary.json``     — steps, first/last loss, wall time, examples.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from sand_framework import hookimpl
from sand_framework.chat_template import CHAT_TEMPLATE
from sand_framework.components import Trainer, TrainRequest
from sand_framework.prompting import trajectory_chat
from sand_framework.types import Trajectory

log = logging.getLogger(__name__)

_CKPT_RE = re.compile(r"^checkpoint-(\d+)$")


@dataclass
class Params:
    lora: bool = True
    """Train a LoRA adapter (True) or fine-tune every weight (False)."""
    lora_r: int = 16
    """LoRA rank."""
    lora_alpha: int = 32
    """LoRA scaling numerator (effective scale ``lora_alpha / lora_r``)."""
    lora_dropout: float = 0.05
    """Dropout on the LoRA branch."""
    target_modules: str = "all-linear"
    """Modules LoRA wraps: ``all-linear`` or a comma-separated list (``q_proj,v_proj``)."""
    learning_rate: float = 2e-4
    """Peak learning rate. 2e-4 suits LoRA on short runs; the paper's full fine-tune uses 1e-5."""
    lr_scheduler_type: str = "cosine"
    """Any ``transformers`` scheduler name (``cosine``, ``linear``, ``constant``, ...)."""
    warmup_ratio: float = 0.03
    """Fraction of the total steps spent warming the learning rate up, in [0, 1)."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    batch_size: int = 8
    """Effective batch size: ``per_device_batch_size`` × gradient accumulation × devices."""
    per_device_batch_size: int = 1
    """Sequences per forward pass; gradient accumulation makes up the rest of ``batch_size``."""
    max_length: int = 4096
    """Tokens kept per trajectory (the start is kept); examples left without assistant tokens are dropped."""
    max_steps: int = -1
    """Stop after this many optimizer steps; -1 trains for ``request.epochs`` epochs."""
    save_steps: int = 50
    """Write a resumable checkpoint every this many optimizer steps."""
    save_total_limit: int = 2
    """Checkpoints kept in ``checkpoints/`` while training."""
    keep_checkpoints: bool = False
    """Keep ``checkpoints/`` after ``final/`` is written (False deletes them to save disk)."""
    logging_steps: int = 5
    """Log loss and learning rate every this many optimizer steps."""
    report_to: str = "tensorboard"
    """``tensorboard`` (events in ``output_dir/logs``) or ``none``."""
    threads: int = 1
    """torch CPU threads during training; 0 leaves torch's default."""
    dtype: str = "auto"
    """Weights dtype: ``auto`` (fp32 on CPU; bf16 on GPU for LoRA, fp32 + bf16 autocast for full), ``float32``,
    ``bfloat16``, ``float16``."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass instead of keeping them: less memory, more compute
    (``benchmarks/train_memory.py`` measures both); the trained weights are the same."""


def build_dataset(trajectories: list[Trajectory]):
    """The SFT dataset: one conversational example ``{"messages": chat}`` per trajectory."""
    from datasets import Dataset

    return Dataset.from_list([{"messages": trajectory_chat(t)} for t in trajectories])


def _has_generation_markers(template: Any) -> bool:
    if isinstance(template, dict):
        template = template.get("default", "")
    return bool(template) and re.search(r"\{%-?\s*generation\s*-?%\}", template) is not None


def prepare_chat_template(tokenizer) -> str:
    """Make ``tokenizer`` able to mask the loss to assistant turns; return how.

    Returns ``"own"`` (template already has ``{% generation %}``), ``"trl"`` (TRL
    patches a template it knows, in memory) or ``"sand_chatml"`` (SAND's ChatML
    template installed on the tokenizer). Raises ``ValueError`` otherwise.
    """
    template = getattr(tokenizer, "chat_template", None)
    if _has_generation_markers(template):
        return "own"
    if template:
        try:
            from trl.chat_template_utils import get_training_chat_template

            if get_training_chat_template(tokenizer):
                return "trl"
        except Exception:  # noqa: BLE001 - unknown template: fall through
            pass
    vocab = tokenizer.get_vocab()
    if "<|im_start|>" in vocab and "<|im_end|>" in vocab:
        log.warning("tokenizer's chat template has no {% generation %} markers; installing SAND's ChatML template")
        tokenizer.chat_template = CHAT_TEMPLATE
        return "sand_chatml"
    raise ValueError(
        "trl_sft: the tokenizer's chat template cannot mask the loss to assistant turns (it has no "
        "'{% generation %}...{% endgeneration %}' markers, TRL has no training variant of it, and the tokenizer "
        "has no ChatML tokens for SAND's template). Fix: save the base model's tokenizer with a chat template "
        "that wraps each assistant reply and its end-of-turn token in {% generation %}...{% endgeneration %} "
        "(see sand_framework/chat_template.py for a ChatML example)."
    )


def release_memory() -> None:
    """Hand the training stage's memory back before sampling/evaluation start in the same process.

    Activations and optimizer state of a CPU run stay in glibc's arenas after
    the trainer is gone (a 135M-parameter SFT left ~7 GB resident); trimming
    them lets several runs share a small machine.
    """
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def latest_checkpoint(ckpt_dir: str | os.PathLike) -> str | None:
    """The newest complete ``checkpoint-N`` (one with ``trainer_state.json``, written last), or None."""
    root = Path(ckpt_dir)
    if not root.is_dir():
        return None
    found = sorted(
        (int(m.group(1)), p) for p in root.iterdir() if p.is_dir() and (m := _CKPT_RE.match(p.name))
    )
    for _, path in reversed(found):
        if (path / "trainer_state.json").exists():
            return str(path)
    return None


def _is_adapter(path: str | None) -> bool:
    return bool(path) and (Path(path) / "adapter_config.json").exists()


def _has_tokenizer(path: str | None) -> bool:
    return bool(path) and any(
        (Path(path) / f).exists() for f in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")
    )


def _rich_progress_callback():
    from transformers import TrainerCallback

    class _RichProgress(TrainerCallback):
        """Optimizer steps with loss and ETA on a rich progress bar (TRL's own tqdm is off)."""

        def __init__(self, label: str):
            self.label, self.progress, self.task = label, None, None

        def on_train_begin(self, args, state, control, **kwargs):
            import os as _os

            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                     TextColumn("{task.fields[loss]}"), TextColumn("eta"), TimeRemainingColumn(),
                                     disable=_os.environ.get("SAND_NO_PROGRESS") == "1")
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


class TrlSftTrainer(Trainer):
    """Assistant-only-loss SFT with TRL; LoRA by default, full fine-tune with ``lora: false``."""

    name: ClassVar[str] = "trl_sft"
    Params: ClassVar[type] = Params
    description: ClassVar[str] = "TRL SFTTrainer on the agent's chats, loss on assistant turns only (LoRA or full)."

    def __init__(self, params: Any = None):
        super().__init__(params)
        self.extra_callbacks: list[Any] = []
        """``transformers.TrainerCallback`` objects added to every run (tests, progress bars)."""

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
        if _is_adapter(init):
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
        if p.threads > 0:
            torch.set_num_threads(p.threads)
        set_seed(request.seed)

        use_cuda, dtype, bf16 = self._device()
        tok_src = request.init_weights if _has_tokenizer(request.init_weights) else request.base_model
        tokenizer = AutoTokenizer.from_pretrained(tok_src)
        self.masking = prepare_chat_template(tokenizer)
        model = self._load_model(request, dtype)
        model.config.use_cache = False

        world = int(os.environ.get("WORLD_SIZE", "1"))
        accum = max(1, p.batch_size // max(1, p.per_device_batch_size * world))
        callbacks = [*self.extra_callbacks, RichProgress(f"train {out.name}")]
        report_to = p.report_to.lower()
        if report_to == "tensorboard":
            from torch.utils.tensorboard import SummaryWriter
            from transformers.integrations import TensorBoardCallback

            callbacks.append(TensorBoardCallback(tb_writer=SummaryWriter(log_dir=str(out / "logs"))))
        elif report_to not in ("none", ""):
            raise ValueError(f"trl_sft: report_to must be 'tensorboard' or 'none', got {p.report_to!r}")

        config = SFTConfig(
            output_dir=str(out / "checkpoints"),
            num_train_epochs=float(request.epochs),
            max_steps=p.max_steps,
            per_device_train_batch_size=p.per_device_batch_size,
            gradient_accumulation_steps=accum,
            learning_rate=p.learning_rate,
            lr_scheduler_type=p.lr_scheduler_type,
            warmup_steps=float(p.warmup_ratio),
            weight_decay=p.weight_decay,
            max_length=p.max_length,
            assistant_only_loss=True,
            packing=False,
            save_strategy="steps",
            save_steps=p.save_steps,
            save_total_limit=p.save_total_limit,
            logging_steps=p.logging_steps,
            logging_first_step=True,
            report_to="none",  # TensorBoard is added as an explicit callback, to put logs in output_dir/logs
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
        return SFTTrainer(
            model=model,
            args=config,
            train_dataset=build_dataset(request.trajectories),
            processing_class=tokenizer,
            peft_config=self._peft_config(model),
            callbacks=callbacks,
        )

    # ------------------------------------------------------------------ train

    def train(self, request: TrainRequest) -> str:
        out = Path(request.output_dir)
        final = out / "final"
        if final.is_dir():
            return str(final)
        import torch

        prev_threads = torch.get_num_threads()
        start = time.time()
        try:
            trainer = self.build(request)
            resume = latest_checkpoint(out / "checkpoints")
            if resume:
                log.info("trl_sft: resuming from %s", resume)
            result = trainer.train(resume_from_checkpoint=resume)
            if trainer.is_world_process_zero():
                tmp = out / f"final.tmp-{os.getpid()}"
                if tmp.exists():
                    shutil.rmtree(tmp)
                trainer.save_model(str(tmp))
                trainer.processing_class.save_pretrained(str(tmp))
                os.replace(tmp, final)
                self._write_summary(out, trainer, result, time.time() - start, resume)
                if not self.params.keep_checkpoints:
                    shutil.rmtree(out / "checkpoints", ignore_errors=True)
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
            "masking": getattr(self, "masking", None),
            "resumed_from": resumed,
        }
        tmp = out / "training_summary.json.tmp"
        tmp.write_text(json.dumps(summary, indent=2))
        os.replace(tmp, out / "training_summary.json")


@hookimpl
def sand_register_trainers(register):
    register(TrlSftTrainer)
