"""The ``openai`` policy's errors, and the translation of the SDK's exceptions into them.

The SDK has already retried (``max_retries``) by the time one of its
exceptions reaches us, so every translation is final: a server that stayed
unreachable or overloaded is :class:`ServerUnavailable`, a request it refused
is :class:`ServerRequestError`. Both name the endpoint, because with several
endpoints the user must know which server to look at.
"""

from __future__ import annotations

from sand_framework.errors import SandError

RETRIED_STATUS = frozenset({408, 409, 429})
"""Statuses the SDK retries (besides every 5xx); after its retries they mean "unavailable", not "refused"."""


class ServerUnavailable(SandError):
    """The OpenAI-compatible server did not answer successfully within the retry budget."""

    exit_code = 4


class ServerRequestError(SandError):
    """The server rejected a request (4xx other than 408/409/429): retrying would not help."""

    exit_code = 4

    def __init__(self, message: str, status: int | None = None, endpoint: str | None = None):
        super().__init__(message)
        self.status = status
        self.endpoint = endpoint


def error_text(exc: BaseException) -> str:
    """The server's own message where it sent one (``{"error": {"message": ...}}``), else the exception's."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict):
            return str(inner.get("message") or inner)[:300]
        return str(inner)[:300]
    if isinstance(body, str) and body:
        return body[:300]
    return str(exc)[:300]


def translate(exc: Exception, endpoint: str, what: str, attempts: int, seconds: float) -> SandError:
    """The policy's error for an SDK exception raised while doing ``what`` (e.g. ``POST /completions``)."""
    import openai  # here, not at the top: importing the SDK takes seconds, and every `sand` command loads this plugin

    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        if status in RETRIED_STATUS or status >= 500:
            last = f"HTTP {status}: {error_text(exc)}"
        else:
            return ServerRequestError(
                f"policy 'openai': {endpoint} rejected {what} with HTTP {status}: {error_text(exc)}",
                status=status, endpoint=endpoint)
    elif isinstance(exc, openai.APIConnectionError):  # APITimeoutError included
        cause = exc.__cause__ or exc.__context__
        last = f"{type(exc).__name__}: {exc}" + (f" ({type(cause).__name__}: {cause})" if cause else "")
    else:  # a malformed answer (not JSON, wrong shape): the server is not OpenAI-compatible
        return ServerRequestError(f"policy 'openai': {endpoint} answered {what} with something unusable: "
                                  f"{type(exc).__name__}: {str(exc)[:300]}", endpoint=endpoint)
    return ServerUnavailable(
        f"policy 'openai': the server at {endpoint} stayed unavailable: {attempts} attempt(s) of {what} failed "
        f"over {seconds:.1f}s; last error: {last}. Is the server running (e.g. `vllm serve MODEL`) and is the "
        "endpoint's URL (policy.base_urls) right?")
