"""The `agentd` command as a user meets it: options after the subcommand, helpful --help,
one-line operational errors with documented exit codes, and waiting for a late database."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import httpx
import pytest

from agentd.testing.up import AgentdUp, clean_env, free_port

pytestmark = [pytest.mark.acceptance]

AGENTD = [sys.executable, "-m", "agentd"]
CONFIG = """\
[agents.writer]
base_url = "http://127.0.0.1:9"
model = "fake-model"
"""


def run(*argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*AGENTD, *argv], env=clean_env(**env), capture_output=True, text=True, timeout=60
    )


def one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    """stderr's only non-log line: the error, with no traceback."""
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln and not ln.startswith("{")]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("agentd: "), lines
    return lines[0]


async def test_config_after_the_subcommand_loads_its_agents(
    database_url: str, tmp_path: Path
) -> None:
    config = tmp_path / "agentd.toml"
    config.write_text(CONFIG)
    up = AgentdUp(database_url=database_url, config=config)  # `agentd up --config FILE`
    async with up, httpx.AsyncClient() as client:
        r = await client.get(f"{up.base_url}/v1/agents", headers=up.headers)
    assert "writer" in {a["name"] for a in r.json()["items"]}, r.text


@pytest.mark.parametrize(
    "command", ["up", "worker", "api", "migrate", "reap", "prune", "demo", "fake-llm"]
)
def test_every_subcommand_help_has_a_description_and_its_options(command: str) -> None:
    proc = run(command, "--help")
    assert proc.returncode == 0, proc.stderr
    usage, _, rest = proc.stdout.partition("\n\n")
    assert f"agentd {command}" in usage
    description = rest.split("\n\n", 1)[0]
    assert not description.startswith("options:") and len(description) > 40, proc.stdout
    assert "--config" in proc.stdout or command == "fake-llm"
    expected = {
        "up": ["--port", "--host", "--database-wait"],
        "worker": ["--queues", "--database-wait"],
        "api": ["--port", "--database-wait"],
        "fake-llm": ["--host", "--port", "--rules"],
        "demo": ["--exit", "--no-crash"],
    }.get(command, [])
    for option in expected:
        assert option in proc.stdout, (command, option)


@pytest.mark.parametrize("command", ["up", "worker", "api"])
def test_unreachable_database_is_one_line_and_exit_3_after_the_wait(command: str) -> None:
    port = free_port()  # nothing listens there
    started = time.monotonic()
    proc = run(
        command,
        AGENTD_DATABASE_URL=f"postgresql://postgres@127.0.0.1:{port}/postgres",
        AGENTD_DATABASE_WAIT="1.5",
        AGENTD_PORT=str(free_port()),
    )
    assert proc.returncode == 3, proc.stderr
    assert time.monotonic() - started >= 1.5  # it waited, with retries
    line = one_line_error(proc)
    assert "unreachable" in line and f"127.0.0.1:{port}" in line
    retries = [ln for ln in proc.stderr.splitlines() if '"database.waiting"' in ln]
    assert len(retries) >= 2  # each retry logged once


def test_missing_database_is_one_line_and_exit_4(pg_server: tuple[str, object]) -> None:
    parts = urllib.parse.urlsplit(pg_server[0])
    url = urllib.parse.urlunsplit(parts._replace(path="/agentd_no_such_database"))
    proc = run("up", AGENTD_DATABASE_URL=url, AGENTD_PORT=str(free_port()))
    assert proc.returncode == 4, proc.stderr
    assert "does not exist" in one_line_error(proc)


def test_unusable_data_dir_is_one_line_and_exit_2(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    proc = run("migrate", AGENTD_DATA_DIR=str(blocker / "data"))
    assert proc.returncode == 2, proc.stderr
    assert "AGENTD_DATA_DIR" in one_line_error(proc)


def test_malformed_database_url_is_one_line_and_exit_2() -> None:
    proc = run("worker", AGENTD_DATABASE_URL="mysql://localhost/x")
    assert proc.returncode == 2, proc.stderr
    assert "not a valid URL" in one_line_error(proc)


@pytest.mark.parametrize(
    ("command", "setting"), [("up", "AGENTD_PORT"), ("worker", "AGENTD_METRICS_PORT")]
)
def test_port_in_use_is_one_line_and_exit_5(database_url: str, command: str, setting: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = run(command, AGENTD_DATABASE_URL=database_url, **{setting: str(port)})
    assert proc.returncode == 5, proc.stderr
    assert "in use" in one_line_error(proc)


async def _forward(local: socket.socket, target: tuple[str, int] | str) -> asyncio.Server:
    """A TCP forwarder on an already-bound socket: the database 'comes up' late. `target`:
    (host, port), or the path of a Unix socket (the embedded server's)."""

    async def pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while data := await r.read(65536):
                w.write(data)
                await w.drain()
        w.close()

    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        if isinstance(target, str):
            tr, tw = await asyncio.open_unix_connection(target)
        else:
            tr, tw = await asyncio.open_connection(*target)
        await asyncio.gather(pipe(r, tw), pipe(tr, w))

    return await asyncio.start_server(handle, sock=local)


async def test_up_waits_for_a_database_that_starts_later(database_url: str) -> None:
    parts = urllib.parse.urlsplit(database_url)
    late = socket.socket()
    late.bind(("127.0.0.1", 0))  # reserved, not listening: connections are refused
    late_port = late.getsockname()[1]
    creds = parts.netloc.rpartition("@")[0]
    # The embedded server (no AGENTD_TEST_DATABASE_URL) is reached over a Unix socket named
    # in the query's `host`: the late TCP port forwards to that socket instead.
    query = urllib.parse.parse_qs(parts.query)
    sock_dir = (query.pop("host", None) or [""])[0]
    target: tuple[str, int] | str = (str(parts.hostname), int(parts.port or 5432))
    if sock_dir.startswith("/"):
        target = f"{sock_dir}/.s.PGSQL.{int(parts.port or (query.pop('port', None) or [5432])[0])}"
    url = urllib.parse.urlunsplit(
        parts._replace(
            netloc=f"{creds}@127.0.0.1:{late_port}",
            query=urllib.parse.urlencode(query, doseq=True),
        )
    )
    up = AgentdUp(env={"AGENTD_DATABASE_URL": url, "AGENTD_DATABASE_WAIT": "60"})
    entered = asyncio.create_task(up.__aenter__())
    server = None
    try:
        deadline = time.monotonic() + 30
        while b'"database.waiting"' not in up.output:
            assert not entered.done(), up.text()
            assert time.monotonic() < deadline, up.text()
            await asyncio.sleep(0.05)
        server = await _forward(late, target)
        await asyncio.wait_for(entered, 60)  # ready: it connected once the database came up
        assert up.text().count('"database.reachable"') == 1
    finally:
        if not entered.done():
            entered.cancel()
        await up.__aexit__()
        if server is not None:
            server.close()
        late.close()
    assert up.proc is not None and up.proc.returncode == 0, up.text()[-2000:]


async def test_fake_llm_command_echoes_and_scripts_a_tool_call() -> None:
    proc = await asyncio.create_subprocess_exec(
        *AGENTD, "fake-llm", "--port", "0", env=clean_env(), stdout=asyncio.subprocess.PIPE
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
        assert line.startswith(b"LISTENING "), line
        url = f"http://127.0.0.1:{int(line.split()[1])}/v1/chat/completions"

        def ask(text: str) -> dict[str, object]:
            body = {"model": "m", "messages": [{"role": "user", "content": text}]}
            return httpx.post(url, json=body, timeout=10).json()["choices"][0]["message"]

        assert ask("hello there")["content"] == "echo: hello there"
        call = ask('/call get_current_time {"timezone": "Europe/Lisbon"}')["tool_calls"][0]
        assert call["function"]["name"] == "get_current_time"
        assert call["function"]["arguments"] == '{"timezone": "Europe/Lisbon"}'
    finally:
        proc.terminate()
        assert await asyncio.wait_for(proc.wait(), 10) == 0


async def test_sigterm_while_waiting_for_the_database_exits_at_once() -> None:
    proc = await asyncio.create_subprocess_exec(
        *AGENTD,
        "worker",
        env=clean_env(
            AGENTD_DATABASE_URL=f"postgresql://postgres@127.0.0.1:{free_port()}/postgres",
            AGENTD_DATABASE_WAIT="300",
        ),
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stderr is not None
    try:
        line = await asyncio.wait_for(proc.stderr.readline(), 30)
        assert b'"database.waiting"' in line, line
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 10) == 130  # not after the 300 s wait
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
