"""GPUHEALTH_<PATH>_FILE: every secret setting read from a file (service/secret_files.py), the
way Compose and Kubernetes mount secrets; a variable and its file both set are refused, and no
error ever shows what a file holds."""

from __future__ import annotations

import base64
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from service.commands.cli import main
from service.secret_files import MAX_BYTES, secret_variables
from service.settings import Settings, SettingsError, load

WHSEC = "whsec_" + base64.b64encode(bytes(range(32))).decode()
EMAIL = {"to": ["ops@example.com"], "from_addr": "gpuhealth@example.com",
         "host": "smtp.example.com"}
RECEIVERS = [
    {"name": "am", "type": "alertmanager", "config": {"urls": ["http://am:9093"]}},
    {"name": "ops-mail", "type": "email", "config": EMAIL},
    {"name": "oncall", "type": "pagerduty", "config": {}},
    {"name": "phone", "type": "twilio",
     "config": {"account_sid": "AC123", "from_number": "+15550100", "to": ["+15550101"]}},
    {"name": "sched", "type": "webhook", "config": {"url": "https://hooks.example.com/g"}},
]
HOOK = {"mode": "dry_run", "hook": "webhook",
        "hook_config": {"url": "https://hooks.example.com/drain"}}


def _receiver(s: Settings, name: str) -> dict[str, Any]:
    config: dict[str, Any] = next(r for r in s.notify.receivers if r.name == name).config
    return config


def _secret(v: Any) -> str:
    text: str = v.get_secret_value()
    return text


# Each secret setting's variable: the value written to its file, any settings it needs beside
# it (YAML), and how to read it back from the loaded settings.
Case = tuple[str, dict[str, Any], Callable[[Settings], Any]]
CASES: dict[str, Case] = {
    "GPUHEALTH_STORAGE__INFLUXDB__PASSWORD_FILE": (
        "influx-pw", {"storage": {"influxdb": {"url": "http://i:8086", "auth": "basic",
                                               "username": "gh"}}},
        lambda s: _secret(s.storage.influxdb.password)),
    "GPUHEALTH_STORAGE__INFLUXDB__TOKEN_FILE": (
        "influx-token", {"storage": {"influxdb": {"url": "http://i:8086", "auth": "token"}}},
        lambda s: _secret(s.storage.influxdb.token)),
    "GPUHEALTH_STORAGE__POSTGRES__DSN_FILE": (
        "postgresql://gh:pg-pw@db:5432/gh", {},
        lambda s: _secret(s.storage.postgres.dsn)),
    "GPUHEALTH_INGEST__TOKENS_FILE": (
        "tok-one", {}, lambda s: next(_secret(t) for t in s.ingest.tokens)),
    "GPUHEALTH_NOTIFY__RECEIVERS__AM__CONFIG__HEADERS__AUTHORIZATION_FILE": (
        "Bearer am-tok", {}, lambda s: _receiver(s, "am")["headers"]["authorization"]),
    "GPUHEALTH_NOTIFY__RECEIVERS__OPS_MAIL__CONFIG__USERNAME_FILE": (
        "mail-user", {"ops-mail": {"password": "pw-in-yaml"}},
        lambda s: _receiver(s, "ops-mail")["username"]),
    "GPUHEALTH_NOTIFY__RECEIVERS__OPS_MAIL__CONFIG__PASSWORD_FILE": (
        "mail-pw", {"ops-mail": {"username": "gh"}},
        lambda s: _receiver(s, "ops-mail")["password"]),
    "GPUHEALTH_NOTIFY__RECEIVERS__ONCALL__CONFIG__ROUTING_KEY_FILE": (
        "rk-0123", {}, lambda s: _receiver(s, "oncall")["routing_key"]),
    "GPUHEALTH_NOTIFY__RECEIVERS__PHONE__CONFIG__AUTH_TOKEN_FILE": (
        "twilio-tok", {}, lambda s: _receiver(s, "phone")["auth_token"]),
    "GPUHEALTH_NOTIFY__RECEIVERS__SCHED__CONFIG__SECRET_FILE": (
        WHSEC, {}, lambda s: _receiver(s, "sched")["secret"]),
    "GPUHEALTH_NOTIFY__RECEIVERS__SCHED__CONFIG__HEADERS__X_API_KEY_FILE": (
        "api-key-0", {}, lambda s: _receiver(s, "sched")["headers"]["x-api-key"]),
    "GPUHEALTH_NOTIFY__VERDICT_LINK_SECRET_FILE": (
        "verdict-link-secret-0123", {}, lambda s: _secret(s.notify.verdict_link_secret)),
    "GPUHEALTH_REMEDIATION__HOOK_CONFIG__SECRET_FILE": (
        WHSEC, {}, lambda s: s.remediation.hook_config["secret"]),
}
# The pagerduty, twilio and webhook receivers cannot load without their secret: the file
# supplies it where a case does not, so each case loads the whole set.
BASE_SECRETS = {
    "GPUHEALTH_NOTIFY__RECEIVERS__ONCALL__CONFIG__ROUTING_KEY_FILE": "rk-base",
    "GPUHEALTH_NOTIFY__RECEIVERS__PHONE__CONFIG__AUTH_TOKEN_FILE": "tw-base",
    "GPUHEALTH_REMEDIATION__HOOK_CONFIG__SECRET_FILE": WHSEC,
}


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in list(os.environ):
        if name.upper().startswith("GPUHEALTH_"):
            monkeypatch.delenv(name)
    yield


def _config(tmp_path: Path, extra: dict[str, Any] | None = None) -> Path:
    receivers = [dict(r, config=dict(r["config"])) for r in RECEIVERS]
    for r in receivers:
        r["config"].update((extra or {}).get(str(r["name"]), {}))
    data: dict[str, Any] = {"storage": {"data_dir": str(tmp_path)},
                            "notify": {"receivers": receivers}, "remediation": dict(HOOK)}
    for k, v in (extra or {}).items():
        if k in Settings.model_fields:
            data[k] = {**data.get(k, {}), **v}
    cfg = tmp_path / "gpuhealth.yaml"
    cfg.write_text(yaml.safe_dump(data))
    return cfg


def _secret_file(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / "secrets" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    return str(path)


def test_every_secret_setting_has_a_file_variable_and_a_case() -> None:
    """A new SecretStr anywhere in the tree shows up here: give it a case (and a README line)."""
    listed = secret_variables(Settings)
    assert listed == [
        "GPUHEALTH_STORAGE__INFLUXDB__PASSWORD_FILE",
        "GPUHEALTH_STORAGE__INFLUXDB__TOKEN_FILE",
        "GPUHEALTH_STORAGE__POSTGRES__DSN_FILE",
        "GPUHEALTH_INGEST__TOKENS_FILE",
        "GPUHEALTH_NOTIFY__RECEIVERS__<NAME>__CONFIG(type=alertmanager)__HEADERS__<HEADER>_FILE",
        "GPUHEALTH_NOTIFY__RECEIVERS__<NAME>__CONFIG(type=email)__USERNAME_FILE",
        "GPUHEALTH_NOTIFY__RECEIVERS__<NAME>__CONFIG(type=email)__PASSWORD_FILE",
        "GPUHEALTH_NOTIFY__RECEIVERS__<NAME>__CONFIG(type=pagerduty)__ROUTING_KEY_FILE",
        "GPUHEALTH_NOTIFY__RECEIVERS__<NAME>__CONFIG(type=twilio)__AUTH_TOKEN_FILE",
        "GPUHEALTH_NOTIFY__RECEIVERS__<NAME>__CONFIG(type=webhook)__SECRET_FILE",
        "GPUHEALTH_NOTIFY__RECEIVERS__<NAME>__CONFIG(type=webhook)__HEADERS__<HEADER>_FILE",
        "GPUHEALTH_NOTIFY__VERDICT_LINK_SECRET_FILE",
        "GPUHEALTH_REMEDIATION__HOOK_CONFIG(hook=webhook)__SECRET_FILE",
    ]
    assert len(CASES) == len(listed)  # one case each (the webhook's header besides its secret)
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    assert "GPUHEALTH_STORAGE__POSTGRES__DSN_FILE" in readme and "_FILE" in readme


@pytest.mark.parametrize("var", CASES)
def test_each_secret_setting_reads_its_file(var: str, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    text, extra, read = CASES[var]
    for base_var, base_text in BASE_SECRETS.items():
        if base_var != var:
            monkeypatch.setenv(base_var, _secret_file(tmp_path, base_var, base_text))
    # A trailing line end, as `echo` and editors leave one, is not part of the secret.
    monkeypatch.setenv(var, _secret_file(tmp_path, var, text + "\n"))
    s = load(_config(tmp_path, extra))
    got = read(s)
    assert (got.get_secret_value() if hasattr(got, "get_secret_value") else got) == text


def _base_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var, text in BASE_SECRETS.items():
        monkeypatch.setenv(var, _secret_file(tmp_path, var, text))


def test_a_token_file_is_one_token_a_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUHEALTH_INGEST__TOKENS_FILE",
                       _secret_file(tmp_path, "tokens", "tok-a\r\n\n  tok-b  \n"))
    s = load(storage={"data_dir": str(tmp_path)})
    assert [t.get_secret_value() for t in s.ingest.tokens] == ["tok-a", "tok-b"]


def test_only_trailing_line_ends_are_dropped(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUHEALTH_NOTIFY__VERDICT_LINK_SECRET_FILE",
                       _secret_file(tmp_path, "v", " inner spaces kept \r\n\n"))
    s = load(storage={"data_dir": str(tmp_path)})
    assert s.notify.verdict_link_secret is not None
    assert s.notify.verdict_link_secret.get_secret_value() == " inner spaces kept "


def test_the_file_wins_over_the_settings_file(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    _base_env(tmp_path, monkeypatch)
    monkeypatch.setenv("GPUHEALTH_NOTIFY__RECEIVERS__SCHED__CONFIG__SECRET_FILE",
                       _secret_file(tmp_path, "sched", WHSEC))
    s = load(_config(tmp_path, {"sched": {"secret": "yaml-secret-0123456789"}}))
    assert _receiver(s, "sched")["secret"] == WHSEC
    # Another receiver's settings are untouched.
    assert _receiver(s, "ops-mail") == EMAIL


def test_a_variable_and_its_file_both_set_are_refused(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUHEALTH_STORAGE__POSTGRES__DSN", "postgresql://a:env-pw@db/x")
    monkeypatch.setenv("GPUHEALTH_STORAGE__POSTGRES__DSN_FILE",
                       _secret_file(tmp_path, "dsn", "postgresql://a:file-pw@db/x"))
    with pytest.raises(SettingsError) as err:
        load(storage={"data_dir": str(tmp_path)})
    text = str(err.value)
    assert "GPUHEALTH_STORAGE__POSTGRES__DSN and GPUHEALTH_STORAGE__POSTGRES__DSN_FILE are " \
           "both set" in text
    assert "env-pw" not in text and "file-pw" not in text


def test_a_section_set_whole_in_the_environment_conflicts_too(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUHEALTH_STORAGE__POSTGRES", '{"dsn": "postgresql://a:env-pw@db/x"}')
    monkeypatch.setenv("GPUHEALTH_STORAGE__POSTGRES__DSN_FILE",
                       _secret_file(tmp_path, "dsn", "postgresql://a:file-pw@db/x"))
    with pytest.raises(SettingsError, match=r"the environment sets storage\.postgres\.dsn as well"):
        load(storage={"data_dir": str(tmp_path)})


@pytest.mark.parametrize(("make", "why"), [
    (lambda d: str(d / "absent"), "cannot read {path}: No such file or directory"),
    (lambda d: str(d), "cannot read {path}: Is a directory"),
    (lambda d: _write(d / "big", "postgresql://" + "x" * MAX_BYTES),
     f"{{path}} is larger than {MAX_BYTES} bytes"),
    (lambda d: _write(d / "empty", "\n"), "{path} is empty"),
    (lambda d: _write(d / "latin1", b"postgresql://a:p\xe4ss@db/x"), "{path} is not UTF-8 text"),
], ids=["missing", "directory", "too-large", "empty", "not-utf8"])
def test_a_file_that_cannot_be_used_names_the_variable_and_the_path(
        make: Callable[[Path], str], why: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    path = make(tmp_path)
    monkeypatch.setenv("GPUHEALTH_STORAGE__POSTGRES__DSN_FILE", path)
    monkeypatch.setenv("GPUHEALTH_STORAGE__DATA_DIR", str(tmp_path))
    with pytest.raises(SettingsError) as err:
        load()
    text = str(err.value)
    assert f"GPUHEALTH_STORAGE__POSTGRES__DSN_FILE: {why.format(path=path)}" in text, text
    assert "xxxx" not in text and "p\\xe4ss" not in text and "db/x" not in text
    # The command line says the same and exits 2, as for any invalid setting.
    assert main(["serve"]) == 2
    err_text = capsys.readouterr().err
    assert "GPUHEALTH_STORAGE__POSTGRES__DSN_FILE" in err_text and "db/x" not in err_text


def _write(path: Path, content: str | bytes) -> str:
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return str(path)


def test_a_secret_that_fails_validation_is_not_shown(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUHEALTH_STORAGE__POSTGRES__DSN_FILE",
                       _secret_file(tmp_path, "dsn", "mysql://gh:pg-hunter2@db/x"))
    with pytest.raises(SettingsError, match=r"storage\.postgres\.dsn must be a postgresql") as err:
        load(storage={"data_dir": str(tmp_path)})
    assert "hunter2" not in str(err.value)


@pytest.mark.parametrize(("var", "why"), [
    ("GPUHEALTH_STORAGE__POSTGRES__DNS_FILE", "names no secret setting"),  # a typo
    ("GPUHEALTH_SERVICE__PORT_FILE", "names no secret setting"),  # not a secret
    ("GPUHEALTH_NOTIFY__RECEIVERS__NOBODY__CONFIG__SECRET_FILE", "names no secret setting"),
])
def test_a_file_variable_naming_no_secret_is_refused(var: str, why: str, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    _base_env(tmp_path, monkeypatch)
    monkeypatch.setenv(var, _secret_file(tmp_path, "x", "whatever-0123456789"))
    with pytest.raises(SettingsError, match=f"{var}: {why}"):
        load(_config(tmp_path))


def test_settings_named_file_and_variables_outside_the_tree_are_left_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUHEALTH_STORAGE__SQLITE_FILE", "other.db")  # a setting of its own
    monkeypatch.setenv("GPUHEALTH_AGENT_TOKEN_FILE", str(tmp_path / "absent"))  # not settings
    monkeypatch.setenv("GPUHEALTH_STORAGE__DATA_DIR", str(tmp_path))
    s = load()
    assert s.storage.sqlite_file == "other.db" and s.storage.postgres.dsn.get_secret_value() == ""


def test_a_header_already_named_in_yaml_keeps_its_spelling(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _base_env(tmp_path, monkeypatch)
    monkeypatch.setenv("GPUHEALTH_NOTIFY__RECEIVERS__SCHED__CONFIG__SECRET_FILE",
                       _secret_file(tmp_path, "sched", WHSEC))
    monkeypatch.setenv("GPUHEALTH_NOTIFY__RECEIVERS__SCHED__CONFIG__HEADERS__AUTHORIZATION_FILE",
                       _secret_file(tmp_path, "auth", "Bearer from-file"))
    s = load(_config(tmp_path, {"sched": {"headers": {"Authorization": "Bearer yaml"}}}))
    headers = _receiver(s, "sched")["headers"]
    assert headers == {"Authorization": "Bearer from-file"}
