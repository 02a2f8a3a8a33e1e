"""The shipped deployments give the service the descriptors its default connection cap needs
(service.max_connections plus its own files): systemd's default of 1,024 did not, and 1,100
slow connections then starved /healthz. And serve raises its soft limit to the hard one."""

from __future__ import annotations

import configparser
import resource
import subprocess
import sys
from pathlib import Path

import yaml

from service.runtime.http_guard import FD_RESERVE, connection_cap
from service.settings import ServiceSettings

REPO = Path(__file__).resolve().parents[2]
NEEDED = ServiceSettings().max_connections + FD_RESERVE


def test_the_systemd_unit_raises_the_file_limit() -> None:
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read(REPO / "service" / "gpuhealth.service")
    assert int(unit["Service"]["LimitNOFILE"]) >= NEEDED
    assert unit["Service"]["ExecStart"].split()[-1] == "serve"


def test_compose_raises_the_file_limit_of_every_service_replica() -> None:
    spec = yaml.safe_load((REPO / "docker-compose.yml").read_text(encoding="utf-8"))
    for name in ("gpuhealth", "gpuhealth-a", "gpuhealth-b"):
        nofile = spec["services"][name]["ulimits"]["nofile"]
        assert min(nofile["soft"], nofile["hard"]) >= NEEDED, name


def test_the_cap_leaves_the_service_its_own_descriptors() -> None:
    assert connection_cap(4096, 1024) == 1024 - FD_RESERVE
    assert connection_cap(4096, 65536) == 4096


def test_serve_raises_its_soft_limit_to_the_hard_one() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    soft = min(512, hard)
    code = ("import resource; from service.runtime.http_guard import raise_nofile; "
            f"resource.setrlimit(resource.RLIMIT_NOFILE, ({soft}, {hard})); "
            "print(raise_nofile(), resource.getrlimit(resource.RLIMIT_NOFILE)[0])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=REPO).stdout.split()
    expect = hard if hard != resource.RLIM_INFINITY else 1 << 20
    assert out == [str(expect), str(expect)]
