"""Start and stop MCP peer server processes for the interop tests (importable by name)."""

from __future__ import annotations

import asyncio
from pathlib import Path


async def wait_for_port(port: int, proc: asyncio.subprocess.Process, within: float = 20) -> None:
    """Poll until something accepts connections on `port` (or the process dies)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while loop.time() < deadline:
        if proc.returncode is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before listening")
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.05)
            continue
        writer.close()
        await writer.wait_closed()
        return
    raise TimeoutError(f"nothing listened on {port} within {within}s")


async def stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), timeout=5)
        except TimeoutError:
            proc.kill()
            await proc.wait()


class PeerProcess:
    """An SDK peer server process on a fixed port, restartable (a server restart mid-loop)."""

    def __init__(self, python: Path | str, script: Path, *args: str) -> None:
        self.python, self.script, self.args = str(python), script, args
        self.port = 0
        self.proc: asyncio.subprocess.Process | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            self.python, str(self.script), "--port", str(self.port), *self.args,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        assert self.proc.stdout is not None
        line = (await asyncio.wait_for(self.proc.stdout.readline(), timeout=30)).decode()
        assert line.startswith("LISTENING"), line
        self.port = int(line.split()[1])
        await wait_for_port(self.port, self.proc)

    async def stop(self) -> None:
        if self.proc is not None:
            await stop(self.proc)

    async def restart(self) -> None:
        await self.stop()
        await self.start()
