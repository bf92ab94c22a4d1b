"""python -m bench.chaos --minutes 10 [--loops N] [--database-url URL] [--seed S]"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from pathlib import Path

from agentd.testing.db import TestDatabases
from bench.chaos import report, soak


async def main(args: argparse.Namespace) -> int:
    dbs = TestDatabases(args.database_url, prefix=f"agentd_chaos{os.getpid()}")
    await dbs.setup()
    url = await dbs.create()
    workdir = Path(tempfile.mkdtemp(prefix="agentd-chaos-"))
    try:
        result = await soak.run(
            soak.Options(
                database_url=url,
                workdir=workdir,
                loops=args.loops or int(args.minutes * 150),
                duration=args.minutes * 60,
                seed=args.seed,
            )
        )
    finally:
        await dbs.teardown()
    print(report.table(result))
    print(f"process logs: {workdir}")
    return 0 if result.findings.ok else 1


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__)
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--loops", type=int, default=0, help="default: 150 per minute")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--database-url",
        default=os.environ.get(
            "AGENTD_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
        ),
        help="a server we may create databases on",
    )
    return p.parse_args(argv)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse(sys.argv[1:]))))
