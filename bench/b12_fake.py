"""B12's model: an OpenAI-compatible streaming endpoint that sends `--tokens` tokens at
`--rate` tokens/s per request and records, per request, when it arrived and when each token
was written (time.monotonic(), comparable across processes on one machine).

A plain asyncio HTTP/1.1 server (keep-alive, chunked SSE), and one ticker for all streams
instead of a sleep per stream: the model must not be what limits 500 concurrent streams on
two cores. Token k of every answer is " w<k>", so an observer maps characters to tokens.

    python -m bench.b12_fake --port P [--tokens 200 --rate 50]

`GET /stats` answers {"requests": [{"tag", "arrival", "emits"}], "max_inflight"} and
clears them. The tag is the last word of the request's last user message.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from dataclasses import dataclass, field


def token(k: int) -> str:
    return f" w{k}"


@dataclass(eq=False)
class Stream:
    writer: asyncio.StreamWriter
    tag: str
    arrival: float
    emits: list[float] = field(default_factory=list)
    done: asyncio.Event = field(default_factory=asyncio.Event)


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _event(payload: dict[str, object] | str) -> bytes:
    text = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    return _chunk(b"data: " + text.encode() + b"\n\n")


class Model:
    def __init__(self, tokens: int, rate: float) -> None:
        self.tokens, self.rate = tokens, rate
        self.live: set[Stream] = set()
        self.log: list[Stream] = []
        self.max_inflight = 0

    async def tick(self) -> None:
        """One write per live stream per 1/rate s, at a fixed rate."""
        period = 1 / self.rate
        loop = asyncio.get_running_loop()
        nxt = loop.time()
        while True:
            nxt += period
            await asyncio.sleep(max(0.0, nxt - loop.time()))
            for s in list(self.live):
                k = len(s.emits)
                if s.writer.is_closing():
                    self._end(s)
                    continue
                s.emits.append(time.monotonic())
                if k < self.tokens:
                    delta = {"content": token(k)}
                    if k == 0:
                        delta["role"] = "assistant"
                    s.writer.write(
                        _event({"model": "fake", "choices": [{"index": 0, "delta": delta}]})
                    )
                if k + 1 >= self.tokens:
                    s.writer.write(
                        _event(
                            {
                                "model": "fake",
                                "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                            }
                        )
                        + _event("[DONE]")
                        + b"0\r\n\r\n"
                    )
                    self._end(s)

    def _end(self, s: Stream) -> None:
        self.live.discard(s)
        s.done.set()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                arrival = time.monotonic()
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                length = 0
                for line in lines[1:]:
                    name, _, value = line.partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value)
                body = await reader.readexactly(length) if length else b""
                if method == "GET" and path.startswith("/stats"):
                    self._answer(writer, self.stats())
                    continue
                s = Stream(writer, _tag(body), arrival)
                self.log.append(s)
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                    b"transfer-encoding: chunked\r\n\r\n"
                )
                self.live.add(s)
                self.max_inflight = max(self.max_inflight, len(self.live))
                await s.done.wait()
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def stats(self) -> dict[str, object]:
        out = {
            "requests": [{"tag": s.tag, "arrival": s.arrival, "emits": s.emits} for s in self.log],
            "max_inflight": self.max_inflight,
        }
        self.log = [s for s in self.log if s in self.live]
        self.max_inflight = len(self.live)
        return out

    @staticmethod
    def _answer(writer: asyncio.StreamWriter, doc: object) -> None:
        data = json.dumps(doc).encode()
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
            % (len(data), data)
        )


def _tag(body: bytes) -> str:
    try:
        messages = json.loads(body).get("messages") or []
        users = [m for m in messages if m.get("role") == "user"]
        content = users[-1]["content"] if users else ""
        if isinstance(content, list):
            content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
        return str(content).split()[-1]
    except (ValueError, KeyError, IndexError, AttributeError):
        return ""


async def main(a: argparse.Namespace) -> None:
    model = Model(a.tokens, a.rate)
    server = await asyncio.start_server(model.serve, "127.0.0.1", a.port, backlog=4096)
    async with server:
        await asyncio.gather(server.serve_forever(), model.tick())


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--tokens", type=int, default=200)
    p.add_argument("--rate", type=float, default=50.0)
    asyncio.run(main(p.parse_args()))
