"""Every `curl` / `agentd` command in the docs, run against one real `agentd up`.

The shell blocks (bash, sh, console) of README.md, docs/*.md and examples/*/README.md are
split into commands (a backslash or an open quote continues a line). Each command that
calls `curl`, the api.md `api` alias (curl with the token), or `agentd` is either run here
or listed in SKIPPED with its reason; a command that is neither fails the test, so a new
doc command cannot go untested.

What a run changes, and nothing else (see `substituted`): `localhost:8080` and `$AGENTD`
point at this test's server; `$T` / `$TOKEN` / `$AGENTD_API_TOKEN` hold its token; the
placeholders `$LOOP`, `$ID`, `0b6c…` become a real loop, `$CALL` and `tool-calls/5` a
real call parked on an approval, `webhook-deliveries/17` a real delivery, `message_id 42`
a real message, `If-Match: "3"` the state's current version and `cursor=WyIy…` a real
cursor — each created by the test in the state the command needs. `curl` gets
`--fail-with-body` (an HTTP error fails) and a time limit; a live SSE stream is cut after a
few seconds and passes if it answered 200.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentd.testing.up import clean_env, free_port

pytestmark = [pytest.mark.acceptance]

ROOT = Path(__file__).parents[2]
DOCS = [
    "README.md",
    *sorted(str(p.relative_to(ROOT)) for p in ROOT.glob("docs/*.md")),
    *sorted(str(p.relative_to(ROOT)) for p in ROOT.glob("examples/*/README.md")),
]
BLOCK = re.compile(r"^```(bash|sh|console)\n(.*?)^```", re.S | re.M)
CALLS_AGENTD = re.compile(r"(^|[\s;&|(')])(curl|api|agentd)(\s|$)")

#: (document, the command's first characters) -> why it is not run here
SKIPPED: dict[tuple[str, str], str] = {
    (
        "README.md",
        "pip install . && agentd demo",
    ): "installs the package; the demo is run by tests/acceptance",
    (
        "README.md",
        "agentd fake-llm --port 9000 &",
    ): "starts a server; the walkthrough test runs it (test_docs_commands.py)",
    (
        "README.md",
        "agentd up --config examples/toml-agent",
    ): "starts a server; the walkthrough test runs it (test_docs_commands.py)",
    (
        "README.md",
        "agentd up --config agentd.toml",
    ): "starts a server in the foreground; this test starts its own",
    ("docs/deployment.md", "docker"): "needs docker",
    (
        "docs/testing.md",
        "agentd fake-llm --port 9000",
    ): "starts a server in the foreground; tests/unit/test_examples.py runs it with the rules",
    ("docs/deployment.md", "kubectl"): "needs a Kubernetes cluster",
    (
        "docs/observability.md",
        "agentd worker",
    ): "starts a server in the foreground; this test starts its own",
    (
        "examples/agentd-example-plugin/README.md",
        "agentd fake-llm --port 9000 &",
    ): "starts a server; this test starts its own",
    (
        "examples/agentd-example-plugin/README.md",
        "NOTES_LLM_BASE_URL=",
    ): ("needs the example plugin installed (pip install); this test's `notes` agent stands in"),
    (
        "examples/mcp-server/README.md",
        "agentd fake-llm --port 9000 &",
    ): "starts a server; this test starts its own",
    (
        "examples/mcp-server/README.md",
        "agentd up --config",
    ): "starts a server; this test starts its own, with the example's MCP server and agent",
    (
        "examples/stdio-agent/README.md",
        "agentd fake-llm --port 9000 &",
    ): "starts a server; the walkthrough test runs it (test_docs_commands.py)",
    (
        "examples/stdio-agent/README.md",
        "agentd up --config",
    ): "starts a server; the walkthrough test runs it (test_docs_commands.py)",
    (
        "examples/toml-agent/README.md",
        "agentd fake-llm --port 9000 &",
    ): "starts a server; the walkthrough test runs it (test_docs_commands.py)",
    (
        "examples/toml-agent/README.md",
        "agentd up --config",
    ): "starts a server; the walkthrough test runs it (test_docs_commands.py)",
}


def commands(doc: str) -> Iterator[str]:
    """The commands of `doc`'s shell blocks that call curl, `api` or agentd."""
    for _, code in BLOCK.findall((ROOT / doc).read_text()):
        pending = ""
        for line in code.splitlines():
            line = line.removeprefix("$ ") if not pending else line
            pending = f"{pending}\n{line}" if pending else line
            if pending.endswith("\\"):
                continue
            try:
                shlex.split(pending, comments=True)
            except ValueError:  # an open quote: the command goes on
                continue
            command, pending = pending.strip(), ""
            if command and not command.startswith("#") and CALLS_AGENTD.search(command):
                yield command


def skip_reason(doc: str, command: str) -> str | None:
    for (d, prefix), reason in SKIPPED.items():
        if d == doc and command.startswith(prefix):
            return reason
    return None


def test_every_skip_names_a_doc_command() -> None:
    """A skip whose command left the docs is stale: remove it."""
    used = {
        (d, p)
        for d in DOCS
        for c in commands(d)
        for (dd, p) in SKIPPED
        if dd == d and c.startswith(p)
    }
    assert set(SKIPPED) - used == set()


# --- the server and what the placeholders need -------------------------------------------

TOKEN = "doc-commands-token"


def config(llm: int, hook: int, inventory: int) -> str:
    fake = f'dialect = "open_ai"\nbase_url = "http://127.0.0.1:{llm}"\nmodel = "fake-model"\n'
    # examples/mcp-server's agent, its model and MCP server moved to this test's ports
    shop = (
        (ROOT / "examples" / "mcp-server" / "agentd.toml")
        .read_text()
        .replace("http://127.0.0.1:9000", f"http://127.0.0.1:{llm}")
        .replace("http://127.0.0.1:9100/mcp", f"http://127.0.0.1:{inventory}/mcp")
    )
    agents = "".join(
        f"[agents.{name}]\n{fake}" for name in ("writer", "researcher", "reporter", "notes")
    )
    time_tools = f"""name = "time"
command = ["{sys.executable}", "-m", "mcp_server_time"]
timeout = 30
"""
    return f"""{agents}
[agents.clock]
{fake}sequential_tool_calls = true

[[agents.clock.mcps]]
{time_tools}
[agents.support]
{fake}sequential_tool_calls = true
approval_required = ["get_current_time"]

[[agents.support.mcps]]
{time_tools}
[[webhooks]]
url = "http://127.0.0.1:{hook}/hook"  # nothing listens: each delivery fails at once
events = ["loop.completed"]
secret_env = "DOC_WEBHOOK_SECRET"
max_attempts = 1

{shop}"""


class Fleet:
    """Creates, through the API, the loops and calls the placeholders stand for."""

    def __init__(self, http: httpx.Client) -> None:
        self.http = http
        self.shared: dict[str, Any] = {}  # loops that read-only commands share

    def start(self, agent: str, message: str) -> str:
        r = self.http.post("/v1/loops", json={"agent": agent, "message": message})
        assert r.status_code == 201, r.text
        return str(r.json()["id"])

    def wait(self, loop: str, *statuses: str) -> dict[str, Any]:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            body: dict[str, Any] = self.http.get(f"/v1/loops/{loop}").json()
            if body["status"] in statuses:
                return body
            time.sleep(0.1)
        raise AssertionError(f"loop {loop} never reached {statuses}: {body}")

    def completed(self) -> str:
        loop = self.start("writer", "Draft a haiku about queues.")
        self.wait(loop, "completed")
        return loop

    def parked(self) -> tuple[str, str]:
        """A loop waiting on an approval, and the call it waits on."""
        loop = self.start("support", '/call get_current_time {"timezone": "Europe/Lisbon"}')
        self.wait(loop, "waiting")
        calls = self.http.get(f"/v1/loops/{loop}/approvals").json()["items"]
        return loop, str(calls[0]["id"])

    def paused(self) -> str:
        loop, _ = self.parked()
        assert self.http.post(f"/v1/loops/{loop}/pause").status_code == 200
        self.wait(loop, "paused")
        return loop


def placeholders(command: str, fleet: Fleet) -> dict[str, str]:
    """The loop (and call) `command` needs, in the state it needs them."""
    values: dict[str, str] = {}
    writes = re.search(r"-X (POST|PATCH)", command) is not None
    if re.search(r"tool-calls/(\$CALL|5)/", command):
        values["LOOP"], values["CALL"] = fleet.parked()
    elif re.search(r"/approvals", command):
        if "parked" not in fleet.shared:
            fleet.shared["parked"] = fleet.parked()[0]
        values["LOOP"] = fleet.shared["parked"]
    elif re.search(r"/resume", command):
        values["LOOP"] = fleet.completed() if '"from"' in command else fleet.paused()
    elif re.search(r"/(pause|stop|freeze|unfreeze|observe)\b", command):
        values["LOOP"], _ = fleet.parked()
    elif re.search(r"\$LOOP|\$ID|0b6c…", command):
        if writes or "completed" not in fleet.shared:
            fleet.shared["completed"] = fleet.completed()
        values["LOOP"] = fleet.shared["completed"]
        if writes:  # the next reader gets a fresh one
            del fleet.shared["completed"]
    if "LOOP" in values:
        loop = values["LOOP"]
        values["ID"] = loop
        if "message_id" in command:
            messages = fleet.http.get(f"/v1/loops/{loop}/messages").json()["items"]
            values["MESSAGE"] = str(messages[0]["id"])
        if "If-Match" in command:
            values["VERSION"] = str(fleet.http.get(f"/v1/loops/{loop}/state").json()["version"])
    if "cursor=" in command:
        page = fleet.http.get("/v1/loops?limit=1").json()
        values["CURSOR"] = str(page["next_cursor"])
    if "webhook-deliveries/17" in command:
        deadline = time.monotonic() + 60
        while not (items := fleet.http.get("/v1/webhook-deliveries").json()["items"]):
            assert time.monotonic() < deadline, "no webhook delivery was made"
            time.sleep(0.2)
        values["DELIVERY"] = str(items[0]["id"])
    return values


def substituted(command: str, api: int, values: dict[str, str]) -> str:
    line = command.replace("localhost:8080", f"127.0.0.1:{api}")
    line = re.sub(r"(^|[\s$(])curl ", r"\1curl --fail-with-body -sS --max-time 30 ", line)
    if "LOOP" in values:
        line = line.replace("0b6c…", values["LOOP"])
    if "CALL" in values:
        line = line.replace("tool-calls/5/", "tool-calls/$CALL/")
        # the docs' refund example, as arguments the test's gated tool takes
        line = line.replace('{"amount": 10}', '{"timezone": "Europe/Paris"}')
    if "MESSAGE" in values:
        line = re.sub(r'"message_id": \d+', f'"message_id": {values["MESSAGE"]}', line)
    if "VERSION" in values:
        line = re.sub(r"If-Match: \"\d+\"", f'If-Match: "{values["VERSION"]}"', line)
    if "CURSOR" in values:
        line = re.sub(r"cursor=[^&\"\s]+", f"cursor={values['CURSOR']}", line)
    if "DELIVERY" in values:
        line = line.replace("webhook-deliveries/17/", f"webhook-deliveries/{values['DELIVERY']}/")
    return line


def is_live_stream(command: str) -> bool:
    """A stream that stays open until the client hangs up (the fleet's events)."""
    return "text/event-stream" in command and "/v1/events" in command


@pytest.fixture
def server(database_url: str, tmp_path: Path) -> Iterator[tuple[int, dict[str, str]]]:
    api, llm, hook, inventory = free_port(), free_port(), free_port(), free_port()
    (tmp_path / "agentd.toml").write_text(config(llm, hook, inventory))
    env = clean_env(
        AGENTD_DATABASE_URL=database_url,
        AGENTD_DATA_DIR=str(tmp_path / "data"),
        AGENTD_PORT=str(api),
        AGENTD_API_TOKEN=TOKEN,
        OPENAI_API_KEY="offline",
        DOC_WEBHOOK_SECRET="whsec_" + "a" * 32,
    )
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    bin_ = Path(sys.executable).parent / "agentd"
    out = (tmp_path / "agentd.log").open("w")
    procs = [
        subprocess.Popen(
            [str(bin_), "fake-llm", "--port", str(llm)], env=env, stdout=out, stderr=out
        ),
        subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "examples" / "mcp-server" / "server.py"),
                "--port",
                str(inventory),
            ],
            env=env,
            stdout=out,
            stderr=out,
        ),
        subprocess.Popen(
            [str(bin_), "up", "--config", str(tmp_path / "agentd.toml")],
            env=env,
            stdout=out,
            stderr=out,
        ),
    ]
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{api}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "agentd.log").read_text()
            assert all(p.poll() is None for p in procs), (tmp_path / "agentd.log").read_text()
            time.sleep(0.2)
        shell_env = {
            **env,
            "T": TOKEN,
            "TOKEN": TOKEN,
            "AGENTD_API_TOKEN": TOKEN,
            "AGENTD": f"http://127.0.0.1:{api}",
        }
        yield api, shell_env
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=30)
        out.close()


def api_alias() -> str:
    """api.md's `api` alias, as the doc defines it (with the test's curl options)."""
    line = next(c for c in commands("docs/api.md") if c.startswith("alias api="))
    return line.replace("curl ", "curl --fail-with-body -sS --max-time 30 ", 1)


# Minutes, not seconds: a dozen loops parked on a gated MCP tool (each spawns its stdio
# server), pauses and stops that cancel work, and a live stream held open.
@pytest.mark.slow
def test_every_doc_command_runs(server: tuple[int, dict[str, str]]) -> None:
    api, env = server
    http = httpx.Client(
        base_url=env["AGENTD"], headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30
    )
    fleet = Fleet(http)
    alias = api_alias()
    failures: list[str] = []
    ran = 0
    for doc in DOCS:
        for command in commands(doc):
            if skip_reason(doc, command) is not None or command.startswith("alias api="):
                continue
            started = time.monotonic()
            values = placeholders(command, fleet)
            line = substituted(command, api, values)
            live = is_live_stream(line)
            if live:
                line = line.replace("--max-time 30", "--max-time 3 -D /dev/stderr")
            script = f"set -euo pipefail\nshopt -s expand_aliases\n{alias}\n{line}\n"
            proc = subprocess.run(
                ["bash", "-c", script],
                env={**env, **values},
                capture_output=True,
                text=True,
                timeout=120,
            )
            ran += 1
            print(f"{time.monotonic() - started:5.1f}s {doc}: {command.splitlines()[0]}")
            ok = proc.returncode == 0
            if live:  # cut by --max-time (28) once it answered
                ok = proc.returncode == 28 and "HTTP/1.1 200" in proc.stderr
            if not ok:
                failures.append(
                    f"{doc}: {command}\n  ran: {line}\n  rc={proc.returncode}\n"
                    f"  stdout: {proc.stdout[-800:]}\n  stderr: {proc.stderr[-800:]}"
                )
    http.close()
    assert not failures, f"{len(failures)} of {ran} doc commands failed:\n\n" + "\n\n".join(
        failures
    )
    assert ran > 30, ran


@pytest.mark.slow
def test_the_mcp_server_example_works_as_its_readme_says(
    server: tuple[int, dict[str, str]],
) -> None:
    """examples/mcp-server: the README's loop calls the example server's tool through
    agentd, and a reservation waits for its approval (the server here is the example's
    server.py, the agent its agentd.toml, on this test's ports)."""
    _, env = server
    http = httpx.Client(
        base_url=env["AGENTD"], headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30
    )
    fleet = Fleet(http)
    readme = (ROOT / "examples" / "mcp-server" / "README.md").read_text()
    start = next(c for c in commands("examples/mcp-server/README.md") if "-X POST" in c)
    body = json.loads(re.search(r"-d '(.*?)'", start, re.S).group(1))  # type: ignore[union-attr]
    assert body["agent"] == "shop"
    loop = fleet.start(body["agent"], body["message"])
    fleet.wait(loop, "completed")
    messages = http.get(f"/v1/loops/{loop}/messages").json()["items"]
    tool = next(m for m in messages if m["role"] == "tool")
    assert tool["content"] == "12"  # the server's answer, as the README says
    assert "answered: 12" in messages[-1]["content"]

    # "A message `/call inventory__reserve {...}` parks the loop until someone approves"
    reserve = re.search(r"`(/call inventory__reserve \{.*?\})`", readme).group(1)  # type: ignore[union-attr]
    loop = fleet.start("shop", reserve)
    fleet.wait(loop, "waiting")
    (call,) = http.get(f"/v1/loops/{loop}/approvals").json()["items"]
    assert http.post(f"/v1/tool-calls/{call['id']}/approve").status_code == 200
    fleet.wait(loop, "completed")
    messages = http.get(f"/v1/loops/{loop}/messages").json()["items"]
    tool = next(m for m in messages if m["role"] == "tool")
    assert tool["content"] == "reserved 2 of A-100; 10 left"
    http.close()
