"""`gpuhealth token`: create prints a token once, list never shows secrets, revoke stops it
authenticating; bad input is one line on stderr and exit code 2."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from service.api.auth import TokenStore
from service.api.principals import Permission
from service.commands.cli import main
from service.runtime.redact import RedactingFilter
from service.settings import load


@pytest.fixture(autouse=True)
def _root_filters_restored() -> Iterator[None]:
    """main() configures logging, which filters the root handlers (pytest's among them)."""
    yield
    for h in logging.getLogger().handlers:
        for f in [f for f in h.filters if isinstance(f, RedactingFilter)]:
            h.removeFilter(f)


@pytest.fixture(params=["sqlite", "postgres"])
def config(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """The settings file: tokens in the SQLite file, then in PostgreSQL (storage.postgres)."""
    storage: dict[str, object] = {"data_dir": str(tmp_path / "data")}
    if request.param == "postgres":
        storage["postgres"] = {"dsn": request.getfixturevalue("pg_dsn")}
    path = tmp_path / "gpuhealth.yaml"
    path.write_text(yaml.safe_dump({"storage": storage}))
    return path


def db(config: Path) -> str | Path:
    return load(config).storage.state_target


def test_create_list_revoke_round_trip(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["token", "create", "--name", "oncall", "--scope", "operate",
                 "--config", str(config)]) == 0
    out, err = capsys.readouterr()
    secret = out.strip()
    assert out.count("\n") == 1 and secret.startswith("ghk_")
    assert "only once" in err and secret not in err
    token_id = secret.split("_")[1]

    store = TokenStore(db(config))
    who = store.authenticate(secret, time.time())
    assert who is not None and (who.token_id, who.name, who.scope) == (token_id, "oncall",
                                                                        Permission.OPERATE)
    store.close()

    assert main(["token", "list", "--config", str(config)]) == 0
    out, _ = capsys.readouterr()
    header, row = out.splitlines()
    assert header.split()[:4] == ["ID", "NAME", "SCOPE", "STATE"]
    assert row.split()[:4] == [token_id, "oncall", "operate", "active"]
    assert secret.split("_", 2)[2] not in out

    assert main(["token", "list", "--json", "--config", str(config)]) == 0
    out, _ = capsys.readouterr()
    (listed,) = json.loads(out)
    assert listed["id"] == token_id and listed["expires_at"] is None
    assert listed["last_used_at"] is not None  # authenticated once above
    assert secret.split("_", 2)[2] not in out

    assert main(["token", "revoke", token_id, "--config", str(config)]) == 0
    assert f"revoked token {token_id} (oncall)" in capsys.readouterr().out
    store = TokenStore(db(config))
    assert store.authenticate(secret, time.time()) is None
    store.close()
    assert main(["token", "list", "--config", str(config)]) == 0
    assert "revoked" in capsys.readouterr().out.splitlines()[1]


def test_a_token_may_expire(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = time.time()
    assert main(["token", "create", "--name", "ci", "--scope", "ADMIN", "--expires-days", "2",
                 "--config", str(config)]) == 0
    secret = capsys.readouterr().out.strip()
    store = TokenStore(db(config))
    (token,) = store.list()
    assert token.scope is Permission.ADMIN and token.expires_at is not None
    assert before + 2 * 86400 <= token.expires_at <= time.time() + 2 * 86400
    assert store.authenticate(secret, token.expires_at) is None
    store.close()


@pytest.mark.parametrize("argv,says", [
    (["create", "--name", "x", "--scope", "root"], "unknown scope 'root'"),
    (["create", "--name", " ", "--scope", "read"], "--name must not be empty"),
    (["create", "--name", "x", "--scope", "read", "--expires-days", "0"], "--expires-days"),
    (["revoke", "ffffffffffff"], "no token with id 'ffffffffffff'"),
])
def test_bad_input_is_one_line_and_exit_code_2(config: Path, capsys: pytest.CaptureFixture[str],
                                               argv: list[str], says: str) -> None:
    assert main(["token", *argv, "--config", str(config)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("gpuhealth token: ") and says in err
    if argv[0] == "create":  # refused before anything was made
        target = db(config)
        assert ((isinstance(target, Path) and not target.exists())
                or TokenStore(target).list() == [])


def test_with_postgres_the_tokens_are_not_in_the_file(tmp_path: Path, pg_dsn: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "gpuhealth.yaml"
    path.write_text(yaml.safe_dump({"storage": {"data_dir": str(tmp_path / "data"),
                                                "postgres": {"dsn": pg_dsn}}}))
    assert main(["token", "create", "--name", "ci", "--scope", "read", "--config", str(path)]) == 0
    capsys.readouterr()
    assert not load(path).storage.sqlite_path.exists()
    store = TokenStore(pg_dsn)
    assert [t.name for t in store.list()] == ["ci"]
    store.close()
