"""B7's prompt path alone, in one process, no database: per LLM turn of a loop growing by
one round (an answer with one `echo` call, its result), the worker's steps from the history
cache to the wire log — the transcript cache's merge and record, the prompt (pipeline/llm/
prompt.py), the dialect's render, the body's encode, its bytes, the wire log's pieces —
timed early (rounds 5–15) and late (the last 20). What grows here grows with the history.

    python -m bench.b7_prompt_micro [--dialect open_ai] [--rounds 250] [--bytes 64]
"""

from __future__ import annotations

import argparse
import itertools
import secrets
import statistics
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from agentd import redact
from agentd.engine.history_cache import HistoryCache
from agentd.engine.wire_hints import WireHints
from agentd.llm import body, merge
from agentd.llm.dialects import get_dialect
from agentd.llm.types import LLMRequest, Provider, ToolSpec, WireExchange
from agentd.pipeline import wire
from agentd.pipeline.llm import prompt
from agentd.store.models import Message as Row
from agentd.store.models import ToolCall as CallRow

STAGES = ["cache", "prompt", "render", "encode", "bytes", "wire log"]


def run(dialect: str, rounds: int, size: int) -> dict[str, Any]:
    now = datetime.now(UTC)
    lid, token = uuid.uuid4(), uuid.uuid4()
    base = dict(loop_id=lid, reasoning=None, hidden=False, status="completed", step=None,
                execution_token=None, metadata={}, tokens_prompt=None, tokens_completion=None,
                tokens_cached=None, ttft=None, duration=None, finish_reason=None,
                error_message=None, created_at=now, updated_at=now)  # fmt: skip
    no_call: dict[str, Any] = {f: None for f in CallRow.__dataclass_fields__}
    provider = Provider(base_url="http://127.0.0.1:1", model="m", api_token="sk-bench-0123456789")
    tools = [ToolSpec("echo", "echoes", {"type": "object"})]
    d = get_dialect(dialect)
    cache = HistoryCache()
    hints = WireHints()
    ids = iter(range(1, 10**9))
    rows = [Row(id=next(ids), role="user", content="go", tool_call_id=None, **base)]
    calls: list[CallRow] = []
    cache.record(lid, token, rows, calls)
    delta: tuple[list[Row], list[CallRow]] = ([], [])
    per_turn: list[list[float]] = []
    for r in range(rounds):
        t = [time.perf_counter()]
        if r:
            merged = cache.merge(lid, delta[0][0].id - 1, *delta)
            assert merged is not None
            rows, calls = merged
        cache.record(lid, token, rows, calls)
        t.append(time.perf_counter())
        history = prompt.history("b7", rows, calls, memo=cache.rendered(lid))
        t.append(time.perf_counter())
        request = LLMRequest(provider=provider, messages=history, tools=tools)
        rendered = d.render(request)
        t.append(time.perf_counter())
        b = body.encode(merge.deep_merge(rendered.payload, request.llm_params), rendered.elements)
        t.append(time.perf_counter())
        _ = b.data
        t.append(time.perf_counter())
        ex = WireExchange(attempt=1, method="POST", url="u", request_headers={},
                          request_body=None, request_wire=b, request_redact=redact.scrub,
                          status=200)  # fmt: skip
        wire.llm_events([ex], loop_id=lid, hints=hints, token=token)
        hints.settle(lid, token, committed=True)
        t.append(time.perf_counter())
        per_turn.append([b - a for a, b in itertools.pairwise(t)])
        text = secrets.token_urlsafe(size)[:size]
        asked = Row(id=next(ids), role="assistant", content="", tool_call_id=None, **base)
        cid = next(ids)
        call = CallRow(**{**no_call, "id": cid, "loop_id": lid, "message_id": asked.id,
                          "position": 0, "provider_call_id": f"call_{cid}", "name": "echo",
                          "arguments": {"text": text}, "metadata": {}, "is_success": True,
                          "status": "completed"})  # fmt: skip
        result = Row(id=next(ids), role="tool", content=text, tool_call_id=cid, **base)
        delta = ([asked, result], [call])
    early = [statistics.median(s[i] for s in per_turn[4:15]) for i in range(len(STAGES))]
    late = [statistics.median(s[i] for s in per_turn[-20:]) for i in range(len(STAGES))]
    return {"messages": len(rows), "body_bytes": len(b.data), "early": early, "late": late}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--dialect", choices=["open_ai", "anthropic", "gemini"], default="open_ai")
    p.add_argument("--rounds", type=int, default=250)
    p.add_argument("--bytes", type=int, default=64)
    a = p.parse_args()
    res = run(a.dialect, a.rounds, a.bytes)
    print(f"{a.dialect}: {res['messages']} messages, {res['body_bytes']:,} body bytes at the end")
    print(f"{'µs per turn':12s} {'early':>8s} {'late':>8s}")
    for name, e, late in zip(STAGES, res["early"], res["late"], strict=True):
        print(f"{name:12s} {e * 1e6:8.0f} {late * 1e6:8.0f}")
    e, late = sum(res["early"]), sum(res["late"])
    print(f"{'total':12s} {e * 1e6:8.0f} {late * 1e6:8.0f}   late ÷ early {late / e:.2f}")


if __name__ == "__main__":
    main()
