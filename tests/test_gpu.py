"""GPU-only checks of the multi-GPU paths (``pytest -m gpu``); they skip cleanly on machines without CUDA.

The CPU suite covers the same code with gloo (2-process DDP) and the
transformers policy; these run what only a GPU machine can: FSDP and ZeRO-3
launches, bf16 training, and vLLM sleep mode freeing the device for training.
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
