"""A Docker engine for the container tests, and the build arguments this machine needs.

`.ci/container-engine` (idempotent) installs and starts the engine from Debian packages
where none answers and makes the registry-free base images from Debian packages. Where it
cannot (no root, no apt, no engine), the container tests skip and say why, unless
AGENTD_REQUIRE_CONTAINER_ENGINE=1 (set by .ci/run once the script succeeded): then they fail.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENGINE_SCRIPT = ROOT / ".ci" / "container-engine"
PYTHON_BASE = "agentd-base/python:3.11-bookworm"
POSTGRES_BASE = "agentd-base/postgres:15-bookworm"
# Where this machine keeps CA certificates it added to Debian's store (a TLS-intercepting
# proxy's, for one): pip in the build must trust them too.
LOCAL_CAS = Path("/usr/local/share/ca-certificates")
PIP_ARGS = ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_TRUSTED_HOST")


def docker(
    *args: str, timeout: float = 120, check: bool = True
) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and out.returncode != 0:
        raise AssertionError(
            f"docker {' '.join(args)} -> {out.returncode}\n{out.stdout}\n{out.stderr}"
        )
    return out


def engine_or_skip() -> None:
    """An answering engine and the base images, or a skip that says why (a failure in CI)."""
    required = os.environ.get("AGENTD_REQUIRE_CONTAINER_ENGINE") == "1"
    why = ""
    if shutil.which("docker") is None and os.geteuid() != 0:
        why = "no docker client, and not root to install one"
    else:
        run = subprocess.run(
            ["bash", str(ENGINE_SCRIPT)], capture_output=True, text=True, timeout=900
        )
        if run.returncode != 0:
            why = f".ci/container-engine failed ({run.returncode}): {run.stderr.strip()[-800:]}"
    if why:
        if required:
            pytest.fail(why)
        pytest.skip(f"no container engine can run here: {why}")


def extra_ca_certs() -> str:
    return "\n".join(p.read_text() for p in sorted(LOCAL_CAS.glob("*.crt")))


def build_args(base: str = PYTHON_BASE, **extra: str) -> list[str]:
    """--build-arg for every build arg compose passes too (same cache key), empty if unset."""
    values = {
        "PYTHON_IMAGE": base,
        **{name: os.environ.get(name, "") for name in PIP_ARGS},
        "EXTRA_CA_CERTS": extra_ca_certs(),
        **extra,
    }
    return [a for k, v in values.items() for a in ("--build-arg", f"{k}={v}")]


def compose_env() -> dict[str, str]:
    """What a user on this machine exports before `docker compose up --build`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_")}
    env.update(
        PYTHON_IMAGE=PYTHON_BASE, POSTGRES_IMAGE=POSTGRES_BASE, EXTRA_CA_CERTS=extra_ca_certs()
    )
    return env


def compose_command() -> list[str]:
    """Compose v2 (`docker compose`) where installed, else v1 (`docker-compose`)."""
    if subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    pytest.fail("neither `docker compose` nor `docker-compose` is installed")


def wait_for(check: Callable[[], Any], *, within: float, what: str, interval: float = 0.1) -> Any:
    deadline = time.monotonic() + within
    last: Any = None
    while True:
        last = check()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {within}s (last: {last!r})")
        time.sleep(interval)
