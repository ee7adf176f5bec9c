"""The TRL SFT trainer on the tiny random model: masking, LoRA/full outputs, continuation, resume, learning."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

pytest.importorskip("trl")
pytest.importorskip("peft")

from sand_framework.components import TrainRequest  # noqa: E402
from sand_framework.prompting import trajectory_chat  # noqa: E402
from sand_framework.types import Step, Trajectory  # noqa: E402
from sand_builtins.trainers import trl_sft  # noqa: E402
from sand_builtins.trainers.checkpoints import latest_checkpoint  # noqa: E402
from sand_builtins.trainers.trl_sft import LaunchParams, Params, TrlSftTrainer, parse_trackers  # noqa: E402


def _traj(i: int = 0) -> Trajectory:
    return Trajectory(
        task_id=f"t{i}",
        env="toy",
        instruction="You are playing a text game. Your task is to find the coin. Answer with Thought: and Action:.",
        task="You are in the kitchen. You see a coin, a fridge and a door to the west.",
        steps=[
            Step("I should look around first.", "look around", "You see a coin and a fridge."),
            Step("The coin may be in the kitchen.", "take coin", "You take the coin."),
        ],
    )


def _params(**kw) -> Params:
    base = dict(
        max_steps=3, logging_steps=1, batch_size=2, per_device_batch_size=2, save_steps=100,
        report_to="none", learning_rate=1e-2, warmup_ratio=0.0, lr_scheduler_type="constant",
    )
    base.update(kw)
    return Params(**base)


def _request(model: Path, out: Path, n: int = 8, init: str | None = None, epochs: float = 1.0) -> TrainRequest:
    return TrainRequest([_traj(i) for i in range(n)], str(model), init, str(out), epochs=epochs, seed=0)


def _summary(out: Path) -> dict:
    return json.loads((Path(out) / "training_summary.json").read_text())


@pytest.fixture(scope="session")
def tiny(tiny_model_dir) -> Path:
    return Path(tiny_model_dir)  # the session's one tiny model (conftest.py)


@pytest.fixture(scope="session")
def adapter(tiny, tmp_path_factory) -> Path:
    """A LoRA adapter trained for 3 steps, with TensorBoard logging on."""
    out = tmp_path_factory.mktemp("lora")
    final = TrlSftTrainer(_params(report_to="tensorboard")).train(_request(tiny, out))
    assert final == str(out / "final")
    return Path(final)


def test_registered_through_hook():
    from sand_framework.plugins import PluginSet

    ps = PluginSet()
    ps.register(trl_sft, "trl_sft_test", "0", "module")
    assert ps.registries()["trainer"].get("trl_sft") is TrlSftTrainer


def test_lora_adapter_is_loadable_and_trained(tiny, adapter):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = adapter.parent
    assert (adapter / "adapter_config.json").exists() and (adapter / "adapter_model.safetensors").exists()
    assert not (adapter / "model.safetensors").exists()
    AutoTokenizer.from_pretrained(adapter)  # tokenizer saved next to the adapter
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny), adapter)
    lora_b = [p for n, p in model.named_parameters() if "lora_B" in n]
    assert lora_b and any(torch.count_nonzero(p) > 0 for p in lora_b)  # LoRA B starts at zero
    s = _summary(out)
    assert s["steps"] == 3 and s["examples"] == 8 and s["lora"] is True
    assert 0 < s["trainable_params"] < s["total_params"]
    assert s["train_loss_first"] is not None and s["wall_seconds"] > 0
    assert list((out / "logs").glob("events.out.tfevents*"))
    assert not (out / "checkpoints").exists()  # removed once final/ is written


def test_only_assistant_tokens_carry_loss(tiny, tmp_path):
    traj = _traj()
    trainer = TrlSftTrainer(_params()).build(_request(tiny, tmp_path, n=1))
    tok = trainer.processing_class
    row = trainer.train_dataset[0]
    ids, labels = row["input_ids"], row["labels"]
    assert len(ids) == len(labels)
    # contiguous runs of trained tokens
    runs, cur = [], []
    for i, lab in zip(ids, labels):
        if lab == -100:
            if cur:
                runs.append(cur)
                cur = []
        else:
            assert lab == i
            cur.append(i)
    if cur:
        runs.append(cur)
    trained = [tok.decode(r) for r in runs]
    expected = [m["content"] + "<|im_end|>" for m in trajectory_chat(traj) if m["role"] == "assistant"]
    assert trained == expected
    masked = tok.decode([i for i, lab in zip(ids, labels) if lab == -100])
    assert traj.instruction in masked and traj.task in masked
    assert "Observation: You see a coin and a fridge." in masked
    assert not any("Observation" in t or traj.task in t for t in trained)


def test_trackers_are_checked_by_name_and_installation(monkeypatch):
    import transformers.integrations as integrations

    assert parse_trackers("none") == [] and parse_trackers("") == []
    with pytest.raises(ValueError, match="unknown report_to wandbb.*trackio"):
        parse_trackers("wandbb")
    monkeypatch.setattr(integrations, "get_available_reporting_integrations", lambda: ["tensorboard"])
    with pytest.raises(ValueError, match="pip install wandb"):
        parse_trackers("tensorboard, WandB")
    monkeypatch.setattr(integrations, "get_available_reporting_integrations", lambda: ["tensorboard", "wandb"])
    assert parse_trackers("tensorboard, WandB") == ["tensorboard", "wandb"]


def test_any_hf_tracker_reaches_the_trainer(tiny, tmp_path, monkeypatch):
    """A tracker other than TensorBoard goes through transformers' own integration table (here: a stand-in
    callback registered under the name 'trackio', since no tracker package is installed offline)."""
    import transformers.integrations as integrations
    import transformers.integrations.integration_utils as utils
    from transformers import TrainerCallback

    class Recorder(TrainerCallback):
        pass

    monkeypatch.setattr(integrations, "get_available_reporting_integrations", lambda: ["trackio"])
    monkeypatch.setitem(utils.INTEGRATION_TO_CALLBACK, "trackio", Recorder)
    trainer = TrlSftTrainer(_params(report_to="trackio")).build(_request(tiny, tmp_path, n=1))
    assert trainer.args.report_to == ["trackio"]
    assert any(isinstance(cb, Recorder) for cb in trainer.callback_handler.callbacks)


def test_final_weights_carry_the_chat_format(adapter):
    from sand_framework.chat_format import ChatFormat

    info = ChatFormat.saved_info(adapter)
    assert info is not None and info.end_of_turn == ["<|im_end|>"] and info.system == "native"
    assert ChatFormat.from_pretrained(adapter).info == info  # the saved tokenizer renders with the same template


def test_full_finetune_saves_full_model(tiny, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    final = Path(TrlSftTrainer(_params(lora=False, max_steps=2, learning_rate=1e-3)).train(_request(tiny, tmp_path)))
    assert (final / "config.json").exists() and (final / "model.safetensors").exists()
    assert not (final / "adapter_config.json").exists()
    assert (final / "tokenizer.json").exists()
    trained = AutoModelForCausalLM.from_pretrained(final)
    base = AutoModelForCausalLM.from_pretrained(tiny)
    diffs = [not torch.equal(a, b) for a, b in zip(trained.state_dict().values(), base.state_dict().values())]
    assert any(diffs)
    s = _summary(tmp_path)
    assert s["lora"] is False and s["trainable_params"] == s["total_params"]


def test_continue_from_adapter(tiny, adapter, tmp_path):
    from safetensors.torch import load_file

    before = _summary(adapter.parent)
    final = Path(TrlSftTrainer(_params(max_steps=2)).train(_request(tiny, tmp_path, init=str(adapter))))
    assert (final / "adapter_config.json").exists()
    after = _summary(tmp_path)
    # The first logged loss is computed before the first update, i.e. with the previous adapter loaded:
    # it must match where the previous stage ended, not the untrained base.
    assert after["train_loss_first"] < before["train_loss_first"] - 0.05
    old, new = load_file(adapter / "adapter_model.safetensors"), load_file(final / "adapter_model.safetensors")
    assert old.keys() == new.keys()
    assert any(not (old[k] == new[k]).all() for k in old)


def test_existing_final_returns_immediately(adapter, monkeypatch):
    trainer = TrlSftTrainer(_params())

    def boom(request):
        raise AssertionError("must not train again")

    monkeypatch.setattr(trainer, "build", boom)
    req = TrainRequest([_traj()], "/nonexistent/base", None, str(adapter.parent), epochs=1)
    assert trainer.train(req) == str(adapter)


def test_resume_after_kill(tiny, tmp_path):
    import torch
    from transformers import TrainerCallback

    class Kill(TrainerCallback):
        def on_save(self, args, state, control, **kw):
            if state.global_step == 2:
                raise KeyboardInterrupt("simulated kill after checkpoint-2")

    class Count(TrainerCallback):
        steps = 0

        def on_step_end(self, args, state, control, **kw):
            Count.steps += 1

    params = _params(max_steps=4, save_steps=2, save_total_limit=3)
    first = TrlSftTrainer(params)
    first.extra_callbacks.append(Kill())
    with pytest.raises(KeyboardInterrupt):
        first.train(_request(tiny, tmp_path))
    assert not (tmp_path / "final").exists()
    ckpt = latest_checkpoint(tmp_path / "checkpoints")
    assert ckpt is not None and ckpt.endswith("checkpoint-2")

    second = TrlSftTrainer(params)
    second.extra_callbacks.append(Count())
    final = Path(second.train(_request(tiny, tmp_path)))
    assert (final / "adapter_model.safetensors").exists()
    assert Count.steps == 2  # steps 3 and 4 only
    s = _summary(tmp_path)
    assert s["steps"] == 4 and s["resumed_from"].endswith("checkpoint-2")
    assert len(s["losses"]) >= 4  # log history carried over from the checkpoint

    # weights, optimizer, scheduler and data order came back: same result as an uninterrupted run
    from safetensors.torch import load_file

    straight = Path(TrlSftTrainer(params).train(_request(tiny, tmp_path / "straight")))
    a, b = load_file(final / "adapter_model.safetensors"), load_file(straight / "adapter_model.safetensors")
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    assert _summary(tmp_path)["train_loss_last"] == pytest.approx(_summary(tmp_path / "straight")["train_loss_last"])


def test_a_stop_signal_saves_a_checkpoint_at_the_step_end_and_the_resume_trains_the_same_weights(tiny, tmp_path):
    """SIGTERM during step 2 of 4, with no checkpoint due (save_steps 100): the stage saves checkpoint-2 and raises
    RunStopped instead of losing both steps; resuming trains steps 3-4 to the weights of an uninterrupted run."""
    import signal

    import torch
    from safetensors.torch import load_file
    from transformers import TrainerCallback

    from sand_framework.app.runner import stop_on_signals
    from sand_framework.errors import RunStopped

    class Stop(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            if state.global_step == 1:
                os.kill(os.getpid(), signal.SIGTERM)

    params = _params(max_steps=4, save_steps=100)
    first = TrlSftTrainer(params)
    first.extra_callbacks.append(Stop())
    with stop_on_signals(), pytest.raises(RunStopped) as stopped:
        first.train(_request(tiny, tmp_path))
    assert stopped.value.signum == signal.SIGTERM and not (tmp_path / "final").exists()
    assert latest_checkpoint(tmp_path / "checkpoints").endswith("checkpoint-2")

    final = Path(TrlSftTrainer(params).train(_request(tiny, tmp_path)))
    assert _summary(tmp_path)["resumed_from"].endswith("checkpoint-2")
    straight = Path(TrlSftTrainer(params).train(_request(tiny, tmp_path / "straight")))
    a, b = load_file(final / "adapter_model.safetensors"), load_file(straight / "adapter_model.safetensors")
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)


def test_a_further_stop_signal_does_not_wait_for_the_safe_point(monkeypatch):
    """The first signal and its repeat within REPEAT_S (`timeout` signals the command, then its group) wait for
    the step's end; a later one stops at once; outside a safe point every signal stops at once."""
    import signal

    from sand_framework import stopping

    clock = [100.0]
    monkeypatch.setattr(stopping.time, "monotonic", lambda: clock[0])
    assert not stopping.wait_for_safe_point(signal.SIGTERM)
    with pytest.raises(stopping.RunStopped):
        with stopping.stop_at_safe_point() as request:
            assert stopping.wait_for_safe_point(signal.SIGTERM) and request.signum == signal.SIGTERM
            clock[0] += stopping.REPEAT_S / 2
            assert stopping.wait_for_safe_point(signal.SIGTERM)
            clock[0] += stopping.REPEAT_S
            assert not stopping.wait_for_safe_point(signal.SIGINT)
    assert not stopping.wait_for_safe_point(signal.SIGTERM)


def test_latest_checkpoint_skips_incomplete(tmp_path):
    (tmp_path / "checkpoint-2").mkdir()
    (tmp_path / "checkpoint-2" / "trainer_state.json").write_text("{}")
    (tmp_path / "checkpoint-10").mkdir()  # killed mid-save: no trainer_state.json
    assert latest_checkpoint(tmp_path) == str(tmp_path / "checkpoint-2")
    assert latest_checkpoint(tmp_path / "missing") is None


def test_empty_request_rejected(tiny, tmp_path):
    with pytest.raises(ValueError, match="no trajectories"):
        TrlSftTrainer(_params()).train(TrainRequest([], str(tiny), None, str(tmp_path), epochs=1))


def test_training_lowers_loss(tiny, tmp_path):
    """16 copies of one short trajectory, 30 steps: the loss must fall markedly."""
    params = _params(lora=False, learning_rate=3e-3, max_steps=30, batch_size=4, per_device_batch_size=4,
                     logging_steps=5)
    TrlSftTrainer(params).train(_request(tiny, tmp_path, n=16))
    s = _summary(tmp_path)
    assert s["steps"] == 30
    assert s["train_loss_last"] < 0.5 * s["train_loss_first"], s["losses"]


def test_lora_lowers_loss_with_fractional_epochs(tiny, tmp_path):
    """Epoch-driven run (max_steps=-1, 2.5 epochs over 16 examples at batch 4 = 10 steps); LoRA learns too."""
    params = _params(max_steps=-1, batch_size=4, per_device_batch_size=4, learning_rate=1e-2)
    TrlSftTrainer(params).train(_request(tiny, tmp_path, n=16, epochs=2.5))
    s = _summary(tmp_path)
    assert s["steps"] == 10
    assert s["train_loss_last"] < s["train_loss_first"] - 0.3, s["losses"]


def test_gradient_checkpointing_trains_the_same_weights_on_cpu(tiny, tmp_path):
    """Checkpointing only changes when activations are computed, not what is learned: the LoRA weights after
    3 steps equal those of plain training (LoRA dropout included, its RNG state is replayed)."""
    from safetensors.torch import load_file

    weights = {}
    for gc in (False, True):
        out = tmp_path / f"gc{gc}"
        trainer = TrlSftTrainer(_params(gradient_checkpointing=gc))
        assert trainer.build(_request(tiny, out)).args.gradient_checkpointing is gc
        final = trainer.train(_request(tiny, out))
        weights[gc] = load_file(str(Path(final) / "adapter_model.safetensors"))
    assert weights[True].keys() == weights[False].keys()
    for name, w in weights[False].items():
        assert (w - weights[True][name]).abs().max().item() < 1e-6, name


def test_ddp_two_processes_on_cpu(tiny, tmp_path):
    """`accelerate launch` with 2 processes (gloo on CPU): both ranks train, rank 0 saves a loadable adapter."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    params = _params(max_steps=2, batch_size=2, per_device_batch_size=1, launch=LaunchParams(num_processes=2))
    final = Path(TrlSftTrainer(params).train(_request(tiny, tmp_path, n=4)))
    assert (final / "adapter_model.safetensors").exists() and (final / "sand_chat_format.json").exists()
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny), final)
    assert any(torch.count_nonzero(p) > 0 for n, p in model.named_parameters() if "lora_B" in n)
    s = _summary(tmp_path)
    assert s["steps"] == 2 and s["examples"] == 4
    assert not list(tmp_path.glob("final.tmp*"))


def test_launch_rejects_unknown_config(tiny, tmp_path):
    from sand_builtins.trainers.launch import LaunchError

    params = _params(launch=LaunchParams(num_processes=2, config="nosuch"))
    with pytest.raises(LaunchError, match="ddp, fsdp, zero3"):
        TrlSftTrainer(params).train(_request(tiny, tmp_path, n=2))
