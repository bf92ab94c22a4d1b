"""The one place httpx exceptions become LLM errors (httpx's `map_httpcore_exceptions`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from agentd.errors import LLMTimeout, LLMTransportError


def where(url: str) -> str:
    """The endpoint as an error may name it: origin and path, never userinfo, query (a
    gemini `key=`) or fragment."""
    try:
        u = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError):
        return "(an invalid URL)"
    port = f":{u.port}" if u.port is not None else ""
    return f"{u.scheme}://{u.host}{port}{u.path}"


@contextmanager
def map_transport_errors(url: str = "") -> Iterator[None]:
    """Translate httpx errors; the most specific match wins, the cause is chained. The
    message names the endpoint (`where(url)`) so a dead or mistyped URL is found at once."""
    at = f" {where(url)}" if url else ""
    try:
        yield
    except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
        # Never reached the server: safe to re-send.
        raise LLMTransportError(f"connect to{at} failed: {exc!r}", connected=False) from exc
    except (httpx.ReadTimeout, httpx.WriteTimeout) as exc:
        raise LLMTimeout(f"no data from{at} within the read timeout: {exc!r}") from exc
    except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
        raise LLMTransportError(f"connection to{at} broke: {exc!r}", connected=True) from exc
    except httpx.TransportError as exc:
        raise LLMTransportError(f"transport error at{at}: {exc!r}", connected=True) from exc
