"""Preference fine-tuning of the agent with TRL's ``DPOTrainer`` (ETO's and IPR's training step), LoRA or full.

Trained the way ``trl_sft`` trains: every pair is rendered with the base
model's own chat template (:class:`sand_framework.chat_format.ChatFormat`, no
other template substituted), the loss of each side covers its assistant
replies and their end-of-turn token only (the observations between them are
masked, as ETO's ``train_dpo`` masks the human turns), and the prompt the
policy renders for each step is checked to be a token prefix of what is
trained (:mod:`.dpo_data`).

**Reference model.** ``request.reference_weights`` (the method's choice:
ETO's current agent = ``init_weights``, IPR's fixed SFT model, or None = the
base model) is held without a second copy of the model wherever LoRA allows:

* LoRA, ``init_weights`` an adapter: training *continues that adapter*; the
  reference is a frozen adapter named ``ref`` beside it (TRL's own mechanism):
  a bit-exact copy of the init adapter when the reference is the init weights
  (ETO), the reference adapter loaded from disk when it is another adapter on
  the same base (IPR's SFT adapter), or no adapter at all (adapters disabled)
  when the reference is the base model. The output stays a LoRA adapter on
  the base model, so every policy loads it as the next agent exactly as it
  loads an SFT adapter (and vLLM's LoRA engine layout, chosen from the
  ``trainer`` slot, stays right). Merging the init adapter into the base and
  training a fresh adapter on top would give the same reference but a merged
  full model per iteration as output. The adapter's rank and target modules
  are the init adapter's (``lora_r`` & co. apply to fresh adapters only).
* LoRA from the base model: a fresh adapter; reference = adapters disabled
  (the base), or a ``ref`` adapter when the reference is an adapter.
* LoRA on a full-model ``init_weights`` (a full SFT): a fresh adapter on that
  model, merged into it at the end: ``final/`` is then a full model.
* A reference that is a full model the adapters cannot express, and every
  full fine-tune (``lora: false``): an explicit frozen ``ref_model`` loaded
  from the reference weights (a second copy of the model, as ETO's and IPR's
  own ``train_dpo`` keep).

Per-iteration settings: ``beta`` and ``learning_rate`` are lists indexed by
``request.iteration - 1``, the last repeating (ETO: 0.1 / 1e-6 in iteration
1, 0.5 / 5e-7 after).

Outputs, as ``trl_sft``'s, under ``request.output_dir``: ``checkpoints/``
(resumable: a killed stage continues from the newest complete one),
``final/`` (adapter or full model + tokenizer + ``sand_chat_format.json``,
renamed into place), ``logs/`` (TensorBoard) and ``training_summary.json``
(steps, losses, pairs, reward accuracy and margins as TRL logs them). With
``launch.num_processes > 1`` the stage runs under ``accelerate launch``
(:mod:`.launch`). What both trainers do around TRL's trainer (set-up, resume,
the atomic ``final/``, the summary's common entries) is :mod:`.stage`.
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from annotated_types import Ge, Gt, Interval, MinLen

from sand_framework import hookimpl
from sand_framework.components import PreferenceTrainer, PreferenceTrainRequest, TrainRequest
from sand_framework.errors import TrainingInputError
from sand_builtins.models import is_adapter
from sand_builtins.trainers.dpo_data import MaskedPreferenceCollator, build_dataset
from sand_builtins.trainers.launch import LaunchParams
from sand_builtins.trainers.loading import broadcast_from_rank0, prepare_loading
from sand_builtins.trainers.stage import MAX_BATCH, MAX_DEVICE_BATCH, StageParams, TrlStage, logged
from sand_builtins.trainers.trackers import tracker_problems

__all__ = ["MAX_BATCH", "MAX_DEVICE_BATCH", "DpoTrainer", "LaunchParams", "Params", "tracker_problems"]
"""Names other modules import from here (the shared ones are declared in :mod:`.stage`, :mod:`.launch`,
:mod:`.trackers`)."""

log = logging.getLogger(__name__)

REF_ADAPTER = "ref"
"""The frozen reference adapter's name (TRL's: its DPOTrainer uses an adapter of this name as the reference)."""

LOSS_TYPES = ("sigmoid", "hinge", "ipo", "robust", "sigmoid_norm")
"""TRL ``loss_type`` values offered (pairwise losses that need no extra setting)."""


def per_iteration(values: list[float], iteration: int) -> float:
    """``values[iteration - 1]``, the last entry for later iterations (and the first for iteration 0)."""
    return float(values[min(max(iteration, 1), len(values)) - 1])


def _same_weights(a: str | None, b: str | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return Path(a).resolve() == Path(b).resolve()


def _sand_dpo_trainer_class():
    """TRL's ``DPOTrainer`` taking our pre-tokenized, pre-masked rows as they are.

    Three private methods are overridden, each because TRL 1.16 has no public hook for it: ``_prepare_dataset``
    (TRL skips its own tokenization only for vision datasets; SFTConfig's ``dataset_kwargs.skip_prepare_dataset``
    has no DPO counterpart), ``_set_signature_columns_if_needed`` (the columns our collator reads, not those of
    TRL's tokenization) and ``_save`` (it writes checkpoints too, and no callback runs between a checkpoint's
    files and the moment a resume can find them). ``tests/components/test_trainer_dpo.py`` trains through all three.
    """
    from trl import DPOTrainer

    class SandDPOTrainer(DPOTrainer):
        def _prepare_dataset(self, dataset, processing_class, args, dataset_name):
            return dataset  # tokenized and masked by dpo_data with the model's own template

        def _set_signature_columns_if_needed(self):
            if self._signature_columns is None:
                self._signature_columns = ["prompt_ids", "chosen_ids", "rejected_ids", "chosen_mask",
                                           "rejected_mask", "ref_chosen_logps", "ref_rejected_logps"]

        def _save(self, output_dir=None, state_dict=None):
            super()._save(output_dir, state_dict)
            # PEFT saves every adapter, the frozen reference into <dir>/ref; a resume that found that folder
            # would load only it (transformers loads adapter subfolders instead of the root adapter), and the
            # reference is rebuilt from its source on every start anyway
            shutil.rmtree(Path(output_dir or self.args.output_dir) / REF_ADAPTER, ignore_errors=True)

    return SandDPOTrainer


class DpoTrainer(TrlStage, PreferenceTrainer["DpoTrainer.Params"]):
    """DPO with TRL on preference pairs; LoRA by default (reference without a second model copy), or full."""

    loads_reference = True  # a full fine-tune loads an explicit ref_model (twice the host RAM at the load)

    name: ClassVar[str] = "trl_dpo"
    description: ClassVar[str] = ("DPO (TRL DPOTrainer) on preference pairs, loss on assistant replies only, "
                                  "LoRA or full, optional SFT term on the chosen side")
    summary_unit: ClassVar[str] = "pairs"

    def train(self, request: PreferenceTrainRequest | TrainRequest) -> str:
        """As :meth:`TrlStage.train`; a 0.3.4-style ``TrainRequest`` with pairs is taken as its preference request."""
        return super().train(PreferenceTrainRequest.of(request))

    @dataclass
    class Params(StageParams):
        lora: bool = True
        """Train a LoRA adapter (True) or fine-tune every weight (False). With LoRA the reference costs no second
        model copy (a frozen adapter or adapters disabled); a full fine-tune keeps a frozen reference model."""
        beta: Annotated[list[Annotated[float, Gt(0)]], MinLen(1)] = field(default_factory=lambda: [0.1, 0.5])
        """DPO beta per iteration: entry k-1 for iteration k, the last repeating (ETO: 0.1, then 0.5; IPR: [0.1])."""
        learning_rate: Annotated[list[Annotated[float, Gt(0)]], MinLen(1)] = field(
            default_factory=lambda: [1e-6, 5e-7])
        """Peak learning rate per iteration, indexed like ``beta`` (ETO's full fine-tune: 1e-6, then 5e-7; IPR:
        [3e-6]). A LoRA adapter usually needs 10-50x more (e.g. ``[5e-5, 2.5e-5]``)."""
        loss_type: Literal["sigmoid", "hinge", "ipo", "robust", "sigmoid_norm"] = "sigmoid"
        """TRL's preference loss: ``sigmoid`` is DPO (ETO, IPR); ``hinge``, ``ipo``, ``robust``, ``sigmoid_norm``
        (length-normalized DPO) are TRL's variants."""
        label_smoothing: Annotated[float, Interval(ge=0, lt=0.5)] = 0.0
        """Conservative-DPO label smoothing (``robust`` loss); 0 for plain DPO."""
        sft_weight: Annotated[float, Ge(0)] = 0.0
        """Weight of an NLL term on the chosen side added to the preference loss: IPR's ``DPO - log pi(chosen)``
        is 1.0; 0 (ETO) adds none. It is TRL's ``sft`` loss: the mean negative log-likelihood per trained chosen
        token of the micro-batch (TRL 1.16 has no ``rpo_alpha``)."""
        lr_scheduler_type: str = "constant_with_warmup"
        """Any ``transformers`` scheduler name (ETO: ``constant_with_warmup``; ``cosine``, ``linear`` ...)."""
        warmup_ratio: Annotated[float, Interval(ge=0, lt=1)] = 0.1
        """Fraction of the total steps spent warming the learning rate up, in [0, 1) (ETO, IPR: 0.1)."""
        batch_size: Annotated[int, Interval(ge=1, le=MAX_BATCH)] = 32
        """Effective batch size in pairs: ``per_device_batch_size`` x gradient accumulation x devices (ETO: 32,
        IPR: 48); at most 65536."""
        max_length: Annotated[int, Ge(1)] = 4096
        """Tokens kept per prompt + side (a longer side is cut at its end); a pair left with a side without any
        trained token is dropped (ETO: 4096)."""
        max_prompt_length: Annotated[int, Ge(0)] = 0
        """Longest prompt in tokens; a longer one loses its oldest (reply, observation) turns after the task, as the
        policy shortens a prompt that does not fit. 0 = no limit beyond ``max_length`` (ETO: 512)."""
        disable_dropout: bool = True
        """Turn dropout off in the policy and the reference (TRL's default: the log-ratios then compare like with
        like)."""
        def validate(self) -> list[str]:
            problems = super().validate()
            if self.max_prompt_length >= self.max_length:
                problems.append(f"max_prompt_length: {self.max_prompt_length} leaves no room for the replies within "
                                f"max_length={self.max_length}; lower it (ETO: 512 of 4096) or use 0")
            if self.per_device_batch_size > self.batch_size:
                problems.append(f"per_device_batch_size: {self.per_device_batch_size} is above batch_size="
                                f"{self.batch_size}")
            return problems

    def __init__(self, params: Any = None):
        super().__init__(params)
        self.reference: str = ""
        """How the last :meth:`build` held the reference model (recorded in the training summary)."""
        self.merge_at_end = False
        self._merge_into: tuple[str, Any] = ("", None)
        """(init model folder, dtype) the trained adapter is merged into when ``merge_at_end``."""

    # ------------------------------------------------------------------ setup

    @staticmethod
    def _load_full(weights: str | None, base_model: str, dtype):
        """``weights`` as one plain model: the base, base + adapter merged, or a full model folder."""
        from transformers import AutoModelForCausalLM

        if is_adapter(weights):
            from peft import PeftModel

            base = AutoModelForCausalLM.from_pretrained(base_model, dtype=dtype)
            return PeftModel.from_pretrained(base, weights).merge_and_unload()
        return AutoModelForCausalLM.from_pretrained(weights or base_model, dtype=dtype)

    @classmethod
    def _load_reference(cls, weights: str | None, base_model: str, dtype):
        """The explicit frozen ``ref_model``: :meth:`_load_full`, with rank 0's weights on every rank
        (:func:`~sand_builtins.trainers.loading.broadcast_from_rank0`: TRL never broadcasts a reference)."""
        return broadcast_from_rank0(cls._load_full(weights, base_model, dtype))

    def _load_models(self, request: PreferenceTrainRequest, dtype) -> tuple[Any, Any, Any, str | None]:
        """(policy model, explicit ref_model or None, peft_config or None, reference adapter to load or None)."""
        from transformers import AutoModelForCausalLM

        init, ref = request.init_weights, request.reference_weights
        for what, path in (("init_weights", init), ("reference_weights", ref)):
            if path and not Path(path).exists():
                raise TrainingInputError(f"trl_dpo: {what} {path!r} does not exist")
        same = _same_weights(init, ref)
        self.merge_at_end = False
        if not self.params.lora:
            model = self._load_full(init, request.base_model, dtype).requires_grad_(True)  # peft froze a merge
            self.reference = f"ref_model loaded from {ref or 'the base model'} (full fine-tune)"
            return model, self._load_reference(ref, request.base_model, dtype), None, None
        if is_adapter(init):
            from peft import PeftModel

            base = AutoModelForCausalLM.from_pretrained(request.base_model, dtype=dtype)
            model = PeftModel.from_pretrained(base, init, is_trainable=True)
            if same:
                self.reference = "frozen copy of the init adapter (adapter 'ref')"
                return model, None, None, None
            return self._reference_on_base(model, None, ref, request.base_model, dtype)
        # a fresh adapter: on the base model, or on a full init model (merged into it at the end)
        model = AutoModelForCausalLM.from_pretrained(init or request.base_model, dtype=dtype)
        config = self._lora_config()
        if init:  # the adapter is relative to the init model, not to the base: final/ is the merged model
            self.merge_at_end = True
            self._merge_into = (init, dtype)
            if same:
                self.reference = "the init model (adapters disabled)"
                return model, None, config, None
            self.reference = f"ref_model loaded from {ref or 'the base model'}"
            return model, self._load_reference(ref, request.base_model, dtype), config, None
        return self._reference_on_base(model, config, ref, request.base_model, dtype)

    def _reference_on_base(self, model, config, ref: str | None, base_model: str,
                           dtype) -> tuple[Any, Any, Any, str | None]:
        """:meth:`_load_models`' answer for a policy that is adapters on the base model: the reference is the base
        (adapters disabled), an adapter ``ref`` on the same base, or else an explicit full ``ref_model``."""
        if ref is None:
            self.reference = "the base model (adapters disabled)"
            return model, None, config, None
        if is_adapter(ref):
            self.reference = f"adapter 'ref' loaded from {ref}"
            return model, None, config, ref
        self.reference = f"ref_model loaded from {ref} (a full model)"
        return model, self._load_reference(ref, base_model, dtype), config, None

    def build(self, request: PreferenceTrainRequest):
        """The configured TRL DPO trainer for ``request`` (not yet trained)."""
        from trl import DPOConfig

        p = self.params
        if not request.pairs:
            raise TrainingInputError("trl_dpo: no preference pairs to train on")
        self._prepare(request)
        use_cuda, dtype, bf16 = self._device()
        tokenizer = self.chat_format.tokenizer
        dataset, self.examples = build_dataset(request.pairs, self.chat_format, p.max_length, p.max_prompt_length)
        if self.examples.truncated:
            log.warning("trl_dpo: %d of %d pairs are longer than max_length=%d / max_prompt_length=%d tokens and "
                        "were cut (%d left without a trained token on a side were dropped). Raise "
                        "preference_trainer.max_length to keep them.", self.examples.truncated, len(request.pairs),
                        p.max_length, p.max_prompt_length, self.examples.dropped)
        self.beta = per_iteration(p.beta, request.iteration)
        self.learning_rate = per_iteration(p.learning_rate, request.iteration)
        args, callbacks = self._arguments(request, len(dataset), "dpo", use_cuda, bf16)
        losses = [p.loss_type] + (["sft"] if p.sft_weight > 0 else [])
        config = DPOConfig(
            **args,
            learning_rate=self.learning_rate,
            beta=self.beta,
            loss_type=losses,
            loss_weights=[1.0, float(p.sft_weight)] if p.sft_weight > 0 else None,
            label_smoothing=p.label_smoothing,
            max_length=None,  # dpo_data already cut every row to max_length
            disable_dropout=p.disable_dropout,
        )
        # arguments before weights: the loads below are ZeRO-3 / FSDP-aware (.loading)
        self.loading = prepare_loading(config)
        model, ref_model, peft_config, ref_adapter = self._load_models(request, dtype)
        model.config.use_cache = False
        trainer = _sand_dpo_trainer_class()(
            model=model,
            ref_model=ref_model,
            args=config,
            data_collator=MaskedPreferenceCollator(pad_token_id=tokenizer.pad_token_id),
            train_dataset=dataset,
            processing_class=tokenizer,
            peft_config=peft_config,
            callbacks=callbacks,
        )
        self._place_reference(trainer, ref_adapter, request)
        return trainer

    def _place_reference(self, trainer, ref_adapter: str | None, request: PreferenceTrainRequest) -> None:
        """Make the PEFT model's ``ref`` adapter what :meth:`_load_models` decided (TRL copies the init adapter
        into ``ref`` whenever it is handed a PEFT model and no ref_model)."""
        from accelerate.utils import is_peft_model

        model = trainer.accelerator.unwrap_model(trainer.model)
        if not is_peft_model(model) or trainer.ref_model is not None:
            return
        has_ref = REF_ADAPTER in model.peft_config
        keep_copy = is_adapter(request.init_weights) and _same_weights(request.init_weights,
                                                                       request.reference_weights)
        if has_ref and not keep_copy:
            model.delete_adapter(REF_ADAPTER)
        if ref_adapter is not None:
            model.load_adapter(ref_adapter, adapter_name=REF_ADAPTER, is_trainable=False)
        model.set_adapter("default")
        for name, param in model.named_parameters():  # only the policy's adapter learns
            if f".{REF_ADAPTER}." in name:
                param.requires_grad_(False)

    # ------------------------------------------------------------------ output

    def _save_weights(self, trainer, folder: Path) -> None:
        """The trained adapter or model, without the frozen reference; an adapter on a full init model is
        merged into it (the next agent is the merged model)."""
        # Every rank saves the adapter first: under FSDP gathering it is a collective (a merge on rank 0 alone
        # of a sharded model would wait for ranks that never join, or merge rank 0's shards only).
        super()._save_weights(trainer, folder)
        if trainer.is_world_process_zero():
            shutil.rmtree(folder / REF_ADAPTER, ignore_errors=True)
            if self.merge_at_end:
                self._merge_saved_adapter(folder)

    def _merge_saved_adapter(self, folder: Path) -> None:
        """Replace the adapter saved in ``folder`` by the init model with it merged: a plain model loaded on this
        process's CPU from the files, so no rank's shards are involved."""
        from peft import PeftModel
        from transformers import AutoModelForCausalLM

        init, dtype = self._merge_into
        model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(init, dtype=dtype), str(folder))
        merged = model.merge_and_unload()
        for name in ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin"):
            (folder / name).unlink(missing_ok=True)
        merged.save_pretrained(str(folder))
        del model, merged

    def _stage_facts(self, trainer, request: PreferenceTrainRequest, wall: float) -> dict[str, Any]:
        """Reward accuracy and margins as TRL logs them, the pairs, and the iteration's settings and reference."""
        accuracies, margins = logged(trainer, "rewards/accuracies"), logged(trainer, "rewards/margins")
        return {
            "reward_accuracy_first": accuracies[0] if accuracies else None,
            "reward_accuracy_last": accuracies[-1] if accuracies else None,
            "reward_margin_first": margins[0] if margins else None,
            "reward_margin_last": margins[-1] if margins else None,
            "reward_margins": margins,
            "wall_seconds": wall,
            "pairs": len(request.pairs),
            "pairs_truncated": self.examples.truncated,
            "pairs_dropped": self.examples.dropped,
            "examples": len(trainer.train_dataset),
            "iteration": request.iteration,
            "beta": self.beta,
            "learning_rate": self.learning_rate,
            "loss_type": self.params.loss_type,
            "sft_weight": self.params.sft_weight,
            "reference": self.reference,
            "reference_weights": request.reference_weights,
            "init_weights": request.init_weights,
            "output": "full (adapter merged into the init model)" if self.merge_at_end else
                      self.weights_kind(self.params),
        }


Params = DpoTrainer.Params
"""An alias of :class:`DpoTrainer.Params` (a third-party trainer or test may import it by this name)."""


@hookimpl
def sand_register_preference_trainers(register):
    register(DpoTrainer)
