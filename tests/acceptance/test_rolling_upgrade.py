"""Rolling upgrade across an expand-only migration (docs/upgrading.md).

"Old" is the `agentd worker` of this checkout; "new" is the same code whose packaged
migrations also hold an extra expand-only migration (new nullable columns on the hot
tables and a new table). The order the docs prescribe is followed: old workers run loops,
the new release's `agentd migrate` runs while turns are in flight, a new worker starts
beside the old one, then the old one is stopped. Every loop completes exactly once.
A new worker started before `agentd migrate` refuses to start.
"""

from __future__ import annotations

import shutil
import signal
import sys
from pathlib import Path

import pytest

from agentd.db import migrate
from agentd.db import pool as dbpool
from agentd.db.pool import Pool, connection
from agentd.engine.lifecycle import Lifecycle
from agentd.settings import Settings
from agentd.testing import agents
from agentd.testing.fake_llm import FakeLLM, Reply, Rule, ToolCall

from ._procs_scale import all_completed, assert_exactly_once, fleet, live_workers, poll

pytestmark = [pytest.mark.acceptance, pytest.mark.timeout(180)]

EXPAND_VERSION = 9001  # far beyond any real migration of this checkout
# Expand only, and one hot table per migration (each is one transaction): an ALTER holding
# one table's ACCESS EXCLUSIVE lock while it waits for the next would deadlock with a
# worker transaction that holds the second and wants the first. Old code never names the
# new columns, and reads rows with SELECT * / RETURNING *, so it must tolerate them.
EXPAND = {
    "loops_upgrade_probe": "ALTER TABLE loops ADD COLUMN upgrade_probe text;",
    "messages_upgrade_probe": "ALTER TABLE messages ADD COLUMN upgrade_probe text;",
    "tool_calls_upgrade_probe": "ALTER TABLE tool_calls ADD COLUMN upgrade_probe text;",
    "jobs_upgrade_probe": "ALTER TABLE jobs ADD COLUMN upgrade_probe text;",
    "upgrade_probe_notes": """CREATE TABLE upgrade_probe_notes (
    id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    loop_id uuid REFERENCES loops(id) ON DELETE CASCADE,
    note    text
);""",
}
NEW_VERSIONS = [EXPAND_VERSION + i for i in range(len(EXPAND))]

NEW_AGENTD = """\
import sys
from pathlib import Path

from agentd.db import migrate

# The "new release": its packaged migrations are the given directory.
migrate.migrations_dir = lambda: Path(sys.argv[1])

from agentd.cli import main

main(sys.argv[2:])
"""

TURN_DELAY = 0.4


def new_release(tmp: Path) -> tuple[Path, Path]:
    """(migrations dir of the new release, its launcher script)."""
    mig = tmp / "new_migrations"
    mig.mkdir()
    for m in migrate.migrations_dir().glob("*.sql"):
        shutil.copy(m, mig / m.name)
    assert all(m.version < EXPAND_VERSION for m in migrate.load())
    for version, (name, sql) in zip(NEW_VERSIONS, EXPAND.items(), strict=True):
        (mig / f"{version:04d}_{name}.sql").write_text(sql + "\n")
    script = tmp / "new_agentd.py"
    script.write_text(NEW_AGENTD)
    return mig, script


async def _start(lifecycle: Lifecycle, base_url: str, n: int, tag: str) -> list:  # type: ignore[type-arg]
    return [
        (await lifecycle.start(agent="calc", message=f"{tag} {i}", state={"llm": base_url})).id
        for i in range(n)
    ]


async def _completed(pool: Pool, ids: list) -> bool:  # type: ignore[type-arg]
    async with connection(pool) as conn:
        n = await conn.fetchval(
            "SELECT count(*) FROM loops WHERE id = ANY($1::uuid[]) AND status = 'completed'", ids
        )
    return n == len(ids)


async def test_old_worker_keeps_working_across_an_expand_migration(
    tmp_path: Path, database_url: str, pool: Pool
) -> None:
    mig_dir, script = new_release(tmp_path)
    lifecycle = Lifecycle(pool, agents.registry(), Settings())
    async with FakeLLM() as fake:
        fake.add(
            Rule(
                match=lambda last: last.role == "user",
                reply=Reply(
                    tool_calls=[
                        ToolCall("add", {"a": 1, "b": 2}),
                        ToolCall("add", {"a": 3, "b": 4}),
                    ],
                    delay_before_first_byte=TURN_DELAY,
                ),
            )
        )
        fake.add(
            Rule(
                match=lambda last: last.role == "tool",
                reply=Reply(content="done", delay_before_first_byte=TURN_DELAY),
            )
        )
        with fleet(tmp_path, database_url, AGENTD_SHUTDOWN_GRACE="10") as f:
            new_argv = [sys.executable, str(script), str(mig_dir)]

            # A new worker before the new release's `agentd migrate` refuses to start.
            early = f.start("new-worker-early", argv=[*new_argv, "worker"])
            assert await early.wait(within=30) == 2, early.tail()
            assert "pending migrations" in early.output()
            assert f"{EXPAND_VERSION:04d}_loops_upgrade_probe" in early.output()

            old = f.start("old-worker", "worker")
            await poll(lambda: _has(pool, old.pid), within=30, what="old worker registered")
            before = await _start(lifecycle, fake.base_url, 15, "before")

            async def some_running() -> bool:
                async with connection(pool) as conn:
                    return bool(
                        await conn.fetchval("SELECT count(*) FROM loops WHERE status = 'running'")
                    )

            await poll(some_running, within=20, what="turns in flight on the old worker")

            # The new release's migration, while the old worker has turns in flight.
            mig = f.start("new-migrate", argv=[*new_argv, "migrate"])
            assert await mig.wait(within=30) == 0, mig.tail()
            assert f"applied {len(EXPAND)} migration(s)" in mig.output()
            conn = await dbpool.connect(database_url)
            try:
                assert set(NEW_VERSIONS) <= await migrate.applied_versions(conn)
                # The old code still considers the database current (it does not know 9001).
                assert await migrate.pending(conn) == []
            finally:
                await conn.close()

            # Old code alone keeps completing loops started before and after the migration.
            after = await _start(lifecycle, fake.base_url, 10, "after")
            await poll(
                lambda: _completed(pool, before + after),
                within=60,
                what="old worker completes loops across the migration",
            )

            # Roll: a new worker joins, loops run on both, then the old one stops.
            new = f.start("new-worker", argv=[*new_argv, "worker"])
            await poll(lambda: _has(pool, new.pid), within=30, what="new worker registered")
            mixed = await _start(lifecycle, fake.base_url, 15, "mixed")
            await poll(some_running, within=20, what="turns in flight on the mixed fleet")
            old.signal(signal.SIGTERM)
            assert await old.wait(within=30) == 0, old.tail()
            late = await _start(lifecycle, fake.base_url, 5, "late")
            ids = before + after + mixed + late
            await poll(
                lambda: all_completed(pool, len(ids)),
                within=60,
                what="every loop completed after the roll",
            )
            await assert_exactly_once(pool, ids)
            for p in (old, new):
                assert "Error" not in p.output().replace("error_message", ""), p.tail()
            new.signal(signal.SIGTERM)
            assert await new.wait(within=30) == 0, new.tail()


async def _has(pool: Pool, pid: int) -> bool:
    return pid in await live_workers(pool)
