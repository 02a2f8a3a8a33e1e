"""Safe by default: `serve` on an address beyond loopback with no write token refuses to start,
in one line and exit 2, unless told it is meant; loopback, a token or --insecure start."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr

from service.commands.cli import main
from service.commands.exposure import exposure_problem, loopback


@pytest.mark.parametrize("host", ["127.0.0.1", "127.8.0.1", "::1", "[::1]", "localhost"])
def test_loopback_addresses(host: str) -> None:
    assert loopback(host) and exposure_problem(host, [], False) is None


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "gpuhealth.example"])
def test_beyond_loopback_needs_a_token_or_insecure(host: str) -> None:
    assert "no write token" in (exposure_problem(host, [], False) or "")
    assert exposure_problem(host, [SecretStr("t0ken")], False) is None
    assert exposure_problem(host, [], True) is None


def test_serve_refuses_to_listen_openly(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "gpuhealth.yaml"
    cfg.write_text(f"storage: {{data_dir: {tmp_path / 'var'}}}\n")
    assert main(["serve", "--config", str(cfg), "--host", "0.0.0.0"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "--insecure" in err and "ingest.tokens" in err
    assert not (tmp_path / "var").exists()  # refused before anything was built
