"""The ``openai`` policy: prompts rendered here with the model's own chat template, completed by remote servers."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sand_builtins.models import is_adapter
from sand_framework.components.kinds import Policy
from sand_framework.errors import ComponentError, ModelUnavailable, SandError
from sand_framework.prompting import cut_at_stop, fit_prompt, report_shortened
from sand_framework.types import Chat, Completion, Role, SamplingParams

from .errors import ServerRequestError, ServerUnavailable
from .loop import LoopThread
from .params import OpenAIParams

if TYPE_CHECKING:  # the SDK is imported on first use: it takes seconds, and every `sand` command loads this plugin
    import openai

    from .endpoints import Endpoint, Endpoints

log = logging.getLogger(__name__)

TOKENIZER_FIX = ("Fix: set policy.tokenizer to a local copy of the model's tokenizer (the model's folder, or one "
                 "with its tokenizer*.json and tokenizer_config.json files).")


class OpenAIPolicy(Policy[OpenAIParams]):
    name = "openai"
    seeds_per_chat = True
    description = ("Completions from OpenAI-compatible servers (vllm serve, SGLang), spread over several; prompts "
                   "rendered locally with the model's own chat template and sent as token ids.")

    Params = OpenAIParams

    @classmethod
    def context_token_budget(cls, params: OpenAIParams) -> dict[str, tuple[str, int]]:
        """The prompt limit, checked by ``sand validate`` against the trainer's context (the servers' own
        ``--max-model-len`` is theirs to set: at least the trainer's ``max_length``)."""
        return {"prompt": ("max_prompt_tokens", int(params.max_prompt_tokens or 0))}

    def __init__(self, params: OpenAIParams | None = None):
        super().__init__(params)
        self.base_name: str = ""
        self.agent_name: str | None = None
        self.agent_weights: str | None = None
        self.chat_format: Any = None
        """The base model's :class:`~sand_framework.chat_format.ChatFormat` (tokenizer and template)."""
        self.agent_format: Any = None
        """The agent weights' own format when their folder carries a tokenizer, else None (= the base's)."""
        self.tokenizer: Any = None
        self._lora_seq = 0
        self._loaded_lora: str | None = None
        self._loop: LoopThread | None = None
        self._endpoints: Endpoints | None = None
        self._agent_endpoints: Endpoints | None = None
        self._asleep = False
        self._agent_full = False
        self._lock = threading.Lock()
        self._submitter: Any = None
        self._stats = {"calls": 0, "sequences": 0, "prompt_tokens": 0, "completion_tokens": 0, "busy_seconds": 0.0}

    # ------------------------------------------------------------------
    # Set-up
    # ------------------------------------------------------------------

    @property
    def urls(self) -> list[str]:
        return self.params.urls()

    @property
    def url(self) -> str:
        """The servers' API roots, comma-separated (for messages)."""
        return ", ".join(self.urls)

    def _servers(self) -> Endpoints:
        """The servers' SDK clients, on the policy's event loop (created on first use)."""
        with self._lock:
            if self._endpoints is None:
                from .endpoints import Endpoints

                p = self.params
                key = os.environ.get(p.api_key_env, "") if p.api_key_env else ""
                eps = Endpoints(self.urls, key, p.timeout_s, p.connect_timeout_s, p.max_retries, p.max_concurrency)
                self._loop = LoopThread()
                self._loop.run(eps.open())
                self._endpoints = eps
            return self._endpoints

    def _agent_servers(self) -> Endpoints:
        """The agent servers' clients (``agent_base_urls``), on the same event loop."""
        eps = self._servers()
        with self._lock:
            if self._agent_endpoints is None:
                from .endpoints import Endpoints

                p = self.params
                key = os.environ.get(p.api_key_env, "") if p.api_key_env else ""
                agents = Endpoints(list(p.agent_base_urls), key, p.timeout_s, p.connect_timeout_s, p.max_retries,
                                   p.max_concurrency)
                self._run(agents.open())
                self._agent_endpoints = agents
            return self._agent_endpoints if self._agent_endpoints.endpoints else eps

    def _all_servers(self) -> list[Endpoints]:
        return [self._servers()] + ([self._agent_servers()] if self.params.agent_base_urls else [])

    def _admin(self, path: str, body: dict[str, Any] | None, what: str, servers: list[Endpoints] | None = None
               ) -> None:
        """``POST path`` (under the server root) on every server; raise naming those that refused."""
        failed = []
        for eps in servers or self._all_servers():
            for ep, err in zip(eps.endpoints, self._run(eps.post_all(path, body, root=True))):
                if err is not None:
                    failed.append((ep, err))
        if not failed:
            return
        status = getattr(failed[0][1], "status", None)
        hint = (" The server has no such route: start it with VLLM_SERVER_DEV_MODE=1 (and --enable-sleep-mode "
                "for sleep/wake)." if status in (404, 405) else "")
        raise ServerRequestError(f"policy 'openai': {what} failed on {len(failed)} server(s): "
                                 + " | ".join(f"{ep.url}: {err}" for ep, err in failed) + hint,
                                 status=status, endpoint=failed[0][0].url)

    def release(self) -> None:
        """Before a training stage: with ``sleep_on_release`` every server sleeps (its GPU memory freed), else only
        the clients close."""
        if not self.params.sleep_on_release or self._endpoints is None:
            self.close()
            return
        if not self._asleep:
            self._admin(f"/sleep?level={int(self.params.sleep_level)}", None, "putting the servers to sleep")
            self._asleep = True
            log.info("policy 'openai': %d server(s) asleep", sum(len(e.endpoints) for e in self._all_servers()))

    def wake(self) -> None:
        """Wake every server put to sleep by :meth:`release` (``POST /wake_up``); a no-op when awake."""
        if self._asleep:
            self._admin("/wake_up", None, "waking the servers")
            self._asleep = False

    def _run(self, coro: Any) -> Any:
        assert self._loop is not None
        return self._loop.run(coro)

    @staticmethod
    def load_format(ref: str, what: str) -> Any:
        """The :class:`ChatFormat` of ``ref``; the server's own template is never used, so one is required."""
        from sand_framework.chat_format import ChatFormat

        if not ref:
            raise ModelUnavailable(f"policy 'openai': no tokenizer for {what}: prompts are rendered with the model's "
                                   f"own chat template on this machine and sent as token ids. {TOKENIZER_FIX}")
        try:
            return ChatFormat.from_pretrained(ref)
        except ModelUnavailable as exc:
            raise ModelUnavailable(
                f"policy 'openai': cannot load the tokenizer for {what} from {ref!r}: prompts are rendered with the "
                f"model's own chat template on this machine and sent as token ids, never through the server's "
                f"template. {TOKENIZER_FIX} ({exc})") from exc

    def setup(self, base_model: str) -> None:
        p = self.params
        self.base_name = p.base_model_name or p.model or base_model
        if not self.base_name:
            raise ValueError("policy 'openai': no model name (set model: or pass a base model)")
        self.chat_format = self.load_format(p.tokenizer or base_model, "the base model")
        self.tokenizer = self.chat_format.tokenizer
        self._servers()
        if p.wait_ready_s and p.wait_ready_s > 0:
            self.wait_ready(float(p.wait_ready_s))
        self.wake()

    def wait_ready(self, timeout_s: float) -> None:
        """Poll every server's ``GET /models`` until all answer, or raise :class:`ServerUnavailable` naming the rest."""
        eps = self._servers()
        self._run(eps.wait_ready(timeout_s))

    # ------------------------------------------------------------------
    # Agent weights
    # ------------------------------------------------------------------

    def set_agent_weights(self, weights: str | None) -> None:
        p = self.params
        if weights is None:
            self._unload_lora()
            self.agent_name, self.agent_weights, self.agent_format = None, None, None
            self._agent_full = False
            return
        folder = Path(weights).expanduser()
        self._agent_full = False
        # Trained weights carry the tokenizer and template they were trained with; sample with exactly those.
        fmt = self.load_format(str(folder), f"agent weights {weights}") if (
            folder / "tokenizer_config.json").is_file() else None
        if p.agent_base_urls and (folder / "config.json").is_file() and not is_adapter(folder):
            self._load_full(folder)
            self.agent_name = p.agent_model_name or p.agent_model_link
            self._agent_full = True
        elif p.dynamic_lora:
            self._lora_seq += 1
            name = f"{p.lora_name_prefix}{self._lora_seq}"
            self._load_lora(name, str(folder.resolve()) if folder.exists() else weights)
            self._unload_lora()
            self._loaded_lora = name
            self.agent_name = name
        elif weights in p.weights_map:
            self.agent_name = p.weights_map[weights]
        elif p.agent_model_name:
            self.agent_name = p.agent_model_name
        else:
            self.agent_name = weights
        self.agent_weights, self.agent_format = weights, fmt

    def _load_full(self, folder: Path) -> None:
        """Point ``agent_model_link`` at ``folder`` and have every agent server reload its weights from it."""
        link = Path(self.params.agent_model_link).expanduser()
        if link.exists() and not link.is_symlink():
            raise ComponentError(f"policy 'openai': agent_model_link {link} has become a real file or folder, "
                                 "not a symbolic link; give a path the policy may re-link (the agent servers "
                                 "serve it)")
        link.parent.mkdir(parents=True, exist_ok=True)
        tmp = link.with_name(f".{link.name}.tmp")
        if tmp.is_symlink() or tmp.exists():
            tmp.unlink()
        tmp.symlink_to(folder.resolve(), target_is_directory=True)
        os.replace(tmp, link)  # atomic: a server reading the link sees the old folder or the new one
        agents = [self._agent_servers()]
        self.wake()
        self._admin("/collective_rpc", {"method": "reload_weights"}, f"reloading the agent weights from {folder}",
                    agents)
        self._admin("/reset_prefix_cache", None, "resetting the agent servers' prefix cache", agents)
        log.info("policy 'openai': agent servers reloaded %s", folder)

    def _load_lora(self, name: str, path: str) -> None:
        """Load the adapter on every server; if any refuses, take it off the others and raise naming the refusers."""
        eps = self._servers()
        errors = self._run(eps.post_all("load_lora_adapter", {"lora_name": name, "lora_path": path}))
        failed = [(ep, err) for ep, err in zip(eps.endpoints, errors) if err is not None]
        if not failed:
            return
        loaded = [ep for ep, err in zip(eps.endpoints, errors) if err is None]
        if loaded:
            self._unload(name, loaded)
        first = failed[0][1]
        status = getattr(first, "status", None)
        hint = ""
        if status in (404, 405):
            hint = (" The server has no runtime LoRA loading: start it with --enable-lora and "
                    "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True, or serve the adapter under a fixed name "
                    "(--lora-modules agent=PATH) with policy.dynamic_lora=false and agent_model_name=agent.")
        elif status == 400:
            hint = " The adapter folder must be readable by every server at this path (a shared filesystem)."
        msg = (f"policy 'openai': loading agent adapter {name!r} from {path} failed on {len(failed)} of "
               f"{len(eps.endpoints)} server(s){' (unloaded again from the others)' if loaded else ''}: "
               + " | ".join(str(err) for _, err in failed) + hint)
        if isinstance(first, ServerRequestError):
            raise ServerRequestError(msg, status=status, endpoint=failed[0][0].url) from first
        if isinstance(first, SandError):
            raise ServerUnavailable(msg) from first
        raise first

    def _unload(self, name: str, endpoints: list[Endpoint] | None = None) -> None:
        """Unload ``name`` (from every server by default); a lingering adapter is harmless, so only warn."""
        eps = self._servers()
        targets = eps.endpoints if endpoints is None else endpoints
        for ep, err in zip(targets, self._run(eps.post_all("unload_lora_adapter", {"lora_name": name}, targets))):
            if err is not None:
                log.warning("policy 'openai': could not unload adapter %s from %s: %s", name, ep.url, err)

    def _unload_lora(self) -> None:
        if self._loaded_lora is None:
            return
        name, self._loaded_lora = self._loaded_lora, None
        self._unload(name)

    def model_for(self, role: Role) -> str:
        if role == "agent" and self.agent_name:
            return self.agent_name
        return self.base_name

    def format_for(self, role: Role) -> Any:
        return self.agent_format if role == "agent" and self.agent_format is not None else self.chat_format

    # ------------------------------------------------------------------
    # Generation
    # ------------------------------------------------------------------

    def generate(self, chats: list[Chat], sampling: SamplingParams, role: Role = "agent") -> list[list[Completion]]:
        if role not in ("agent", "base"):
            raise ValueError(f"role must be 'agent' or 'base', got {role!r}")
        if not self.base_name or self.chat_format is None:
            raise RuntimeError("policy 'openai': call setup(base_model) first")
        if not chats:
            return []
        p = self.params
        start = time.perf_counter()
        fmt = self.format_for(role)
        shortened: dict[str, int] = {}
        prompts = [fit_prompt(chat, fmt.prompt_ids, int(p.max_prompt_tokens or 0), shortened) for chat in chats]
        with self._lock:
            report_shortened(self._stats, shortened, "policy 'openai'", int(p.max_prompt_tokens or 0))
        n = max(1, int(sampling.n))
        greedy = sampling.temperature is None or sampling.temperature <= 0
        per_chat = 1 if greedy else n
        self.wake()
        request: dict[str, Any] = {
            "model": self.model_for(role),
            "n": per_chat,
            "max_tokens": max(1, int(sampling.max_new_tokens)),
            "temperature": 0.0 if greedy else float(sampling.temperature),
            # vLLM stops at the template's end of turn by id: the text stops below may never appear.
            "extra_body": {"stop_token_ids": list(fmt.stop_token_ids), **(p.extra_body or {})},
        }
        if not greedy:
            request["top_p"] = float(p.top_p)
        stops = [s for s in p.stop if s]
        if stops:
            request["stop"] = stops
        seeds = ([int(x) & 0x7FFFFFFF for x in sampling.seeds] if sampling.seeds else
                 [None if sampling.seed is None else int(sampling.seed) + i * per_chat for i in range(len(prompts))])
        try:
            eps = self._agent_servers() if role == "agent" and self._agent_full else self._servers()
            texts = self._run(self._complete_all(eps, prompts, request, seeds))
            results = []
            for ids, outs in zip(prompts, texts):
                results.append([Completion(text=cut_at_stop(t, p.stop), prompt_tokens=len(ids),
                                           completion_tokens=len(fmt.tokenizer(t, add_special_tokens=False)
                                                                 ["input_ids"]))
                                for t in outs])
            with self._lock:
                self._stats["sequences"] += sum(len(r) for r in results)
                self._stats["prompt_tokens"] += sum(c.prompt_tokens for r in results for c in r)
                self._stats["completion_tokens"] += sum(c.completion_tokens for r in results for c in r)
        finally:
            with self._lock:
                self._stats["calls"] += 1
                self._stats["busy_seconds"] += time.perf_counter() - start
        if greedy and n > 1:
            results = [[Completion(**r[0].to_dict()) for _ in range(n)] for r in results]
        return results

    def submit(self, chat: Chat, sampling: SamplingParams, role: Role = "agent") -> Future:
        """One chat's completions as a future (asynchronous rollouts): the request goes out on the policy's event
        loop at once and is spread over the servers like any other (the bound is ``max_concurrency``); the
        servers' continuous batching serves every turn in flight."""
        result: Future = Future()
        done = self._submit_pool().submit(self.generate, [chat], sampling, role)

        def deliver(f: Future) -> None:
            exc = f.exception()
            if exc is not None:
                result.set_exception(exc)
            else:
                result.set_result(f.result()[0])

        done.add_done_callback(deliver)
        return result

    def _submit_pool(self) -> Any:
        """Threads that each wait on one request's round trip (the requests themselves share the event loop)."""
        with self._lock:
            if self._submitter is None:
                from concurrent.futures import ThreadPoolExecutor

                workers = max(4, int(self.params.max_concurrency) * len(self.urls))
                self._submitter = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sand-openai-submit")
            return self._submitter

    async def _complete_all(self, eps: Endpoints, prompts: list[list[int]], request: dict[str, Any],
                            seeds: list[int | None]) -> list[list[str]]:
        """All prompts at once (the bound is in :meth:`Endpoints.call`); the first failure cancels the rest."""
        tasks = [asyncio.ensure_future(self._complete(eps, ids, request, seed)) for ids, seed in zip(prompts, seeds)]
        try:
            return list(await asyncio.gather(*tasks))
        except BaseException:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise

    @staticmethod
    async def _complete(eps: Endpoints, ids: list[int], request: dict[str, Any], seed: int | None) -> list[str]:
        """One prompt's ``n`` completions, as a plain ``/completions`` request with the prompt as token ids."""

        async def send(client: openai.AsyncOpenAI) -> Any:
            extra = {} if seed is None else {"seed": seed}
            return await client.completions.create(prompt=ids, **request, **extra)

        response, url = await eps.call("POST /completions", send)
        choices = sorted(response.choices or [], key=lambda c: c.index)
        if not choices:
            raise ServerRequestError(f"policy 'openai': {url} returned no choices: {str(response)[:300]}",
                                     endpoint=url)
        return [c.text or "" for c in choices]

    @property
    def stats(self) -> dict[str, float]:
        """Calls, SDK requests and their retries, sequences, prompt/completion tokens, busy seconds."""
        with self._lock:
            out = dict(self._stats)
        eps = self._endpoints
        out["requests"] = eps.requests if eps else 0
        out["retries"] = eps.retries if eps else 0
        return out

    def close(self) -> None:
        with self._lock:
            submitter, self._submitter = self._submitter, None
        if submitter is not None:
            submitter.shutdown(wait=True)
        with self._lock:
            eps, agents, loop = self._endpoints, self._agent_endpoints, self._loop
            self._endpoints, self._agent_endpoints, self._loop = None, None, None
            self._asleep = False
        if loop is not None:
            try:
                for e in (eps, agents):
                    if e is not None:
                        loop.run(e.aclose())
            finally:
                loop.close()

