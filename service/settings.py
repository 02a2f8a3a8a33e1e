"""One settings tree: a YAML file plus GPUHEALTH_ environment overrides (nested with `__`,
e.g. GPUHEALTH_ALERTS__RESOLVE_FOR_S=600). Every section validates at start-up and all
problems are reported at once (pydantic collects them)."""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import parse_qs, urlsplit

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from collectors.node_names import DEFAULT_ORDER
from models.detectors.chassis import ChassisRuleConfig
from models.detectors.dynamic import DynamicConfig
from models.detectors.hard import HardRuleConfig
from models.predictor.policy import PredictorConfig
from service.cluster.settings import ClusterSettings
from service.diagnostics.settings import DiagnosticsServiceSettings
from service.errors import field_errors
from service.history.influx.settings import InfluxSettings
from service.learning.scoreboard import PromotionPolicy
from service.notify.config import NotifySettings
from service.remediation.config import RemediationSettings
from service.secret_files import SecretFileError, SecretFilesSource
from service.stages.alert_machine import AlertPolicy
from service.stages.windows import EntityLimits, WindowConfig


class ServiceSettings(BaseModel):
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=1, le=65535)
    collect_interval_s: float = Field(default=5.0, gt=0)
    score_interval_s: float = Field(default=5.0, gt=0)
    # Listen beyond loopback with no write token (service/commands/exposure.py): off unless meant.
    insecure: bool = False
    # Slow clients (service/runtime/http_guard.py): a request's headers must arrive within
    # header_timeout_s and its body within body_timeout_s plus 1 s per body_min_bytes_per_s;
    # idle kept-alive connections close after keep_alive_s. Past max_connections (or what the
    # open-file limit leaves) the stalest idle connection is closed to admit a new one.
    header_timeout_s: float = Field(default=10.0, gt=0)
    body_timeout_s: float = Field(default=30.0, gt=0)
    body_min_bytes_per_s: float = Field(default=500.0, ge=0)
    keep_alive_s: int = Field(default=15, ge=1)
    max_connections: int = Field(default=4096, ge=8)
    # Proxies (addresses or networks) whose X-Forwarded-For and X-Forwarded-Proto are believed;
    # empty: a request's client is its peer address, whatever its headers say.
    trusted_proxies: list[str] = Field(default_factory=list)

    @field_validator("trusted_proxies")
    @classmethod
    def _networks(cls, v: list[str]) -> list[str]:
        for p in v:
            try:
                ipaddress.ip_network(p.strip(), strict=False)
            except ValueError:
                raise ValueError(f"trusted_proxies: {p!r} is not an address or network "
                                 "(e.g. 10.0.0.5 or 10.0.0.0/24)") from None
        return [p.strip() for p in v]


class PostgresSettings(BaseModel):
    """The shared state (alerts, notification log, silences, verdicts, actions, the breaker,
    tokens, ...) on PostgreSQL, shared by replicas and shards. `dsn` empty: the SQLite file."""

    # The DSN may hold a password: never repeated in an error (nor is any other input here).
    model_config = ConfigDict(hide_input_in_errors=True)

    dsn: SecretStr = SecretStr("")  # e.g. postgresql://gpuhealth@db:5432/gpuhealth
    connect_timeout_s: float = Field(default=5.0, gt=0)

    @field_validator("dsn")
    @classmethod
    def _scheme(cls, v: SecretStr) -> SecretStr:
        dsn = v.get_secret_value()
        if dsn and not dsn.startswith(("postgresql://", "postgres://")):
            raise ValueError("storage.postgres.dsn must be a postgresql:// (or postgres://) "
                             "URL; its value is not shown, it may hold a password")
        return v


class StorageSettings(BaseModel):
    model_config = ConfigDict(hide_input_in_errors=True)  # postgres.dsn may hold a password

    data_dir: Path = Path("var")
    sqlite_file: str = "gpuhealth.db"
    write_samples: bool = True  # keep sample history in SQLite (the embedded default sink)
    # Without InfluxDB, risk and alert level history in SQLite for the charts (at most a row
    # per entity a minute, service.history.risk_history); days kept, 0 turns it off.
    risk_history_days: float = Field(default=3.0, ge=0)
    # Days of sample history (samples, events) kept in SQLite, counted back from the newest
    # sample; older rows are deleted in small batches by a background thread. 0 keeps all.
    sample_retention_days: float = Field(default=14.0, ge=0)
    influxdb: InfluxSettings = InfluxSettings()
    # After a restart, replay this much history from the store into the window store and the
    # detectors, so sustained-duration rules and baselines keep their state. 0 disables.
    warm_start_s: float = Field(default=4 * 3600.0, ge=0)
    warm_start_tick_s: float = Field(default=5.0, gt=0)  # detector ticks during the replay

    @property
    def influx_spool(self) -> Path:
        return self.influxdb.spool_dir or self.data_dir / "influx-spool"

    postgres: PostgresSettings = PostgresSettings()

    @property
    def sqlite_path(self) -> Path:
        return self.data_dir / self.sqlite_file

    @property
    def state_target(self) -> str | Path:
        """Where the shared-state stores live (service.storage.state_db): the PostgreSQL DSN
        when one is set, else the SQLite file. Sample and risk history stay in the file."""
        dsn = self.postgres.dsn.get_secret_value()
        if not dsn:
            return self.sqlite_path
        query = urlsplit(dsn).query
        if "connect_timeout" in parse_qs(query):  # the DSN's own wins
            return dsn
        sep = "&" if query else "?"
        return f"{dsn}{sep}connect_timeout={max(1, round(self.postgres.connect_timeout_s))}"


class ApiSettings(BaseModel):
    """The `api` section of the settings."""

    # Reads are open by default (an internal network); a token that is sent is still checked.
    read_requires_token: bool = False
    rate_limit_per_min: float = Field(default=60.0, gt=0)  # mutating requests per token
    rate_limit_burst: int = Field(default=20, ge=1)
    idempotency_ttl_s: float = Field(default=86400.0, gt=0)  # the IETF draft's 24 h
    # Failed authentications per credential, and new wrong credentials per client address
    # (guessing): past the burst, those are answered 429 unchecked; a valid token never is
    # (service/api/auth_failures.py).
    auth_failures_per_min: float = Field(default=10.0, gt=0)
    auth_failures_burst: int = Field(default=20, ge=1)


class IngestSettings(BaseModel):
    max_future_s: float = Field(default=300.0, gt=0)
    max_samples_per_batch: int = Field(default=5_000_000, gt=0)
    max_lines_per_request: int = Field(default=1_000_000, gt=0)
    # InfluxDB 1.x's default max-body-size for /write; also bounds a gzip body once inflated.
    max_body_bytes: int = Field(default=25_000_000, gt=0)
    # Write tokens. Empty: writes need no credentials (the embedded default on loopback); else
    # every write must carry one, the ways InfluxDB clients and Telegraf send it.
    tokens: list[SecretStr] = Field(default_factory=list)
    # Entities held at once, in GPUs (NVLink links and IB ports scale with it), and new ones
    # taken from one request: names from the wire must not allocate window memory without
    # bound. Raise max_gpus for a fleet beyond it; entities silent past their longest window
    # (7 days) are forgotten. The per-request cap holds for anonymous writes only (no tokens);
    # its excess is answered 503 with Retry-After: the same body sent again takes the rest.
    max_gpus: int = Field(default=20_000, gt=0)
    max_new_gpus_per_batch: int = Field(default=1_024, gt=0)
    # Writes wait this long (ms) to be ingested together with the other senders' (one
    # window-store ingest and one sink write for many node agents; each request still gets
    # its own answer). 0: each request is ingested alone. At 10,000 GPUs of node agents (250
    # requests a second) 50 ms merges about a dozen, where a merged ingest's cost per request
    # levels off; 20 ms merged five, whose ingest cost about 1.6x as much per request
    # (docs/design.md, "Agent ingest").
    coalesce_ms: float = Field(default=50.0, ge=0, le=1000)
    # The labels that name the node of a dcgm-exporter sample Telegraf's prometheus input
    # scraped, first first; a value that is a known exporter's pod name is passed over
    # (collectors/node_names.py). A central Telegraf scraping many nodes' exporters puts
    # `Hostname` first; its own `host` would make every GPU the scraper's.
    node_name_from: list[Annotated[str, Field(min_length=1)]] = Field(
        default_factory=lambda: list(DEFAULT_ORDER), min_length=1)

    def limits(self) -> EntityLimits:
        # With write tokens every writer is a known sender: its new entities are taken in
        # full (a relay's cold start); anonymous writes keep the per-request cap.
        return EntityLimits(self.max_gpus, self.max_new_gpus_per_batch,
                            trusted=bool(self.tokens))


class CollectorSettings(BaseModel):
    """Sources the service runs itself (a single node, or a head node with its own GPUs):
    `sources` maps a registered source name (collectors.registry) to its own config section;
    `auto` also runs every other source this host has, with defaults."""

    auto: bool = False
    sources: dict[str, dict[str, Any]] = Field(default_factory=dict)


SHIPPED_MODEL = Path(__file__).resolve().parents[1] / "models" / "artifacts" / "default"


class ModelSettings(BaseModel):
    """The LSTM predictor. `path`: "default" is the model shipped with gpuhealth (see its
    MODEL_CARD.md), "" or "none" runs rules and thresholds only, anything else is an artifact
    directory written by `gpuhealth train`; it is loaded when it appears or changes."""

    path: str = "default"
    recheck_s: float = Field(default=60.0, gt=0)
    # Highest risk a horizon's probability may give: a day's stays below critical (the model
    # pages only on its 1-h horizon), a week's at watch.
    day_cap: float = Field(default=0.85, ge=0, le=1)
    week_cap: float = Field(default=0.5, ge=0, le=1)
    # Model risk below this adds nothing. Tuned on ci seeds 2000-2001 (disjoint from every
    # reported seed; docs/evaluation.md) for the share of lost GPU-hours saved, the operational
    # value: 0.8 saved 0.463 and 0.755 of the precursor-bearing failures' hours against 0.447
    # and 0.755 at 0.6, 0.455 and 0.755 at 0.4, and the rules' 0.435 and 0.680 (0.9 and above
    # silence the model: fused equals the rules). Below it the model mostly adds false alarms
    # on benign correctable-ECC carriers and single remaps, which the rules' baselines ignore.
    floor: float = Field(default=0.8, ge=0, le=1)
    # When a challenger in shadow counts as better (gpuhealth model promote, docs/learning.md).
    promotion: PromotionPolicy = PromotionPolicy()

    def predictor_config(self) -> PredictorConfig:
        return PredictorConfig(caps=self.caps(), floor=self.floor)

    def caps(self) -> dict[int, float]:
        """Horizon (hours) -> the highest risk its probability may give."""
        return {1: 1.0, 24: self.day_cap, 168: self.week_cap}

    def resolved(self) -> Path | None:
        if self.path.strip().lower() in ("", "none"):
            return None
        return SHIPPED_MODEL if self.path == "default" else Path(self.path)


class DetectorSettings(BaseModel):
    hard: HardRuleConfig = HardRuleConfig()
    chassis: ChassisRuleConfig = ChassisRuleConfig()  # supplies, fans, inlet, host errors
    dynamic: DynamicConfig = DynamicConfig()
    model: ModelSettings = ModelSettings()


class RetrainSettings(BaseModel):
    """Scheduled retraining (service.runtime.retrain): train from history, shadow, promote
    only if better, tell `notify_receiver` either way."""

    # "auto" (the default): on wherever the history it trains from is kept, i.e. with InfluxDB
    # (storage.influxdb.url); false turns it off, true insists (and fails loudly without it).
    enabled: bool | Literal["auto"] = "auto"
    # No model is trained before some failure mode has this many failure labels (auto-labels
    # and operators' verdicts, overruled ones aside) in the `since_days` it would train on: a
    # few labels teach noise (docs/learning.md, "The fleet teaches itself").
    min_labels_per_mode: int = Field(default=10, ge=1)
    every_days: float = Field(default=7.0, gt=0)  # a new model this often
    since_days: float = Field(default=90.0, gt=0)  # of history to train on
    shadow_days: float = Field(default=7.0, gt=0)  # judged after this long in shadow
    check_s: float = Field(default=3600.0, gt=0)  # how often the job looks
    notify_receiver: str | None = None  # told of every outcome (a receiver's name)
    out_dir: Path | None = None  # artifacts; default <data_dir>/models
    train_args: list[str] = Field(default_factory=list)  # more `gpuhealth train` flags
    # Start from the active model (`gpuhealth train --init`), not from scratch: a fleet's own
    # labels are few, and fine-tuning keeps what the larger training set taught.
    fine_tune: bool = True
    timeout_s: float = Field(default=6 * 3600.0, gt=0)


class WindowRefitSettings(BaseModel):
    """Failure windows refitted daily on the fleet's own alerts and failure labels
    (service.stages.window_refit); the shipped calibration stands until enough alerts have
    been followed by failures."""

    enabled: bool = True
    coverage: float = Field(default=0.8, gt=0, lt=1)  # the share of failures a window holds


class LearningSettings(BaseModel):
    """Learning from the fleet (docs/learning.md): scheduled retraining, refitted windows."""

    retrain: RetrainSettings = RetrainSettings()
    windows: WindowRefitSettings = WindowRefitSettings()


class Settings(BaseSettings):
    # Inputs are never repeated in errors: secrets (storage.postgres.dsn, tokens) are inputs.
    model_config = SettingsConfigDict(env_prefix="GPUHEALTH_", env_nested_delimiter="__",
                                      extra="forbid", hide_input_in_errors=True)

    service: ServiceSettings = ServiceSettings()
    storage: StorageSettings = StorageSettings()
    ingest: IngestSettings = IngestSettings()
    window: WindowConfig = WindowConfig()
    detectors: DetectorSettings = DetectorSettings()
    collectors: CollectorSettings = CollectorSettings()
    alerts: AlertPolicy = AlertPolicy()
    notify: NotifySettings = NotifySettings()
    remediation: RemediationSettings = RemediationSettings()
    api: ApiSettings = ApiSettings()
    learning: LearningSettings = LearningSettings()
    cluster: ClusterSettings = ClusterSettings()
    diagnostics: DiagnosticsServiceSettings = DiagnosticsServiceSettings()

    @model_validator(mode="after")
    def _plugins(self) -> Settings:
        """Receivers and the remediation hook validate their own sections here, at start-up,
        and every problem is reported at once."""
        from service.notify.receivers import check_receiver
        from service.remediation.hooks import check_hook

        problems = [p for r in self.notify.receivers
                    if (p := check_receiver(r.name, r.type, r.config)) is not None]
        if self.remediation.mode != "off":
            hook = check_hook(self.remediation.hook, self.remediation.hook_config)
            problems += [f"remediation: {hook}"] if hook else []
        if problems:
            raise ValueError("\n  ".join(problems))
        if self.cluster.membership == "postgres" and \
                not self.storage.postgres.dsn.get_secret_value():
            raise ValueError("cluster.membership postgres needs storage.postgres.dsn (the "
                             "members and the map live in PostgreSQL)")
        return self

    @classmethod
    def settings_customise_sources(
        cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Environment wins over the file, which is passed as init values by load(); the
        # GPUHEALTH_<PATH>_FILE variables read secret settings from files (service/secret_files.py).
        return (SecretFilesSource(settings_cls, env_settings, init_settings),)


class SettingsError(ValueError):
    """Invalid settings, every problem on its own line, never echoing a value (it may be a
    password or a routing key)."""


def _explain(exc: ValidationError) -> SettingsError:
    lines = field_errors(exc, "(settings)")
    return SettingsError("invalid settings:\n" + "\n".join(f"  {line}" for line in lines))


def load(path: str | Path | None = None, **overrides: Any) -> Settings:
    """Settings from a YAML file (or $GPUHEALTH_CONFIG), then the environment, then overrides."""
    path = path or os.environ.get("GPUHEALTH_CONFIG")
    data: dict[str, Any] = {}
    if path:
        loaded = yaml.safe_load(Path(path).read_text())
        if loaded is not None and not isinstance(loaded, dict):
            raise ValueError(f"{path}: the settings file must hold a mapping")
        data = loaded or {}
    for k, v in overrides.items():
        data[k] = v
    try:
        return Settings(**data)
    except ValidationError as exc:
        raise _explain(exc) from None
    except SecretFileError as exc:  # a *_FILE variable: names it and the path, never the content
        raise SettingsError(f"invalid settings:\n  {exc}") from None
