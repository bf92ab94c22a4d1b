"""The one place httpx exceptions become LLM errors (httpx's `map_httpcore_exceptions`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from agentd.errors import LLMTimeout, LLMTransportError


@contextmanager
def map_transport_errors() -> Iterator[None]:
    """Translate httpx errors; the most specific match wins, the cause is chained."""
    try:
        yield
    except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
        # Never reached the server: safe to re-send.
        raise LLMTransportError(f"connect failed: {exc!r}", connected=False) from exc
    except (httpx.ReadTimeout, httpx.WriteTimeout) as exc:
        raise LLMTimeout(f"no data within the read timeout: {exc!r}") from exc
    except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
        raise LLMTransportError(f"connection broke: {exc!r}", connected=True) from exc
    except httpx.TransportError as exc:
        raise LLMTransportError(f"transport error: {exc!r}", connected=True) from exc
