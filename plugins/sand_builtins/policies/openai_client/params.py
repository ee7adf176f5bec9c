"""The ``openai`` policy's parameters: the servers, model names, sampling, limits and sleep/reload settings.

Declared apart from :mod:`.policy` (the client's behaviour) so that the settings read as one list; the policy
class names them as its ``Params``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from annotated_types import Ge, Gt, Interval

DEFAULT_URL = "http://127.0.0.1:8000/v1"


@dataclass
class OpenAIParams:
    """The ``openai`` policy's settings (``policy.*`` in a recipe; ``sand components policy`` lists them)."""

    base_urls: list[str] = field(default_factory=list)
    """API roots of the servers (each including ``/v1``); requests are spread over them, each to the one with
    the fewest requests in flight. Empty = ``[base_url]``."""
    base_url: str = DEFAULT_URL
    """A single server's API root: the one-endpoint spelling of ``base_urls`` (kept for older recipes)."""
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
    """Load each agent adapter into every server at run time (vLLM ``/v1/load_lora_adapter``)."""
    lora_name_prefix: str = "sand-agent"
    """Adapters loaded at run time are named ``{lora_name_prefix}{k}``, k = 1, 2, ... per ``set_agent_weights``."""
    stop: list[str] = field(default_factory=lambda: ["\nObservation:"])
    """Sent as ``stop`` (besides the template's end-of-turn token ids); the text is also cut before the first."""
    top_p: Annotated[float, Interval(gt=0, le=1)] = 1.0
    """Nucleus sampling for sampled (temperature > 0) calls, in (0, 1]; 1 = off."""
    max_concurrency: Annotated[int, Ge(1)] = 8
    """Requests in flight at once per server (the server batches them); all servers together take
    ``max_concurrency x len(base_urls)``."""
    timeout_s: Annotated[float, Gt(0)] = 120.0
    """Read timeout of one request attempt."""
    connect_timeout_s: Annotated[float, Gt(0)] = 5.0
    """Connect timeout of one request attempt."""
    max_retries: Annotated[int, Ge(0)] = 5
    """Retries by the SDK after the first attempt (connection errors, timeouts, 408/409/429/5xx; exponential
    backoff with jitter, ``Retry-After`` honoured) before :class:`ServerUnavailable`."""
    tokenizer: str = ""
    """The model's tokenizer (a local folder or a cached hub id) whose chat template renders every prompt;
    empty = the ``setup(base_model)`` argument. Required: prompts are rendered here, not by the server."""
    max_prompt_tokens: Annotated[int, Ge(0)] = 0
    """Drop the oldest turns after the first three while a prompt is longer, then cut from the left; 0 = no
    limit."""
    wait_ready_s: Annotated[float, Ge(0)] = 0.0
    """``setup`` polls every server's ``GET /models`` up to this long until all answer; 0 = don't wait."""
    extra_body: dict[str, Any] = field(default_factory=dict)
    """Extra request fields (e.g. ``{"top_k": 20}`` for vLLM)."""

    sleep_on_release: bool = False
    """Before a training stage put every server to sleep (vLLM ``POST /sleep?level=...``: weights offloaded, KV
    cache freed) and wake it on the next ``setup`` (``POST /wake_up``), so training on the same GPUs gets their
    memory. Needs servers started with ``--enable-sleep-mode`` and ``VLLM_SERVER_DEV_MODE=1``. False: a release
    closes only the clients; the servers keep their GPU memory."""
    sleep_level: Literal[1, 2] = 1
    """vLLM sleep level: 1 keeps the weights in CPU memory (fast wake), 2 discards them (a reload follows)."""
    agent_base_urls: list[str] = field(default_factory=list)
    """Servers for ``role="agent"`` once the agent is a *full* model (a full fine-tune): started on
    ``agent_model_link``. Empty = the agent is asked for by name on ``base_urls`` (``agent_model_name``,
    ``weights_map`` or its path)."""
    agent_model_link: str = ""
    """A symbolic link the agent servers serve (``vllm serve LINK``). For each new full-model agent the link is
    pointed at its folder and every agent server reloads the weights (vLLM ``POST /collective_rpc``
    ``{"method": "reload_weights"}``, then ``POST /reset_prefix_cache``; ``VLLM_SERVER_DEV_MODE=1``). The folder
    must be readable by the servers at the same path (a shared filesystem). Required with ``agent_base_urls``."""

    def __post_init__(self) -> None:
        if self.base_urls and self.base_url != DEFAULT_URL:
            raise ValueError("give either base_url (one server) or base_urls (a list), not both")
        urls = self.urls()
        bad = [u for u in urls if not isinstance(u, str) or not u.startswith(("http://", "https://"))]
        if bad:
            raise ValueError(f"base_urls must be http(s) URLs of API roots (e.g. {DEFAULT_URL}), got {bad}")
        if len(set(u.rstrip("/") for u in urls)) != len(urls):
            raise ValueError(f"base_urls lists a server twice: {urls}")
        agents = [u for u in self.agent_base_urls]
        if any(not isinstance(u, str) or not u.startswith(("http://", "https://")) for u in agents):
            raise ValueError(f"agent_base_urls must be http(s) URLs of API roots, got {agents}")
        if agents and not self.agent_model_link:
            raise ValueError("agent_base_urls needs agent_model_link: the path (a symbolic link) the agent servers "
                             "serve, which each new full-model agent is linked to before they reload it")
        link = Path(self.agent_model_link).expanduser() if self.agent_model_link else None
        if link is not None and link.exists() and not link.is_symlink():
            raise ValueError(f"agent_model_link {str(link)!r} is a real file or folder, not a symbolic link: the "
                             "policy re-links it to each new agent's weights, and would have to delete it; give a "
                             "path that is a symbolic link, or none yet (the policy creates it)")

    def urls(self) -> list[str]:
        """The servers' API roots, without trailing slashes."""
        return [u.rstrip("/") if isinstance(u, str) else u for u in (list(self.base_urls) or [self.base_url])]
