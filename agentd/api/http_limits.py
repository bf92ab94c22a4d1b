"""Bounds on a request's head (request line and headers), enforced while it is read.

uvicorn's httptools protocol has none of its own: httptools gathers a header's value
piece by piece in memory, however long it grows, so a 150 MB header cost the process
hundreds of MB and stalled its event loop (the worker's too, in `agentd up`). Here the
bytes of a request's head are counted as they arrive, before the parser sees them:

- a URL longer than `max_url_bytes`: `414 URI Too Long`;
- a head longer than `max_header_bytes`, or more than `max_headers` header fields:
  `431 Request Header Fields Too Large`;

then the connection is closed. Nothing past the limit is buffered or parsed. A request's
body is not counted here (`AGENTD_MAX_BODY_BYTES` bounds it, api/body_limit.py).
"""

from __future__ import annotations

import http
from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from agentd.api.head_limits import HeadLimits

# How long a refused connection's incoming bytes are read and dropped before it is closed
# (reading is cheap and holds no memory; a client that sends its whole oversized head
# before it reads, as most do, gets the answer and not a reset).
_LINGER = 2.0


class _Refused(Exception):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with `limits` on each request's head."""

    limits = HeadLimits()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_bytes: int | None = 0  # None: reading a body, not a head
        self._header_count = 0
        self._discarding = False  # refused: what still arrives is dropped unread

    def data_received(self, data: bytes) -> None:
        self._unset_keepalive_if_required()
        if self._discarding:
            return
        while data:
            if self._head_bytes is None:  # a body: counted by the app, not here
                self._feed(data)
                return
            room = self.limits.max_header_bytes - self._head_bytes
            if room <= 0:
                self._refuse(
                    431, f"The request's head is over {self.limits.max_header_bytes} bytes."
                )
                return
            part, data = data[:room], data[room:]
            self._head_bytes += len(part)
            # The head may end within `part` (on_headers_complete stops the count), and
            # what follows is its body or the next request.
            if not self._feed(part):
                return

    def _feed(self, data: bytes) -> bool:
        """Parse `data`; False when the connection was answered and is closing."""
        if not data:
            return True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return False
        except httptools.HttpParserError as exc:
            refused = exc.__cause__ or exc.__context__
            if isinstance(refused, _Refused):
                self._refuse(refused.status, refused.detail)
            else:
                msg = "Invalid HTTP request received."
                self.logger.warning(msg)
                self.send_400_response(msg)
            return False
        return not self.transport.is_closing()

    def _refuse(self, status: int, detail: str) -> None:
        self._head_bytes = None
        if self.cycle is not None and not self.cycle.response_complete:
            self.transport.close()  # a response is being written: no answer to interleave
            return
        phrase = http.HTTPStatus(status).phrase
        body = detail.encode()
        self.transport.write(
            b"HTTP/1.1 %d %s\r\n" % (status, phrase.encode())
            + b"content-type: text/plain; charset=utf-8\r\n"
            + b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body)
            + body
        )
        # A lingering close (as nginx's): closing with the client's bytes still arriving
        # makes the kernel send a reset, which can destroy the answer before the client
        # reads it. So: end our side, drop what still comes for a moment, then close.
        self._discarding = True
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(_LINGER, self.transport.close)

    # Parser callbacks (an exception here stops the parser, and _feed answers it).

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._header_count = 0

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        if len(self.url) > self.limits.max_url_bytes:
            raise _Refused(414, f"The request's URL is over {self.limits.max_url_bytes} bytes.")

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        if self._header_count > self.limits.max_headers:
            raise _Refused(431, f"The request has over {self.limits.max_headers} header fields.")
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._head_bytes = None
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._head_bytes = 0  # the next request on this connection starts its head


def protocol_class(limits: HeadLimits) -> type[BoundedHttpToolsProtocol]:
    """The protocol class uvicorn instantiates per connection, bound to `limits`."""
    return type("BoundedHttpToolsProtocol", (BoundedHttpToolsProtocol,), {"limits": limits})
