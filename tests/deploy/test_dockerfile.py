"""The Dockerfile and .dockerignore, parsed line by line (no Docker engine needed).

`docker build` itself runs only where a Docker engine answers (`docker info`); elsewhere
that one test skips and says so. The build stage's own step (a wheel of this checkout that
ships the migrations and the `agentd` command) is reproduced here without Docker.
"""

from __future__ import annotations

import fnmatch
import json
import os
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


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_docker_build_when_an_engine_is_available() -> None:
    """`docker build` on whatever engine answers here, on a base image this machine has.

    The base is AGENTD_TEST_PYTHON_IMAGE, else the Debian-made agentd-base image of
    .ci/container-engine when present, else the Dockerfile's default; a base that cannot be
    pulled (no registry reachable) skips with the engine's message instead of failing.
    tests/deploy/test_container.py runs the image.
    """
    from ._docker import PYTHON_BASE, build_args

    docker = shutil.which("docker")
    if docker is None:
        pytest.skip("no docker client on this machine")
    info = subprocess.run([docker, "info"], capture_output=True, timeout=30)
    if info.returncode != 0:
        pytest.skip(
            "no Docker engine answers `docker info` here; the image is validated by parsing only"
        )
    base = os.environ.get("AGENTD_TEST_PYTHON_IMAGE")
    if not base:
        have = subprocess.run([docker, "image", "inspect", PYTHON_BASE], capture_output=True)
        base = PYTHON_BASE if have.returncode == 0 else "python:3.11-slim-bookworm"
    tag = "agentd-test:deploy"
    build = subprocess.run(
        [docker, "build", *build_args(base), "-t", tag, str(ROOT)],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    if build.returncode != 0:
        text = build.stdout + build.stderr
        if any(s in text for s in _PULL_FAILURES):
            pytest.skip(f"base image {base} cannot be pulled here: {text.strip()[-300:]}")
        raise AssertionError(text)
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


# What an engine says when a FROM image is neither local nor pullable.
_PULL_FAILURES = (
    "pull access denied",
    "no such host",
    "failed to resolve source metadata",
    "dial tcp",
    "i/o timeout",
    "manifest unknown",
    "TLS handshake timeout",
)


# --- pinned dependencies (requirements/image*.txt, deploy/lock_image_requirements.py) ----------


def _pins(path: Path) -> dict[str, str]:
    from packaging.utils import canonicalize_name

    pins: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, version = line.partition("==")
        assert sep and version and " " not in line, f"{path.name}: not an exact pin: {line!r}"
        pins[canonicalize_name(name)] = version
    return pins


def test_the_image_pins_cover_pyprojects_dependencies_within_their_ranges() -> None:
    """Every runtime and build requirement of pyproject.toml is pinned, inside its range.

    Out of date? `python deploy/lock_image_requirements.py` rewrites both files.
    """
    import tomllib

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    for reqs, path in (
        (project["project"]["dependencies"], ROOT / "requirements" / "image.txt"),
        (project["build-system"]["requires"], ROOT / "requirements" / "image-build.txt"),
    ):
        pins = _pins(path)
        assert canonicalize_name("agentd") not in pins
        for raw in reqs:
            req = Requirement(raw)
            name = canonicalize_name(req.name)
            assert name in pins, f"{req.name} is not pinned in {path.name}"
            assert req.specifier.contains(pins[name], prereleases=True), (
                f"{path.name} pins {req.name}=={pins[name]}, outside pyproject's {req.specifier}"
            )
    # uvicorn[standard]'s extras are in too (the build's `pip check` verifies the rest).
    assert {"uvloop", "httptools", "websockets"} <= set(_pins(ROOT / "requirements" / "image.txt"))


def test_the_dockerfile_installs_the_pins_only_and_checks_them() -> None:
    runs = " ".join(stage("build").all("RUN"))
    assert "-r requirements/image-build.txt" in runs and "--no-build-isolation" in runs
    assert "--no-deps -r requirements/image.txt" in runs
    assert "pip check" in runs
    # Every pip install in the image is --no-deps: nothing resolves beyond the pins.
    for s in stages():
        for run in s.all("RUN"):
            for part in run.split("&&"):
                if "pip install" in part:
                    assert "--no-deps" in part, part
    text = (ROOT / "Dockerfile").read_text()
    assert not text.startswith("# syntax="), "a syntax line makes BuildKit pull a frontend image"
    for arg in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_TRUSTED_HOST", "EXTRA_CA_CERTS"):
        assert arg in stage("build").all("ARG"), arg


def test_without_embedded_postgres_up_says_to_set_a_database_url(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The EMBEDDED_POSTGRES=false image: no embedded-postgres package, a clear config error."""
    import asyncio

    from agentd.db.startup import ready_url
    from agentd.errors import ConfigError

    monkeypatch.setitem(sys.modules, "embedded_postgres", None)  # import raises ImportError

    async def start() -> None:
        async with ready_url(Settings(data_dir=tmp_path)):
            raise AssertionError("started without a server")

    with pytest.raises(ConfigError, match="AGENTD_DATABASE_URL"):
        asyncio.run(start())
