"""The zero-setup paths a new user runs first: `agentd up` and `agentd demo` on embedded
PostgreSQL, with no database configured."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import time
from pathlib import Path

import httpx
import pytest

pytestmark = [pytest.mark.acceptance]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(data_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_")}
    return {**env, "AGENTD_DATA_DIR": str(data_dir), "AGENTD_LOG_FORMAT": "json", **extra}


def _postgres_running_in(pgdata: Path) -> bool:
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "postgres" in cmd and str(pgdata) in cmd:
            return True
    return False


async def test_up_on_embedded_postgres_is_ready_and_stops_cleanly(tmp_path: Path) -> None:
    port = _free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "agentd",
        "up",
        env=_env(tmp_path, AGENTD_PORT=str(port)),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        async with httpx.AsyncClient() as client:
            while True:
                assert proc.returncode is None, "agentd up exited early"
                try:
                    r = await client.get(f"http://127.0.0.1:{port}/readyz")
                    if r.status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, "never became ready"
                await asyncio.sleep(0.2)
            assert (await client.get(f"http://127.0.0.1:{port}/healthz")).json() == {"status": "ok"}
        assert _postgres_running_in(tmp_path / "pgdata")
        proc.send_signal(signal.SIGTERM)
        out, _ = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, out.decode()[-2000:]
        assert b"generated one for this run" in out  # the token is printed once
        assert not _postgres_running_in(tmp_path / "pgdata")
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_demo_finishes_a_multi_step_task_surviving_a_killed_worker(tmp_path: Path) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "agentd",
        "demo",
        env=_env(tmp_path, AGENTD_PORT=str(_free_port()), TMPDIR=str(scratch)),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 150)
    text = out.decode()
    assert proc.returncode == 0, text[-3000:]
    assert "killed worker" in text and "reclaimed" in text
    assert "waits for a person's approval" in text
    assert "done in" in text and "Booked and confirmed" in text
    # Its own embedded database, apart from `agentd up`'s, stopped; no scratch left behind.
    assert (tmp_path / "demo" / "pgdata").is_dir() and not (tmp_path / "pgdata").exists()
    assert not _postgres_running_in(tmp_path / "demo" / "pgdata")
    assert not list(scratch.glob("agentd-demo-*"))
