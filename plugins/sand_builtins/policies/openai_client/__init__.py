"""The ``openai`` policy: completions from OpenAI-compatible servers, spread over several of them.

Works against ``vllm serve`` and other servers whose ``/v1/completions``
accepts a prompt as token ids (SGLang does too). Built on the maintained
``openai`` SDK: one ``AsyncOpenAI`` client per server, driven from a private
event loop (:mod:`.loop`), so up to ``max_concurrency`` requests per server are
in flight at once while the policy's own interface stays synchronous.

**One template for training and sampling.** Every prompt is rendered here,
with the base model's own chat template
(:class:`sand_framework.chat_format.ChatFormat`, loaded from ``tokenizer`` or
the ``setup`` argument), shortened by
:func:`sand_framework.prompting.fit_prompt` when ``max_prompt_tokens`` is set,
and sent as token ids to ``/v1/completions``, never to
``/v1/chat/completions``: a server applying its own template (or a different
version of it) would prompt the agent with a format it was not trained on.
Generation stops at the template's end-of-turn and EOS ids (``stop_token_ids``
in the request's ``extra_body``, which vLLM honours) and at the ``stop``
strings. Without a local tokenizer ``setup`` fails and says how to fix it.

**Several servers** (``base_urls``): each request goes to the server with the
fewest requests in flight (:mod:`.endpoints`). ``set_agent_weights`` with
``dynamic_lora`` loads the adapter into every server (vLLM's ``POST
/v1/load_lora_adapter``, an admin route the SDK has no method for, sent with
the SDK client's low-level ``post``) under a fresh name
(``{lora_name_prefix}{k}``; the servers need ``--enable-lora`` and
``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``); if one refuses, the adapter is
unloaded from the others and the error names the server that refused. The
previous adapter is then unloaded everywhere.

Which model name a call uses:

* ``role="base"``: ``base_model_name`` (default: ``model``, else the
  ``setup(base_model)`` argument);
* ``role="agent"``: after ``set_agent_weights(None)`` the base name; after
  ``set_agent_weights(path)`` the dynamically loaded adapter's name, else
  ``weights_map[path]``, else ``agent_model_name`` (a name the servers already
  serve, e.g. ``--lora-modules agent=PATH``), else ``path`` itself. Agent
  weights whose folder carries a tokenizer are prompted with that tokenizer's
  template (the one they were trained with).

Failures: the SDK retries connection errors, timeouts and HTTP 408/409/429/5xx
``max_retries`` times with exponential backoff and jitter, honouring
``Retry-After``; what still fails raises :class:`ServerUnavailable`. Other HTTP
errors (400, 401, 404 ...) are not retried and raise
:class:`ServerRequestError` with the server's message. Both name the server
and exit with code 4.

Token counts: prompt tokens are the ids sent; completion tokens are each
choice's text re-tokenized locally (``usage`` only has the total over the
``n`` choices). ``stats`` adds the SDK requests and their retries.
"""

from __future__ import annotations

from sand_framework import hookimpl

from .errors import ServerRequestError, ServerUnavailable
from .policy import OpenAIParams, OpenAIPolicy

__all__ = ["OpenAIParams", "OpenAIPolicy", "ServerRequestError", "ServerUnavailable"]


@hookimpl
def sand_register_policies(register) -> None:
    register(OpenAIPolicy)
