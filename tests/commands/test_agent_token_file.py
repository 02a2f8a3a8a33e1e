"""The agent's write token from a file ($GPUHEALTH_AGENT_TOKEN_FILE, a compose or Kubernetes
secret), so it never sits on a command line `ps` shows; both ways set, or a file that cannot
be read, is a clear usage error that never shows the token."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.commands.agent import MAX_SECRET_BYTES, env_secret
from service.commands.usage import UsageError

ENV = "GPUHEALTH_AGENT_TOKEN"


def test_the_token_comes_from_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "token"
    f.write_text("s3cret-token\n")
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.setenv(f"{ENV}_FILE", str(f))
    assert env_secret(ENV) == "s3cret-token"


def test_the_variable_alone_still_works(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "t0")
    monkeypatch.delenv(f"{ENV}_FILE", raising=False)
    assert env_secret(ENV) == "t0"
    monkeypatch.delenv(ENV)
    assert env_secret(ENV) is None


@pytest.mark.parametrize(("content", "why"), [
    (None, "cannot read"), ("", "is empty"), ("x" * (MAX_SECRET_BYTES + 1), "is over")])
def test_a_bad_file_is_named_never_shown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         content: str | None, why: str) -> None:
    f = tmp_path / "token"
    if content is not None:
        f.write_text(content)
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.setenv(f"{ENV}_FILE", str(f))
    with pytest.raises(UsageError, match=why) as err:
        env_secret(ENV)
    assert str(f) in str(err.value) and "xxxx" not in str(err.value)


def test_both_set_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "token").write_text("from-file")
    monkeypatch.setenv(ENV, "from-env")
    monkeypatch.setenv(f"{ENV}_FILE", str(tmp_path / "token"))
    with pytest.raises(UsageError, match="both set") as err:
        env_secret(ENV)
    assert "from-env" not in str(err.value) and "from-file" not in str(err.value)
