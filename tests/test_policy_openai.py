"""The ``openai`` policy.

Fast part (default suite): a scripted OpenAI-compatible server on loopback
(``http.server``) that answers, fails, stalls or rate-limits on demand, to pin
the request format, model-name mapping, concurrency limit, retry/backoff and
giving up. Slow part (``-m "slow and vllm"``): a real ``vllm serve`` on
SmolLM2-135M with a LoRA module.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from sand_builtins.policies import openai_client
from sand_builtins.policies.openai_client import OpenAIPolicy, ServerRequestError, ServerUnavailable
from sand_framework.errors import SandError
from sand_framework.plugins import PluginSet
from sand_framework.types import SamplingParams

CHAT = [
    {"role": "user", "content": "You are playing a text game."},
    {"role": "assistant", "content": "OK"},
    {"role": "user", "content": "Your task is to find the coin."},
]
FAST = dict(backoff_initial_s=0.01, backoff_max_s=0.05, backoff_jitter=0.0, connect_timeout_s=1.0, timeout_s=2.0)


class Scripted:
    """A loopback server whose answers follow ``script``: a list of actions consumed per chat request.

    Actions: ``"ok"``, an int HTTP status, ``("status", code, headers)``, ``("sleep", seconds)`` (then ok),
    ``"close"`` (drop the connection). When the script is exhausted, ``default`` is used.
    """

    def __init__(self, script=None, default="ok", delay=0.0):
        self.script = list(script or [])
        self.default = default
        self.delay = delay
        self.requests: list[dict] = []
        self.paths: list[str] = []
        self.headers: list[dict] = []
        self.inflight = 0
        self.max_inflight = 0
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):  # quiet
                pass

            def do_GET(self):
                self._send(200, {"object": "list", "data": [{"id": "base"}]})

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                with outer.lock:
                    outer.requests.append(body)
                    outer.paths.append(self.path)
                    outer.headers.append(dict(self.headers))
                    action = outer.script.pop(0) if outer.script else outer.default
                    outer.inflight += 1
                    outer.max_inflight = max(outer.max_inflight, outer.inflight)
                try:
                    if outer.delay:
                        time.sleep(outer.delay)
                    self._act(action, body)
                finally:
                    with outer.lock:
                        outer.inflight -= 1

            def _act(self, action, body):
                if action == "close":
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if isinstance(action, tuple) and action[0] == "sleep":
                    time.sleep(action[1])
                    action = "ok"
                if isinstance(action, int):
                    self._send(action, {"error": {"message": f"scripted {action}"}})
                    return
                if isinstance(action, tuple) and action[0] == "status":
                    self._send(action[1], {"error": {"message": f"scripted {action[1]}"}}, action[2])
                    return
                if not self.path.endswith("/chat/completions"):
                    self._send(200, {"ok": True})
                    return
                n = body.get("n", 1)
                choices = [{"index": i, "finish_reason": "stop",
                            "message": {"role": "assistant",
                                        "content": f"Thought: t{i}.\nAction: go {body['model']} {i}\nObservation: x"}}
                           for i in range(n)]
                self._send(200, {"id": "x", "object": "chat.completion", "model": body["model"], "choices": choices,
                                 "usage": {"prompt_tokens": 17, "completion_tokens": 5 * n, "total_tokens": 17 + 5 * n}})

            def _send(self, code, payload, headers=None):
                data = json.dumps(payload).encode()
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def make():
    servers, policies = [], []

    def _make(script=None, default="ok", delay=0.0, **params):
        srv = Scripted(script, default, delay)
        servers.append(srv)
        pol = OpenAIPolicy(OpenAIPolicy.Params(base_url=srv.url, **{**FAST, **params}))
        pol.setup("base")
        policies.append(pol)
        return srv, pol

    yield _make
    for p in policies:
        p.close()
    for s in servers:
        s.close()


def test_registers_through_hook():
    ps = PluginSet()
    ps.register(openai_client, "openai_client", "test", "builtin")
    assert ps.registries()["policy"].get("openai") is OpenAIPolicy


def test_registered_by_default():
    from sand_framework.plugins import load_plugins

    assert load_plugins().registries()["policy"].get("openai") is OpenAIPolicy


def test_request_format_samples_and_stats(make, monkeypatch):
    monkeypatch.setenv("SAND_TEST_KEY", "sekrit")
    srv, pol = make(api_key_env="SAND_TEST_KEY", stop=["\nObservation:"])
    out = pol.generate([CHAT, CHAT], SamplingParams(n=3, temperature=0.8, max_new_tokens=20, seed=7))
    assert [len(r) for r in out] == [3, 3]
    assert out[0][1].text == "Thought: t1.\nAction: go base 1"  # cut before the stop string
    assert out[0][0].prompt_tokens == 17 and out[0][0].completion_tokens == 5
    bodies = sorted(srv.requests, key=lambda b: b["seed"])
    assert [b["seed"] for b in bodies] == [7, 10]  # one seed per chat
    b = bodies[0]
    assert b["model"] == "base" and b["n"] == 3 and b["max_tokens"] == 20 and b["temperature"] == 0.8
    assert b["stop"] == ["\nObservation:"] and b["messages"] == CHAT
    assert all(p == "/v1/chat/completions" for p in srv.paths)
    assert srv.headers[0].get("Authorization") == "Bearer sekrit"
    st = pol.stats
    assert st["calls"] == 1 and st["requests"] == 2 and st["sequences"] == 6 and st["retries"] == 0
    assert st["prompt_tokens"] == 6 * 17 and st["completion_tokens"] == 6 * 5 and st["busy_seconds"] > 0


def test_greedy_sends_one_sample_and_copies(make):
    srv, pol = make()
    out = pol.generate([CHAT], SamplingParams(n=4, temperature=0.0, max_new_tokens=8))
    assert len(out[0]) == 4 and len({c.text for c in out[0]}) == 1
    assert srv.requests[0]["n"] == 1 and srv.requests[0]["temperature"] == 0.0 and "seed" not in srv.requests[0]


def test_role_and_agent_model_names(make):
    srv, pol = make(agent_model_name="agent", weights_map={"/w/iter2": "agent-iter2"})
    g = SamplingParams(n=1, temperature=0.0, max_new_tokens=4)

    def model(role):
        pol.generate([CHAT], g, role=role)
        return srv.requests[-1]["model"]

    assert model("agent") == "base"  # no agent weights yet: the base model
    pol.set_agent_weights("/w/iter1")
    assert model("agent") == "agent" and model("base") == "base"
    pol.set_agent_weights("/w/iter2")
    assert model("agent") == "agent-iter2"
    pol.set_agent_weights(None)
    assert model("agent") == "base"
    with pytest.raises(ValueError):
        pol.generate([CHAT], g, role="critic")


def test_dynamic_lora_loads_and_unloads(make, tmp_path):
    srv, pol = make(dynamic_lora=True)
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    pol.set_agent_weights(str(a))
    pol.set_agent_weights(str(b))
    pol.generate([CHAT], SamplingParams(n=1, temperature=0.0, max_new_tokens=4))
    assert srv.paths == ["/v1/load_lora_adapter", "/v1/load_lora_adapter", "/v1/unload_lora_adapter",
                         "/v1/chat/completions"]
    assert srv.requests[0] == {"lora_name": "sand-agent1", "lora_path": str(a.resolve())}
    assert srv.requests[2] == {"lora_name": "sand-agent1"}
    assert srv.requests[3]["model"] == "sand-agent2"


def test_retries_server_errors_then_succeeds(make):
    srv, pol = make(script=[503, 500, "close"], max_retries=3)
    out = pol.generate([CHAT], SamplingParams(n=2, temperature=1.0, max_new_tokens=4))
    assert len(out[0]) == 2
    assert pol.stats["retries"] == 3 and pol.stats["requests"] == 4


def test_backoff_is_exponential_and_honours_retry_after(make):
    pol = OpenAIPolicy(OpenAIPolicy.Params(backoff_initial_s=0.1, backoff_multiplier=2.0, backoff_max_s=1.0,
                                           backoff_jitter=0.0))
    assert [round(pol._delay(k, None), 3) for k in range(5)] == [0.1, 0.2, 0.4, 0.8, 1.0]
    assert pol._delay(0, "0.7") == pytest.approx(0.7)
    srv, pol = make(script=[("status", 429, {"Retry-After": "0.3"})], backoff_max_s=1.0)
    t0 = time.monotonic()
    pol.generate([CHAT], SamplingParams(n=1, temperature=1.0, max_new_tokens=4))
    assert time.monotonic() - t0 >= 0.3 and pol.stats["retries"] == 1


def test_gives_up_with_typed_error(make):
    srv, pol = make(default=503, max_retries=2, backoff_initial_s=0.05, backoff_multiplier=2.0, backoff_max_s=1.0)
    t0 = time.monotonic()
    with pytest.raises(ServerUnavailable) as err:
        pol.generate([CHAT], SamplingParams(n=1, temperature=1.0, max_new_tokens=4))
    elapsed = time.monotonic() - t0
    assert isinstance(err.value, SandError)
    assert len(srv.requests) == 3 and elapsed >= 0.05 + 0.1  # waits 0.05 then 0.1
    msg = str(err.value)
    assert "3 attempt(s)" in msg and srv.url in msg and "HTTP 503" in msg and "scripted 503" in msg


def test_timeouts_are_retried_then_give_up(make):
    srv, pol = make(script=[("sleep", 1.0)], timeout_s=0.3, max_retries=2)
    out = pol.generate([CHAT], SamplingParams(n=1, temperature=1.0, max_new_tokens=4))
    assert out[0][0].text and pol.stats["retries"] == 1
    srv2, pol2 = make(default=("sleep", 1.0), timeout_s=0.2, max_retries=1)
    with pytest.raises(ServerUnavailable, match="Timeout"):
        pol2.generate([CHAT], SamplingParams(n=1, temperature=1.0, max_new_tokens=4))
    assert len(srv2.requests) == 2


def test_server_down_gives_up_quickly():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    pol = OpenAIPolicy(OpenAIPolicy.Params(base_url=f"http://127.0.0.1:{port}/v1", max_retries=2, **{
        k: v for k, v in FAST.items() if k != "timeout_s"}))
    pol.setup("base")
    t0 = time.monotonic()
    with pytest.raises(ServerUnavailable, match="ConnectionError"):
        pol.generate([CHAT], SamplingParams(n=1, temperature=1.0, max_new_tokens=4))
    assert time.monotonic() - t0 < 5
    assert pol.stats["requests"] == 3
    with pytest.raises(ServerUnavailable, match="not ready"):
        pol.wait_ready(0.3)


def test_client_errors_are_not_retried(make):
    srv, pol = make(script=[404], max_retries=5)
    with pytest.raises(ServerRequestError, match="HTTP 404.*scripted 404") as err:
        pol.generate([CHAT], SamplingParams(n=1, temperature=1.0, max_new_tokens=4))
    assert err.value.status == 404 and len(srv.requests) == 1


def test_concurrency_limit(make):
    srv, pol = make(delay=0.2, max_concurrency=2)
    t0 = time.monotonic()
    out = pol.generate([CHAT] * 6, SamplingParams(n=1, temperature=1.0, max_new_tokens=4))
    assert len(out) == 6 and srv.max_inflight == 2
    assert time.monotonic() - t0 >= 0.55  # 3 waves of 0.2 s
    srv1, pol1 = make(delay=0.05, max_concurrency=1)
    pol1.generate([CHAT] * 3, SamplingParams(n=1, temperature=1.0, max_new_tokens=4))
    assert srv1.max_inflight == 1


def test_wait_ready(make):
    srv, pol = make()
    pol.wait_ready(2.0)


# --------------------------------------------------------------------------
# Against a real `vllm serve` (slow)
# --------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def smollm2_dir():
    from sand_framework.plugins import load_plugins

    return load_plugins().resolve_model("smollm2-135m", os.environ["SAND_CACHE"])


@pytest.fixture(scope="module")
def vllm_server(smollm2_dir, tmp_path_factory):
    from sand_builtins.policies.vllm_backend import vllm_available

    if not vllm_available():
        pytest.skip("vllm is not importable (pip install 'sand-framework[vllm]')")
    from test_policy_vllm import make_adapter

    root = tmp_path_factory.mktemp("served")
    a1 = make_adapter(smollm2_dir, root / "a1", 1)
    a2 = make_adapter(smollm2_dir, root / "a2", 2)
    port = _free_port()
    env = dict(os.environ, VLLM_ALLOW_RUNTIME_LORA_UPDATING="True", VLLM_CPU_KVCACHE_SPACE="1")
    log = open(root / "server.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", smollm2_dir,
         "--served-model-name", "base", "--host", "127.0.0.1", "--port", str(port), "--dtype", "bfloat16",
         "--max-model-len", "1024", "--enforce-eager", "--enable-lora", "--max-lora-rank", "8",
         "--max-loras", "2", "--lora-modules", f"agent={a1}"],
        stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
    )
    try:
        yield {"url": f"http://127.0.0.1:{port}/v1", "a1": a1, "a2": a2, "proc": proc, "log": root / "server.log"}
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.mark.slow
@pytest.mark.vllm
def test_real_vllm_serve(vllm_server, smollm2_dir):
    pol = OpenAIPolicy(OpenAIPolicy.Params(base_url=vllm_server["url"], model="base", agent_model_name="agent",
                                           max_concurrency=4, timeout_s=300, stop=["\n"]))
    try:
        try:
            pol.setup(smollm2_dir)
            pol.base_name = "base"
            pol.wait_ready(600)
        except ServerUnavailable:
            pytest.fail("vllm serve did not come up:\n" + Path(vllm_server["log"]).read_text()[-3000:])
        chats = [CHAT, [{"role": "user", "content": "Name a color."}]]
        sample = SamplingParams(n=3, temperature=1.0, max_new_tokens=12, seed=5)
        out = pol.generate(chats, sample, role="base")
        assert [len(r) for r in out] == [3, 3]
        assert pol.generate(chats, sample, role="base") == out  # same seed, same samples
        greedy = SamplingParams(n=2, temperature=0.0, max_new_tokens=12)
        base_greedy = pol.generate(chats, greedy, role="base")
        assert base_greedy == pol.generate(chats, greedy, role="base")
        assert out[0][0].prompt_tokens > 10 and all(c.completion_tokens > 0 for r in out for c in r)
        pol.set_agent_weights(vllm_server["a1"])  # static: the server's --lora-modules agent=...
        agent_greedy = pol.generate(chats, greedy, role="agent")
        assert agent_greedy != base_greedy
        assert pol.generate(chats, greedy, role="base") == base_greedy
        # dynamic: load the second adapter at run time
        pol.params.dynamic_lora = True
        pol.set_agent_weights(vllm_server["a2"])
        dyn = pol.generate(chats, greedy, role="agent")
        assert dyn != base_greedy and dyn != agent_greedy
        assert pol.stats["retries"] == 0
    finally:
        pol.close()
