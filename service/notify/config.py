"""The `notify` settings section: receivers, the routing tree, inhibition, rate limits and the
retry policy, shaped like Alertmanager's configuration (timing knobs `group_wait`,
`group_interval`, `repeat_interval`, in seconds)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator

from service.notify.matchers import parse_all
from service.notify.verdict_links import VerdictLinks
from service.stages.fleet_alerts import StormSettings


def _check_matchers(v: list[str]) -> list[str]:
    parse_all(v)  # ValueError names the bad one (RE2 syntax, at most MAX_MATCHERS)
    return v


class ReceiverSettings(BaseModel):
    name: str = Field(min_length=1)
    type: str = Field(min_length=1)  # a registered receiver type: email, pagerduty, twilio, ...
    config: dict[str, Any] = Field(default_factory=dict)
    send_resolved: bool = True


class RouteSettings(BaseModel):
    receiver: str | None = None  # inherited from the parent when unset
    matchers: list[str] = Field(default_factory=list)
    group_by: list[str] | None = None
    group_wait_s: float | None = Field(default=None, ge=0)
    group_interval_s: float | None = Field(default=None, gt=0)
    repeat_interval_s: float | None = Field(default=None, gt=0)
    continue_: bool = Field(default=False, alias="continue")
    routes: list[RouteSettings] = Field(default_factory=list)

    model_config = {"populate_by_name": True}

    _m = field_validator("matchers")(_check_matchers)


class InhibitRule(BaseModel):
    """Alerts matching `target_matchers` are muted while an alert matching `source_matchers`
    fires with the same values of `equal`; with `level_at_least_target`, only a source at the
    target's level or above mutes it."""

    source_matchers: list[str]
    target_matchers: list[str]
    equal: list[str] = Field(default_factory=list)
    level_at_least_target: bool = True

    _s = field_validator("source_matchers", "target_matchers")(_check_matchers)


class RateLimit(BaseModel):
    """Messages a receiver may get per hour, with a burst; the rest roll into one digest."""

    per_hour: float = Field(gt=0)
    burst: int = Field(default=5, ge=1)


def _default_inhibit() -> list[InhibitRule]:
    return [
        # No data from a node mutes its GPUs', links' and ports' alerts (their data is as old).
        # Not the node's own sensors (NodeAtRisk: a hot inlet, a host memory error): those are
        # a cause of their own beside a GPU's, and neither may hide the other.
        InhibitRule(source_matchers=["alertname=NodeNoData"],
                    target_matchers=["scope=~gpu|nvlink|ib_port"], equal=["node"]),
        # A fleet-wide storm mutes every per-node page: one page for the fleet instead.
        InhibitRule(source_matchers=["alertname=FleetStorm"],
                    target_matchers=["alertname!=FleetStorm", "level>=3"],
                    level_at_least_target=False),
    ]


class NotifySettings(BaseModel):
    external_url: str = "http://127.0.0.1:8080"  # links in messages point here
    receivers: list[ReceiverSettings] = Field(default_factory=list)
    route: RouteSettings = Field(default_factory=lambda: RouteSettings(
        receiver="record", group_by=["node"], group_wait_s=30.0, group_interval_s=300.0,
        repeat_interval_s=4 * 3600.0))
    inhibit_rules: list[InhibitRule] = Field(default_factory=_default_inhibit)
    rate_limits: dict[str, RateLimit] = Field(default_factory=dict)  # by receiver name
    storm: StormSettings = StormSettings()
    silence_max_s: float = Field(default=7 * 86400.0, gt=0)
    # Silences active or pending at once: each is matched against every alert a flush sends.
    silence_max_active: int = Field(default=1000, ge=1, le=100_000)
    # One retry policy for every receiver: exponential backoff from retry_initial_s, given up
    # after the group's interval (the next flush tries again; the log says nothing was sent).
    retry_initial_s: float = Field(default=1.0, gt=0)
    retry_max_s: float = Field(default=60.0, gt=0)
    send_timeout_s: float = Field(default=30.0, gt=0)
    resolved_keep_s: float = Field(default=86400.0, gt=0)  # how long a resolve waits to be sent
    # Signed, expiring links in messages with which an on-call engineer gives a verdict on an
    # alert without a token (service.notify.verdict_links); off while no secret is set.
    verdict_link_secret: SecretStr | None = Field(default=None, min_length=16)
    verdict_link_ttl_s: float = Field(default=7 * 86400.0, gt=0)

    def verdict_links(self) -> VerdictLinks | None:
        if self.verdict_link_secret is None:
            return None
        return VerdictLinks(self.verdict_link_secret.get_secret_value().encode(),
                            self.external_url, self.verdict_link_ttl_s)

    @model_validator(mode="after")
    def _receivers_exist(self) -> NotifySettings:
        names = [r.name for r in self.receivers]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"notify.receivers: duplicate names {sorted(dup)}")
        known = {*names, "record"}
        if self.route.receiver is None:
            raise ValueError("notify.route: the root route needs a receiver")
        missing = sorted({r for r in _route_receivers(self.route) if r not in known})
        if missing:
            raise ValueError(f"notify.route names unknown receivers {missing}; "
                             f"known: {sorted(known)}")
        unknown_limits = sorted(set(self.rate_limits) - known)
        if unknown_limits:
            raise ValueError(f"notify.rate_limits names unknown receivers {unknown_limits}")
        return self


def _route_receivers(r: RouteSettings) -> list[str]:
    out = [r.receiver] if r.receiver else []
    for child in r.routes:
        out += _route_receivers(child)
    return out
