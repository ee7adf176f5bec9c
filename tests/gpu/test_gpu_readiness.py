"""Issue 26 part B on CPU: accelerator memory hand-back, arguments before weights, warm-up steps, truncation counts.

A fake ``torch.cuda`` stands in for the device: its caching allocator keeps
memory *reserved* after the tensors are gone, as PyTorch's does, and a fake
vLLM-like policy refuses to start below ``gpu_memory_utilization`` x total
free, as vLLM does. The real checks are in tests/gpu/test_gpu.py (marked gpu).
"""

from __future__ import annotations

import logging
import os
from contextlib import nullcontext
from pathlib import Path
from types import SimpleNamespace

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

from sand_framework import accelerator  # noqa: E402
from sand_framework.engine.context import RunContext  # noqa: E402

GB = 1024 ** 3


class FakeCuda:
    """One or more devices whose caching allocator holds what was freed until ``empty_cache``."""

    def __init__(self, devices: int = 1, total: int = 80 * GB):
        self.total = total
        self.allocated = [0] * devices
        self.reserved = [0] * devices
        self.calls: list[str] = []
        self.touched: set[int] = set()
        """Devices asked anything that creates a CUDA context there."""

    def alloc(self, i: int, n: int) -> None:
        self.allocated[i] += n
        self.reserved[i] = max(self.reserved[i], self.allocated[i])

    def free_tensors(self, i: int, n: int) -> None:  # references dropped: still reserved
        self.allocated[i] -= n

    # the torch.cuda API hand_back uses
    def device_count(self) -> int:
        return len(self.allocated)

    def device(self, i: int):
        self.touched.add(i)
        return nullcontext()

    def synchronize(self) -> None:
        self.calls.append("synchronize")

    def empty_cache(self) -> None:
        self.calls.append("empty_cache")
        self.reserved = list(self.allocated)

    def ipc_collect(self) -> None:
        self.calls.append("ipc_collect")

    def mem_get_info(self, i: int) -> tuple[int, int]:
        self.touched.add(i)
        return self.total - self.reserved[i], self.total

    def memory_allocated(self, i: int) -> int:
        return self.allocated[i]

    def memory_reserved(self, i: int) -> int:
        return self.reserved[i]


@pytest.fixture
def cuda(monkeypatch) -> FakeCuda:
    fake = FakeCuda()
    monkeypatch.setattr(accelerator, "_cuda", lambda: fake)
    return fake


def test_hand_back_empties_the_caching_allocator_and_reports(cuda, caplog):
    cuda.alloc(0, 60 * GB)
    cuda.free_tensors(0, 58 * GB)  # 2 GB still referenced
    with caplog.at_level(logging.INFO, logger="sand_framework.accelerator"):
        report = accelerator.hand_back("test")
    assert cuda.calls == ["synchronize", "empty_cache", "ipc_collect"]
    assert report.before[0].reserved == 60 * GB and report.after[0].reserved == 2 * GB
    assert report.released == 58 * GB and report.still_reserved == 2 * GB
    assert "cuda:0 2.0 GiB reserved" in report.summary()
    assert any("still reserves 2.0 GiB" in r.message for r in caplog.records)  # a leak is named


def test_hand_back_touches_only_the_devices_the_process_uses(monkeypatch):
    """Issue 37 item 6: probing or emptying a GPU the run's process never used creates a CUDA context there
    (~0.5 GB each, kept until the process ends): after training on GPU 0 of 8, only GPU 0 is visited."""
    fake = FakeCuda(devices=8)
    monkeypatch.setattr(accelerator, "_cuda", lambda: fake)
    fake.alloc(0, 10 * GB)
    fake.free_tensors(0, 10 * GB)
    report = accelerator.hand_back()
    assert fake.touched == {0} and [d.index for d in report.after] == [0] and report.released == 10 * GB


def test_hand_back_without_cuda_is_a_no_op(monkeypatch):
    monkeypatch.setattr(accelerator, "_cuda", lambda: None)
    report = accelerator.hand_back()
    assert report.after == [] and report.summary() == "no accelerator"


def test_the_trainer_hands_memory_back(cuda):
    from sand_builtins.trainers.trl_sft import release_memory  # the public helper keeps its name

    cuda.alloc(0, 40 * GB)
    cuda.free_tensors(0, 40 * GB)
    release_memory()
    assert cuda.reserved == [0]


class EngineLikePolicy:
    """Starts like vLLM: refuses when free memory < gpu_memory_utilization x total."""

    def __init__(self, cuda: FakeCuda, utilization: float = 0.9):
        self.cuda, self.utilization = cuda, utilization
        self.starts = 0

    def setup(self, base_model: str) -> None:
        free, total = self.cuda.mem_get_info(0)
        if free < self.utilization * total:
            raise RuntimeError(f"free memory {free / GB:.1f} GiB < {self.utilization} x {total / GB:.0f} GiB")
        self.starts += 1

    def release(self) -> None:
        pass

    def expect_agent_weights(self, kind) -> None:  # Policy's default: a registered policy inherits it
        pass


def _context(policy) -> RunContext:
    ctx = RunContext(recipe=SimpleNamespace(slots={}), run_dir=SimpleNamespace(finished_stages=lambda: []),
                     plugins=None, registries=None)
    ctx.components["policy"] = policy
    ctx.base_model_path = "base"
    return ctx


def test_an_engine_starts_after_in_process_training(cuda):
    """Fails without the hand-back: the trainer's cached 60 GB leave 20 of 80 free, below 0.9 x 80."""
    policy = EngineLikePolicy(cuda)
    ctx = _context(policy)
    ctx.policy()
    ctx.release_policy()  # the training stage starts
    cuda.alloc(0, 60 * GB)  # model, gradients, optimizer state, activations
    cuda.free_tensors(0, 60 * GB)  # the trainer is gone; PyTorch keeps the memory reserved
    ctx.policy()  # synthesis: the engine starts (or wakes) again
    assert policy.starts == 2 and cuda.reserved == [0]


# ---------------------------------------------------------------------------------------------------------------
# Arguments before weights; warm-up steps; truncation counts (the real trainer, stopped before training)
# ---------------------------------------------------------------------------------------------------------------

trl = pytest.importorskip("trl")


class Stop(Exception):
    pass


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    return Path(tiny_model_dir)  # the session's one tiny model (conftest.py)


def _request(model, out, n=6, steps=2):
    from sand_framework.components import TrainRequest
    from sand_framework.types import Step, Trajectory

    traj = Trajectory("t", "toy", "Answer with Thought: and Action:.", "Find the coin.",
                      [Step("Look first. " * 3, "look around", "You see a coin. " * 3)] * steps)
    return TrainRequest([traj] * n, str(model), None, str(out), epochs=3.0, seed=0)


@pytest.fixture
def stopped_build(monkeypatch):
    """``build`` runs until the model would load; records SFTConfig and from_pretrained calls in order."""
    from transformers import AutoModelForCausalLM

    from sand_builtins.trainers import trl_sft

    events: list[tuple[str, object]] = []
    real = trl.SFTConfig

    class Recording(real):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            events.append(("config", self))

    def from_pretrained(*a, **kw):
        built = [e for e in events if e[0] == "config"]
        events.append(("load", built[-1][1] if built else None))
        raise Stop

    monkeypatch.setattr(trl, "SFTConfig", Recording)
    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", from_pretrained)

    def run(params, request):
        trainer = trl_sft.TrlSftTrainer(params)
        with pytest.raises(Stop):
            trainer.build(request)
        return trainer, events

    return run


def test_training_arguments_exist_before_the_model_loads(stopped_build, tiny, tmp_path):
    from sand_builtins.trainers.trl_sft import Params

    trainer, events = stopped_build(Params(report_to="none", batch_size=2, per_device_batch_size=1),
                                    _request(tiny, tmp_path))
    assert [e[0] for e in events] == ["config", "load"]
    assert events[1][1] is events[0][1]  # the arguments object is alive when from_pretrained runs
    # the loading mode was read after the arguments were built (ZeRO-3 / FSDP flags; both off on one CPU process)
    assert trainer.loading is not None and trainer.loading.zero3_init is False


def test_warmup_is_an_integer_number_of_steps(stopped_build, tiny, tmp_path):
    from sand_builtins.trainers.loading import optimizer_steps, warmup_steps
    from sand_builtins.trainers.trl_sft import Params

    # 6 examples, 1 per step, accumulation 2: 3 updates per epoch x 3 epochs = 9; 0.3 of 9 = 2.7 -> 3
    _, events = stopped_build(Params(report_to="none", batch_size=2, per_device_batch_size=1, warmup_ratio=0.3),
                              _request(tiny, tmp_path))
    config = events[0][1]
    assert config.warmup_steps == 3 and isinstance(config.warmup_steps, int)
    assert optimizer_steps(6, 1, 1, 2, 3.0) == 9
    assert optimizer_steps(7, 1, 1, 2, 1.0) == 4  # a partial accumulation is a step
    assert optimizer_steps(100, 4, 8, 2, 1.0) == 2  # 4 batches per rank (ceil(100 / 32)), 2 updates
    assert optimizer_steps(100, 1, 1, 1, 3.0, max_steps=5) == 5
    assert warmup_steps(0.03, 100) == 3 and warmup_steps(0.0, 100) == 0 and warmup_steps(0.03, 10) == 1
    with pytest.raises(ValueError):
        warmup_steps(1.0, 10)


def test_cut_training_examples_are_counted_in_a_warning(stopped_build, tiny, tmp_path, caplog):
    from sand_builtins.trainers.trl_sft import Params

    with caplog.at_level(logging.WARNING, logger="sand_builtins.trainers.trl_sft"):
        trainer, _ = stopped_build(Params(report_to="none", max_length=48), _request(tiny, tmp_path, steps=6))
    assert trainer.examples.truncated == 6
    assert any("6 of 6 training examples are longer than max_length=48" in r.message for r in caplog.records)


def test_shortened_prompts_are_counted_and_warned(caplog):
    from sand_framework.prompting import fit_prompt, report_shortened

    head = [{"role": "user", "content": "i"}, {"role": "assistant", "content": "OK"}, {"role": "user", "content": "t"}]
    chat = head + [{"role": "assistant", "content": "a"}, {"role": "user", "content": "o"}] * 10

    def render(c):
        return list(range(10 * len(c)))

    total: dict = {}
    with caplog.at_level(logging.WARNING, logger="sand_framework.prompting"):
        for _ in range(12):
            batch: dict = {}
            assert len(fit_prompt(chat, render, 100, batch)) <= 100
            report_shortened(total, batch, "policy 'x'", 100)
    assert total["prompts_shortened"] == 12 and total["prompt_turns_dropped"] == 12 * 14
    warned = [r.message for r in caplog.records]
    assert len(warned) == 2 and "policy 'x': 1 prompt(s)" in warned[0] and "10 prompt(s)" in warned[1]
    assert fit_prompt(chat, render, 0, batch := {}) == render(chat) and batch == {}
