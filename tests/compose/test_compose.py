"""docker-compose.yml: Compose accepts it, and the service, InfluxDB, Grafana and the demo agent
agree with each other and with the repository (ports, database, token, mounted paths, the
data source uid the dashboards use, health checks, the Dockerfile). No Docker engine needed."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from service.grafana.panels import DATASOURCE_UID
from service.grafana.registry import build_all

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "docker-compose.yml"
PROVISIONING = REPO / "dashboards" / "provisioning"
_DEFAULT = re.compile(r"\$\{(\w+)(?::?-([^}]*))?\}")


def _defaults(value: Any) -> Any:
    """Compose's `${VAR:-default}` with nothing set in the environment: the defaults."""
    if isinstance(value, str):
        return _DEFAULT.sub(lambda m: m.group(2) or "", value).replace("$$", "$")
    if isinstance(value, list):
        return [_defaults(v) for v in value]
    if isinstance(value, dict):
        return {k: _defaults(v) for k, v in value.items()}
    return value


SPEC: dict[str, Any] = _defaults(yaml.safe_load(COMPOSE.read_text(encoding="utf-8")))
SERVICES: dict[str, Any] = SPEC["services"]
SVC, INFLUX, GRAFANA, AGENT = (SERVICES[n] for n in ("gpuhealth", "influxdb", "grafana",
                                                     "demo-agent"))
DATASOURCE = yaml.safe_load(
    (PROVISIONING / "datasources" / "gpuhealth.yaml").read_text(encoding="utf-8"))["datasources"][0]
PROVIDER = yaml.safe_load(
    (PROVISIONING / "dashboards" / "gpuhealth.yaml").read_text(encoding="utf-8"))["providers"][0]


def _compose_cmd() -> list[str] | None:
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "compose", "version"], capture_output=True,
                                 check=False).returncode == 0:
        return [docker, "compose"]
    return None


def _container_port(service: dict[str, Any]) -> int:
    (mapping,) = service["ports"]
    return int(str(mapping).split(":")[-1].split("/")[0])


def _health_url(service: dict[str, Any]) -> str:
    test = " ".join(service["healthcheck"]["test"])
    found = re.search(r"https?://[^\s'\"]+", test)
    assert found, test
    return found.group()


def _agent_args() -> list[str]:
    return " ".join(AGENT["command"]).split()


def _arg(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


@pytest.mark.skipif(_compose_cmd() is None,
                    reason="needs docker-compose (Debian package docker-compose) or the docker "
                           "compose plugin; no Docker engine is needed")
@pytest.mark.parametrize("profiles", [[], ["ha"]], ids=["default", "ha"])
def test_compose_accepts_the_file(profiles: list[str]) -> None:
    cmd = _compose_cmd()
    assert cmd is not None
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUHEALTH_", "GRAFANA_",
                                                                     "INFLUXDB_", "COMPOSE_"))}
    chosen = [a for p in profiles for a in ("--profile", p)]
    res = subprocess.run([*cmd, "-f", str(COMPOSE), *chosen, "config", "-q"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 0, res.stderr
    assert "WARN" not in res.stderr.upper(), res.stderr


def test_images_are_pinned() -> None:
    assert INFLUX["image"].startswith("influxdb:1.8.")  # the 1.x API the stack speaks
    assert re.match(r"grafana/grafana:\d+\.\d+\.\d+@", GRAFANA["image"])
    assert int(GRAFANA["image"].split(":")[1].split(".")[0]) >= 10


def _secret_file(service: dict[str, Any], path: str) -> Path:
    """The file Compose mounts at `path` (/run/secrets/<name>) in `service`: its default."""
    name = path.removeprefix("/run/secrets/")
    assert path.startswith("/run/secrets/") and name in service.get("secrets", []), (path, name)
    return REPO / SPEC["secrets"][name]["file"]


def _settings_env(service: dict[str, Any]) -> dict[str, str]:
    """A service's environment, its /run/secrets paths pointing at the files Compose mounts."""
    env = {k: str(v) for k, v in service["environment"].items()}
    for k, v in env.items():
        if k.endswith("_FILE") and v.startswith("/run/secrets/"):
            env[k] = str(_secret_file(service, v))
    return env


def _secret(service: dict[str, Any], var: str) -> str:
    return _secret_file(service, service["environment"][var]).read_text(encoding="utf-8").strip()


def test_secrets_are_files_declared_and_mounted() -> None:
    declared = SPEC["secrets"]
    for name, secret in declared.items():
        assert set(secret) == {"file"}, name  # Compose without Swarm: file secrets
        assert (REPO / secret["file"]).is_file(), name
    for name, service in SERVICES.items():
        assert set(service.get("secrets", [])) <= set(declared), name
        for k, v in service.get("environment", {}).items():
            assert "/run/secrets/" not in str(v) or k.endswith("_FILE"), (name, k)
            if k.endswith("_FILE") and str(v).startswith("/run/secrets/"):
                _secret_file(service, str(v))  # mounted where the variable says
        # No credential in the environment: the DSN and the tokens come from files.
        env = service.get("environment", {})
        for secret_var in ("GPUHEALTH_INGEST__TOKENS", "GPUHEALTH_STORAGE__POSTGRES__DSN",
                           "POSTGRES_PASSWORD"):
            assert secret_var not in env, (name, secret_var)


def test_one_database_everywhere() -> None:
    env = SVC["environment"]
    db = INFLUX["environment"]["INFLUXDB_DB"]
    assert env["GPUHEALTH_STORAGE__INFLUXDB__DATABASE"] == db
    assert DATASOURCE["jsonData"]["dbName"] == db


def test_service_and_grafana_reach_influxdb_where_it_listens() -> None:
    port = _container_port(INFLUX)
    for url in (SVC["environment"]["GPUHEALTH_STORAGE__INFLUXDB__URL"], DATASOURCE["url"]):
        parts = urlsplit(url)
        assert parts.hostname == "influxdb" and parts.port == port, url
    assert DATASOURCE["type"] == "influxdb" and DATASOURCE["access"] == "proxy"


def test_the_agent_pushes_to_the_service_with_a_token_it_accepts() -> None:
    tokens = _secret(SVC, "GPUHEALTH_INGEST__TOKENS_FILE").splitlines()
    # The demo agent sends the first line of the same secret, mounted in its container too.
    assert AGENT["secrets"] == ["ingest_tokens"] and "ingest_tokens" in SVC["secrets"]
    assert 'GPUHEALTH_AGENT_TOKEN="$(head -n 1 /run/secrets/ingest_tokens)"' in \
        " ".join(AGENT["command"])
    assert tokens and tokens[0] == "gpuhealth-demo-token"
    url = urlsplit(_arg(_agent_args(), "--url"))
    assert url.hostname == "gpuhealth" and url.path == "/write"
    assert url.port == int(SVC["environment"]["GPUHEALTH_SERVICE__PORT"]) == _container_port(SVC)
    assert SVC["environment"]["GPUHEALTH_SERVICE__HOST"] == "0.0.0.0"


def test_the_agent_command_parses() -> None:
    from service.commands.cli import build_parser

    args = _agent_args()
    start = args.index("agent")
    end = args.index("&&") if "&&" in args[start:] else len(args)
    ns = build_parser().parse_args(args[start:end])
    assert ns.replay == Path("/tmp/trace") and ns.rebase_now and ns.speed == 1
    sim = args[args.index("simulate"):args.index(">")]
    assert build_parser().parse_args(sim).scenario == "demo"


def test_health_checks_match_the_ports() -> None:
    assert urlsplit(_health_url(INFLUX)).port == _container_port(INFLUX)
    assert urlsplit(_health_url(INFLUX)).path == "/ping"
    assert urlsplit(_health_url(GRAFANA)).port == _container_port(GRAFANA) == 3000
    assert urlsplit(_health_url(GRAFANA)).path == "/api/health"
    for service in (SVC, *(SERVICES[n] for n in ("gpuhealth-a", "gpuhealth-b"))):
        # Readiness gates what depends on the service (docker-compose.yml says why).
        assert urlsplit(_health_url(service)).port == _container_port(SVC)
        assert urlsplit(_health_url(service)).path == "/readyz"


def test_the_readiness_check_fails_on_a_503(tmp_path: Path) -> None:
    """The service's check is a Python one-liner: urlopen raises on /readyz's 503 (not ready),
    so the check fails then and passes on a 200."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    status = [503]

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(status[0] if self.path == "/readyz" else 404)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        cmd = SVC["healthcheck"]["test"]
        assert cmd[:3] == ["CMD", "python", "-c"]
        code = cmd[3].replace("localhost:8080", f"127.0.0.1:{server.server_address[1]}")
        for want, expect_ok in ((503, False), (200, True)):
            status[0] = want
            res = subprocess.run([sys.executable, "-c", code], capture_output=True,
                                 timeout=30, check=False)
            assert (res.returncode == 0) is expect_ok, (want, res.stderr)
    finally:
        server.shutdown()
        server.server_close()


def test_startup_order_waits_for_health() -> None:
    for name, service in SERVICES.items():
        for dep, cond in service.get("depends_on", {}).items():
            assert cond == {"condition": "service_healthy"}, (name, dep)
            assert "healthcheck" in SERVICES[dep], dep


def test_volumes_are_named_and_declared() -> None:
    declared = set(SPEC["volumes"])
    for name, service in SERVICES.items():
        for v in service.get("volumes", []):
            src = v.split(":")[0]
            if not src.startswith("."):
                assert src in declared, (name, src)


def test_grafana_mounts_the_repository_read_only_where_provisioning_looks() -> None:
    mounts = {}
    for v in GRAFANA["volumes"]:
        src, dst, *mode = v.split(":")
        if src.startswith("."):
            assert mode == ["ro"], v
            assert (REPO / src).is_dir(), v
            mounts[dst] = REPO / src
    assert mounts["/etc/grafana/provisioning/datasources"] == PROVISIONING / "datasources"
    assert mounts["/etc/grafana/provisioning/dashboards"] == PROVISIONING / "dashboards"
    dash_dir = mounts[PROVIDER["options"]["path"]]
    assert {p.name for p in dash_dir.glob("*.json")} == set(build_all())
    home = GRAFANA["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert (dash_dir / Path(home).relative_to(PROVIDER["options"]["path"])).is_file()


def test_provisioning_is_read_only_and_uses_the_dashboards_uid() -> None:
    assert PROVIDER["allowUiUpdates"] is False and PROVIDER["type"] == "file"
    assert DATASOURCE["editable"] is False
    assert DATASOURCE["uid"] == DATASOURCE_UID
    for name in build_all():
        text = (REPO / "dashboards" / name).read_text(encoding="utf-8")
        uids = set(re.findall(r'"type": "influxdb",\s*"uid": "([^"]+)"', text))
        assert uids == {DATASOURCE["uid"]}, name
        assert json.loads(text)["editable"] is False


def test_the_dockerfile_builds_what_pyproject_installs() -> None:
    build = SVC["build"]
    assert AGENT["build"] == build and AGENT["image"] == SVC["image"]
    dockerfile = REPO / build["context"] / build["dockerfile"]
    text = dockerfile.read_text(encoding="utf-8")
    assert text.startswith("#") and re.search(r"^FROM python:3\.11\.\d+-slim@", text, re.M)
    assert "-c constraints.txt" in text and "download.pytorch.org/whl/cpu" in text
    copied = set()
    for line in text.splitlines():
        if line.startswith("COPY "):
            *sources, _ = line.split()[1:]
            for s in sources:
                assert (REPO / s).exists(), s
                copied.add(s.rstrip("/"))
    with (REPO / "pyproject.toml").open("rb") as f:
        packages = tomllib.load(f)["tool"]["setuptools"]["packages"]
    assert {p.split(".")[0] for p in packages} <= copied
    ignore = (dockerfile.parent / f"{dockerfile.name}.dockerignore").read_text(encoding="utf-8")
    for s in copied:
        assert f"!{s}" in ignore.replace("/\n", "\n"), s


def test_the_service_environment_is_valid_settings(tmp_path: Path) -> None:
    """The service's variables load through the real settings tree (unknown keys are refused),
    in a fresh interpreter so nothing here leaks into it."""
    from service.settings import StorageSettings

    if "influxdb" not in StorageSettings.model_fields:
        pytest.skip("storage.influxdb settings are not in service/settings.py yet")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUHEALTH_")}
    env.update(_settings_env(SVC))
    env["GPUHEALTH_STORAGE__DATA_DIR"] = str(tmp_path)
    code = ("import json; from service.settings import load; s = load(); "
            "print(json.dumps({'db': s.storage.influxdb.database, 'port': s.service.port, "
            "'tokens': [t.get_secret_value() for t in s.ingest.tokens]}))")
    res = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=60, check=False)
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    assert got["db"] == INFLUX["environment"]["INFLUXDB_DB"]
    assert got["port"] == _container_port(SVC)
    assert got["tokens"] == ["gpuhealth-demo-token"]


# ---- the node agent alone (issue 17) ------------------------------------------------------------

NODE_AGENT = SERVICES["node-agent"]
DOCKERFILE = REPO / "service" / "Dockerfile"


def _stages() -> dict[str, str]:
    """The Dockerfile's stages by name, continuation lines joined as Docker joins them."""
    text = DOCKERFILE.read_text(encoding="utf-8").replace("\\\n", "")
    parts = re.split(r"^FROM \S+ AS (\w+)\n", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_the_node_agent_is_the_dockerfiles_agent_target_and_not_started_by_default() -> None:
    assert NODE_AGENT["profiles"] == ["node-agent"]  # a plain `up` leaves it out
    build = NODE_AGENT["build"]
    assert build["context"] == SVC["build"]["context"]
    assert build["dockerfile"] == SVC["build"]["dockerfile"]
    assert build["target"] == "agent" and SVC["build"]["target"] == "service"
    assert NODE_AGENT["image"] != SVC["image"]
    stages = _stages()
    assert {"agent", "service"} <= set(stages)
    assert list(stages)[-1] == "service"  # `docker build` without --target builds the service
    assert 'ENTRYPOINT ["gpuhealth", "agent"]' in stages["agent"]


def test_the_node_agent_command_parses_and_spools_on_its_volume() -> None:
    from service.commands.cli import build_parser

    ns = build_parser().parse_args(["agent", *NODE_AGENT["command"]])
    (url,) = ns.url  # --url is repeatable (an HA pair); the stack's agent names one service
    assert urlsplit(url).path == "/write" and urlsplit(url).port == _container_port(SVC)
    (volume,) = NODE_AGENT["volumes"]
    name, mount = volume.split(":")
    assert name in SPEC["volumes"] and ns.spool.is_relative_to(mount)
    # The node agent (on other machines) takes its token from GPUHEALTH_TOKEN: by default
    # the one the service's demo secret holds.
    assert NODE_AGENT["environment"]["GPUHEALTH_AGENT_TOKEN"] in \
        _secret(SVC, "GPUHEALTH_INGEST__TOKENS_FILE").splitlines()


def test_the_agent_image_installs_the_agent_set_pinned(tmp_path: Path) -> None:
    """The agent stage's dependency list, computed by its own RUN line from pyproject, is the
    core set plus the `agent` extra, installed at requirements.txt's pins; no torch index."""
    agent = _stages()["agent"]
    run = next(line for line in agent.splitlines() if line.startswith("RUN python"))
    listing, install = run.removeprefix("RUN ").split(" && ", 1)
    assert install.strip() == "pip install -c requirements.txt -r agent-deps.txt"
    assert "download.pytorch.org" not in agent and "-r requirements.txt" not in agent
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    subprocess.run(["sh", "-c", listing.replace("python ", f"{sys.executable} ", 1)],
                   cwd=tmp_path, check=True, timeout=60)
    deps = (tmp_path / "agent-deps.txt").read_text(encoding="utf-8").split()
    with (REPO / "pyproject.toml").open("rb") as f:
        project = tomllib.load(f)["project"]
    assert deps == project["dependencies"] + project["optional-dependencies"]["agent"]
    assert not any(d.startswith(("torch", "scipy", "fastapi", "scikit")) for d in deps)


# ---- high availability: profile `ha` (issue 20) -------------------------------------------------

HA = ("postgres", "gpuhealth-a", "gpuhealth-b")
REPLICAS = tuple(SERVICES[n] for n in HA[1:])


def test_the_ha_profile_leaves_the_default_stack_unchanged() -> None:
    default = {n for n, svc in SERVICES.items() if "profiles" not in svc}
    assert default == {"influxdb", "gpuhealth", "demo-agent", "grafana"}
    for name in HA:
        assert SERVICES[name]["profiles"] == ["ha"], name
    assert "postgres" not in str(SVC["environment"])  # the plain service stays on SQLite


def test_postgres_is_checked_with_pg_isready_on_a_named_volume() -> None:
    pg = SERVICES["postgres"]
    assert re.match(r"postgres:\d+\.\d+@sha256:", pg["image"])
    test = pg["healthcheck"]["test"]
    assert test[:2] == ["CMD", "pg_isready"]
    assert _arg(test, "-U") == pg["environment"]["POSTGRES_USER"]
    assert _arg(test, "-d") == pg["environment"]["POSTGRES_DB"]
    (volume,) = pg["volumes"]
    name, mount = volume.split(":")
    assert name in SPEC["volumes"] and mount == "/var/lib/postgresql/data"


def test_the_replicas_share_postgres_and_influxdb_as_one_shard() -> None:
    pg = SERVICES["postgres"]["environment"]
    envs = [r["environment"] for r in REPLICAS]
    for env in envs:
        dsn = urlsplit(_secret(REPLICAS[0], "GPUHEALTH_STORAGE__POSTGRES__DSN_FILE"))
        assert dsn.scheme == "postgresql" and dsn.hostname == "postgres" and dsn.port == 5432
        password = _secret(SERVICES["postgres"], "POSTGRES_PASSWORD_FILE")
        assert (dsn.username, dsn.password) == (pg["POSTGRES_USER"], password)
        assert dsn.path == "/" + pg["POSTGRES_DB"]
        assert env["GPUHEALTH_STORAGE__INFLUXDB__URL"] == \
            SVC["environment"]["GPUHEALTH_STORAGE__INFLUXDB__URL"]
        assert "GPUHEALTH_CLUSTER__REPLICA_ID" not in env  # the host name: never shared
    assert envs[0] == envs[1]  # one shard: the same settings, the same shard id
    for r in REPLICAS:
        assert r["depends_on"]["postgres"] == {"condition": "service_healthy"}
    volumes = [r["volumes"][0].split(":")[0] for r in REPLICAS]
    assert len(set(volumes)) == 2 and set(volumes) <= set(SPEC["volumes"])
    ports = [r["ports"][0].split(":")[-2] for r in REPLICAS]
    assert len(set(ports)) == 2 and _container_port(SVC) not in map(int, ports)


def test_the_replicas_environment_is_valid_settings(tmp_path: Path) -> None:
    from service.settings import Settings

    if "cluster" not in Settings.model_fields:
        pytest.skip("cluster settings are not in service/settings.py yet")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUHEALTH_")}
    env.update(_settings_env(REPLICAS[0]))
    env["GPUHEALTH_STORAGE__DATA_DIR"] = str(tmp_path)
    code = ("import json; from service.settings import load; s = load(); "
            "print(json.dumps({'dsn': s.storage.postgres.dsn.get_secret_value(), "
            "'shard': s.cluster.shard_id, 'ttl': s.cluster.lease_ttl_s, "
            "'renew': s.cluster.lease_renew_s}))")
    res = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=60, check=False)
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    assert got["dsn"] == _secret(REPLICAS[0], "GPUHEALTH_STORAGE__POSTGRES__DSN_FILE")
    assert got["shard"] == "ha" and got["renew"] < got["ttl"] <= 30
