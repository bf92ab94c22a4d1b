"""The Dockerfile and .dockerignore, parsed line by line (no Docker engine needed).

`docker build` itself runs only where a Docker engine answers (`docker info`); elsewhere
that one test skips and says so. The build stage's own step (a wheel of this checkout that
ships the migrations and the `agentd` command) is reproduced here without Docker.
"""

from __future__ import annotations

import fnmatch
import json
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from agentd.cli import _parser
from agentd.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
FIELDS = {f"AGENTD_{name.upper()}" for name in Settings.model_fields}


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, op: str) -> list[str]:
        return [args for o, args in self.instructions if o == op]

    def last(self, op: str) -> str | None:
        found = self.all(op)
        return found[-1] if found else None


def parse_dockerfile(text: str) -> list[Stage]:
    """Stages with their (INSTRUCTION, arguments), continuations joined, comments dropped."""
    logical: list[str] = []
    buf = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        logical.append(buf + line)
        buf = ""
    assert not buf, "dangling line continuation"
    stages: list[Stage] = []
    for line in logical:
        op, _, args = line.partition(" ")
        op = op.upper()
        if op == "FROM":
            parts = args.split()
            name = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else None
            stages.append(Stage(base=parts[0], name=name))
        elif op == "ARG" and not stages:
            continue  # global ARG before the first FROM
        else:
            assert stages, f"{op} before FROM"
            stages[-1].instructions.append((op, args.strip()))
    return stages


def stages() -> list[Stage]:
    return parse_dockerfile((ROOT / "Dockerfile").read_text())


def stage(name: str) -> Stage:
    [s] = [s for s in stages() if s.name == name]
    return s


def effective(target: str, op: str) -> str | None:
    """The value of a per-image setting (USER, ENTRYPOINT...) in `target`, following FROM."""
    by_name = {s.name: s for s in stages()}
    s = by_name[target]
    while True:
        value = s.last(op)
        if value is not None:
            return value
        if s.base not in by_name:
            return None
        s = by_name[s.base]


def env_of(target: str) -> dict[str, str]:
    by_name = {s.name: s for s in stages()}
    chain = []
    s: Stage | None = by_name[target]
    while s is not None:
        chain.append(s)
        s = by_name.get(s.base)
    env: dict[str, str] = {}
    for st in reversed(chain):
        for args in st.all("ENV"):
            for pair in args.split():
                key, _, value = pair.partition("=")
                env[key] = value
    return env


def test_multi_stage_and_default_target() -> None:
    ss = stages()
    assert [s.name for s in ss] == ["build", "runtime", "with-examples", "agentd"]
    assert ss[-1].base == "runtime", "the default build target is the plain runtime"
    assert stage("with-examples").base == "runtime"
    assert any(
        "slim" in line
        for line in (ROOT / "Dockerfile").read_text().splitlines()
        if line.startswith("ARG PYTHON_IMAGE=python:3.11")
    )
    build = stage("build")
    assert any("pip wheel" in r for r in build.all("RUN"))
    runtime = stage("runtime")
    assert runtime.all("COPY") == ["--from=build /opt/agentd /opt/agentd"], (
        "the runtime gets the built venv only, no sources or build tools"
    )


@pytest.mark.parametrize("target", ["agentd", "with-examples"])
def test_runs_as_non_root(target: str) -> None:
    user = effective(target, "USER")
    assert user is not None
    assert user.split(":")[0] not in ("root", "0")
    # Numeric, so Kubernetes' runAsNonRoot can verify it without /etc/passwd.
    assert user.split(":")[0].isdigit()


@pytest.mark.parametrize("target", ["agentd", "with-examples"])
def test_entrypoint_cmd_and_signals(target: str) -> None:
    entry = effective(target, "ENTRYPOINT")
    cmd = effective(target, "CMD")
    assert entry is not None and cmd is not None
    assert json.loads(entry) == ["agentd"], "exec form, so SIGTERM reaches agentd as PID 1"
    argv = json.loads(cmd)
    assert argv == ["up"]
    assert _parser().parse_args(argv).command == "up"
    assert effective(target, "STOPSIGNAL") == "SIGTERM"


def test_healthcheck_probes_healthz_without_curl() -> None:
    hc = effective("agentd", "HEALTHCHECK")
    assert hc is not None and "CMD python -c" in hc
    assert "/healthz" in hc and "curl" not in hc and "wget" not in hc
    from agentd.api import health

    assert "/healthz" in {r.path for r in health.router.routes}  # type: ignore[attr-defined]
    # The one-liner is valid Python.
    code = hc.split('python -c "', 1)[1].rsplit('"', 1)[0]
    compile(code, "<healthcheck>", "exec")


def test_env_volume_and_port() -> None:
    env = env_of("agentd")
    assert env["AGENTD_HOST"] == "0.0.0.0"
    agentd_names = {k for k in env if k.startswith("AGENTD_")}
    assert agentd_names <= FIELDS, agentd_names - FIELDS
    volumes = json.loads(effective("agentd", "VOLUME") or "[]")
    assert env["AGENTD_DATA_DIR"] in volumes
    assert effective("agentd", "EXPOSE") == env["AGENTD_PORT"]
    Settings(host=env["AGENTD_HOST"], port=int(env["AGENTD_PORT"]))  # valid values


def test_dockerignore_keeps_the_context_small_but_sufficient() -> None:
    patterns = [
        p.strip()
        for p in (ROOT / ".dockerignore").read_text().splitlines()
        if p.strip() and not p.startswith("#")
    ]

    def ignored(path: str) -> bool:
        out = False
        for pat in patterns:
            neg = pat.startswith("!")
            pat = pat.lstrip("!").rstrip("/")
            hit = (
                fnmatch.fnmatch(path, pat)
                or path.startswith(pat + "/")
                or fnmatch.fnmatch(path, pat.replace("**/", "*/"))
                or (pat.startswith("**/") and fnmatch.fnmatch(path.rsplit("/", 1)[-1], pat[3:]))
            )
            if hit:
                out = not neg
        return out

    for needed in (
        "pyproject.toml",
        "README.md",
        "agentd/cli.py",
        "migrations/0001_baseline.sql",
        "examples/agentd-example-plugin/pyproject.toml",
    ):
        assert not ignored(needed), needed
    for junk in (
        ".venv/bin/python",
        ".git/HEAD",
        "tests/conftest.py",
        "agentd/__pycache__/cli.cpython-311.pyc",
        "tests/node/node_modules/x",
    ):
        assert ignored(junk), junk
    # Everything the Dockerfile COPYs from the context is in it.
    for s in stages():
        for args in s.all("COPY"):
            if args.startswith("--from"):
                continue
            for src in args.split()[:-1]:
                assert not ignored(src.rstrip("/")), src
                assert (ROOT / src).exists(), src


@pytest.mark.slow
def test_build_stage_wheel_ships_migrations_and_the_command(tmp_path: Path) -> None:
    """What the build stage runs (`pip wheel --no-deps .`), here, on a copy of the context."""
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, ctx / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "agentd", ctx / "agentd", ignore=ignore)
    shutil.copytree(ROOT / "migrations", ctx / "migrations")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--wheel-dir",
            str(tmp_path / "dist"),
            str(ctx),
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    if result.returncode != 0 and "No matching distribution found for hatchling" in (
        result.stdout + result.stderr
    ):
        pytest.skip("no package index reachable for the build backend (hatchling)")
    assert result.returncode == 0, result.stdout + result.stderr
    [wheel] = (tmp_path / "dist").glob("agentd-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        entry_points = next(zf.read(n).decode() for n in names if n.endswith("entry_points.txt"))
    assert "agentd/_migrations/0001_baseline.sql" in names
    assert "agentd/store/sql/functions/tool_call_finish.sql" in names
    assert "agentd/cli.py" in names
    assert "agentd = agentd.cli:main" in entry_points
    assert not any(n.startswith(("tests/", "migrations/")) for n in names)


def test_docker_build_when_an_engine_is_available(tmp_path: Path) -> None:
    docker = shutil.which("docker")
    if docker is None:
        pytest.skip("no docker client on this machine")
    info = subprocess.run([docker, "info"], capture_output=True, timeout=30)
    if info.returncode != 0:
        pytest.skip(
            "no Docker engine answers `docker info` here; the image is validated by parsing only"
        )
    tag = "agentd-test:deploy"
    subprocess.run([docker, "build", "-t", tag, str(ROOT)], check=True, timeout=1200)
    out = subprocess.run(
        [docker, "run", "--rm", tag, "--version"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert out.stdout.startswith("agentd ")
    user = subprocess.run(
        [docker, "run", "--rm", "--entrypoint", "id", tag, "-u"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert user.stdout.strip() == "10001"
