"""deploy/k8s and docker-compose.yml, checked against the code they deploy.

No cluster and no Docker engine needed: every YAML is parsed; commands are parsed by the
CLI's own argparse; ports, probe paths, env names and grace periods are checked against
Settings and the API's routes.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentd.api import health, metrics
from agentd.cli import _parser
from agentd.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
COMPOSE = ROOT / "docker-compose.yml"
FIELDS = {f"AGENTD_{name.upper()}" for name in Settings.model_fields}
DEFAULT_PORT = Settings.model_fields["port"].default
DEFAULT_GRACE = Settings.model_fields["shutdown_grace"].default
MARGIN = 10  # seconds beyond the shutdown grace: cancel, hand back, close


def routes() -> set[str]:
    return {r.path for r in [*health.router.routes, *metrics.router.routes]}  # type: ignore[attr-defined]


def k8s_docs() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted(K8S.glob("*.yaml")):
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return docs


def of_kind(kind: str) -> list[dict[str, Any]]:
    return [d for d in k8s_docs() if d["kind"] == kind]


def named(kind: str, name: str) -> dict[str, Any]:
    [doc] = [d for d in of_kind(kind) if d["metadata"]["name"] == name]
    return doc


def configmap_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for d in of_kind("ConfigMap"):
        env.update(d.get("data") or {})
    return env


def pod_specs() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for d in k8s_docs():
        if d["kind"] in ("Deployment", "Job"):
            out.append((d["metadata"]["name"], d["spec"]["template"]["spec"]))
    return out


def check_command(argv: list[str]) -> str:
    """Parse with the real CLI parser; returns the subcommand."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # argparse exits on an unknown command
        raise AssertionError(f"not an agentd command line: {argv}") from exc
    assert args.command, argv
    return str(args.command)


def grace_of(env: dict[str, str]) -> float:
    return float(env.get("AGENTD_SHUTDOWN_GRACE", DEFAULT_GRACE))


# --- kubernetes ---------------------------------------------------------------------------


def test_every_k8s_file_parses_and_is_in_the_kustomization() -> None:
    kust = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    listed = set(kust["resources"])
    on_disk = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == on_disk
    for doc in k8s_docs():
        assert doc.get("apiVersion") and doc.get("kind"), doc
    kinds = {d["kind"] for d in k8s_docs()}
    assert {
        "Deployment",
        "Service",
        "Job",
        "PodDisruptionBudget",
        "HorizontalPodAutoscaler",
        "ConfigMap",
        "Secret",
    } <= kinds


def test_k8s_commands_are_real_subcommands() -> None:
    seen = {}
    for name, spec in pod_specs():
        for c in spec["containers"]:
            assert c["image"] == "agentd", "kustomization rewrites the image named agentd"
            assert "command" not in c, "keep the image's ENTRYPOINT (agentd)"
            seen[name] = check_command(c["args"])
    assert seen == {"agentd-api": "api", "agentd-worker": "worker", "agentd-migrate": "migrate"}


def test_k8s_env_names_are_settings_fields() -> None:
    names = set(configmap_env())
    for d in of_kind("Secret"):
        names |= set(d.get("stringData") or {}) | set(d.get("data") or {})
    for _, spec in pod_specs():
        for c in spec["containers"]:
            names |= {e["name"] for e in c.get("env", [])}
    agentd_names = {n for n in names if n.startswith("AGENTD_")}
    assert agentd_names, "settings come from env"
    assert agentd_names <= FIELDS, agentd_names - FIELDS
    for _, spec in pod_specs():
        for c in spec["containers"]:
            refs = {
                r.get("configMapRef", r.get("secretRef", {})).get("name")
                for r in c.get("envFrom", [])
            }
            assert refs == {"agentd-env", "agentd-secrets"}


def test_k8s_ports_and_probes_match_settings_and_routes() -> None:
    port = int(configmap_env().get("AGENTD_PORT", DEFAULT_PORT))
    api = named("Deployment", "agentd-api")["spec"]["template"]
    [c] = api["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"http": port}
    for kind, want in (
        ("readinessProbe", "/readyz"),
        ("livenessProbe", "/healthz"),
        ("startupProbe", "/healthz"),
    ):
        probe = c[kind]["httpGet"]
        assert probe["path"] == want
        assert probe["path"] in routes()
        assert probe["port"] in ("http", port)
    ann = api["metadata"]["annotations"]
    assert int(ann["prometheus.io/port"]) == port
    assert ann["prometheus.io/path"] in routes()
    svc = named("Service", "agentd-api")
    assert svc["spec"]["selector"].items() <= api["metadata"]["labels"].items()
    assert {p["targetPort"] for p in svc["spec"]["ports"]} <= {"http", port}


def test_worker_probes_use_its_metrics_port() -> None:
    # `agentd worker` serves HTTP only on AGENTD_METRICS_PORT (/healthz, /readyz, /metrics).
    worker = named("Deployment", "agentd-worker")["spec"]["template"]["spec"]
    for c in worker["containers"]:
        env = {e["name"]: e["value"] for e in c.get("env", [])}
        port = int(env["AGENTD_METRICS_PORT"])
        assert {p["name"]: p["containerPort"] for p in c["ports"]} == {"probes": port}
        assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "probes"}
        assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "probes"}
        assert {"/readyz", "/healthz"} <= routes()


def test_termination_grace_covers_shutdown_grace() -> None:
    grace = grace_of(configmap_env())
    for name, spec in pod_specs():
        if name == "agentd-migrate":
            continue
        assert spec["terminationGracePeriodSeconds"] >= grace + MARGIN, name


def test_pods_run_as_non_root_with_resources() -> None:
    for name, spec in pod_specs():
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["runAsUser"] != 0
        for c in spec["containers"]:
            res = c["resources"]
            assert res["requests"]["cpu"] and res["requests"]["memory"], name
            assert res["limits"]["memory"], name
            assert c["securityContext"]["allowPrivilegeEscalation"] is False
            mounts = {m["mountPath"] for m in c["volumeMounts"]}
            assert "/tmp" in mounts, "read-only root filesystem needs a writable /tmp"


def test_pdbs_select_the_deployments() -> None:
    pdbs = of_kind("PodDisruptionBudget")
    assert len(pdbs) == 2
    for deployment in of_kind("Deployment"):
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
        matching = [
            p for p in pdbs if p["spec"]["selector"]["matchLabels"].items() <= labels.items()
        ]
        assert len(matching) == 1, deployment["metadata"]["name"]
        assert matching[0]["spec"]["minAvailable"] < deployment["spec"]["replicas"]


def test_hpa_scales_workers_on_queue_depth() -> None:
    [hpa] = of_kind("HorizontalPodAutoscaler")
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "agentd-worker",
    }
    queues = set()
    for m in hpa["spec"]["metrics"]:
        assert m["type"] == "External"
        assert m["external"]["metric"]["name"] == "agentd_queue_depth"
        queues.add(m["external"]["metric"]["selector"]["matchLabels"]["queue"])
    assert queues <= set(Settings().queues) and "llm" in queues
    # The metric the HPA names is the one the API exports, with the same label.
    source = (ROOT / "agentd" / "api" / "metrics.py").read_text()
    assert re.search(r'"agentd_queue_depth".*\[\s*"queue"\s*\]', source, re.S)


def test_migration_job_never_restarts_forever() -> None:
    job = named("Job", "agentd-migrate")
    assert job["spec"]["backoffLimit"] <= 10
    assert job["spec"]["template"]["spec"]["restartPolicy"] in ("OnFailure", "Never")


# --- docker compose -------------------------------------------------------------------------


def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def test_compose_services_and_commands() -> None:
    services = compose()["services"]
    assert {"postgres", "migrate", "api", "worker"} <= set(services)
    assert check_command(services["migrate"]["command"]) == "migrate"
    assert check_command(services["api"]["command"]) == "api"
    assert check_command(services["worker"]["command"]) == "worker"
    assert services["worker"]["deploy"]["replicas"] == 2
    assert services["migrate"]["restart"] == "no"
    for name in ("api", "worker"):
        dep = services[name]["depends_on"]
        assert dep["migrate"]["condition"] == "service_completed_successfully"
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert services["api"]["build"]["target"] == "with-examples"


def _env(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(e.split("=", 1) for e in env)
    return {k: str(v) for k, v in env.items()}


def _seconds(value: str) -> float:
    m = re.fullmatch(r"(?:(\d+)m)?(?:(\d+)s)?", value)
    assert m and value, value
    return int(m.group(1) or 0) * 60 + int(m.group(2) or 0)


def test_compose_env_ports_probes_and_grace() -> None:
    services = compose()["services"]
    for name in ("migrate", "api", "worker"):
        env = _env(services[name])
        agentd_names = {k for k in env if k.startswith("AGENTD_")}
        assert agentd_names <= FIELDS, agentd_names - FIELDS
        assert "AGENTD_DATABASE_URL" in env and "@postgres:5432/" in env["AGENTD_DATABASE_URL"]
        if name != "migrate":
            stop = _seconds(services[name]["stop_grace_period"])
            assert stop >= grace_of(env) + MARGIN, name
    api = services["api"]
    port = int(_env(api).get("AGENTD_PORT", DEFAULT_PORT))
    assert any(str(p).endswith(f":{port}") for p in api["ports"])
    probe = " ".join(api["healthcheck"]["test"])
    url = re.search(r"http://127\.0\.0\.1:(\d+)(/\w+)", probe)
    assert url and int(url.group(1)) == port and url.group(2) in routes()
    assert "healthcheck" in services["worker"]  # overrides the image's HTTP check
    assert "/healthz" not in " ".join(services["worker"]["healthcheck"]["test"])
    assert services["migrate"]["healthcheck"] == {"disable": True}


def worker_healthcheck_script() -> str:
    test = compose()["services"]["worker"]["healthcheck"]["test"]
    assert test[:3] == ["CMD", "python", "-c"]
    return str(test[3]).replace("$$", "$")  # compose's escape for a literal $


@pytest.mark.acceptance
async def test_compose_worker_healthcheck_sees_a_live_worker(
    tmp_path: Path, database_url: str
) -> None:
    """Run the compose worker healthcheck against a real `agentd worker` on this host."""
    import asyncio
    import os
    import signal
    import sys

    from agentd.testing.engine import eventually

    agentd = str(Path(sys.executable).with_name("agentd"))
    script = worker_healthcheck_script()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_")}
    env.update(
        AGENTD_DATABASE_URL=database_url,
        AGENTD_LOG_LEVEL="warning",
        AGENTD_DATA_DIR=str(tmp_path / "data"),
    )

    async def check() -> int:
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", script, env=env)
        return await asyncio.wait_for(proc.wait(), timeout=30)

    assert await check() == 1  # no worker yet
    worker = await asyncio.create_subprocess_exec(agentd, "worker", env=env)
    try:
        await eventually(lambda: _is_zero(check()), within=30, interval=0.2)
    finally:
        if worker.returncode is None:
            os.kill(worker.pid, signal.SIGTERM)
        assert await asyncio.wait_for(worker.wait(), timeout=30) == 0
    assert await check() == 1  # deregistered on graceful stop


async def _is_zero(rc: Any) -> bool:
    return await rc == 0
