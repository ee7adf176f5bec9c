"""Issue 26 part B on CPU: vLLM engine placement and arguments by device and trainer, ``sand plan``, one context
budget for training, prompts and engines (``sand validate``)."""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from sand_builtins.policies.engine_plan import (  # noqa: E402
    engine_kwargs, model_bytes, plan_engines, visible_devices,
)
from sand_builtins.policies.vllm_backend import VLLMParams, VLLMPolicy  # noqa: E402
from sand_framework.cli.main import main  # noqa: E402
from sand_framework.errors import RecipeError  # noqa: E402


def test_cpu_is_eager_and_gpu_uses_cuda_graphs():
    cpu = plan_engines(0, VLLMParams(), "adapter").spec("base")
    gpu = plan_engines(1, VLLMParams(), "adapter").spec("base")
    assert cpu.enforce_eager is True and cpu.sleep_mode is False and cpu.devices == ()
    assert gpu.enforce_eager is False and gpu.sleep_mode is True and gpu.devices == (0,)
    assert plan_engines(1, VLLMParams(enforce_eager=True), "adapter").spec("base").enforce_eager is True
    kw = engine_kwargs(cpu, VLLMParams(), "m", "m", on_cpu=True)
    assert kw["enforce_eager"] is True and kw["enable_chunked_prefill"] is False and "gpu_memory_utilization" not in kw
    kw = engine_kwargs(gpu, VLLMParams(), "m", "m", on_cpu=False)
    assert kw["enforce_eager"] is False and kw["gpu_memory_utilization"] == 0.9 and kw["enable_sleep_mode"] is True


def test_lora_only_for_an_engine_that_serves_adapters():
    adapter = plan_engines(1, VLLMParams(), "adapter")
    full = plan_engines(1, VLLMParams(), "full", gpu_memory_gb=80, weights_gb=16)
    assert [e.role for e in adapter.engines] == ["base"] and adapter.spec("base").enable_lora
    assert [e.role for e in full.engines] == ["base", "agent"]
    assert not any(e.enable_lora for e in full.engines)
    assert "enable_lora" not in engine_kwargs(full.spec("base"), VLLMParams(), "m", "m", on_cpu=False)
    merge = plan_engines(1, VLLMParams(lora_mode="merge"), "adapter", gpu_memory_gb=80, weights_gb=16)
    assert [e.role for e in merge.engines] == ["base", "agent"] and not merge.spec("base").enable_lora
    assert VLLMParams(engine_args={"enable_lora": True}).engine_args  # engine_args still override everything
    kw = engine_kwargs(full.spec("base"), VLLMParams(engine_args={"max_num_seqs": 8}), "m", "m", on_cpu=False)
    assert kw["max_num_seqs"] == 8


def test_full_finetune_engines_on_separate_gpus_with_tensor_parallelism():
    plan = plan_engines(8, VLLMParams(), "full")
    assert plan.spec("base").devices == (0, 1, 2, 3) and plan.spec("agent").devices == (4, 5, 6, 7)
    assert plan.spec("base").tensor_parallel_size == plan.spec("agent").tensor_parallel_size == 4
    assert plan.both_awake and plan.idle == ()
    three = plan_engines(3, VLLMParams(), "full")  # the agent gets the larger half; tp takes powers of two
    assert three.spec("base").devices == (0,) and three.spec("agent").devices == (1, 2)
    five = plan_engines(5, VLLMParams(), "full")
    assert five.spec("agent").devices == (2, 3, 4)[:2] and five.idle == (4,)
    one = plan_engines(8, VLLMParams(), "adapter")
    assert one.spec("base").tensor_parallel_size == 8 and len(one.engines) == 1
    fixed = plan_engines(8, VLLMParams(tensor_parallel_size=1), "full")
    assert fixed.spec("agent").devices == (4,) and fixed.idle == (1, 2, 3, 5, 6, 7)
    with pytest.raises(ValueError, match="tensor_parallel_size=8"):
        plan_engines(8, VLLMParams(tensor_parallel_size=8), "full")


def test_one_gpu_splits_its_memory_when_both_fit_else_swaps():
    split = plan_engines(1, VLLMParams(), "full", gpu_memory_gb=80, weights_gb=16)
    assert split.both_awake and all(e.gpu_memory_utilization == 0.45 for e in split.engines)
    small = plan_engines(1, VLLMParams(), "full", gpu_memory_gb=40, weights_gb=16)
    assert not small.both_awake and all(e.gpu_memory_utilization == 0.9 for e in small.engines)
    unknown = plan_engines(1, VLLMParams(), "full", gpu_memory_gb=80, weights_gb=None)
    assert not unknown.both_awake and "unknown" in unknown.notes[0]
    swap = plan_engines(8, VLLMParams(placement="swap"), "full")
    assert not swap.both_awake and swap.spec("base").devices == swap.spec("agent").devices


def test_shared_placement_puts_both_engines_on_every_gpu_where_the_weights_fit_twice():
    shared = plan_engines(8, VLLMParams(placement="shared"), "full", gpu_memory_gb=80, weights_gb=16, heads=(32, 8))
    assert shared.both_awake and not shared.idle
    assert [e.devices for e in shared.engines] == [tuple(range(8))] * 2
    assert [(e.tensor_parallel_size, e.gpu_memory_utilization) for e in shared.engines] == [(8, 0.45)] * 2
    assert plan_engines(8, VLLMParams(), "full", gpu_memory_gb=80, weights_gb=16, heads=(32, 8)).spec(
        "agent").devices == (4, 5, 6, 7)  # auto stays the split layout
    # 28 heads do not split over 8: both engines take the same 4, and the plan says the others idle
    qwen = plan_engines(8, VLLMParams(placement="shared"), "full", gpu_memory_gb=80, weights_gb=15, heads=(28, 4))
    assert qwen.idle == (4, 5, 6, 7) and qwen.spec("base").devices == qwen.spec("agent").devices
    with pytest.raises(ValueError, match="placement=shared.*do not fit"):
        plan_engines(1, VLLMParams(placement="shared"), "full", gpu_memory_gb=24, weights_gb=16)
    unknown = plan_engines(2, VLLMParams(placement="shared"), "full")
    assert unknown.both_awake and "unknown" in unknown.notes[-1]
    # one engine serves both roles when the agent is an adapter: nothing to share
    assert len(plan_engines(8, VLLMParams(placement="shared"), "adapter", 80, 16).engines) == 1


def test_visible_devices_narrows_and_restores(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5,6,7")
    with visible_devices((2, 3)):
        assert os.environ["CUDA_VISIBLE_DEVICES"] == "6,7"
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "3,5,6,7"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    with visible_devices((1,)):
        assert os.environ["CUDA_VISIBLE_DEVICES"] == "1"
    assert "CUDA_VISIBLE_DEVICES" not in os.environ


def test_model_size_from_files_index_or_name(tmp_path):
    (tmp_path / "model.safetensors.index.json").write_text('{"metadata": {"total_size": 16000000000}}')
    assert model_bytes(str(tmp_path)) == 16_000_000_000
    assert model_bytes("meta-llama/Llama-3.1-8B-Instruct") == 16_000_000_000
    assert model_bytes("Qwen/Qwen2.5-0.5B-Instruct") == 1_000_000_000
    assert model_bytes("some/model") is None


def test_the_policy_asks_the_plan_for_its_engine_arguments(monkeypatch):
    """The vllm policy's engine arguments on a (pretended) 2-GPU node, without vLLM: what the trainer writes
    decides enable_lora and placement."""
    import sand_builtins.policies.vllm_backend as vb

    monkeypatch.setattr(vb, "device_count_and_memory", lambda: (2, 80.0))
    policy = VLLMPolicy(VLLMParams())
    policy.on_cpu, policy.base_path = False, "base"
    policy.expect_agent_weights("full")
    base, agent = policy._engine_kwargs("base", role="base"), policy._engine_kwargs("agent", role="agent")
    assert "enable_lora" not in base and base["enforce_eager"] is False and base["tensor_parallel_size"] == 1
    assert policy.plan.spec("agent").devices == (1,) and policy.plan.both_awake
    policy = VLLMPolicy(VLLMParams())
    policy.on_cpu, policy.base_path = False, "base"
    policy.expect_agent_weights("adapter")
    assert policy._engine_kwargs("base")["enable_lora"] is True
    assert policy._engine_kwargs("base")["tensor_parallel_size"] == 2
    # a full model evaluated with an adapter recipe: an unplanned agent engine without LoRA, taking turns
    assert "enable_lora" not in policy._engine_kwargs("x", role="agent") and not policy._planned("agent")


class FakeLLM:
    def __init__(self):
        self.events = []

    def sleep(self, level=1):
        self.events.append("sleep")

    def wake_up(self):
        self.events.append("wake")


def test_engines_placed_apart_stay_awake_and_all_sleep_for_training(monkeypatch):
    import sand_builtins.policies.vllm_backend as vb

    monkeypatch.setattr(vb, "device_count_and_memory", lambda: (2, 80.0))
    policy = VLLMPolicy(VLLMParams())
    policy.on_cpu, policy.base_path = False, "base"
    policy.expect_agent_weights("full")
    policy._plan()
    policy.base_llm, policy.agent_llm = FakeLLM(), FakeLLM()
    policy._activate(policy.agent_llm)
    policy._activate(policy.base_llm)
    assert policy.base_llm.events == [] and policy.agent_llm.events == []  # no swaps during synthesis
    policy.release()
    assert policy.base_llm.events == ["sleep"] and policy.agent_llm.events == ["sleep"]
    policy._activate(policy.agent_llm)
    assert policy.agent_llm.events == ["sleep", "wake"] and policy.base_llm.events == ["sleep"]


def test_a_plan_the_engine_cannot_place_is_a_named_error_not_a_bug_report(monkeypatch):
    """The run's start checks both (validate's plan checks, this machine's GPUs); the engine's own planning says
    the same where it is reached anyway (GPUs gone since the start, `sand eval`)."""
    import sand_builtins.policies.vllm_backend as vb
    from sand_framework.errors import MachineNotReady, RecipeError

    monkeypatch.setattr(vb, "device_count_and_memory", lambda: (2, 80.0))
    policy = VLLMPolicy(VLLMParams(tensor_parallel_size=2))
    policy.on_cpu, policy.base_path = False, "base"
    policy.expect_agent_weights("full")  # two engines on 2 GPUs: one GPU each, tp=2 does not fit
    with pytest.raises(MachineNotReady, match="tensor_parallel_size=2 but the base engine has 1 GPU"):
        policy._plan()
    monkeypatch.setattr(vb, "model_heads", lambda path: (28, 4))
    policy = VLLMPolicy(VLLMParams(tensor_parallel_size=8))
    policy.on_cpu, policy.base_path = False, "base"
    monkeypatch.setattr(vb, "device_count_and_memory", lambda: (8, 80.0))
    with pytest.raises(RecipeError, match="policy 'vllm': .*tensor_parallel_size=8"):
        policy._plan()


@pytest.mark.parametrize("gpus, expect", [
    ("1", ["engine base: GPU 0", "gpu_memory_utilization=0.45", "engine agent: GPU 0", "both awake",
           "train (full fine-tune): GPU 0, in the run's process"]),
    ("8", ["engine base: GPUs 0-3, tensor_parallel_size=4", "engine agent: GPUs 4-7, tensor_parallel_size=4",
           "enable_lora=False, enforce_eager=False", "7 GPU(s) idle while training"]),
])
def test_sand_plan_for_a_node(gpus, expect):
    result = CliRunner().invoke(main, ["plan", "paper/alfworld", "--gpus", gpus])
    assert result.exit_code == 0, result.output
    for text in expect:
        assert text in result.output


def test_sand_plan_with_a_launch_and_lora_and_cpu():
    out = CliRunner().invoke(main, ["plan", "paper/alfworld", "--gpus", "8", "trainer.launch.num_processes=8",
                                    "trainer.launch.config=fsdp"]).output
    assert "GPUs 0-7, 8 processes under accelerate launch (fsdp)" in out
    out = CliRunner().invoke(main, ["plan", "paper/alfworld", "--gpus", "8", "trainer.lora=true"]).output
    assert "engine base: GPUs 0-7, tensor_parallel_size=8" in out and "enable_lora=True" in out
    assert "engine agent" not in out
    out = CliRunner().invoke(main, ["plan", "paper/alfworld", "--gpus", "0"]).output
    assert "engine base: CPU" in out and "enforce_eager=True" in out
    bad = CliRunner().invoke(main, ["plan", "paper/alfworld", "--gpus", "2", "trainer.launch.num_processes=4"])
    assert "problem: trainer.launch.num_processes=4 but the node has 2 GPU(s)" in bad.output


# ---------------------------------------------------------------------------------------------------------------
# One context budget
# ---------------------------------------------------------------------------------------------------------------


def _resolve(*overrides):
    from sand_framework.app.runner import resolve

    return resolve("paper/alfworld", list(overrides), [])[0]


def test_the_paper_recipe_has_one_context():
    r = _resolve()
    assert r.slots["policy"][1].max_model_len == r.slots["trainer"][1].max_length == 4096
    assert r.slots["policy"][1].max_prompt_tokens == 0
    r = _resolve("trainer.max_length=8192")
    assert r.slots["policy"][1].max_model_len == 8192


@pytest.mark.parametrize("override, says", [
    ("policy.max_model_len=2048", "policy.max_model_len=2048 is shorter than the trainer.max_length=4096"),
    ("policy.max_prompt_tokens=2048", "policy.max_prompt_tokens=2048 cuts agent prompts shorter than training"),
])
def test_validate_refuses_contexts_that_disagree(override, says):
    with pytest.raises(RecipeError) as err:
        _resolve(override)
    assert says in str(err.value)


def test_a_prompt_limit_that_leaves_the_training_context_passes():
    _resolve("policy.max_prompt_tokens=3584")  # 4096 - the 512 tokens the agent may write


def test_tensor_parallel_size_splits_the_models_heads(tmp_path):
    """Qwen2.5-7B (28 attention / 4 KV heads) with a LoRA agent on 8 GPUs: one engine, and vLLM refuses tp=8
    (28 % 8); the plan takes 4 and says why. Heads come from the model's config.json first."""
    from sand_builtins.policies.engine_plan import TensorParallelError, model_heads, splits_heads

    assert model_heads("Qwen/Qwen2.5-7B-Instruct") == (28, 4)  # offline: the bundled recipes' models by name
    local = tmp_path / "m"
    local.mkdir()
    (local / "config.json").write_text('{"num_attention_heads": 12, "num_key_value_heads": 3}')
    assert model_heads(str(local)) == (12, 3) and model_heads(str(tmp_path / "nothing")) is None
    assert splits_heads(4, (28, 4)) and not splits_heads(8, (28, 4)) and splits_heads(8, (32, 8))
    assert splits_heads(16, (32, 8)) and not splits_heads(5, (12, 3)) and splits_heads(3, (12, 3))

    plan = plan_engines(8, VLLMParams(), "adapter", heads=(28, 4))
    assert plan.spec("base").tensor_parallel_size == 4 and plan.idle == (4, 5, 6, 7)
    assert any("28 attention / 4 KV heads" in n for n in plan.notes)
    assert plan_engines(8, VLLMParams(), "adapter", heads=(32, 8)).spec("base").tensor_parallel_size == 8
    assert plan_engines(8, VLLMParams(), "adapter").spec("base").tensor_parallel_size == 8  # unknown: pow2
    with pytest.raises(TensorParallelError, match="does not split the model's 28 attention / 4 KV heads"):
        plan_engines(8, VLLMParams(tensor_parallel_size=8), "adapter", heads=(28, 4))


def test_validate_refuses_a_fixed_tensor_parallel_size_the_heads_do_not_split():
    """Issue 37 item 2: the fixed size is a fact of the model, so `sand validate` refuses it on any machine (this
    CPU one, --for-another-machine too), naming the sizes that do split; auto (0) and a divisor validate."""
    args = ["validate", "paper/alfworld", "trainer.lora=true", "model.base=Qwen/Qwen2.5-7B-Instruct",
            "--for-another-machine"]
    bad = CliRunner().invoke(main, args + ["policy.tensor_parallel_size=8"])
    assert bad.exit_code == 2, bad.output
    assert "policy.tensor_parallel_size=8 does not split the model's 28 attention / 4 KV heads" in bad.output
    assert "one of 1, 2, 4" in bad.output
    for ok in ("policy.tensor_parallel_size=4", "policy.tensor_parallel_size=0"):
        good = CliRunner().invoke(main, args + [ok])
        assert good.exit_code == 0, good.output
    plan = CliRunner().invoke(main, ["plan", "paper/alfworld", "--gpus", "8", "trainer.lora=true",
                                     "model.base=Qwen/Qwen2.5-7B-Instruct",
                                     "policy.tensor_parallel_size=8"])
    assert "problem: policy.tensor_parallel_size=8 does not split" in plan.output


def test_the_host_ram_docs_state_is_what_sand_plan_computes():
    """Issue 37 item 4: docs/gpu.md's load figures for Llama-3.1-8B on 8 ranks (SFT, and a full DPO with its
    reference) are the ones `sand plan` prints, from one function."""
    from pathlib import Path

    from sand_builtins.policies.engine_plan import model_parameters
    from sand_builtins.trainers.host_memory import load_host_ram
    from sand_builtins.trainers.trl_dpo import DpoTrainer
    from sand_builtins.trainers.trl_sft import TrlSftTrainer

    doc = (Path(__file__).resolve().parents[2] / "docs" / "gpu.md").read_text(encoding="utf-8")
    p = model_parameters("meta-llama/Llama-3.1-8B-Instruct")
    launch = {"launch": {"num_processes": 8, "config": "fsdp"}, "lora": False}
    sft = load_host_ram(p, _built(TrlSftTrainer, launch))
    dpo = load_host_ram(p, _built(DpoTrainer, launch), reference=DpoTrainer.loads_reference)
    assert (sft.ranks, round(sft.per_rank_gb), round(sft.total_gb), round(dpo.total_gb)) == (8, 32, 256, 512)
    assert "≈ 8 × 32 = 256 GB for 8 ranks at the SFT load" in doc
    assert "≈ 8 × 32 GB = 256 GB (SFT) or ≈ 512 GB (DPO with its reference)" in doc
    out = CliRunner().invoke(main, ["plan", "baselines/paper/alfworld-eto", "--gpus", "8",
                                    "preference_trainer.launch.num_processes=8",
                                    "preference_trainer.launch.config=fsdp"]).output
    assert "host RAM at the load: ~512 GB = 8 rank(s) x 64 GB" in out, out


def test_a_preference_trainers_plan_hints_name_its_own_slot():
    """The DPO trainer fills ``preference_trainer``: a hint saying ``trainer.launch...`` would set a slot ETO's
    recipe does not train with."""
    import re

    out = CliRunner().invoke(main, ["plan", "baselines/paper/alfworld-eto", "--gpus", "8"]).output
    assert "use preference_trainer.launch.num_processes=8 preference_trainer.launch.config=" in out, out
    bad = CliRunner().invoke(main, ["plan", "baselines/paper/alfworld-eto", "--gpus", "2",
                                    "preference_trainer.launch.num_processes=4"]).output
    assert "preference_trainer.launch.num_processes=4 but the node has 2 GPU(s)" in bad, bad
    assert not re.search(r"(?<!preference_)trainer\.(launch|dtype)", out.split("train (")[-1]), out


def _built(cls, values):
    from sand_framework.config.typecheck import build  # the validator's builder: nested launch params too

    return build(cls.Params, values)


def test_max_model_len_longer_than_the_model_holds_is_refused_before_any_training(tmp_path, tiny_model_dir,
                                                                                  monkeypatch):
    """`sand run smoke policy=vllm` trained its SFT stage, then vLLM refused the engine: max_model_len 4096 on a
    model of 2048 positions. `sand validate` refuses it for a model folder; an alias (built only when a run needs
    it) is checked as the run starts, before its first stage. VLLM_ALLOW_LONG_MAX_MODEL_LEN lifts it, as in vLLM."""
    from sand_builtins.policies.engine_plan import ContextLengthError, check_context, model_context

    assert model_context(tiny_model_dir) == 2048
    scaled = tmp_path / "scaled"
    scaled.mkdir()
    (scaled / "config.json").write_text('{"text_config": {"max_position_embeddings": 4096, "seq_length": 8192, '
                                        '"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}}')
    assert model_context(str(scaled)) == 16384 and model_context(str(tmp_path / "nothing")) is None
    with pytest.raises(ContextLengthError, match="Set policy.max_model_len=2048 or less"):
        check_context(VLLMParams(max_model_len=4096), tiny_model_dir)
    check_context(VLLMParams(max_model_len=2048), tiny_model_dir)
    args = ["validate", "smoke", "policy=vllm", f"model.base={tiny_model_dir}", "--for-another-machine"]
    bad = CliRunner().invoke(main, args)
    assert bad.exit_code == 2 and "policy.max_model_len=4096 is longer than" in bad.output, bad.output
    assert CliRunner().invoke(main, args + ["policy.max_model_len=2048"]).exit_code == 0
    monkeypatch.setenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "1")
    assert CliRunner().invoke(main, args).exit_code == 0


ALIAS_PLUGIN = '''
import json
from pathlib import Path

from sand_framework import hookimpl
from sand_framework.accelerator import PlanImpossible
from sand_builtins.policies.transformers_backend import TransformersPolicy


class Checked(TransformersPolicy):
    name = "plan_checked"
    description = "test policy whose plan refuses the tiny model's folder"

    @classmethod
    def device_plan(cls, params, node):
        config = Path(node.base_model) / "config.json"
        if config.is_file() and json.loads(config.read_text())["max_position_embeddings"] == 2048:
            raise PlanImpossible(f"no place for {node.base_model}")
        return []


@hookimpl
def sand_register_policies(register):
    register(Checked)
'''


def test_a_run_checks_the_plan_on_its_model_before_the_first_stage(tmp_path, tiny_model_dir):
    """The run-start check with a plugin policy whose plan refuses the tiny model, named by its alias (the folder
    it names is read) or by its folder: exit 2, the recipe error, and no stage computed (the vLLM lane runs the
    real policy through it)."""
    folder = tmp_path / "plugins"
    folder.mkdir()
    (folder / "checked.py").write_text(ALIAS_PLUGIN)
    for name, base in (("alias", "tiny-random"), ("folder", tiny_model_dir)):
        run = tmp_path / name
        result = CliRunner().invoke(main, ["run", "smoke", "policy.name=plan_checked", f"model.base={base}",
                                           "--run-dir", str(run), "--plugins-dir", str(folder)])
        assert result.exit_code == 2, result.output
        assert "policy: no place for" in result.output and f"(model.base {base!r})" in result.output
        assert not (run / "expert").exists() and not (run / "weights").exists(), sorted(p.name for p in run.iterdir())


def test_sand_run_refuses_a_plan_this_machines_gpus_cannot_hold_before_any_stage(tmp_path, monkeypatch):
    """Issue 38 item 5: `sand validate` refused a tensor_parallel_size over the machine's GPUs, but `sand run`
    went on to train and met it as a ValueError at the engine start ('unexpected failure'). It is refused where
    the run begins, exit 4, with the missing packages (a one-GPU machine, simulated)."""
    import shutil as shutil_module
    from types import SimpleNamespace

    import torch

    from sand_framework.config import preflight

    monkeypatch.setattr(preflight.shutil, "which", lambda name: "/usr/bin/nvidia-smi" if name == "nvidia-smi"
                        else shutil_module.which(name))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: SimpleNamespace(total_memory=80e9))
    run = tmp_path / "run"
    result = CliRunner().invoke(main, ["run", "smoke", "policy=vllm", "policy.max_model_len=2048",
                                       "policy.tensor_parallel_size=2", "--run-dir", str(run)])
    assert result.exit_code == 4, result.output
    assert "this machine's 1 GPU(s) cannot hold the plan" in result.output and "tensor_parallel_size=2" in result.output
    assert not run.exists()
