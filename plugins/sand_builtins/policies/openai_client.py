"""The ``openai`` policy: chat completions from any OpenAI-compatible server.

Works against ``vllm serve`` (``python -m vllm.entrypoints.openai.api_server``),
SGLang, llama.cpp's server, TGI or the OpenAI API itself. Each chat is one
``POST {base_url}/chat/completions`` with ``n``, ``temperature``, ``top_p``,
``stop``, ``seed`` and ``max_tokens``; up to ``max_concurrency`` requests are in
flight at once (a thread pool).

Which model name a call uses:

* ``role="base"``: ``base_model_name`` (default: ``model``, else the
  ``setup(base_model)`` argument);
* ``role="agent"``: after ``set_agent_weights(None)`` the base name; after
  ``set_agent_weights(path)``

  - with ``dynamic_lora: true`` the adapter at ``path`` is loaded into the
    server through vLLM's ``POST /v1/load_lora_adapter`` under a fresh name
    (``{lora_name_prefix}{k}``; the server needs
    ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`` and ``--enable-lora``), the
    previous one is unloaded, and agent calls use the new name;
  - otherwise ``weights_map[path]`` if present, else ``agent_model_name`` (a
    name the server already serves, e.g. ``--lora-modules agent=PATH``), else
    ``path`` itself is taken as a model name.

Failures: connection errors, timeouts and HTTP 408/409/429/5xx are retried with
exponential backoff and jitter (``Retry-After`` is honoured, capped at
``backoff_max_s``); after ``max_retries`` retries the call raises
:class:`ServerUnavailable`. Other HTTP errors (400, 401, 404 ...) are not
retried and raise :class:`ServerRequestError` with the server's message.

Token counts come from the response's ``usage`` (prompt tokens per chat; the
completion tokens of each choice from a local tokenizer when one is available,
else ``usage.completion_tokens`` split evenly over the choices). With a local
tokenizer (``tokenizer`` param, or ``setup`` given a local model directory)
prompts longer than ``max_prompt_tokens`` drop their oldest (assistant,
observation) pairs after the first three turns, as the other policies do.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sand_framework import hookimpl
from sand_framework.prompting import HEAD_TURNS, cut_at_stop
from sand_framework.components.kinds import Policy
from sand_framework.errors import SandError
from sand_framework.types import Chat, Completion, Role, SamplingParams

log = logging.getLogger(__name__)

RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})


class ServerUnavailable(SandError):
    """The OpenAI-compatible server did not answer successfully within the retry budget."""

    exit_code = 4


class ServerRequestError(SandError):
    """The server rejected a request (4xx other than 408/409/429): retrying would not help."""

    exit_code = 4

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


@dataclass
class OpenAIParams:
    base_url: str = "http://127.0.0.1:8000/v1"
    """The server's API root, including ``/v1``."""
    api_key_env: str = "OPENAI_API_KEY"
    """Name of the environment variable holding the API key (sent as ``Bearer``); unset/empty = no key."""
    model: str = ""
    """Default model name; empty = the ``setup(base_model)`` argument."""
    base_model_name: str = ""
    """Model name for ``role="base"``; empty = ``model``."""
    agent_model_name: str = ""
    """Model name for ``role="agent"`` once agent weights are set (e.g. a ``--lora-modules agent=...`` name)."""
    weights_map: dict[str, str] = field(default_factory=dict)
    """Agent weight paths -> served model names (static set-ups with one LoRA module per iteration)."""
    dynamic_lora: bool = False
    """Load each agent adapter into the server at run time (vLLM ``/v1/load_lora_adapter``)."""
    lora_name_prefix: str = "sand-agent"
    stop: list[str] = field(default_factory=lambda: ["\nObservation:"])
    """Sent as ``stop``; the text is also cut before the first of these strings."""
    top_p: float = 1.0
    max_concurrency: int = 8
    """Requests in flight at once."""
    timeout_s: float = 120.0
    """Read timeout of one request."""
    connect_timeout_s: float = 5.0
    max_retries: int = 5
    """Retries after the first attempt (so ``max_retries + 1`` attempts) before :class:`ServerUnavailable`."""
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 30.0
    backoff_multiplier: float = 2.0
    backoff_jitter: float = 0.1
    """Each wait is multiplied by ``1 + uniform(0, jitter)``."""
    tokenizer: str = ""
    """Local tokenizer (path or cached hub id) for token counts and prompt shortening; empty = try ``setup``'s
    argument if it is a local directory, else none."""
    max_prompt_tokens: int = 0
    """With a local tokenizer: drop the oldest turns after the first three while longer; 0 = no limit."""
    wait_ready_s: float = 0.0
    """``setup`` polls ``GET {base_url}/models`` up to this long until the server answers; 0 = don't wait."""
    extra_body: dict[str, Any] = field(default_factory=dict)
    """Extra request fields (e.g. ``{"top_k": 20}`` for vLLM)."""


class OpenAIPolicy(Policy):
    name = "openai"
    Params = OpenAIParams
    description = "Chat completions from an OpenAI-compatible server (vllm serve, SGLang, OpenAI ...), with retries."

    def __init__(self, params: OpenAIParams | None = None):
        super().__init__(params)
        self.base_name: str = ""
        self.agent_name: str | None = None
        self.agent_weights: str | None = None
        self.tokenizer: Any = None
        self._lora_seq = 0
        self._loaded_lora: str | None = None
        self._local = threading.local()
        self._lock = threading.Lock()
        self._stats = {"calls": 0, "requests": 0, "retries": 0, "sequences": 0, "prompt_tokens": 0,
                       "completion_tokens": 0, "busy_seconds": 0.0}

    # ------------------------------------------------------------------
    # Set-up
    # ------------------------------------------------------------------

    @property
    def url(self) -> str:
        return self.params.base_url.rstrip("/")

    def setup(self, base_model: str) -> None:
        p = self.params
        self.base_name = p.base_model_name or p.model or base_model
        if not self.base_name:
            raise ValueError("policy 'openai': no model name (set model: or pass a base model)")
        tok_ref = p.tokenizer or (base_model if base_model and Path(base_model).is_dir() else "")
        if tok_ref:
            try:
                from transformers import AutoTokenizer

                self.tokenizer = AutoTokenizer.from_pretrained(tok_ref)
            except Exception as exc:  # noqa: BLE001 - counts then come from usage only
                log.warning("policy 'openai': no local tokenizer from %r (%s)", tok_ref, exc)
        if p.wait_ready_s and p.wait_ready_s > 0:
            self.wait_ready(float(p.wait_ready_s))

    def wait_ready(self, timeout_s: float) -> None:
        """Poll ``GET /models`` until the server answers 200, or raise :class:`ServerUnavailable`."""
        deadline = time.monotonic() + timeout_s
        last = "no attempt"
        while True:
            try:
                r = self._session().get(f"{self.url}/models", headers=self._headers(),
                                        timeout=(self.params.connect_timeout_s, self.params.timeout_s))
                if r.status_code == 200:
                    return
                last = f"HTTP {r.status_code}"
            except Exception as exc:  # noqa: BLE001
                last = f"{type(exc).__name__}: {exc}"
            if time.monotonic() >= deadline:
                raise ServerUnavailable(
                    f"policy 'openai': server at {self.url} not ready after {timeout_s:.0f}s (last: {last})"
                )
            time.sleep(min(1.0, max(0.05, deadline - time.monotonic())))

    def set_agent_weights(self, weights: str | None) -> None:
        p = self.params
        if weights is None:
            self._unload_lora()
            self.agent_name, self.agent_weights = None, None
            return
        if p.dynamic_lora:
            self._lora_seq += 1
            name = f"{p.lora_name_prefix}{self._lora_seq}"
            path = str(Path(weights).expanduser().resolve()) if Path(weights).exists() else weights
            self._admin("load_lora_adapter", {"lora_name": name, "lora_path": path})
            self._unload_lora()
            self._loaded_lora = name
            self.agent_name = name
        elif weights in p.weights_map:
            self.agent_name = p.weights_map[weights]
        elif p.agent_model_name:
            self.agent_name = p.agent_model_name
        else:
            self.agent_name = weights
        self.agent_weights = weights

    def _unload_lora(self) -> None:
        if self._loaded_lora is None:
            return
        name, self._loaded_lora = self._loaded_lora, None
        try:
            self._admin("unload_lora_adapter", {"lora_name": name})
        except SandError as exc:  # the old adapter lingering is harmless
            log.warning("policy 'openai': could not unload adapter %s: %s", name, exc)

    def _admin(self, endpoint: str, body: dict[str, Any]) -> None:
        # vLLM serves these at /v1/<endpoint>: the API root, like chat/completions.
        self._post(f"{self.url}/{endpoint}", body, expect_json=False)

    def model_for(self, role: Role) -> str:
        if role == "agent" and self.agent_name:
            return self.agent_name
        return self.base_name

    # ------------------------------------------------------------------
    # HTTP
    # ------------------------------------------------------------------

    def _session(self) -> Any:
        import requests

        s = getattr(self._local, "session", None)
        if s is None:
            s = requests.Session()
            self._local.session = s
        return s

    def _headers(self) -> dict[str, str]:
        h = {"Content-Type": "application/json"}
        key = os.environ.get(self.params.api_key_env, "") if self.params.api_key_env else ""
        if key:
            h["Authorization"] = f"Bearer {key}"
        return h

    def _delay(self, attempt: int, retry_after: str | None) -> float:
        p = self.params
        wait = float(p.backoff_initial_s) * float(p.backoff_multiplier) ** attempt
        if retry_after:
            try:
                wait = max(wait, float(retry_after))
            except ValueError:
                pass
        wait = min(wait, float(p.backoff_max_s))
        return wait * (1.0 + random.uniform(0.0, max(0.0, float(p.backoff_jitter))))

    def _post(self, url: str, body: dict[str, Any], expect_json: bool = True) -> Any:
        import requests

        p = self.params
        attempts = max(0, int(p.max_retries)) + 1
        start = time.monotonic()
        last = ""
        for attempt in range(attempts):
            if attempt:
                with self._lock:
                    self._stats["retries"] += 1
            retry_after = None
            try:
                with self._lock:
                    self._stats["requests"] += 1
                r = self._session().post(url, json=body, headers=self._headers(),
                                         timeout=(float(p.connect_timeout_s), float(p.timeout_s)))
            except (requests.ConnectionError, requests.Timeout) as exc:
                last = f"{type(exc).__name__}: {exc}"
            else:
                if r.status_code < 300:
                    if not expect_json:
                        return r.text
                    try:
                        return r.json()
                    except ValueError:
                        last = f"HTTP {r.status_code} with a body that is not JSON: {r.text[:200]!r}"
                elif r.status_code in RETRY_STATUS:
                    last = f"HTTP {r.status_code}: {_error_text(r)}"
                    retry_after = r.headers.get("Retry-After")
                else:
                    raise ServerRequestError(
                        f"policy 'openai': {url} rejected the request with HTTP {r.status_code}: {_error_text(r)}",
                        status=r.status_code,
                    )
            if attempt + 1 < attempts:
                wait = self._delay(attempt, retry_after)
                log.warning("policy 'openai': %s failed (%s); retry %d/%d in %.2fs",
                            url, last, attempt + 1, attempts - 1, wait)
                time.sleep(wait)
        raise ServerUnavailable(
            f"policy 'openai': the server at {self.url} stayed unavailable: {attempts} attempt(s) of POST {url} "
            f"failed over {time.monotonic() - start:.1f}s; last error: {last}. Is the server running "
            "(e.g. `python -m vllm.entrypoints.openai.api_server --model ...`) and is base_url right?"
        )

    # ------------------------------------------------------------------
    # Generation
    # ------------------------------------------------------------------

    def _shorten(self, chat: Chat) -> Chat:
        limit = int(self.params.max_prompt_tokens or 0)
        if self.tokenizer is None or limit <= 0:
            return chat
        chat = list(chat)

        def size(c: Chat) -> int:
            text = self.tokenizer.apply_chat_template(c, add_generation_prompt=True, tokenize=False)
            return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

        while size(chat) > limit and len(chat) >= HEAD_TURNS + 3 and chat[HEAD_TURNS].get("role") == "assistant":
            del chat[HEAD_TURNS : HEAD_TURNS + 2]
        return chat

    def _one(self, chat: Chat, sampling: SamplingParams, role: Role, per_chat: int, greedy: bool,
             seed: int | None) -> list[Completion]:
        p = self.params
        body: dict[str, Any] = {
            "model": self.model_for(role),
            "messages": self._shorten(chat),
            "n": per_chat,
            "max_tokens": max(1, int(sampling.max_new_tokens)),
            "temperature": 0.0 if greedy else float(sampling.temperature),
        }
        if not greedy:
            body["top_p"] = float(p.top_p)
        stops = [s for s in p.stop if s]
        if stops:
            body["stop"] = stops
        if seed is not None:
            body["seed"] = int(seed)
        body.update(p.extra_body or {})
        data = self._post(f"{self.url}/chat/completions", body)
        choices = sorted(data.get("choices") or [], key=lambda c: c.get("index", 0))
        if not choices:
            raise ServerRequestError(f"policy 'openai': {self.url} returned no choices: {str(data)[:300]}")
        usage = data.get("usage") or {}
        prompt_tokens = int(usage.get("prompt_tokens") or 0)
        total_completion = int(usage.get("completion_tokens") or 0)
        out = []
        for c in choices:
            text = ((c.get("message") or {}).get("content")) or ""
            if self.tokenizer is not None:
                used = len(self.tokenizer(text, add_special_tokens=False)["input_ids"])
            else:
                used = total_completion // len(choices)
            out.append(Completion(text=self._clean(text), prompt_tokens=prompt_tokens, completion_tokens=used))
        with self._lock:
            self._stats["sequences"] += len(out)
            self._stats["prompt_tokens"] += prompt_tokens * len(out)
            self._stats["completion_tokens"] += sum(c.completion_tokens for c in out)
        return out

    def generate(self, chats: list[Chat], sampling: SamplingParams, role: Role = "agent") -> list[list[Completion]]:
        if role not in ("agent", "base"):
            raise ValueError(f"role must be 'agent' or 'base', got {role!r}")
        if not self.base_name:
            raise RuntimeError("policy 'openai': call setup(base_model) first")
        if not chats:
            return []
        start = time.perf_counter()
        n = max(1, int(sampling.n))
        greedy = sampling.temperature is None or sampling.temperature <= 0
        per_chat = 1 if greedy else n

        def seed_for(i: int) -> int | None:
            if sampling.seed is None:
                return None
            return int(sampling.seed) + i * per_chat

        workers = max(1, min(int(self.params.max_concurrency), len(chats)))
        try:
            if workers == 1:
                results = [self._one(c, sampling, role, per_chat, greedy, seed_for(i)) for i, c in enumerate(chats)]
            else:
                with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sand-openai") as pool:
                    futs = [pool.submit(self._one, c, sampling, role, per_chat, greedy, seed_for(i))
                            for i, c in enumerate(chats)]
                    results = [f.result() for f in futs]
        finally:
            with self._lock:
                self._stats["calls"] += 1
                self._stats["busy_seconds"] += time.perf_counter() - start
        if greedy and n > 1:
            results = [[Completion(**r[0].to_dict()) for _ in range(n)] for r in results]
        return results

    def _clean(self, text: str) -> str:
        return cut_at_stop(text, self.params.stop)

    @property
    def stats(self) -> dict[str, float]:
        with self._lock:
            return dict(self._stats)

    def close(self) -> None:
        s = getattr(self._local, "session", None)
        if s is not None:
            s.close()
            self._local.session = None


def _error_text(r: Any) -> str:
    try:
        data = r.json()
    except ValueError:
        return r.text[:300]
    err = data.get("error", data) if isinstance(data, dict) else data
    if isinstance(err, dict):
        return str(err.get("message") or err)[:300]
    return str(err)[:300]


@hookimpl
def sand_register_policies(register) -> None:
    register(OpenAIPolicy)
