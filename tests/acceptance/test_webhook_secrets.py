"""A webhook secret that is not a Standard Webhooks secret stops the process at start
(exit 2, one line naming the variable), however the webhook was configured.

Caught: a secret without `whsec_`, or shorter than the spec's 24 bytes, started and served:
`standardwebhooks.Webhook` accepts any base64 and strips the prefix only if present.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest

from agentd.testing.up import clean_env

pytestmark = [pytest.mark.acceptance]

GOOD = "whsec_" + base64.b64encode(b"k" * 32).decode()
URL = "http://127.0.0.1:9/hook"


def _toml(tmp_path: Path) -> Path:
    path = tmp_path / "agentd.toml"
    path.write_text(
        f'[[webhooks]]\nurl = "{URL}"\nevents = ["loop.failed"]\nsecret_env = "HOOK_SECRET"\n'
    )
    return path


@pytest.mark.parametrize(
    ("source", "secret", "says"),
    [
        ("toml", base64.b64encode(b"k" * 32).decode(), "does not start with whsec_"),
        ("env", "whsec_" + base64.b64encode(b"k" * 16).decode(), "decodes to 16 bytes"),
        ("toml", "whsec_not*base64!", "not whsec_ followed by base64"),
        ("env", f"{GOOD} whsec_{base64.b64encode(b'k' * 8).decode()}", "secret 2 of 2"),
    ],
    ids=["no-prefix-toml", "short-env", "not-base64-toml", "bad-rotation-env"],
)
def test_a_malformed_webhook_secret_is_one_line_and_exit_2(
    database_url: str, tmp_path: Path, source: str, secret: str, says: str
) -> None:
    env = {"AGENTD_DATABASE_URL": database_url, "HOOK_SECRET": secret, "AGENTD_METRICS_PORT": "0"}
    argv = [sys.executable, "-m", "agentd", "worker"]
    if source == "toml":
        argv += ["--config", str(_toml(tmp_path))]
    else:  # the same entry from the environment (pydantic-settings reads JSON)
        hook = {"url": URL, "events": ["loop.failed"], "secret_env": "HOOK_SECRET"}
        env["AGENTD_WEBHOOKS"] = json.dumps([hook])
    proc = subprocess.run(argv, env=clean_env(**env), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("agentd: ")]
    assert "HOOK_SECRET" in line and says in line and URL in line
    assert secret.split()[-1] not in proc.stderr  # the secret itself is never printed
    assert "engine.started" not in proc.stderr
