"""The ``openai`` policy puts vLLM servers to sleep for training, wakes them, and reloads full-model agents on
servers of their own: against fake servers on 127.0.0.1 that answer vLLM's dev-mode routes."""

from __future__ import annotations

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytest.importorskip("openai")

from sand_builtins.policies.openai_client.endpoints import server_root  # noqa: E402
from sand_builtins.policies.openai_client.errors import ServerRequestError  # noqa: E402
from sand_builtins.policies.openai_client.policy import OpenAIPolicy  # noqa: E402
from sand_framework.errors import ComponentError  # noqa: E402
from sand_framework.types import SamplingParams  # noqa: E402

GREEDY = SamplingParams(n=1, temperature=0.0, max_new_tokens=4)
CHAT = [{"role": "user", "content": "Find the coin."}]


class FakeVLLM:
    """Answers /v1/models, /v1/completions and the dev routes; records every call; ``dev=False``: 404 on them."""

    def __init__(self, name: str, dev: bool = True, link: Path | None = None):
        self.calls: list[tuple[str, str, dict]] = []
        self.sleeping = False
        self.loaded_from: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                outer.calls.append(("GET", self.path, {}))
                if self.path == "/is_sleeping" and dev:
                    return self._send(200, {"is_sleeping": outer.sleeping})
                self._send(200, {"object": "list", "data": [{"id": name, "object": "model", "created": 0,
                                                             "owned_by": "t"}]})

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(n) or b"{}")
                outer.calls.append(("POST", self.path, body))
                route = self.path.split("?")[0]
                if route == "/v1/completions":
                    if outer.sleeping:
                        return self._send(503, {"error": {"message": "asleep"}})
                    text = f"Thought: {name}.\nAction: go {body['model']}"
                    return self._send(200, {"id": "x", "object": "text_completion", "created": 0,
                                            "model": body["model"],
                                            "choices": [{"index": 0, "text": text, "finish_reason": "stop",
                                                         "logprobs": None}]})
                if not dev:
                    return self._send(404, {"detail": "Not Found"})
                if route == "/sleep":
                    outer.sleeping = True
                elif route == "/wake_up":
                    outer.sleeping = False
                elif route == "/collective_rpc" and body.get("method") == "reload_weights" and link is not None:
                    outer.loaded_from.append(os.path.realpath(link))
                self._send(200, {})

            def _send(self, code, payload):
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def routes(self) -> list[str]:
        return [p for m, p, _ in self.calls if m == "POST" and not p.startswith("/v1/")]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def servers():
    made = []

    def make(*a, **kw):
        s = FakeVLLM(*a, **kw)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def _policy(tiny_model_dir, urls, **params) -> OpenAIPolicy:
    pol = OpenAIPolicy(OpenAIPolicy.Params(base_urls=urls, tokenizer=tiny_model_dir, model="base", max_retries=0,
                                           **params))
    pol.setup("base")
    return pol


def test_server_root_is_beside_the_api_root():
    assert server_root("http://h:8000/v1") == "http://h:8000" and server_root("http://h:8000/v1/") == "http://h:8000"
    assert server_root("http://h:8000") == "http://h:8000"


def test_release_puts_every_server_to_sleep_and_setup_wakes_them(tiny_model_dir, servers):
    a, b = servers("base"), servers("base")
    pol = _policy(tiny_model_dir, [a.url, b.url], sleep_on_release=True)
    try:
        pol.release()  # before a training stage
        assert a.sleeping and b.sleeping
        assert a.routes()[-1] == "/sleep?level=1"
        pol.release()  # twice is once
        assert a.routes().count("/sleep?level=1") == 1
        pol.setup("base")  # the next stage sets the policy up again
        assert not a.sleeping and not b.sleeping and a.routes()[-1] == "/wake_up"
        assert pol.generate([CHAT], GREEDY)[0][0].text.startswith("Thought: base.")
    finally:
        pol.close()


def test_a_generate_after_release_wakes_the_servers_first(tiny_model_dir, servers):
    a = servers("base")
    pol = _policy(tiny_model_dir, [a.url], sleep_on_release=True, sleep_level=2)
    try:
        pol.release()
        assert a.routes() == ["/sleep?level=2"]
        pol.generate([CHAT], GREEDY)
        assert a.routes() == ["/sleep?level=2", "/wake_up"] and not a.sleeping
    finally:
        pol.close()


def test_without_sleep_on_release_release_only_closes_the_clients(tiny_model_dir, servers):
    a = servers("base")
    pol = _policy(tiny_model_dir, [a.url])
    pol.release()
    assert a.routes() == [] and pol._endpoints is None


def test_a_server_without_dev_mode_is_named_with_the_fix(tiny_model_dir, servers):
    a = servers("base", dev=False)
    pol = _policy(tiny_model_dir, [a.url], sleep_on_release=True)
    try:
        with pytest.raises(ServerRequestError, match="VLLM_SERVER_DEV_MODE=1") as err:
            pol.release()
        assert a.url in str(err.value)
    finally:
        pol.close()


def test_a_full_model_agent_is_relinked_and_reloaded_on_its_servers(tiny_model_dir, servers, tmp_path):
    link = tmp_path / "agent-current"
    base, agent = servers("base"), servers("agent", link=link)
    pol = _policy(tiny_model_dir, [base.url], agent_base_urls=[agent.url], agent_model_link=str(link),
                  sleep_on_release=True)
    try:
        for k in (1, 2):
            folder = tmp_path / f"iter{k}" / "final"
            folder.mkdir(parents=True)
            (folder / "config.json").write_text("{}")
            pol.set_agent_weights(str(folder))
            assert link.is_symlink() and os.path.realpath(link) == str(folder.resolve())
            assert agent.loaded_from[-1] == str(folder.resolve())
        assert agent.routes() == ["/collective_rpc", "/reset_prefix_cache"] * 2
        assert base.routes() == []
        out = pol.generate([CHAT], GREEDY, role="agent")[0][0].text
        assert out.startswith("Thought: agent.") and str(link) in out  # agent servers, the link's served name
        assert pol.generate([CHAT], GREEDY, role="base")[0][0].text.startswith("Thought: base.")
        pol.release()
        assert base.sleeping and agent.sleeping  # every server sleeps for training
        pol.set_agent_weights(None)
        assert pol.generate([CHAT], GREEDY, role="agent")[0][0].text.startswith("Thought: base.")
    finally:
        pol.close()


def test_agent_servers_need_a_link_and_a_link_must_be_one(tiny_model_dir, servers, tmp_path):
    with pytest.raises(ValueError, match="agent_model_link"):
        OpenAIPolicy.Params(agent_base_urls=["http://127.0.0.1:1/v1"])
    from sand_framework.config.validate import component_params
    from sand_framework.plugins import load_plugins

    assert component_params(load_plugins().registries(), "policy", "openai", {"sleep_level": 3})[1] == [
        "policy[openai].sleep_level: must be one of 1 | 2, got 3"]
    real = tmp_path / "real"
    real.mkdir()
    # a real folder is refused where the recipe is checked (sand validate: a recipe problem, not mid-run) ...
    assert component_params(load_plugins().registries(), "policy", "openai",
                            {"agent_base_urls": ["http://127.0.0.1:1/v1"], "agent_model_link": str(real)})[1] == [
        f"policy[openai]: agent_model_link {str(real)!r} is a real file or folder, not a symbolic link: the policy "
        "re-links it to each new agent's weights, and would have to delete it; give a path that is a symbolic link, "
        "or none yet (the policy creates it)"]
    # ... and one that becomes real after the check is the policy's ComponentError, not a bug report
    link = tmp_path / "later"
    agent = servers("agent")
    pol = _policy(tiny_model_dir, [servers("base").url], agent_base_urls=[agent.url], agent_model_link=str(link))
    link.mkdir()
    folder = tmp_path / "final"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    try:
        with pytest.raises(ComponentError, match="has become a real file or folder"):
            pol.set_agent_weights(str(folder))
    finally:
        pol.close()
