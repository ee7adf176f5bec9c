"""GPU-only checks of the multi-GPU paths (``pytest -m gpu``); they skip cleanly on machines without CUDA.

The CPU suite covers the same code with gloo (2-process DDP), the
transformers policy and fakes (tests/gpu/test_gpu_readiness.py, tests/components/test_engine_plan.py); these run what only a
GPU machine can: FSDP and ZeRO-3 launches, bf16 training, vLLM sleep mode freeing the device for training, the
memory hand-back after in-process training, two engines awake for a full-model agent, an adapter after a wake.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device", allow_module_level=True)

from sand_framework.components import TrainRequest  # noqa: E402
from sand_framework.testing.tiny_model import build_tiny_model  # noqa: E402
from sand_framework.types import Step, Trajectory  # noqa: E402


def _request(model: Path, out: Path, n: int = 8) -> TrainRequest:
    traj = Trajectory("t", "toy", "Answer with Thought: and Action:.", "Find the coin.",
                      [Step("Look first.", "look around", "You see a coin."), Step("", "take coin", "Done.")])
    return TrainRequest([traj] * n, str(model), None, str(out), epochs=1.0, seed=0)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "m", family="llama3")


@pytest.mark.parametrize("config", ["ddp", "fsdp", "zero3"])
def test_full_finetune_launch_saves_a_loadable_model(tiny, tmp_path, config):
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    if config == "zero3" and importlib.util.find_spec("deepspeed") is None:
        pytest.skip("needs deepspeed")
    from transformers import AutoModelForCausalLM

    from sand_builtins.trainers.trl_sft import LaunchParams, Params, TrlSftTrainer

    params = Params(lora=False, max_steps=2, batch_size=2, per_device_batch_size=1, report_to="none",
                    launch=LaunchParams(num_processes=2, config=config))
    final = Path(TrlSftTrainer(params).train(_request(tiny, tmp_path)))
    model = AutoModelForCausalLM.from_pretrained(final)
    base = AutoModelForCausalLM.from_pretrained(tiny)
    assert model.num_parameters() == base.num_parameters()
    assert any(not torch.equal(a, b) for a, b in zip(model.state_dict().values(), base.state_dict().values()))


def test_vllm_release_frees_the_gpu_and_wakes(tiny):
    pytest.importorskip("vllm")
    from sand_builtins.policies.vllm_backend import VLLMPolicy, VLLMParams
    from sand_framework.types import SamplingParams

    policy = VLLMPolicy(VLLMParams(gpu_memory_utilization=0.3, max_model_len=512))
    policy.setup(str(tiny))
    chat = [{"role": "user", "content": "Find the coin."}]
    first = policy.generate([chat], SamplingParams(temperature=0.0, max_new_tokens=8))
    used = torch.cuda.mem_get_info()[1] - torch.cuda.mem_get_info()[0]
    policy.release()
    freed = torch.cuda.mem_get_info()[1] - torch.cuda.mem_get_info()[0]
    assert freed < used * 0.5
    policy.setup(str(tiny))  # wakes instead of starting a new engine
    assert policy.generate([chat], SamplingParams(temperature=0.0, max_new_tokens=8)) == first
    assert policy.stats["engine_starts"] == 1
    policy.close()


# ---------------------------------------------------------------------------------------------------------------
# Issue 26 part B: memory hand-back after in-process training, two engines, an adapter after a wake
# ---------------------------------------------------------------------------------------------------------------


def _adapter(base: Path, out: Path, seed: int = 1) -> str:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32),
                           LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"],
                                      init_lora_weights=False))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.2)
    model.save_pretrained(str(out))
    return str(out)


def _full_agent(base: Path, out: Path) -> str:
    """A full model that differs from the base (its weights perturbed), with the base's tokenizer."""
    import shutil

    from transformers import AutoModelForCausalLM

    torch.manual_seed(2)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    model.save_pretrained(str(out))
    for f in Path(base).glob("*token*"):
        shutil.copy(f, out / f.name)
    return str(out)


CHAT = [{"role": "user", "content": "Find the coin."}]


def _greedy():
    from sand_framework.types import SamplingParams

    return SamplingParams(temperature=0.0, max_new_tokens=8)


def test_cached_training_memory_is_handed_back_before_an_engine_starts(tiny):
    """What the caching allocator keeps after in-process training goes back; then a vLLM engine asking for 0.85 of
    the GPU starts (it refuses below that much free memory)."""
    pytest.importorskip("vllm")
    from sand_builtins.policies.vllm_backend import VLLMParams, VLLMPolicy
    from sand_framework.accelerator import hand_back

    free, total = torch.cuda.mem_get_info()
    block = torch.empty(int(free * 0.5), dtype=torch.uint8, device="cuda")  # stands in for a training stage
    del block
    assert torch.cuda.memory_reserved() > total * 0.3  # freed tensors, memory still reserved
    report = hand_back("test")
    assert report.still_reserved < 1024 ** 3 and report.released > total * 0.3
    policy = VLLMPolicy(VLLMParams(gpu_memory_utilization=0.85, max_model_len=512))
    try:
        policy.setup(str(tiny))
        assert policy.generate([CHAT], _greedy())[0][0].completion_tokens > 0
    finally:
        policy.close()


def test_in_process_training_then_the_engine_starts(tiny, tmp_path):
    """The one-GPU LoRA path: train in this process, then the run's hand-back, then vLLM at 0.8 of the GPU."""
    pytest.importorskip("vllm")
    from sand_builtins.policies.vllm_backend import VLLMParams, VLLMPolicy
    from sand_builtins.trainers.trl_sft import Params, TrlSftTrainer

    final = TrlSftTrainer(Params(max_steps=2, batch_size=2, per_device_batch_size=2, report_to="none")).train(
        _request(tiny, tmp_path))
    assert torch.cuda.memory_reserved() < 1024 ** 3  # trl_sft handed back what it used
    policy = VLLMPolicy(VLLMParams(gpu_memory_utilization=0.8, max_model_len=512))
    try:
        policy.setup(str(tiny))
        policy.set_agent_weights(final)
        assert policy.generate([CHAT], _greedy())[0][0].completion_tokens > 0
    finally:
        policy.close()


@pytest.mark.parametrize("placement", ["auto", "shared"])
def test_two_engines_both_awake_for_a_full_model_agent(tiny, tmp_path, placement):
    """A full fine-tune's layout: base and agent engines on separate GPUs (2+), or both on one GPU at half the
    memory each (``shared``: on all the GPUs at half the memory each); no sleep/wake swap between the roles; then
    both sleep for training and wake with the same outputs."""
    pytest.importorskip("vllm")
    from sand_builtins.policies.vllm_backend import VLLMParams, VLLMPolicy

    agent = _full_agent(tiny, tmp_path / "agent")
    policy = VLLMPolicy(VLLMParams(gpu_memory_utilization=0.6, max_model_len=512, placement=placement))
    policy.expect_agent_weights("full")
    try:
        policy.setup(str(tiny))
        policy.set_agent_weights(agent)
        assert [e.role for e in policy.plan.engines] == ["base", "agent"]
        if placement == "shared":
            assert policy.plan.spec("base").devices == policy.plan.spec("agent").devices
        elif torch.cuda.device_count() >= 2:
            assert set(policy.plan.spec("base").devices).isdisjoint(policy.plan.spec("agent").devices)
        assert policy.plan.both_awake
        base = [c.text for c in policy.generate([CHAT], _greedy(), role="base")[0]]
        mine = [c.text for c in policy.generate([CHAT], _greedy(), role="agent")[0]]
        assert base != mine
        assert policy._asleep == set()  # neither engine was put to sleep to serve the other
        policy.release()
        assert len(policy._asleep) == 2
        policy.setup(str(tiny))
        assert [c.text for c in policy.generate([CHAT], _greedy(), role="agent")[0]] == mine
        assert [c.text for c in policy.generate([CHAT], _greedy(), role="base")[0]] == base
        assert policy.stats["engine_starts"] == 2
    finally:
        policy.close()


def test_an_adapter_answers_the_same_after_a_sleep_and_wake(tiny, tmp_path):
    pytest.importorskip("vllm")
    from sand_builtins.policies.vllm_backend import VLLMParams, VLLMPolicy

    adapter = _adapter(tiny, tmp_path / "adapter")
    policy = VLLMPolicy(VLLMParams(gpu_memory_utilization=0.3, max_model_len=512))
    policy.expect_agent_weights("adapter")
    try:
        policy.setup(str(tiny))
        assert policy.plan.spec("base").enable_lora and policy.plan.spec("base").enforce_eager is False
        policy.set_agent_weights(adapter)
        before = [c.text for c in policy.generate([CHAT], _greedy(), role="agent")[0]]
        base = [c.text for c in policy.generate([CHAT], _greedy(), role="base")[0]]
        assert before != base
        policy.release()
        policy.setup(str(tiny))  # wakes
        assert [c.text for c in policy.generate([CHAT], _greedy(), role="agent")[0]] == before
        assert [c.text for c in policy.generate([CHAT], _greedy(), role="base")[0]] == base
        assert policy.stats["engine_starts"] == 1
    finally:
        policy.close()
