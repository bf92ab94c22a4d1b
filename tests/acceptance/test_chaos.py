"""Chaos soak, short version: three `agentd worker` processes and an `agentd api` on one
database; ~200 loops with parallel and sequential tool calls (in-process and on an MCP
server over HTTP); workers SIGKILLed and SIGTERMed every few seconds and replaced; a fake
LLM answering ~5% 429/500 with Retry-After, stalls and mid-stream drops; an MCP server
failing 5% of POSTs and restarting. After the system quiesces every invariant must hold.
The long version is `python -m bench.chaos --minutes 10`."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.chaos import report, soak

pytestmark = [pytest.mark.acceptance, pytest.mark.timeout(300)]


async def test_chaos_soak_loses_no_loop_and_doubles_no_answer(
    database_url: str, tmp_path: Path
) -> None:
    result = await soak.run(
        soak.Options(database_url=database_url, workdir=tmp_path, loops=200, duration=75, seed=7)
    )
    print("\n" + report.table(result))
    f = result.findings
    assert result.notes == [], result.logs
    assert f.lost == [], f.lost
    assert f.violations == [], f.violations
    assert f.duplicate_messages == 0 and f.duplicate_results == 0
    assert f.loops == 200 and f.statuses.get("completed", 0) >= 100, f.statuses
    assert f.effects > 0
    for kind in ("sigkill", "sigterm", "mcp_500", "mcp_restart"):
        assert result.faults[kind] > 0, (kind, result.faults)
    assert sum(v for k, v in result.faults.items() if k.startswith("llm_")) > 0, result.faults
