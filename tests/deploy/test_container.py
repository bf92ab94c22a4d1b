"""The container path, run: the image built and run, and the compose quickstart end to end.

No container registry is needed: `.ci/container-engine` makes the base images from Debian
packages and the builds override the base with `--build-arg PYTHON_IMAGE=...` (compose:
PYTHON_IMAGE and POSTGRES_IMAGE). Containers that use the test PostgreSQL run with
`--network host`. Figures (image sizes, seconds to /readyz) go to
test-artifacts/container-figures.json; docs/deployment.md reports them.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from agentd.testing.up import free_port

from ._docker import (
    ROOT,
    build_args,
    compose_command,
    compose_env,
    docker,
    engine_or_skip,
    wait_for,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

TAG = "agentd-ci:test"
EXAMPLES = "agentd-ci:test-examples"
EXTERNAL_DB = "agentd-ci:test-external-db"
TOKEN = "container-test-token"
FIGURES = ROOT / "test-artifacts" / "container-figures.json"
# Short intervals, as in tests/acceptance/_procs.py, and a grace shorter than the slow turn.
FAST = {
    "AGENTD_HEARTBEAT_INTERVAL": "0.2",
    "AGENTD_LIVENESS_INTERVAL": "0.2",
    "AGENTD_POLL_INTERVAL": "0.2",
    "AGENTD_REAPER_INTERVAL": "0.5",
    "AGENTD_SHUTDOWN_GRACE": "1",
    "AGENTD_LOG_LEVEL": "info",
}
SLOW_TURN = 120.0  # the first answer to "slow": far longer than the test waits for it


def record(**figures: Any) -> None:
    FIGURES.parent.mkdir(exist_ok=True)
    data = json.loads(FIGURES.read_text()) if FIGURES.exists() else {}
    data.update(figures)
    FIGURES.write_text(json.dumps(data, indent=2) + "\n")


def size_mb(tag: str) -> float:
    return round(int(docker("image", "inspect", "-f", "{{.Size}}", tag).stdout) / 1e6, 1)


@pytest.fixture(scope="module")
def images() -> Iterator[None]:
    """Both Dockerfile targets and the embedded-less variant, on the Debian-made base."""
    engine_or_skip()
    t0 = time.monotonic()
    docker("build", *build_args(), "-t", TAG, str(ROOT), timeout=900)
    built = time.monotonic() - t0
    docker(
        "build", *build_args(), "--target", "with-examples", "-t", EXAMPLES, str(ROOT), timeout=900
    )
    docker(
        "build", *build_args(EMBEDDED_POSTGRES="false"), "-t", EXTERNAL_DB, str(ROOT), timeout=900
    )
    record(
        build_seconds=round(built, 1),
        size_mb={t: size_mb(t) for t in (TAG, EXAMPLES, EXTERNAL_DB)},
        base_size_mb=size_mb("agentd-base/python:3.11-bookworm"),
    )
    yield


class Containers:
    def __init__(self) -> None:
        self.ids: list[str] = []

    def run(self, image: str, *args: str, env: dict[str, str], network_host: bool = True) -> str:
        flags = ["--network", "host"] if network_host else []
        for k, v in env.items():
            flags += ["-e", f"{k}={v}"]
        cid = docker("run", "-d", *flags, image, *args).stdout.strip()
        self.ids.append(cid)
        return cid

    def logs(self) -> str:
        out = []
        for cid in self.ids:
            r = docker("logs", "--tail", "40", cid, check=False)
            out.append(f"--- {cid[:12]} ---\n{r.stdout}{r.stderr}")
        return "\n".join(out)

    def remove(self) -> None:
        for cid in self.ids:
            docker("rm", "-f", "-v", cid, check=False, timeout=60)


@pytest.fixture
def containers() -> Iterator[Containers]:
    c = Containers()
    try:
        yield c
    except BaseException:
        print(c.logs())
        raise
    finally:
        c.remove()


def ready(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def exit_code(cid: str) -> int:
    return int(docker("inspect", "-f", "{{.State.ExitCode}}", cid).stdout)


def test_the_image_is_non_root_and_up_serves_readyz_on_its_embedded_postgres(
    images: None, containers: Containers
) -> None:
    assert docker("run", "--rm", TAG, "--version").stdout.startswith("agentd ")
    assert docker("run", "--rm", "--entrypoint", "id", TAG, "-u").stdout.strip() == "10001"
    port = free_port()
    t0 = time.monotonic()
    cid = containers.run(TAG, env={"AGENTD_PORT": str(port), "AGENTD_API_TOKEN": TOKEN})
    wait_for(lambda: ready(port), within=120, what="`agentd up` /readyz")
    record(readyz_seconds_up_embedded=round(time.monotonic() - t0, 1))
    r = httpx.get(
        f"http://127.0.0.1:{port}/v1/agents", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    assert r.status_code == 200
    docker("stop", "-t", "30", cid, timeout=60)
    assert exit_code(cid) == 0, containers.logs()


async def test_the_external_db_variant_needs_a_database_url_and_then_serves(
    images: None, containers: Containers, database_url: str
) -> None:
    await asyncio.to_thread(_external_db, containers, database_url)


def _external_db(containers: Containers, database_url: str) -> None:
    assert size_mb(EXTERNAL_DB) < size_mb(TAG) - 30  # the 41 MB embedded server is left out
    port = free_port()
    run = docker(
        "run",
        "--rm",
        "--network",
        "host",
        "-e",
        f"AGENTD_PORT={port}",
        "-e",
        f"AGENTD_API_TOKEN={TOKEN}",
        EXTERNAL_DB,
        "up",
        check=False,
        timeout=120,
    )
    assert run.returncode == 2, run
    assert "AGENTD_DATABASE_URL" in run.stdout + run.stderr
    t0 = time.monotonic()
    containers.run(
        EXTERNAL_DB,
        "api",
        env={
            "AGENTD_PORT": str(port),
            "AGENTD_API_TOKEN": TOKEN,
            "AGENTD_DATABASE_URL": database_url,
        },
    )
    wait_for(lambda: ready(port), within=60, what="external-db variant `agentd api` /readyz")
    record(readyz_seconds_api_external_db=round(time.monotonic() - t0, 1))


async def test_a_loop_runs_in_containers_and_a_stopped_worker_hands_its_turn_back(
    images: None, containers: Containers, database_url: str, tmp_path: Path
) -> None:
    await asyncio.to_thread(_loop_and_drain_with_fake_llm, containers, database_url, tmp_path)


def _loop_and_drain_with_fake_llm(
    containers: Containers, database_url: str, tmp_path: Path
) -> None:
    # The offline model on the host: the first "slow" request hangs, everything else answers.
    rules = tmp_path / "rules.json"
    rules.write_text(
        json.dumps(
            [
                {
                    "match": {"contains": "slow"},
                    "times": 1,
                    "reply": {"content": "never sent", "delay_before_first_byte": SLOW_TURN},
                },
                {"reply": {"content": "done"}},
            ]
        )
    )
    llm_port = free_port()
    agentd_cmd = str(Path(sys.executable).with_name("agentd"))
    llm = subprocess.Popen(
        [agentd_cmd, "fake-llm", "--port", str(llm_port), "--rules", str(rules)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert llm.stdout is not None and llm.stdout.readline().startswith("LISTENING")
        _loop_and_drain(containers, database_url, llm_port)
    finally:
        llm.terminate()
        llm.communicate(timeout=30)  # reaps it and closes its pipe


def _loop_and_drain(containers: Containers, database_url: str, llm_port: int) -> None:
    port = free_port()
    env = {
        **FAST,
        "AGENTD_DATABASE_URL": database_url,
        "AGENTD_API_TOKEN": TOKEN,
        "AGENTD_PORT": str(port),
        "NOTES_LLM_BASE_URL": f"http://127.0.0.1:{llm_port}",
        "NOTES_LLM_MODEL": "fake-model",
        "OPENAI_API_KEY": "unused-by-the-fake-llm",
    }
    api = httpx.Client(
        base_url=f"http://127.0.0.1:{port}",
        headers={"Authorization": f"Bearer {TOKEN}"},
        timeout=10,
    )

    def sql(query: str, *args: Any) -> Any:
        return asyncio.run(_fetchval(database_url, query, *args))

    try:
        containers.run(EXAMPLES, "api", env=env)
        w1 = containers.run(EXAMPLES, "worker", env=env)
        wait_for(lambda: ready(port), within=60, what="api /readyz")
        w1_id = _registered(sql, w1, set())

        def start(message: str) -> str:
            r = api.post("/v1/loops", json={"agent": "notes", "message": message})
            assert r.status_code == 201, r.text
            return str(r.json()["id"])

        def completed(loop_id: str) -> bool:
            body = api.get(f"/v1/loops/{loop_id}").json()
            assert body["status"] not in ("failed", "cancelled"), body
            return body["status"] == "completed"

        first = start("hello")
        wait_for(lambda: completed(first), within=60, what="first loop completed")

        # A turn in flight on w1 (the model is holding its answer back), then w2 joins.
        slow = start("slow, please")

        def held() -> bool:
            return bool(
                sql(
                    "SELECT worker_id = $2 FROM loops WHERE id = $1 AND status = 'running' "
                    "AND turn_started_at IS NOT NULL",
                    uuid.UUID(slow),
                    w1_id,
                )
            )

        wait_for(held, within=30, what="w1 holds the slow loop's turn")
        w2 = containers.run(EXAMPLES, "worker", env=env)
        _registered(sql, w2, {w1_id})

        t0 = time.monotonic()
        docker("stop", "-t", "30", w1, timeout=60)
        stopped_in = time.monotonic() - t0
        assert exit_code(w1) == 0, containers.logs()
        assert stopped_in < 1 + 15, stopped_in  # grace 1 s + hand-back, not Docker's SIGKILL
        assert "worker.released" in docker("logs", w1).stdout + docker("logs", w1).stderr
        assert not sql("SELECT count(*) FROM workers WHERE id = $1", w1_id)

        # w2, the only worker left, answers it at once: long before the slow answer or a lease.
        wait_for(lambda: completed(slow), within=30, what="handed-back loop completed")
        assert time.monotonic() - t0 < SLOW_TURN / 2
        messages = api.get(f"/v1/loops/{slow}/messages").json()["items"]
        assert messages[-1]["role"] == "assistant" and messages[-1]["content"] == "done"
    finally:
        api.close()


async def _fetchval(url: str, query: str, *args: Any) -> Any:
    conn = await asyncpg.connect(url)
    try:
        return await conn.fetchval(query, *args)
    finally:
        await conn.close()


def _registered(sql: Any, cid: str, known: set[uuid.UUID]) -> uuid.UUID:
    """The heartbeat row container `cid` adds (with --network host a container has the host's
    hostname and every one is PID 1, so the new row is told apart by being new)."""

    def new_row() -> uuid.UUID | None:
        state = docker("inspect", "-f", "{{.State.Status}}", cid).stdout.strip()
        assert state == "running", f"{cid[:12]} is {state}: {docker('logs', cid).stderr[-2000:]}"
        ids = set(sql("SELECT coalesce(array_agg(id), '{}') FROM workers")) - known
        assert len(ids) <= 1, ids
        return ids.pop() if ids else None

    result: uuid.UUID = wait_for(new_row, within=60, what=f"worker {cid[:12]} registered")
    return result


def test_the_compose_quickstart_completes_a_loop(images: None) -> None:
    """docs/deployment.md's compose commands, as written, with this machine's base images."""
    compose = [*compose_command(), "-p", f"agentd-ci-{secrets.token_hex(3)}"]
    port = free_port()
    token = secrets.token_hex(32)
    env = {**compose_env(), "AGENTD_API_TOKEN": token, "AGENTD_PUBLISH_PORT": str(port)}

    def run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        out = subprocess.run(
            [*compose, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
        )
        assert out.returncode == 0, f"{args}: {out.stdout}\n{out.stderr}"
        return out

    clients: list[httpx.Client] = []
    try:
        run("up", "--build", "-d", timeout=900)
        wait_for(lambda: ready(port), within=120, what="compose api /readyz")
        api = httpx.Client(
            base_url=f"http://127.0.0.1:{port}",
            headers={"Authorization": f"Bearer {token}"},
            timeout=10,
        )
        clients.append(api)
        assert [a["name"] for a in api.get("/v1/agents").json()["items"]] == ["notes"]
        r = api.post("/v1/loops", json={"agent": "notes", "message": "remember: buy milk"})
        assert r.status_code == 201, r.text
        loop_id = r.json()["id"]

        def completed() -> bool:
            body = api.get(f"/v1/loops/{loop_id}").json()
            assert body["status"] not in ("failed", "cancelled"), body
            return body["status"] == "completed"

        wait_for(completed, within=60, what="compose loop completed")
        items = api.get(f"/v1/loops/{loop_id}/messages").json()["items"]
        assert items[-1]["content"] == "echo: remember: buy milk"
        workers = run("ps", "-q", "worker").stdout.split()
        assert len(workers) == 2, workers

        def all_healthy() -> bool:
            states = [
                docker("inspect", "-f", "{{.State.Health.Status}}", w).stdout.strip()
                for w in workers
            ]
            assert "unhealthy" not in states, states
            return set(states) == {"healthy"}

        wait_for(all_healthy, within=90, what="both workers healthy", interval=1)
    except BaseException:
        print(
            subprocess.run(
                [*compose, "logs", "--tail", "40"],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
            ).stdout
        )
        raise
    finally:
        for c in clients:
            c.close()
        subprocess.run(
            [*compose, "down", "-v", "--timeout", "45"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            timeout=180,
        )
