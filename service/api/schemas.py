"""Wire shapes: the pydantic models the endpoints return and the OpenAPI schema names."""

from __future__ import annotations

from pydantic import BaseModel, Field

from service.api.cluster_truth import ClusterTruth
from service.api.timefmt import Timestamp
from service.notify.status import DeliveryState

NEXT_CURSOR_DOC = "the `cursor` of the next page; null on the last"


class SignalOut(BaseModel):
    rule: str
    signal: str
    value: float | None
    threshold: float | None
    risk: float
    hard: bool
    # The value and threshold in words: a state by its name (`DOWN`), a measure with its unit
    # (`3 errors`, `92 °C`), an Xid by its number (service.notify.values).
    value_text: str = ""
    threshold_text: str = ""


class TopSignal(BaseModel):
    entity: str
    rule: str
    signal: str
    risk: float


SILENT_DOC = "every metric stale as of the last scoring tick: no data is arriving"
SINCE_DOC = "while silent, its newest sample's time (null while it reports)"
RISK_DOC = ("the scoring tick's; where an entity's telemetry went stale while its alert fires, "
            "the risk that alert holds (its level is frozen on stale data, so is its risk)")

MISSING_DOC = ("on a sharded service asked with partial=true: the shards that did not answer "
               "(their nodes are left out of this answer); otherwise empty")


class NodeSummary(BaseModel):
    node: str
    risk: float | None = Field(description="None until a tick has scored the node; " + RISK_DOC)
    level: int  # level of the node's worst open alert, 0 when none
    gpus: int
    links: int
    ports: int
    psus: int = 0  # power supplies its BMC reports
    fans: int = 0  # chassis fans its BMC reports
    alerts: int  # open alerts
    top_signal: TopSignal | None
    silent: bool = Field(default=False, description=SILENT_DOC)
    silent_since: Timestamp | None = Field(default=None, description=SINCE_DOC)


class NodeList(BaseModel):
    total: int  # nodes in the fleet
    limit: int
    next_cursor: str | None = Field(description=NEXT_CURSOR_DOC)
    nodes: list[NodeSummary]
    missing_shards: list[str] = Field(default_factory=list, description=MISSING_DOC)


class MetricOut(BaseModel):
    name: str
    unit: str
    kind: str
    value: float | None  # None: never reported
    ts: Timestamp | None  # when it was sampled


class BoardOut(BaseModel):
    """One board's time in a GPU slot (service.stages.gpu_identity)."""

    uuid: str | None = None
    serial: str | None = Field(default=None, description="the board's serial, for an RMA")
    pci_bus_id: str | None = None
    model: str | None = None
    vbios: str | None = None
    driver: str | None = None
    since: Timestamp = Field(description="when this service first saw the board in the slot")
    until: Timestamp | None = Field(default=None, description="when it saw it replaced")
    why: str = Field(default="", description="new, swapped (serial a -> b) or renumbered")


class IdentityOut(BoardOut):
    """The board in the GPU slot now, and the boards before it."""

    changed: Timestamp = Field(description="when an attribute last changed")
    previous: list[BoardOut] = Field(default_factory=list,
                                     description="the boards that sat in the slot before, "
                                                 "newest first")


class EntityOut(BaseModel):
    entity: str
    scope: str
    risk: float | None
    level: int
    explanation: list[SignalOut]  # empty while risk is zero
    window: WindowOut | None = None  # the model's predicted failure window, where it has one
    silent: bool = Field(default=False, description=SILENT_DOC)
    silent_since: Timestamp | None = Field(default=None, description=SINCE_DOC)
    readings: list[MetricOut] = Field(default_factory=list, description=(
        "On a node's page: the newest readings shown beside the entity (a supply's and a "
        "fan's every metric, a GPU's PCIe link and readability); empty elsewhere"))
    identity: IdentityOut | None = Field(default=None, description=(
        "A GPU's board (UUID, serial, bus id, model, VBIOS, driver) where a source said it"))


class AlertmanagerOut(BaseModel):
    """An `alertmanager` receiver's Alertmanager and what it said of the alert when last read
    back (after each periodic re-send): a silence made there shows here."""

    receiver: str
    url: str
    state: str = Field(description="Alertmanager's state: active, suppressed or unprocessed")
    silenced_by: list[str]
    inhibited_by: list[str]
    checked_at: Timestamp


class DeliveryOut(BaseModel):
    """What happened to the alert at one receiver it routes to (service/notify/status.py)."""

    receiver: str
    state: DeliveryState = Field(
        description="sent: the receiver holds the alert's current state; pending: group "
                    "timers or a retry under way; muted (why) or silenced (silence_id): our own "
                    "receivers only, Alertmanager gets every alert; failed: error, failed_at; "
                    "held: rate limited, in the next digest")
    why: str = ""
    silence_id: str | None = None
    sent_at: Timestamp | None = Field(default=None, description="when it was first told the "
                                                                "level it holds")
    level_sent: int | None = None
    error: str | None = None
    failed_at: Timestamp | None = None


class VerdictOut(BaseModel):
    verdict: str  # failed, false_alarm, maintenance, unknown
    mode: str | None  # failed: the failure mode
    failed_at: Timestamp | None
    comment: str
    actor: str  # the token's name, or link[:name] for a signed link
    via: str  # api or link
    at: Timestamp


class AlertOut(BaseModel):
    id: int
    alertname: str
    fingerprint: str = Field(description="stable identity: 16 hex characters of a hash of "
                                         "the sorted identity labels (alertname, entity)")
    labels: dict[str, str]
    entity: str
    scope: str
    node: str
    level: int
    peak_level: int
    state: str
    risk: float
    started_at: Timestamp
    updated_at: Timestamp
    resolved_at: Timestamp | None
    explanation: list[SignalOut]
    alertmanager: list[AlertmanagerOut] = Field(
        default_factory=list, description="where an alertmanager receiver is configured")
    deliveries: list[DeliveryOut] = Field(
        default_factory=list, description="one per receiver the alert routes to: what "
                                          "happened to it there")
    acked_by: str | None = None  # who acknowledged it (no repeats until it resolves)
    acked_at: Timestamp | None = None
    verdict: VerdictOut | None = Field(default=None, description=(
        "the newest operator verdict (POST /v1/alerts/{id}/verdict); none yet: null"))


class LevelChange(BaseModel):
    at: Timestamp
    old_level: int
    new_level: int
    risk: float


class AlertDetail(AlertOut):
    history: list[LevelChange]


class AlertList(BaseModel):
    limit: int
    next_cursor: str | None = Field(description=NEXT_CURSOR_DOC)
    alerts: list[AlertOut]


class NodeDetail(BaseModel):
    node: str
    risk: float | None = Field(description=RISK_DOC)
    level: int
    gpus: list[EntityOut]
    links: list[EntityOut]
    ports: list[EntityOut]
    psus: list[EntityOut] = Field(default_factory=list, description="Its power supplies")
    fans: list[EntityOut] = Field(default_factory=list, description="Its chassis fans")
    own: EntityOut | None = Field(default=None, description=(
        "The node's own sensors (inlet temperature, redundancy, host memory errors, BMC and "
        "SXid events) as one entity: the risk and level of its NodeAtRisk alert"))
    sensors: list[MetricOut] = Field(default_factory=list, description=(
        "The newest value of each of the node's own metrics and events"))
    alerts: list[AlertOut]
    silent: bool = Field(default=False, description=SILENT_DOC)
    silent_since: Timestamp | None = Field(default=None, description=SINCE_DOC)


class ModelOut(BaseModel):
    """The LSTM predictor's state: without a model the service scores with rules and
    thresholds only, and `reason` says why."""

    loaded: bool
    path: str
    version: str
    reason: str


class WindowOut(BaseModel):
    """When the failure is expected (models/predictor/interval.py): an interval that held the
    failure for `coverage` of such alerts on fleets it was not fitted on, from the source that
    gave the narrowest one."""

    mode: str
    after_h: float | None = Field(description=(
        "expected after this many hours (0: from now); null when withheld"))
    within_h: float | None = Field(description=(
        "... and within this many; null when withheld, or when the calibration has no upper "
        "bound for it"))
    probability: float = Field(description=(
        "the model's probability of failing within its raw window; for a growth rule its risk, "
        "not a probability"))
    text: str = Field(description=(
        'e.g. "HBM failure expected in 6 h to 1.5 days (80% of such alerts; growth rule)", or '
        "why no window is shown"))
    source: str = Field(default="", description="growth (a rule's extrapolation) or model")
    coverage: float | None = Field(default=None, description=(
        "the share of pre-failure alerts whose failure fell inside such windows on held-out "
        "fleets; null for an uncalibrated window (no calibration shipped)"))
    withheld: bool = Field(default=False, description=(
        "true when every source's window is no narrower than a constant window of the same "
        "coverage: it would tell nothing, so none is shown and `text` says why"))


class PredictionOut(BaseModel):
    model: str  # the model version
    # Calibrated probability of failure per "<mode>@<horizon>h" head, e.g. M1_hbm@24h.
    probabilities: dict[str, float]
    window: WindowOut | None = None  # None while no mode is more likely than not


class GpuDetail(BaseModel):
    gpu: str
    node: str
    risk: float | None
    level: int
    metrics: list[MetricOut]
    explanation: list[SignalOut]  # rules, thresholds and the model (rule lstm_<mode>)
    links: list[EntityOut]
    alerts: list[AlertOut]  # open alerts of the GPU and of its NVLink links
    prediction: PredictionOut | None = None  # None without a model or before its first hour
    # The model's predicted window, or where it has none a growth rule's (its probability is
    # then the rule's risk): the same as the GPU's entry in /v1/nodes/{node}.
    window: WindowOut | None = None
    identity: IdentityOut | None = Field(default=None, description=(
        "The board in the slot (UUID, serial, bus id, model, VBIOS, driver) and the boards "
        "before it; null until a source says it"))


class CollectorOut(BaseModel):
    up: bool
    reason: str
    exhausted: bool


class DetectorOut(BaseModel):
    ok: bool  # False while it raises: its findings are left out, the others still score
    errors: int  # ticks it failed on since start
    reason: str  # its newest failure, kept after it recovers


class Readiness(BaseModel):
    ready: bool
    reasons: list[str]
    collectors: dict[str, CollectorOut]
    model: ModelOut | None = None  # None: no model configured (detectors.model.path)
    # A failing detector degrades scoring but does not make the service unready: the rules
    # still score. Ticks that fail outright do (reasons).
    detectors: dict[str, DetectorOut] = {}
    cluster: ClusterTruth | None = Field(default=None, description=(
        "who leads, whether this replica does and whether its sender and remediation run"))


class RejectionOut(BaseModel):
    line: int | None
    reason: str
    entity: str | None
    metric: str | None


class Problem(BaseModel):
    """Every error body (RFC 9457 problem details, `application/problem+json`); extension
    members such as `retry_after` or `errors` go beside these."""

    type: str  # a relative URI, /problems/<slug>, or about:blank for a bare HTTP status
    title: str  # the same for every problem of a type
    status: int
    detail: str  # this occurrence
    instance: str  # the request's path


class WriteError(Problem):
    """The write endpoints' errors: InfluxDB's `error` key (which Telegraf logs) beside the
    problem members, as `application/json`."""

    error: str
    accepted: int = 0
    rejected: int = 0
    rejections: list[RejectionOut] = []
    # The gzip body arrived cut short: the whole lines before the cut were kept, and a sender
    # holding the complete body may send it again (its points merge, last write wins).
    truncated: bool = False
    # A 503 for new entities past one request's share: the nodes whose samples are still to
    # come (send the body again, or just their lines; null: send it all) and when.
    pending_nodes: list[str] | None = None
    retry_after: int | None = None


class SeriesPoints(BaseModel):
    """One metric of an entity over time: `times` (bucket starts, epoch seconds) and `values`
    side by side; a bucket without data is left out."""

    metric: str
    unit: str
    kind: str  # gauge, counter, state, event, risk
    rate: bool  # a counter as a per-second rate (reset-aware) rather than its raw value
    agg: str  # how a bucket's samples became one value: mean, max, min, last, count
    times: list[float] = Field(description="bucket starts in epoch seconds (a point array "
                                           "keeps epoch time, as InfluxDB and Prometheus do)")
    values: list[float]


class HistoryOut(BaseModel):
    entity: str
    scope: str
    start: Timestamp  # inclusive
    end: Timestamp  # exclusive
    step: int  # bucket width in seconds
    source: str  # influxdb or sqlite
    series: list[SeriesPoints]


class GridGpu(BaseModel):
    """One cell of the fleet grid: a GPU with its NVLink links folded in."""

    gpu: str
    risk: float | None  # None until a tick has scored it
    level: int  # of its own open alert, 0 when none
    link_risk: float | None  # its riskiest link's risk; None without links
    link_level: int  # its worst link's open alert level
    worst_link: str | None  # that link's key, when one is above zero risk or alerting
    silent: bool = Field(default=False, description=SILENT_DOC)
    silent_since: Timestamp | None = Field(default=None, description=SINCE_DOC)


class GridPort(BaseModel):
    port: str
    risk: float | None
    level: int


class GridChassis(BaseModel):
    """A node's power supplies, fans and own sensors (inlet temperature, redundancy, host
    errors) folded into one cell of the fleet grid, as a GPU's links fold into its cell."""

    risk: float | None  # the highest of theirs; None until a tick has scored one
    level: int  # the worst open alert among them
    worst: str | None  # the entity behind it (a supply, a fan or the node), when above zero
    reason: SignalOut | None  # that entity's strongest signal
    psus: int
    fans: int


class GridNode(BaseModel):
    node: str
    risk: float | None = Field(description=RISK_DOC)
    level: int  # the worst open alert of the node's entities
    gpus: list[GridGpu]  # in GPU index order
    ports: list[GridPort]
    chassis: GridChassis | None = Field(default=None, description=(
        "its supplies, fans and own sensors as one cell; null where its BMC and host sensors "
        "report nothing"))
    silent: bool = Field(default=False, description=SILENT_DOC)
    silent_since: Timestamp | None = Field(default=None, description=SINCE_DOC)


class RiskyEntity(BaseModel):
    """One of the fleet's riskiest entities, with why and, where known, when."""

    entity: str
    scope: str
    node: str
    risk: float
    level: int
    reason: SignalOut | None  # the top signal of its explanation
    window: WindowOut | None


class FleetGrid(BaseModel):
    at: Timestamp | None  # the scoring tick the risks come from; None before the first
    total: int  # nodes in the fleet
    limit: int
    next_cursor: str | None = Field(description=NEXT_CURSOR_DOC)
    nodes: list[GridNode]  # in node name order
    riskiest: list[RiskyEntity]  # across the whole fleet, riskiest first
    missing_shards: list[str] = Field(default_factory=list, description=MISSING_DOC)
