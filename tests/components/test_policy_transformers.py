"""The ``transformers`` policy on the tiny random model: real batched generate calls."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")

from sand_builtins.policies import transformers_backend  # noqa: E402
from sand_builtins.policies.transformers_backend import TransformersPolicy  # noqa: E402
from sand_framework.plugins import PluginSet  # noqa: E402
from sand_framework.prompting import parse_turn  # noqa: E402
from sand_framework.testing.tiny_model import build_tiny_model  # noqa: E402
from sand_framework.types import Completion, SamplingParams  # noqa: E402

CHAT = [
    {"role": "user", "content": "You are playing a text game. Answer with Thought: and Action:."},
    {"role": "assistant", "content": "OK"},
    {"role": "user", "content": "Your task is to find the coin. You are in the kitchen."},
]
CHAT2 = [{"role": "user", "content": "Observation: You see a fridge and a door to the west."}]
SAMPLE = SamplingParams(n=4, temperature=1.0, max_new_tokens=12, seed=123)
GREEDY = SamplingParams(n=1, temperature=0.0, max_new_tokens=12)


@pytest.fixture(scope="module")
def tiny_dir(tiny_model_dir):
    return tiny_model_dir  # the session's one tiny model (conftest.py)


def _make_adapter(base_dir: str, out_dir, seed: int) -> str:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    cfg = LoraConfig(r=4, lora_alpha=16, target_modules=["q_proj", "v_proj", "down_proj"], init_lora_weights=False)
    peft_model = get_peft_model(model, cfg)
    with torch.no_grad():  # make the adapter's effect large enough to change samples
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    peft_model.save_pretrained(str(out_dir))
    return str(out_dir)


@pytest.fixture(scope="module")
def adapters(tiny_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("adapters")
    return _make_adapter(tiny_dir, root / "a", 1), _make_adapter(tiny_dir, root / "b", 2)


@pytest.fixture()
def policy(tiny_dir):
    pol = TransformersPolicy(TransformersPolicy.Params(batch_size=8, threads=1))
    pol.setup(tiny_dir)
    yield pol
    pol.close()


def _texts(result):
    return [[c.text for c in row] for row in result]


def test_registers_through_hook():
    ps = PluginSet()
    ps.register(transformers_backend, "transformers_backend", "test", "builtin")
    regs = ps.registries()
    assert regs["policy"].get("transformers") is TransformersPolicy


def test_batched_sampling_shapes_and_tokens(policy):
    out = policy.generate([CHAT, CHAT2, CHAT], SAMPLE)
    assert len(out) == 3 and all(len(row) == 4 for row in out)
    for row in out:
        for c in row:
            assert isinstance(c, Completion) and isinstance(c.text, str)
            assert 1 <= c.completion_tokens <= SAMPLE.max_new_tokens
            assert c.prompt_tokens > 0
            assert "\nObservation:" not in c.text
            parse_turn(c.text)  # never raises, whatever the random model wrote
    assert out[0][0].prompt_tokens == out[2][0].prompt_tokens == policy.count_tokens(
        policy.tokenizer.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=False)
    )
    assert out[1][0].prompt_tokens < out[0][0].prompt_tokens
    s = policy.stats
    assert s["calls"] == 1 and s["sequences"] == 12
    assert s["completion_tokens"] == sum(c.completion_tokens for row in out for c in row)
    assert s["prompt_tokens"] == sum(c.prompt_tokens for row in out for c in row)
    assert s["busy_seconds"] > 0


def test_more_samples_than_batch_size(tiny_dir):
    pol = TransformersPolicy(TransformersPolicy.Params(batch_size=3))
    pol.setup(tiny_dir)
    out = pol.generate([CHAT, CHAT2], SamplingParams(n=5, temperature=1.0, max_new_tokens=4, seed=0))
    assert [len(r) for r in out] == [5, 5]
    assert pol.stats["sequences"] == 10


def test_greedy_is_deterministic_and_batch_independent(policy):
    a = policy.generate([CHAT, CHAT2], GREEDY)
    b = policy.generate([CHAT2, CHAT], GREEDY)
    alone = policy.generate([CHAT], GREEDY)
    assert _texts(a) == _texts(b)[::-1]
    assert a[0][0].text == alone[0][0].text
    three = policy.generate([CHAT], SamplingParams(n=3, temperature=0.0, max_new_tokens=12))
    assert [c.text for c in three[0]] == [a[0][0].text] * 3


def test_same_seed_same_samples(policy):
    a = policy.generate([CHAT, CHAT2], SAMPLE)
    b = policy.generate([CHAT, CHAT2], SAMPLE)
    c = policy.generate([CHAT, CHAT2], SamplingParams(n=4, temperature=1.0, max_new_tokens=12, seed=124))
    assert _texts(a) == _texts(b)
    assert _texts(a) != _texts(c)
    assert len(set(a[0][i].text for i in range(4))) > 1  # the samples differ from each other


def test_adapter_agent_vs_base(policy, adapters):
    pre_greedy = policy.generate([CHAT, CHAT2], GREEDY)
    pre_sample = policy.generate([CHAT, CHAT2], SAMPLE)
    base_model = policy.model

    policy.set_agent_weights(adapters[0])
    assert policy.agent_kind == "adapter"
    agent_a = policy.generate([CHAT, CHAT2], SAMPLE, role="agent")
    assert _texts(agent_a) != _texts(pre_sample)
    # role="base" sees exactly the base weights
    assert _texts(policy.generate([CHAT, CHAT2], SAMPLE, role="base")) == _texts(pre_sample)
    assert _texts(policy.generate([CHAT, CHAT2], GREEDY, role="base")) == _texts(pre_greedy)

    # switching adapters keeps the base model object and drops the old adapter
    policy.set_agent_weights(adapters[1])
    assert policy.model is base_model
    assert policy.peft_model.get_base_model() is base_model
    assert list(policy.peft_model.peft_config) == [policy.peft_model.active_adapter]
    agent_b = policy.generate([CHAT, CHAT2], SAMPLE, role="agent")
    assert _texts(agent_b) != _texts(agent_a)
    assert _texts(policy.generate([CHAT, CHAT2], SAMPLE, role="base")) == _texts(pre_sample)

    # switching back to A reproduces A's samples (no leftover of B)
    policy.set_agent_weights(adapters[0])
    assert _texts(policy.generate([CHAT, CHAT2], SAMPLE)) == _texts(agent_a)

    # None: the agent is the base model again
    policy.set_agent_weights(None)
    assert _texts(policy.generate([CHAT, CHAT2], SAMPLE, role="agent")) == _texts(pre_sample)
    assert policy.model is base_model


def test_fresh_policy_with_adapter_matches_switched(tiny_dir, adapters, policy):
    policy.set_agent_weights(adapters[0])
    policy.set_agent_weights(adapters[1])
    switched = policy.generate([CHAT, CHAT2], SAMPLE)
    fresh = TransformersPolicy(TransformersPolicy.Params(batch_size=8))
    fresh.setup(tiny_dir)
    fresh.set_agent_weights(adapters[1])
    assert _texts(fresh.generate([CHAT, CHAT2], SAMPLE)) == _texts(switched)


def test_full_model_agent(policy, tmp_path):
    pre = policy.generate([CHAT], SAMPLE)
    other = build_tiny_model(tmp_path / "other", seed=7)
    policy.set_agent_weights(str(other))
    assert policy.agent_kind == "full"
    assert _texts(policy.generate([CHAT], SAMPLE)) != _texts(pre)
    assert _texts(policy.generate([CHAT], SAMPLE, role="base")) == _texts(pre)
    policy.set_agent_weights(None)
    assert policy.agent_model is None
    assert _texts(policy.generate([CHAT], SAMPLE)) == _texts(pre)


def test_bad_agent_weights(policy, tmp_path):
    from sand_framework.errors import ModelUnavailable

    with pytest.raises(ModelUnavailable):
        policy.set_agent_weights(str(tmp_path))


def test_stop_strings_cut_text_and_generation(tiny_dir):
    pol = TransformersPolicy(TransformersPolicy.Params(stop=["e", "a"]))
    pol.setup(tiny_dir)
    out = pol.generate([CHAT, CHAT2], SamplingParams(n=4, temperature=1.0, max_new_tokens=40, seed=5))
    comps = [c for row in out for c in row]
    assert all("e" not in c.text and "a" not in c.text for c in comps)
    assert any(c.completion_tokens < 40 for c in comps)  # generation stopped early, not just the text


def test_long_prompt_keeps_head_and_tail(policy):
    chat = list(CHAT)
    for i in range(30):
        chat.append({"role": "assistant", "content": f"Thought: step {i}.\nAction: look around"})
        chat.append({"role": "user", "content": f"Observation: nothing new {i}."})
    limit = len(policy.encode_prompt(CHAT + chat[-4:])) + 2  # room for the head and two pairs
    policy.params.max_prompt_tokens = limit
    ids = policy.encode_prompt(chat)
    assert len(ids) <= limit
    text = policy.tokenizer.decode(ids)
    assert "You are playing a text game" in text and "find the coin" in text
    assert "nothing new 29." in text and "nothing new 28." in text and "nothing new 27." not in text
    assert text.endswith("<|im_start|>assistant\n")
    # a single over-long message is cut from the left, keeping the generation prompt
    ids = policy.encode_prompt([{"role": "user", "content": "look around " * 200}])
    assert len(ids) == limit and policy.tokenizer.decode(ids).endswith("<|im_start|>assistant\n")
    out = policy.generate([chat], SamplingParams(n=2, temperature=1.0, max_new_tokens=4, seed=0))
    assert all(c.prompt_tokens <= limit for c in out[0])


def test_decoding_is_robust(policy):
    assert isinstance(policy._decode([]), str)
    assert isinstance(policy._decode([5, 7, 300, 2, 3, 0]), str)
    assert isinstance(policy._decode([10**7]), str)  # out-of-vocabulary id
    assert policy.generate([], SAMPLE) == []


def test_shared_prefill_matches_reencoding(tiny_dir):
    chats = [CHAT, CHAT2]  # different lengths: left padding in the shared cache
    sp = SamplingParams(n=3, temperature=1.0, max_new_tokens=10, seed=9)
    out = {}
    for share in (True, False):
        pol = TransformersPolicy(TransformersPolicy.Params(share_prefill=share))
        pol.setup(tiny_dir)
        used = []
        real = pol._generate_shared_prefill
        pol._generate_shared_prefill = lambda *a, _r=real: used.append(_r(*a)) or used[-1]
        out[share] = pol.generate(chats, sp)
        assert bool(used) == share and all(u is not None for u in used)  # no silent fallback
    assert _texts(out[True]) == _texts(out[False])
    counts = {share: [[c.completion_tokens for c in r] for r in res] for share, res in out.items()}
    assert counts[True] == counts[False]


def test_common_prefix_sharing_matches_full_encoding(tiny_dir):
    """Rows laid out as [shared prefix][padding][rest] with the prefix encoded once give the same tokens as
    plain left-padded encoding, greedy and sampled (same seed), for prompts of different lengths."""
    head = CHAT[:2]
    chats = [head + [{"role": "user", "content": "Your task is to find the coin. You are in the kitchen."}],
             head + [{"role": "user", "content": "Observation: You see a fridge."}],
             head + [{"role": "user", "content": "Observation: You are in the pantry. There is a door to the "
                                                 "north and a door to the south, both open."}]]
    out = {}
    for share in (True, False):
        pol = TransformersPolicy(TransformersPolicy.Params(share_common_prefix=share, min_common_prefix=4))
        pol.setup(tiny_dir)
        assert (pol._common_prefix([pol.encode_prompt(c) for c in chats], 1) >= 4) == share
        used = []
        real = pol._generate_from_common_prefix
        pol._generate_from_common_prefix = lambda *a, _r=real: used.append(_r(*a)) or used[-1]
        out[share] = (pol.generate(chats, GREEDY), pol.generate(chats, SamplingParams(n=3, temperature=1.0,
                                                                                      max_new_tokens=10, seed=5)))
        assert bool(used) == share and all(u is not None for u in used)  # no silent fallback
        pol.close()
    for a, b in zip(out[True], out[False]):
        assert _texts(a) == _texts(b)
        assert [[c.prompt_tokens for c in r] for r in a] == [[c.prompt_tokens for c in r] for r in b]


def test_common_prefix_leaves_every_prompt_a_token(tiny_dir):
    pol = TransformersPolicy(TransformersPolicy.Params(share_common_prefix=True, min_common_prefix=1))
    assert pol._common_prefix([[1, 2, 3], [1, 2, 3, 4]], 1) == 2
    assert pol._common_prefix([[1, 2, 3]], 1) == 0 and pol._common_prefix([[1, 2, 3]], 2) == 2
    assert pol._common_prefix([[5, 2], [1, 2]], 1) == 0


@pytest.mark.parametrize("sharing", ["prefill", "common_prefix"])
def test_prefill_keeps_only_the_last_logits(tiny_dir, adapters, sharing):
    """The cache-filling forwards must not build logits for every prompt token (rows x tokens x vocabulary
    floats: with SmolLM2's 49k vocabulary a 40-row synthesis batch allocated 5.5 GB that way), with the
    base model and with a LoRA adapter attached; the tokens generated stay those of full encoding."""
    params = dict(share_prefill=True) if sharing == "prefill" else dict(share_common_prefix=True, min_common_prefix=4)
    pol = TransformersPolicy(TransformersPolicy.Params(**params))
    pol.setup(tiny_dir)
    head = CHAT[:2]
    chats = [head + [{"role": "user", "content": "Your task is to find the coin. You are in the kitchen."}],
             head + [{"role": "user", "content": "Observation: You see a fridge and a door to the west."}]]
    sp = SamplingParams(n=3, temperature=1.0, max_new_tokens=6, seed=3)
    for weights in (None, adapters[0]):
        pol.set_agent_weights(weights)
        positions: list[int] = []
        hook = pol.model.lm_head.register_forward_hook(lambda m, i, o: positions.append(o.shape[1]))
        try:
            pol.generate(chats, sp)
        finally:
            hook.remove()
        assert positions and max(positions) == 1, positions
    pol.close()
