"""InfluxDB's settings (`storage.influxdb`), beside the client, sink and reader that read them."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator

from service.history.influx.influxql import parse_duration


class InfluxSettings(BaseModel):
    """InfluxDB through the v1-compatible API (docs/influxdb.md has the settings per version).
    `url` empty: no InfluxDB, SQLite keeps the history."""

    url: str = ""
    database: str = Field(default="gpuhealth", min_length=1)
    retention_policy: str = ""  # empty: the database's default policy
    cluster: str = Field(default="default", min_length=1)  # the `cluster` tag of every point
    auth: Literal["none", "basic", "token"] = "none"
    username: str = ""
    password: SecretStr = SecretStr("")
    token: SecretStr = SecretStr("")
    timeout_s: float = Field(default=10.0, gt=0)
    batch_lines: int = Field(default=50_000, gt=0)  # lines per write request
    spool_dir: Path | None = None  # default: <data_dir>/influx-spool
    spool_mb: int = Field(default=1024, gt=0)  # bound; oldest segments dropped first, counted
    manage_schema: bool = True  # 1.x: create the database, retention policies and CQs
    raw_retention: str = "14d"
    rollup_retention: str = "400d"

    @field_validator("raw_retention", "rollup_retention")
    @classmethod
    def _retention(cls, v: str) -> str:
        parse_duration(v)  # ValueError names the bad value
        return v

    @model_validator(mode="after")
    def _credentials(self) -> InfluxSettings:
        if self.auth == "token" and not self.token.get_secret_value():
            raise ValueError("storage.influxdb.auth is 'token' but no token is set")
        if self.auth == "basic" and not self.username:
            raise ValueError("storage.influxdb.auth is 'basic' but no username is set")
        return self
