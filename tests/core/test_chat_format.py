"""One template for training and sampling, for every model family.

Tiny tokenizers carrying the real families' special tokens and chat templates
(Llama-3.x, Qwen2.5 ChatML with a default system prompt, Mistral without a
system role, Gemma rejecting system messages, SmolLM2) check that

(a) the loss mask covers exactly the assistant replies and their end-of-turn token;
(b) the prompt every policy renders at step t equals, token for token, the
    start of the training sequence;
(c) system text is folded where the template rejects a system role;
(d) the whole smoke loop (expert, SFT, synthesis, SFT, evaluation) completes,
    and the trained weights carry the template they were trained with.
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings

import pytest
from chat_families import END_OF_TURN, FAMILY_NAMES, trained_runs

from sand_framework.chat_format import ChatFormat, ChatTemplateError, FORMAT_FILE
from sand_framework.prompting import format_turn, trajectory_chat
from sand_framework.testing.tiny_model import FAMILIES, build_tiny_model
from sand_framework.types import Step, Trajectory


def _traj() -> Trajectory:
    return Trajectory(
        task_id="t0", env="textworld_express",
        instruction="You are playing a text game. Answer with Thought: and Action:.",
        task="Your task is to find the coin. You are in the kitchen.",
        steps=[Step("I should look around first.", "look around", "You see a door to the east."),
               Step("", "move east", "You are in the pantry. You see a coin."),
               Step("The coin is here.", "take coin", "You take the coin.")],
        reward=1.0, success=True)


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request, tmp_path_factory):
    path = build_tiny_model(tmp_path_factory.mktemp(request.param) / "model", family=request.param)
    return request.param, path, ChatFormat.from_pretrained(path)


def test_mask_covers_exactly_the_replies_and_end_of_turn(family):
    name, _, fmt = family
    traj = _traj()
    ids, mask = fmt.training_example(trajectory_chat(traj))
    replies = [m["content"] for m in trajectory_chat(traj) if m["role"] == "assistant"]
    trained = [fmt.tokenizer.decode(r) for r in trained_runs(ids, mask)]
    assert trained == [r + END_OF_TURN[name] for r in replies]
    untrained = fmt.tokenizer.decode([t for t, m in zip(ids, mask) if not m])
    assert traj.instruction in untrained and traj.task in untrained
    assert all(s.observation in untrained for s in traj.steps[:-1])  # the last one is never shown
    assert fmt.info.end_of_turn == [END_OF_TURN[name]]


def test_every_policy_prompt_is_a_token_prefix_of_the_training_sequence(family):
    """The transformers and vLLM policies render the step-t prompt exactly as the trainer's sequence starts."""
    from sand_builtins.policies.transformers_backend import TransformersPolicy
    from sand_builtins.policies.vllm_backend import VLLMPolicy

    name, path, fmt = family
    traj = _traj()
    ids, mask = fmt.training_example(trajectory_chat(traj))
    hf = TransformersPolicy()
    hf.setup(str(path))
    vllm = VLLMPolicy()  # rendering needs no engine: the formats are what setup would load
    vllm.base_format = vllm.agent_format = ChatFormat.from_pretrained(path)
    for t in range(len(traj.steps)):
        chat = trajectory_chat(traj, upto=t)
        for prompt in (hf.encode_prompt(chat), vllm.encode_prompt(chat, 16)):
            assert prompt == ids[: len(prompt)], (name, t)
            reply = fmt.encode(format_turn(traj.steps[t].thought, traj.steps[t].action))
            # the reply's tokens follow the prompt and are the first trained tokens after it
            assert ids[len(prompt): len(prompt) + len(reply)] == reply
            assert mask[len(prompt) - 1] == 0 and all(mask[len(prompt): len(prompt) + len(reply)])
    stop = set(hf._stop_ids)
    assert fmt.tokenizer.convert_tokens_to_ids(END_OF_TURN[name]) in stop


def test_system_text_is_folded_where_the_template_rejects_it(family):
    name, _, fmt = family
    chat = [{"role": "system", "content": "Be brief."}, *trajectory_chat(_traj())]
    expected = "fold" if name in ("mistral", "gemma") else "native"
    assert fmt.system == expected
    text = fmt.render(chat)
    assert "Be brief." in text
    if expected == "fold":
        assert "Be brief.\n\nYou are playing a text game." in text
    ids, mask = fmt.training_example(chat)
    assert len(trained_runs(ids, mask)) == 4
    with warnings.catch_warnings(record=True) as caught:  # the fold is said, so a user learns of it
        warnings.simplefilter("always")
        ChatFormat(fmt.tokenizer, source=name)
    assert [str(w.message) for w in caught if "folded into the first user turn" in str(w.message)] == \
        ([f"{name}: the chat template renders no system role, so system text is folded into the first user turn "
          "(training and prompts alike)"] if expected == "fold" else [])


def test_a_template_that_rewrites_past_turns_is_refused(tmp_path):
    """A template that renders the last reply differently from earlier ones (as templates that strip past
    reasoning do) would train on sequences the agent is never prompted with: refused with a fix."""
    path = build_tiny_model(tmp_path / "m", family="sand_chatml")
    fmt = ChatFormat.from_pretrained(path)
    fmt.tokenizer.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
        "{% if m['role'] == 'assistant' and not loop.last %}{{ m['content'][:4] }}{% else %}{{ m['content'] }}"
        "{% endif %}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    with pytest.raises(ChatTemplateError, match="not a prefix.*only appends"):
        ChatFormat(fmt.tokenizer).training_example(trajectory_chat(_traj()))


def test_a_tokenizer_without_template_is_refused_with_the_fix(tmp_path):
    path = build_tiny_model(tmp_path / "m")
    fmt = ChatFormat.from_pretrained(path)
    fmt.tokenizer.chat_template = None
    with pytest.raises(ChatTemplateError, match="no chat template.*save the tokenizer with a `chat_template`"):
        ChatFormat(fmt.tokenizer)


# The whole loop on the two families whose templates refuse a system message (Mistral: none at all, Gemma: it raises)
# in the default suite; the families that take one, as SAND's own ChatML does in every other smoke run
# (tests/engine/test_pipeline.py), run with -m slow. Each family's prompts and loss masks are checked above either way.
SMOKE_DEFAULT = {"mistral", "gemma"}


@pytest.mark.parametrize("name", [n if n in SMOKE_DEFAULT else pytest.param(n, marks=pytest.mark.slow)
                                  for n in FAMILY_NAMES])
def test_smoke_loop_runs_on_every_family(name, tmp_path):
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "sand_framework.cli.main", "run", "smoke", f"model.base=tiny-random-{name}",
         "eval.splits=[unseen]", "eval.limit=1", "--run-dir", str(run_dir)],
        capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert set(metrics["eval"]) == {"sft", "final"}
    for weights in ("iter0", "iter1"):
        saved = json.loads((run_dir / "weights" / weights / "final" / FORMAT_FILE).read_text())
        assert saved["end_of_turn"] == [END_OF_TURN[name]]
