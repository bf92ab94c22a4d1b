"""Property-based API testing from our own OpenAPI schema (schemathesis, deterministic seed).

The app is served in this test's event loop; the schemathesis CLI runs in a subprocess
against it, so no input it generates may yield a 500 or a response the schema does not
describe.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from pathlib import Path

import pytest
from fastapi import FastAPI

TOKEN = "operator-token-for-tests"
CHECKS = ",".join(
    [
        "not_a_server_error",
        "status_code_conformance",
        "content_type_conformance",
        "response_schema_conformance",
        "negative_data_rejection",
    ]
)


# The run is bounded (a fixed seed, 60 examples per operation, one worker), so this is a
# hang guard, not a speed check: on a 2-core box beside CPU-bound work it took over 150 s.
HANG_AFTER = 720.0


def _cli() -> list[str]:
    exe = Path(sys.executable).parent / "schemathesis"
    if exe.exists():
        return [str(exe)]
    found = shutil.which("schemathesis") or shutil.which("st")
    if found is None:
        pytest.skip("schemathesis is not installed")
    return [found]


@pytest.mark.slow
@pytest.mark.timeout(HANG_AFTER + 120)
async def test_schemathesis_finds_no_server_errors_or_schema_violations(
    app: FastAPI, live_server, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    cli = _cli()
    schema = tmp_path / "openapi.json"
    schema.write_text(json.dumps(app.openapi()))
    config = tmp_path / "schemathesis.toml"
    # Its defaults plus 413: a generated body past AGENTD_MAX_BODY_BYTES is refused as such
    # (documented on every body route), which is a rejection, not an acceptance.
    config.write_text(
        "[checks.negative_data_rejection]\n"
        'expected-statuses = ["400", "401", "403", "404", "405", "406", "409", "413", "415",'
        ' "422", "428", "429", "5XX"]\n'
    )
    async with live_server(app) as base_url:
        proc = await asyncio.create_subprocess_exec(
            *cli,
            "--config-file",
            str(config),
            "run",
            str(schema),
            "--url",
            base_url,
            "--header",
            f"Authorization: Bearer {TOKEN}",
            "--checks",
            CHECKS,
            "--phases",
            "examples,coverage,fuzzing",
            "--max-examples",
            "60",
            "--seed",
            "20240601",
            "--workers",
            "1",
            "--request-timeout",
            "10",
            "--no-color",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            cwd=tmp_path,
        )
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), timeout=HANG_AFTER)
        except TimeoutError:
            # Kill and reap it here: a child left running keeps its pipe open past the test.
            proc.kill()
            rest, _ = await proc.communicate()
            pytest.fail(f"schemathesis still running after {HANG_AFTER:.0f} s:\n{rest[-4000:]!r}")
    text = out.decode(errors="replace")
    assert proc.returncode == 0, text[-8000:]
