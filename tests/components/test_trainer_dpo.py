"""The TRL DPO trainer on tiny random models: learning, masks on five template families, reference, resume."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

pytest.importorskip("trl")
pytest.importorskip("peft")

from chat_families import END_OF_TURN, FAMILY_NAMES, trained_runs  # noqa: E402

from sand_framework.chat_format import ChatFormat  # noqa: E402
from sand_framework.components import PreferenceTrainRequest, TrainRequest  # noqa: E402
from sand_framework.pairs import pair_messages  # noqa: E402
from sand_framework.testing.tiny_model import build_tiny_model  # noqa: E402
from sand_framework.types import PreferencePair, Step, Trajectory  # noqa: E402
from sand_builtins.trainers import trl_dpo  # noqa: E402
from sand_builtins.trainers.checkpoints import latest_checkpoint  # noqa: E402
from sand_builtins.trainers.dpo_data import MaskedPreferenceCollator, build_examples  # noqa: E402
from sand_builtins.trainers.stage import TrlStage  # noqa: E402
from sand_builtins.trainers.trl_dpo import DpoTrainer, LaunchParams, Params, per_iteration  # noqa: E402


def _pair(i: int = 0, prefix: int = 0) -> PreferencePair:
    """A pair whose sides have two steps each; ``prefix`` expert steps before them (IPR's step-level pairs)."""
    prompt = Trajectory(
        task_id=f"t{i}", env="toy", instruction="You are playing a text game. Answer with Thought: and Action:.",
        task=f"You are in room {i}. Your task is to find the coin.",
        steps=[Step("I look first.", "look around", "You see a door to the east."),
               Step("East it is.", "move east", "You are in the pantry.")][:prefix])
    chosen = [Step("The coin is near.", "take coin", "You take the coin."), Step("Done.", "inventory", "A coin.")]
    rejected = [Step("Maybe north.", "go north", "You are in a hall."), Step("Lost.", "look", "A hall.")]
    return PreferencePair(prompt, chosen, rejected, chosen_reward=1.0, rejected_reward=0.0)


def _params(**kw) -> Params:
    base = dict(max_steps=3, logging_steps=1, batch_size=4, per_device_batch_size=4, save_steps=100,
                report_to="none", learning_rate=[5e-3], beta=[0.1], warmup_ratio=0.0, lr_scheduler_type="constant")
    base.update(kw)
    return Params(**base)


def _request(model: Path, out: Path, n: int = 4, init: str | None = None, reference: str | None = None,
             iteration: int = 1, epochs: float = 1.0) -> PreferenceTrainRequest:
    return PreferenceTrainRequest([_pair(i) for i in range(n)], str(model), init, str(out), epochs=epochs, seed=0,
                                  reference_weights=reference, iteration=iteration)


def _summary(out: Path) -> dict:
    return json.loads((Path(out) / "training_summary.json").read_text())


@pytest.fixture(scope="session")
def tiny(tiny_model_dir) -> Path:
    return Path(tiny_model_dir)  # the session's one tiny model (conftest.py)


@pytest.fixture(scope="session")
def dpo_adapter(tiny, tmp_path_factory) -> Path:
    """A LoRA adapter on the base trained by DPO for 3 steps (a non-trivial agent to continue from)."""
    out = tmp_path_factory.mktemp("dpo_lora")
    return Path(DpoTrainer(_params()).train(_request(tiny, out)))


@pytest.fixture(scope="session")
def other_adapter(tiny, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dpo_lora_other")
    return Path(DpoTrainer(_params(learning_rate=[2e-2], max_steps=2)).train(_request(tiny, out, n=2)))


def test_registered_as_the_preference_trainer():
    from sand_framework.plugins import PluginSet

    ps = PluginSet()
    ps.register(trl_dpo, "trl_dpo_test", "0", "module")
    assert ps.registries()["preference_trainer"].get("trl_dpo") is DpoTrainer


def test_dpo_lowers_its_loss_and_widens_the_margin(tiny, dpo_adapter):
    """From the base (reference = base): loss starts at ln 2 (policy == reference) and falls; margins grow."""
    s = _summary(dpo_adapter.parent)
    assert s["steps"] == 3 and s["pairs"] == 4 and s["examples"] == 4
    assert s["train_loss_first"] == pytest.approx(math.log(2), abs=1e-4)
    assert s["train_loss_last"] < s["train_loss_first"] - 0.1, s["losses"]
    assert s["reward_margin_last"] > s["reward_margin_first"] and s["reward_accuracy_last"] == 1.0
    assert s["reference"] == "the base model (adapters disabled)" and s["output"] == "adapter"
    assert (dpo_adapter / "adapter_config.json").exists() and (dpo_adapter / "sand_chat_format.json").exists()
    assert not (dpo_adapter / "ref").exists() and not (dpo_adapter.parent / "checkpoints").exists()


@pytest.mark.parametrize("name", FAMILY_NAMES)
def test_masks_are_the_replies_and_the_prompt_is_a_prefix_on_every_family(name, tmp_path):
    """Token for token: each side trains exactly its assistant replies + end-of-turn; observations between them,
    and the whole prompt (its own expert step included), carry no loss; every step's policy prompt is a prefix."""
    path = build_tiny_model(tmp_path / name, family=name)
    fmt = ChatFormat.from_pretrained(path)
    pair = _pair(prefix=1)
    msgs = pair_messages(pair)
    (row,) = build_examples([pair], fmt, max_length=4096).rows
    assert row["prompt_ids"] == fmt.prompt_ids(msgs["prompt"])
    for side in ("chosen", "rejected"):
        ids, mask = row["prompt_ids"] + row[f"{side}_ids"], [0] * len(row["prompt_ids"]) + row[f"{side}_mask"]
        replies = [m["content"] for m in msgs[side] if m["role"] == "assistant"]
        assert [fmt.tokenizer.decode(r) for r in trained_runs(ids, mask)] == [r + END_OF_TURN[name] for r in replies]
        untrained = fmt.tokenizer.decode([t for t, m in zip(ids, mask) if not m])
        steps = getattr(pair, side)
        assert steps[0].observation in untrained and pair.prompt.steps[0].action in untrained
        assert steps[-1].observation not in fmt.tokenizer.decode(ids)  # the last observation is never shown
        for t in range(len(steps)):  # the policy's prompt for each step of the side starts the sequence
            prompt = fmt.prompt_ids(msgs["prompt"] + msgs[side][: 2 * t])
            assert ids[: len(prompt)] == prompt and mask[len(prompt) - 1] == 0 and mask[len(prompt)] == 1
    batch = MaskedPreferenceCollator(pad_token_id=fmt.tokenizer.pad_token_id)([row])
    for k, side in enumerate(("chosen", "rejected")):
        n = len(row["prompt_ids"]) + len(row[f"{side}_ids"])
        assert batch["completion_mask"][k, :n].tolist() == [0] * len(row["prompt_ids"]) + row[f"{side}_mask"]
        assert batch["attention_mask"][k].sum().item() == n


def test_the_trainer_gets_our_masks(tiny, tmp_path):
    """TRL's own tokenization (which would train every completion token) is skipped: the batch carries ours."""
    trainer = DpoTrainer(_params()).build(_request(tiny, tmp_path, n=2))
    row = trainer.train_dataset[0]
    assert set(row) >= {"prompt_ids", "chosen_ids", "rejected_ids", "chosen_mask", "rejected_mask"}
    assert 0 in row["chosen_mask"]  # the observation between the two replies is masked
    batch = trainer.data_collator([trainer.train_dataset[0], trainer.train_dataset[1]])
    assert batch["completion_mask"].sum().item() == sum(sum(trainer.train_dataset[i][f"{s}_mask"])
                                                        for i in range(2) for s in ("chosen", "rejected"))


def test_truncation_keeps_the_start_and_drops_pairs_left_without_a_trained_token(tiny):
    fmt = ChatFormat.from_pretrained(tiny)
    (row,) = build_examples([_pair()], fmt, max_length=4096).rows
    n = len(row["prompt_ids"])
    cut = build_examples([_pair()], fmt, max_length=n + 3)
    assert cut.truncated == 1 and len(cut.rows[0]["chosen_ids"]) == 3
    gone = build_examples([_pair()], fmt, max_length=n)
    assert gone.dropped == 1 and not gone.rows


def test_max_prompt_length_drops_the_oldest_turns_as_the_policy_does(tiny):
    """A prompt over max_prompt_length is shortened as fit_prompt shortens the policy's: the oldest
    (reply, observation) after the task goes first (the newest stays), then tokens from the left."""
    from sand_framework.prompting import fit_prompt

    fmt = ChatFormat.from_pretrained(tiny)
    pair = _pair(prefix=2)
    full = build_examples([pair], fmt, 4096).rows[0]
    for limit in (len(full["prompt_ids"]) - 1, 20):
        fitted = build_examples([pair], fmt, 4096, max_prompt_length=limit)
        want = fit_prompt(pair_messages(pair)["prompt"], fmt.prompt_ids, limit)
        assert fitted.truncated == 1 and fitted.rows[0]["prompt_ids"] == want and len(want) <= limit
    dropped = fmt.tokenizer.decode(build_examples([pair], fmt, 4096, len(full["prompt_ids"]) - 1).rows[0]["prompt_ids"])
    assert "look around" not in dropped and "move east" in dropped


def test_reference_is_a_frozen_copy_of_the_init_adapter(tiny, dpo_adapter, tmp_path):
    """ETO: the current agent is both the start and the reference. No second model: a frozen 'ref' adapter equal
    to the init adapter, so the first loss is exactly ln 2; the output is an adapter on the base model."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    trainer = DpoTrainer(_params(max_steps=2))
    built = trainer.build(_request(tiny, tmp_path / "b", init=str(dpo_adapter), reference=str(dpo_adapter)))
    assert built.ref_model is None and "ref" in built.model.peft_config
    params = dict(built.model.named_parameters())
    ref_names = [n for n in params if ".ref." in n]
    assert ref_names and all(not params[n].requires_grad for n in ref_names)
    assert all(torch.equal(params[n], params[n.replace(".ref.", ".default.")]) for n in ref_names)
    assert any(p.requires_grad for n, p in params.items() if ".default." in n)
    del built
    final = Path(trainer.train(_request(tiny, tmp_path, init=str(dpo_adapter), reference=str(dpo_adapter))))
    s = _summary(tmp_path)
    assert s["train_loss_first"] == pytest.approx(math.log(2), abs=1e-4)
    assert s["reference"].startswith("frozen copy of the init adapter")
    assert not (final / "ref").exists() and (final / "adapter_config.json").exists()
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny), final)  # the next agent
    assert model is not None


def test_reference_base_or_another_adapter(tiny, dpo_adapter, other_adapter, tmp_path):
    """IPR: the reference (the fixed SFT adapter) differs from the init weights: it is loaded as the 'ref'
    adapter; None (the base model) disables the adapters instead."""
    import torch
    from safetensors.torch import load_file

    built = DpoTrainer(_params()).build(_request(tiny, tmp_path / "a", init=str(dpo_adapter),
                                                 reference=str(other_adapter)))
    params = dict(built.model.named_parameters())
    want = load_file(str(other_adapter / "adapter_model.safetensors"))
    for key, value in want.items():  # peft's saved names lack the adapter name
        name = key.replace(".lora_A.weight", ".lora_A.ref.weight").replace(".lora_B.weight", ".lora_B.ref.weight")
        assert torch.equal(params[name], value), key
    assert built.model.active_adapters == ["default"]
    base = DpoTrainer(_params()).build(_request(tiny, tmp_path / "b", init=str(dpo_adapter), reference=None))
    assert "ref" not in base.model.peft_config and base.ref_model is None
    first = DpoTrainer(_params(max_steps=1)).train(_request(tiny, tmp_path / "c", init=str(dpo_adapter)))
    assert _summary(Path(first).parent)["train_loss_first"] != pytest.approx(math.log(2), abs=1e-4)


def test_full_finetune_keeps_an_explicit_reference_model_and_writes_a_full_model(tiny, dpo_adapter, tmp_path):
    from transformers import AutoModelForCausalLM

    final = Path(DpoTrainer(_params(lora=False, max_steps=2)).train(
        _request(tiny, tmp_path, init=str(dpo_adapter), reference=str(dpo_adapter))))
    assert (final / "config.json").exists() and not (final / "adapter_config.json").exists()
    AutoModelForCausalLM.from_pretrained(final)
    s = _summary(tmp_path)
    assert s["reference"].startswith("ref_model loaded from") and s["output"] == "full"
    assert s["train_loss_first"] == pytest.approx(math.log(2), abs=1e-4)  # the merged init is the reference


def test_lora_on_a_full_init_model_writes_the_merged_model(tiny, tmp_path):
    full = Path(DpoTrainer(_params(lora=False, max_steps=1)).train(_request(tiny, tmp_path / "full", n=2)))
    final = Path(DpoTrainer(_params(max_steps=1)).train(_request(tiny, tmp_path / "lora", n=2, init=str(full),
                                                                 reference=str(full))))
    assert (final / "config.json").exists() and not (final / "adapter_config.json").exists()
    assert _summary(tmp_path / "lora")["reference"] == "the init model (adapters disabled)"


def test_every_rank_joins_the_save_of_an_adapter_merged_at_the_end(tmp_path, monkeypatch):
    """Issue 37 item 6: under FSDP the adapter's gather is a collective every rank must join; the merge then runs
    on rank 0 from the saved files (before, rank 0 merged the sharded model alone: a hang or a partial model)."""
    from types import SimpleNamespace

    calls = []
    for rank in (0, 1):
        trainer = SimpleNamespace(is_world_process_zero=lambda rank=rank: rank == 0,
                                  save_model=lambda folder, rank=rank: calls.append(("save", rank)))
        dpo = DpoTrainer(_params())
        dpo.merge_at_end = True
        monkeypatch.setattr(dpo, "_merge_saved_adapter", lambda folder, rank=rank: calls.append(("merge", rank)))
        dpo._save_weights(trainer, tmp_path)
    assert calls == [("save", 0), ("merge", 0), ("save", 1)]


def test_the_next_agent_loads_in_the_transformers_policy(tiny, dpo_adapter):
    from sand_builtins.policies.transformers_backend import TransformersPolicy

    policy = TransformersPolicy()
    policy.setup(str(tiny))
    policy.set_agent_weights(str(dpo_adapter))
    assert policy.agent_kind != "base" and policy.agent_weights == str(dpo_adapter)
    policy.release()


def test_beta_and_learning_rate_follow_the_iteration(tiny, tmp_path):
    assert [per_iteration([0.1, 0.5], k) for k in (0, 1, 2, 3, 7)] == [0.1, 0.1, 0.5, 0.5, 0.5]
    eto = _params(beta=[0.1, 0.5], learning_rate=[1e-6, 5e-7])
    for k, (beta, lr) in {1: (0.1, 1e-6), 2: (0.5, 5e-7), 3: (0.5, 5e-7)}.items():
        built = DpoTrainer(eto).build(_request(tiny, tmp_path / str(k), n=2, iteration=k))
        assert (built.beta, built.args.beta, built.args.learning_rate) == (beta, beta, lr)


def test_sft_weight_adds_trl_sft_loss(tiny, tmp_path):
    built = DpoTrainer(_params(sft_weight=1.0)).build(_request(tiny, tmp_path, n=2))
    assert built.loss_types == ["sigmoid", "sft"] and built.loss_weights == [1.0, 1.0]
    plain = DpoTrainer(_params()).build(_request(tiny, tmp_path / "p", n=2))
    assert plain.loss_types == ["sigmoid"]


def test_resume_after_kill_continues_the_init_adapter(tiny, dpo_adapter, tmp_path):
    """Killed after checkpoint-2, the stage resumes from it (the trained adapter, not the frozen copy of the init
    one) and ends with the weights of an uninterrupted run."""
    import torch
    from safetensors.torch import load_file
    from transformers import TrainerCallback

    class Kill(TrainerCallback):
        def on_save(self, args, state, control, **kw):
            if state.global_step == 2:
                raise KeyboardInterrupt("simulated kill after checkpoint-2")

    params = _params(max_steps=4, save_steps=2, save_total_limit=3)
    req = lambda out: _request(tiny, out, init=str(dpo_adapter), reference=str(dpo_adapter))  # noqa: E731
    first = DpoTrainer(params)
    first.extra_callbacks.append(Kill())
    with pytest.raises(KeyboardInterrupt):
        first.train(req(tmp_path / "k"))
    ckpt = latest_checkpoint(tmp_path / "k" / "checkpoints")
    assert ckpt is not None and ckpt.endswith("checkpoint-2") and not (Path(ckpt) / "ref").exists()
    final = Path(DpoTrainer(params).train(req(tmp_path / "k")))
    s = _summary(tmp_path / "k")
    assert s["steps"] == 4 and s["resumed_from"].endswith("checkpoint-2")
    straight = Path(DpoTrainer(params).train(req(tmp_path / "s")))
    a, b = load_file(final / "adapter_model.safetensors"), load_file(straight / "adapter_model.safetensors")
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)


def test_existing_final_returns_at_once(dpo_adapter, monkeypatch):
    trainer = DpoTrainer(_params())
    monkeypatch.setattr(trainer, "build", lambda *a: pytest.fail("must not rebuild"))
    req = PreferenceTrainRequest([_pair()], "/nonexistent", None, str(dpo_adapter.parent), epochs=1)
    assert trainer.train(req) == str(dpo_adapter)


def test_a_train_request_with_pairs_still_trains_a_preference_trainer_and_warns(dpo_adapter, monkeypatch):
    """Contract 0.3: one TrainRequest carried both kinds' data. The old spelling keeps working, deprecated, and a
    preference request's ``trajectories`` is still there (empty), deprecated too."""
    trainer = DpoTrainer(_params())
    seen = []
    monkeypatch.setattr(TrlStage, "train", lambda self, request: seen.append(request) or "w")
    with pytest.warns(DeprecationWarning, match="PreferenceTrainRequest"):
        old = TrainRequest([], "/base", None, str(dpo_adapter.parent), epochs=2, seed=3, pairs=[_pair()],
                           reference_weights="/ref", iteration=2)
    assert trainer.train(old) == "w"
    assert seen == [PreferenceTrainRequest([_pair()], "/base", None, str(dpo_adapter.parent), epochs=2, seed=3,
                                           reference_weights="/ref", iteration=2)]
    with pytest.warns(DeprecationWarning, match="no trajectories"):
        assert seen[0].trajectories == []


def test_no_pairs_is_refused(tiny, tmp_path):
    with pytest.raises(ValueError, match="no preference pairs"):
        DpoTrainer(_params()).train(PreferenceTrainRequest([], str(tiny), None, str(tmp_path), epochs=1))


def test_params_are_range_checked(registries):
    from sand_framework.config.validate import component_params

    _, problems = component_params(registries, "preference_trainer", "trl_dpo",
                                   {"beta": [0.1, -1.0], "learning_rate": [], "warmup_ratio": 1.0,
                                    "batch_size": 0})
    text = "\n".join(problems)
    assert "beta[1]" in text and "learning_rate" in text and "warmup_ratio" in text and "batch_size" in text
    _, problems = component_params(registries, "preference_trainer", "trl_dpo",
                                   {"max_length": 512, "max_prompt_length": 512})
    assert any("max_prompt_length" in p for p in problems)
    built, problems = component_params(registries, "preference_trainer", "trl_dpo", {})
    assert not problems and built.lora and built.beta == [0.1, 0.5] and built.loss_type == "sigmoid"


@pytest.mark.slow
def test_ddp_two_processes_on_cpu(tiny, tmp_path):
    """`accelerate launch` with 2 processes (gloo on CPU): both ranks train on the pairs, rank 0 saves."""
    params = _params(max_steps=2, batch_size=2, per_device_batch_size=1, launch=LaunchParams(num_processes=2))
    final = Path(DpoTrainer(params).train(_request(tiny, tmp_path, n=4)))
    assert (final / "adapter_model.safetensors").exists() and (final / "sand_chat_format.json").exists()
    s = _summary(tmp_path)
    assert s["steps"] == 2 and s["pairs"] == 4
    assert not list(tmp_path.glob("final.tmp*"))


def test_warmup_ratio_becomes_whole_steps(tiny, tmp_path):
    """ETO's constant_with_warmup 0.1: 4 pairs at batch 2 for 5 epochs = 10 optimizer steps, 1 of them warm-up."""
    built = DpoTrainer(_params(max_steps=-1, batch_size=2, per_device_batch_size=1, warmup_ratio=0.1,
                               lr_scheduler_type="constant_with_warmup")).build(_request(tiny, tmp_path, epochs=5))
    assert built.args.warmup_steps == 1 and built.args.gradient_accumulation_steps == 2
    assert built.args.lr_scheduler_type == "constant_with_warmup"


RANK_SCRIPT = r"""
import hashlib, json, os, sys
rank, port, model, fix = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4] == "fix"
os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", ACCELERATE_USE_FSDP="true",
                  FSDP_CPU_RAM_EFFICIENT_LOADING="true")
import torch, torch.distributed as dist
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
from sand_builtins.trainers.trl_dpo import DpoTrainer
load = DpoTrainer._load_reference if fix else DpoTrainer._load_full
state = load(None, model, torch.float32).state_dict()
h = hashlib.sha256()
for name in sorted(state):
    h.update(name.encode()); h.update(state[name].detach().contiguous().numpy().tobytes())
print(json.dumps({"rank": rank, "digest": h.hexdigest(), "abs": sum(float(t.abs().sum()) for t in state.values())}),
      flush=True)
# Both ranks past every collective before either leaves; then out without gloo's teardown, whose threads can abort
# a rank whose peer closed first ("terminate called without an active exception", seen once in CI).
dist.barrier()
os._exit(0)
"""


def _ranks(model: str, fix: bool) -> list[dict]:
    import json
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo), str(repo / "plugins")]), "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, "-c", RANK_SCRIPT, str(r), port, model, "fix" if fix else "plain"],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in (0, 1)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in outs]
    return [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]


def test_the_full_fine_tune_reference_holds_the_loaded_weights_on_every_rank(tiny_model_dir):
    """Issue 37: under FSDP's cpu-RAM-efficient loading (the shipped accelerate/fsdp.yaml) transformers loads zeros
    on every rank but local 0, and TRL never broadcasts an explicit ref_model: DPO would train against a zeroed
    reference on ranks 1-7. Two real processes (gloo on CPU) show the zeros, then the reference the trainer loads
    equal to rank 0's, tensor for tensor."""
    plain = _ranks(tiny_model_dir, fix=False)
    assert plain[0]["abs"] > 0 and plain[1]["abs"] == 0, "the loading mode under test zeroes the other ranks"
    fixed = _ranks(tiny_model_dir, fix=True)
    assert fixed[0]["digest"] == fixed[1]["digest"] == plain[0]["digest"]


def test_a_rank_rebuilds_each_kind_of_request_as_it_was_written(tmp_path):
    """``accelerate launch`` hands each rank the request through a file: a preference request comes back as one
    (its pairs, reference and iteration), an SFT request as a TrainRequest."""
    from sand_builtins.trainers.launch import read_request, write_request
    from sand_builtins.trainers.trl_sft import TrlSftTrainer

    pref = PreferenceTrainRequest([_pair(0), _pair(1)], "/base", "/init", str(tmp_path), epochs=3, seed=7,
                                  reference_weights="/ref", iteration=2)
    write_request(pref, _params(), tmp_path / "pref.json", DpoTrainer)
    cls, _, back = read_request(tmp_path / "pref.json")
    assert cls is DpoTrainer and back == pref
    sft = TrainRequest([Trajectory("a", "toy", "act", "t", steps=[Step(thought="x", action="go")])], "/base", None,
                       str(tmp_path), epochs=1, seed=1)
    write_request(sft, TrlSftTrainer.Params(), tmp_path / "sft.json", TrlSftTrainer)
    cls, _, back = read_request(tmp_path / "sft.json")
    assert cls is TrlSftTrainer and back == sft and isinstance(back, TrainRequest)
