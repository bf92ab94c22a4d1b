"""The README's and the examples' offline walkthroughs, run as written.

From each document, the section that starts `agentd fake-llm` is taken whole: its bash
blocks run in one bash script against a real `agentd fake-llm` and `agentd up` (started by
the script itself, as the reader would). Only what a test must change is changed: ports
(the machine may have 8080/9000 taken), the database (the test's own instead of an embedded
server), `pip install .` (already installed), a readiness wait after each background
start (a reader waits by eye), and `curl --fail-with-body`, so that an HTTP error fails.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from agentd.testing.up import clean_env, free_port

pytestmark = [pytest.mark.acceptance]

ROOT = Path(__file__).parents[2]
BLOCK = re.compile(r"```(bash|python)\n(.*?)```", re.S)

#: document -> what its walkthrough's output must contain
WALKTHROUGHS = {
    "README.md": ["echo: Draft a haiku about queues.", "event: status", "[completed]"],
    "examples/toml-agent/README.md": ["echo: Draft a haiku about queues.", "event: status"],
    "examples/stdio-agent/README.md": ['"name":"get_current_time"', "Europe/Lisbon"],
}


def walkthrough(doc: str) -> str:
    """The code blocks of the section of `doc` that starts the offline model, as bash
    (a Python block runs as `python3` in the same session)."""
    sections = re.split(r"\n(?=#+ )", (ROOT / doc).read_text())
    for section in sections:
        blocks = BLOCK.findall(section)
        if any("agentd fake-llm" in code for _, code in blocks):
            return "\n".join(
                code if kind == "bash" else f"python3 - <<'PYTHON'\n{code}PYTHON"
                for kind, code in blocks
            )
    raise AssertionError(f"{doc}: no section runs `agentd fake-llm`")


def as_test_script(commands: str, *, api: int, llm: int, tmp: Path) -> str:
    lines = []
    for line in commands.splitlines():
        if line.strip().startswith("pip install ."):
            continue  # this checkout is installed already
        for cfg in re.findall(r"examples/[\w-]+/agentd\.toml", line):
            copy = tmp / cfg.replace("/", "_")
            copy.write_text((ROOT / cfg).read_text().replace("127.0.0.1:9000", f"127.0.0.1:{llm}"))
            line = line.replace(cfg, str(copy))
        line = line.replace("localhost:8080", f"127.0.0.1:{api}")
        line = line.replace("--port 9000", f"--port {llm}")
        line = re.sub(r"(^|[\s$(])curl ", r"\1curl --fail-with-body -sS --max-time 60 ", line)
        lines.append(line)
        command = line.split("#")[0].strip()
        if command.endswith("&") and "agentd fake-llm" in command:
            lines.append(f"wait_for http://127.0.0.1:{llm}/")
        elif command.endswith("&") and "agentd up" in command:
            lines.append(f"wait_for http://127.0.0.1:{api}/readyz")
    prelude = f"""\
set -euo pipefail
cd {ROOT}
trap 'kill $(jobs -p) 2>/dev/null; wait' EXIT
wait_for() {{  # poll until the URL answers, for at most 60 s
  for _ in $(seq 600); do
    curl -s -o /dev/null --max-time 1 "$1" && return 0
    sleep 0.1
  done
  echo "never answered: $1" >&2; return 1
}}
"""
    return prelude + "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    "doc",
    # The README's walkthrough runs by default; the examples' (much the same) are `slow`.
    [pytest.param(d, marks=[] if d == "README.md" else [pytest.mark.slow]) for d in WALKTHROUGHS],
)
def test_offline_walkthrough_runs_as_written(doc: str, database_url: str, tmp_path: Path) -> None:
    api, llm = free_port(), free_port()
    script = as_test_script(walkthrough(doc), api=api, llm=llm, tmp=tmp_path)
    env = clean_env(
        AGENTD_DATABASE_URL=database_url,
        AGENTD_DATA_DIR=str(tmp_path / "data"),
        AGENTD_PORT=str(api),  # the docs' default 8080, moved
    )
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    proc = subprocess.run(
        ["bash", "-c", script], env=env, capture_output=True, text=True, timeout=180
    )
    out = proc.stdout.replace(" ", "").replace("\\u2019", "'")
    assert proc.returncode == 0, f"{script}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
    for expected in WALKTHROUGHS[doc]:
        assert expected.replace(" ", "") in out, f"{expected!r} not in:\n{proc.stdout}"
