"""Child processes of the soak: `agentd worker` / `agentd api`, each logging to a file."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path

AGENTD = str(Path(sys.executable).with_name("agentd"))


@dataclass
class Child:
    name: str
    proc: asyncio.subprocess.Process
    log_path: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return self.proc.returncode is None

    def signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, sig)

    async def stop(self, within: float = 20.0) -> None:
        if self.proc.returncode is None:
            self.signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), timeout=within)
            except TimeoutError:
                self.signal(signal.SIGKILL)
                await self.proc.wait()

    def tail(self, lines: int = 40) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return f"--- {self.name} ({self.log_path}) ---\n" + "\n".join(text.splitlines()[-lines:])


@dataclass
class Children:
    workdir: Path
    env: dict[str, str]
    all: list[Child] = field(default_factory=list)

    async def start(self, name: str, *args: str) -> Child:
        log_path = self.workdir / f"{name}.log"
        with log_path.open("wb") as log:
            proc = await asyncio.create_subprocess_exec(
                AGENTD,
                *args,
                env=self.env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
            )
        child = Child(name, proc, log_path)
        self.all.append(child)
        return child

    async def stop_all(self) -> None:
        await asyncio.gather(*(c.stop() for c in self.all))


def clean_env(extra: dict[str, str]) -> dict[str, str]:
    """The caller's environment without stray AGENTD_* variables, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_")}
    env.update(extra)
    env["PYTHONUNBUFFERED"] = "1"
    return env
