"""Every container image the repository names (Compose `image:`, Dockerfile `FROM`) is pinned by
version and digest, with the digest's source named in a comment beside it, or is one of the
honest exceptions below, each with its reason. A tag alone can be moved under a deployment; a
digest cannot."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# name:version@sha256:<64 hex>, the version with at least one digit (not `latest`, `slim`).
PINNED = re.compile(r"[\w./-]+:[\w.-]*\d[\w.-]*@sha256:[0-9a-f]{64}")
# Images built here, never pulled (each service that names one also has `build:`).
EXCEPTIONS = {
    "gpuhealth:local": "built from service/Dockerfile by Compose (`build:`), never pulled",
    "gpuhealth-agent:local": "the Dockerfile's agent target, built by Compose, never pulled",
}


def _tracked() -> list[Path]:
    """The repository's Compose files and Dockerfiles (tracked or new, not ignored)."""
    try:
        out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                             cwd=REPO, capture_output=True, text=True, check=True, timeout=60)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the files to check cannot be listed")
    names = [Path(line) for line in out.stdout.splitlines()]
    return [REPO / p for p in names
            if p.suffix in (".yml", ".yaml")
            or (p.name.startswith("Dockerfile") and not p.name.endswith(".dockerignore"))]


def _references() -> list[tuple[Path, int, str, list[str]]]:
    """(file, line number, image, the comment lines just above it) of every image named."""
    found = []
    for path in _tracked():
        lines = path.read_text(encoding="utf-8").splitlines()
        stages: set[str] = set()
        for i, line in enumerate(lines):
            m = (re.match(r"\s*image:\s*[\"']?([^\s\"'#]+)", line) if path.suffix in
                 (".yml", ".yaml") else re.match(r"FROM\s+(?:--\S+\s+)*(\S+)(?:\s+AS\s+(\w+))?",
                                                 line, re.I))
            if m is None:
                continue
            image = m.group(1)
            if path.suffix not in (".yml", ".yaml"):
                if m.group(2):
                    stages.add(m.group(2))
                if image in stages or image == "scratch":
                    continue  # an earlier stage of the same Dockerfile
            above: list[str] = []
            j = i - 1
            while j >= 0 and lines[j].strip().startswith("#"):
                above.insert(0, lines[j].strip())
                j -= 1
            found.append((path, i + 1, image, above))
    return found


def test_the_repository_names_its_images() -> None:
    images = {image for *_, image, _ in _references()}
    # The check sees what it must: the stack's images and the Dockerfile's base.
    assert {"gpuhealth:local", "gpuhealth-agent:local"} <= images
    assert any(i.startswith("python:") for i in images)
    assert any(i.startswith("influxdb:") for i in images)
    assert any(i.startswith("postgres:") for i in images)


def test_every_image_has_a_version_and_a_digest_with_its_source() -> None:
    bad = []
    for path, line, image, above in _references():
        where = f"{path.relative_to(REPO)}:{line}"
        if image in EXCEPTIONS:
            continue
        if not PINNED.fullmatch(image):
            bad.append(f"{where}: {image} (want name:version@sha256:digest)")
        elif not any("digest" in c.lower() for c in above):
            bad.append(f"{where}: {image} has no comment naming the digest's source")
    assert not bad, "\n".join(bad)


def test_the_exceptions_are_built_here() -> None:
    import yaml

    services = yaml.safe_load((REPO / "docker-compose.yml").read_text(encoding="utf-8"))[
        "services"]
    for name, service in services.items():
        if service.get("image") in EXCEPTIONS:
            assert "build" in service, name  # Compose builds it; `pull` never fetches it


def test_the_pattern_refuses_floating_references() -> None:
    for image in ("influxdb:1.8", "postgres:15", "python:3.11-slim", "grafana/grafana:latest",
                  "postgres@sha256:" + "0" * 64, "postgres:latest@sha256:" + "0" * 64,
                  "postgres:15.19@sha256:abc"):
        assert not PINNED.fullmatch(image), image
    assert PINNED.fullmatch("postgres:15.19@sha256:" + "0" * 64)
