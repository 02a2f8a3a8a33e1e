"""Alerts about nodes and the fleet rather than one GPU, link or port:

- `NodeNoData` (level 2): every entity of a node is silent. The node-level alert mutes its
  GPUs' alerts (inhibition), and no action is ever taken on stale data.
- `GpuMissing` (level 2): a GPU went silent while other entities of its node still report
  (gpud checks the expected GPU count the same way). A GPU that falls off the bus goes
  silent; freezing its level on stale data alone would hide exactly that failure.
- `FleetStorm` (level 3): at least `fraction` of the nodes (and `min_nodes`, in a fleet of at
  least `min_fleet`) entered level 2 or above within `window_s`. Something fleet-wide (a bad
  driver roll-out, a cooling or fabric incident) is more likely than that many nodes failing
  at once: one page for the fleet mutes the per-node pages, and the remediation breaker trips
  so nothing is drained automatically. Its explanation names the hot nodes and every hard
  fault under it (service.stages.storm_report), so the one page still says which nodes are
  really broken.

History before trust: a name that reported at one moment only (a phantom from the wire, a
one-shot typo) raises no `NodeNoData` or `GpuMissing` when it falls silent, and a node counts
toward the fleet a storm's share is of only once it has a history (FleetHistory).

Silent is not behind: an entity is silent when nothing of it arrived for the stale limit (by
the service's clock), not when its newest sample is old. A node whose data arrives late (an
agent's backfill, a spool drained after an outage) is reporting: it raises no no-data alert,
and the level changes of its backfill count toward no storm (StormSettings).

Node and fleet alerts explain themselves in entries of the same shape as a rule's (rule,
signal, value, threshold, risk, hard); `summary_of` reads them back into one line.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, Field

from collectors.catalog import Scope
from collectors.frames import Batch, EntityTable
from models.detectors.findings import Signal
from service.stages.alert_machine import Transition

NODATA = "NodeNoData"
MISSING = "GpuMissing"
STORM = "FleetStorm"
FLEET = "fleet"  # the storm's entity
FLEET_NODE = "*"  # ... and its node label: every node ("*" is refused as a host name)
DERIVED = (NODATA, MISSING, STORM)
NODATA_LEVEL = MISSING_LEVEL = 2  # a human looks; no job moves on missing data alone
# Rules of the storm's explanation entries besides the hard faults (which keep their own).
STORM_NODE = "storm_node"  # one hot node: "n01 (xid 79): n01:gpu3 xid: Xid code logged ..."
STORM_MORE = "storm_more"  # the hot nodes not named
STORM_MUTES = "storm_mutes"  # what the storm mutes
MUTES = "mutes per-node level-3 pages; the remediation breaker is tripped"
SUMMARY_NODES = 5  # hot nodes a storm's one-line summary names
SUMMARY_HARD = 3  # ... and hard faults
# Across shards: this shard's (live, hot) nodes in, the fleet's (live, hot) out; None where
# this replica does not judge the storm (service.cluster.census).
FleetWide = Callable[[int, int], tuple[int, int] | None]


class StormSettings(BaseModel):
    """A fleet-wide storm: at least `fraction` of the nodes (and `min_nodes`) entered level 2
    or above within `window_s`. Then one fleet page is sent instead of one per node, and the
    remediation breaker trips.

    - `min_fleet`: no storm is judged in a fleet of fewer nodes (the larger of the declared
      size and the nodes reporting). In a small fleet a few nodes failing together is as
      likely a few real faults as one cause, and "3 of 4" would mute every page of it; there
      each node pages on its own. The share needed never falls below `min_nodes` either, so
      the smallest storm is 3 of 10 nodes by default, and 20 % above 15 nodes.
    - What counts: a node entering level 2 or above from its own telemetry, live. Derived
      alerts (NodeNoData, GpuMissing, the storm itself) never count, nor does an episode that
      began while the node's data arrived behind the live edge (an agent's backfill, a spool
      drain after an outage) or within `settle_s` after it caught up: its levels then still
      reflect history that arrived at once, not nodes failing together.
    - `names`: the storm's explanation names this many hot nodes (earliest first) with their
      top reasons, and says how many more; it lists every hard fault under it.
    - `history_s`: a node counts toward the fleet (the storm's and the breaker's fractions,
      without a declared `remediation.fleet_size`) once it has reported for this long; one
      heard in the service's first minute, after two steps. Names that just appeared on the
      wire cannot dilute a fraction (service.stages.fleet_alerts.FleetHistory)."""

    fraction: float = Field(default=0.2, gt=0, le=1)
    min_nodes: int = Field(default=3, ge=1)
    window_s: float = Field(default=600.0, gt=0)
    min_fleet: int = Field(default=10, ge=1)
    settle_s: float = Field(default=300.0, ge=0)
    names: int = Field(default=10, ge=1, le=100)
    history_s: float = Field(default=600.0, ge=0)



HISTORY_STEPS = 2  # arrivals spanning fewer steps than this: a one-shot name, never notifies


class FleetHistory:
    """Which nodes have a history, from when anything of them first and last arrived (by the
    service's clock: the window store's `born` and `touched`, per node its longest-reporting
    entity). Two questions:

    - May its silence notify (`NodeNoData`, `GpuMissing`)? Once its arrivals span
      HISTORY_STEPS steps: a one-shot name never does, a real node within seconds.
    - Does it count toward the fleet the storm's and the breaker's fractions are of? Once its
      arrivals span `history_s`: names an unknown sender starts re-sending cannot dilute the
      fleet while they are fresh. Nodes first heard within `grace_s` of the first arrival
      (a start: every node is new) count after HISTORY_STEPS steps. A declared fleet size
      (`remediation.fleet_size`) overrides both (service.tick.FleetCount)."""

    def __init__(self, history_s: float, grace_s: float) -> None:
        self.history_s, self.grace_s = history_s, grace_s
        self.first: float | None = None  # when anything first arrived (the fleet's start)
        # History the service replayed itself (a warm start, a replay: never the wire, whose
        # timestamps a sender chooses): node -> (oldest, newest) data time, until it spans
        # HISTORY_STEPS steps; then the node is `vouched`.
        self._data: dict[str, tuple[float, float]] = {}
        self.vouched: set[str] = set()
        # The same for GPUs (by key): one the replay vouches for may raise GpuMissing at once,
        # however soon after a restart it falls silent and whenever live rounds first named
        # it (writes arrive while the replay runs, so first arrivals say nothing then).
        self._gpu_data: dict[str, tuple[float, float]] = {}
        self.vouched_gpus: set[str] = set()
        self._tables: dict[int, tuple[EntityTable, list[str], npt.NDArray[np.intp]]] = {}

    def note(self, clean: Batch, step_s: float) -> None:
        """Accepted rows of a trusted ingest (not from the wire): their data times."""
        need = HISTORY_STEPS * step_s - 1e-9
        for scope, f in clean.frames.items():
            if not len(f):
                continue
            names, idx = self._nodes_of(f.entities)
            _vouch(names, idx[f.rows], f.ts, need, self._data, self.vouched)
            if scope is Scope.GPU:
                keys = [e.key for e in f.entities.entities]
                _vouch(keys, f.rows.astype(np.intp), f.ts, need, self._gpu_data,
                       self.vouched_gpus)

    def _nodes_of(self, table: EntityTable) -> tuple[list[str], npt.NDArray[np.intp]]:
        got = self._tables.get(id(table))
        if got is not None and got[0] is table:
            return got[1], got[2]
        pos: dict[str, int] = {}
        idx = np.fromiter((pos.setdefault(e.node, len(pos)) for e in table.entities),
                          np.intp, len(table))
        if len(self._tables) >= 64:
            self._tables.pop(next(iter(self._tables)))
        self._tables[id(table)] = (table, list(pos), idx)
        return list(pos), idx

    def forget(self, keep: Collection[str]) -> None:
        """Only what is known of the nodes in `keep` (the store's) stays."""
        kept = set(keep)
        self.vouched &= kept
        self.vouched_gpus = {k for k in self.vouched_gpus if k.split(":", 1)[0] in kept}
        self._gpu_data = {k: v for k, v in self._gpu_data.items() if k.split(":", 1)[0] in kept}
        self._data = {n: v for n, v in self._data.items() if n in keep}

    def notifiable(self, span: npt.NDArray[np.float64], step_s: float
                   ) -> npt.NDArray[np.bool_]:
        """Whether each span of arrivals (seconds; NaN: none) is long enough to notify."""
        with np.errstate(invalid="ignore"):
            return np.nan_to_num(span, nan=-1.0) >= HISTORY_STEPS * step_s - 1e-9

    def trusted(self, names: Sequence[str]) -> npt.NDArray[np.bool_]:
        """Which nodes a replayed history vouches for."""
        if not self.vouched:
            return np.zeros(len(names), bool)
        return np.fromiter((n in self.vouched for n in names), bool, len(names))

    def counted(self, now: float, born: npt.NDArray[np.float64],
                span: npt.NDArray[np.float64], step_s: float,
                trusted: npt.NDArray[np.bool_] | None = None) -> npt.NDArray[np.bool_]:
        """Whether each node (its first arrival, the span of its arrivals, whether a replayed
        history vouches for it) is of the fleet."""
        if self.first is None and np.isfinite(born).any():
            self.first = float(np.nanmin(born))
        if self.first is None:
            return np.zeros(len(born), bool)
        early = np.nan_to_num(born, nan=np.inf) - self.first <= self.grace_s
        long = np.nan_to_num(span, nan=-1.0) >= self.history_s
        known = self.notifiable(span, step_s)
        if trusted is not None:
            known |= trusted
        return known & (early | long)


def _vouch(names: list[str], of_row: npt.NDArray[np.intp], ts: npt.NDArray[np.float64],
           need: float, data: dict[str, tuple[float, float]], vouched: set[str]) -> None:
    """Widen each name's span of data times by these rows; past `need`, it is vouched for."""
    if vouched.issuperset(names):
        return
    lo = np.full(len(names), np.inf)
    hi = np.full(len(names), -np.inf)
    np.minimum.at(lo, of_row, ts)
    np.maximum.at(hi, of_row, ts)
    for i in np.flatnonzero(np.isfinite(lo) & np.isfinite(hi)).tolist():
        name = names[i]
        if name in vouched:
            continue
        a, b = data.get(name, (lo[i], hi[i]))
        a, b = min(a, lo[i]), max(b, hi[i])
        if b - a >= need:
            vouched.add(name)
            data.pop(name, None)
        else:
            data[name] = (a, b)


@dataclass(frozen=True, slots=True)
class StormCount:
    """What the storm was last judged on: the fleet's size, its hot nodes, and how many make
    a storm (0: the fleet is below `min_fleet`, no storm is judged)."""

    fleet: int = 0
    hot: int = 0
    need: int = 0


class FleetAlerts:
    def __init__(self, storm: StormSettings, grace_s: float = 60.0) -> None:
        self.storm = storm
        # No data alert is raised until the service has watched for this long: after a start
        # or restart everything looks stale until the first rounds arrive.
        self.grace_s = grace_s
        self.first: float | None = None
        self.nodata: dict[str, int] = {}  # node -> level of its open NodeNoData alert
        self.missing: dict[str, tuple[str, int]] = {}  # GPU key -> (node, level) GpuMissing
        self.entered: dict[str, float] = {}  # node -> when it last entered level >= 2, live
        # node -> when its data last arrived behind the live edge (kept settle_s after).
        self.behind: dict[str, float] = {}
        # Nodes whose level >= 2 episode began behind or settling: no storm entry until it ends.
        self.backfilled: set[str] = set()
        # node -> since when an alert restored at level 2+ holds it (a restart): an entry once
        # the node is heard from here (a shared store also holds other shards' alerts).
        self.restored: dict[str, float] = {}
        self.storm_level = 0
        self.count = StormCount()
        self.hot: list[str] = []  # this shard's hot nodes of the latest step, earliest first
        self.history = FleetHistory(storm.history_s, grace_s)

    def reset(self) -> None:
        """Forget every fleet-level alert (a replica taking over restores them)."""
        self.first = None
        self.nodata, self.missing, self.entered, self.behind = {}, {}, {}, {}
        self.backfilled, self.restored = set(), {}
        self.storm_level = 0
        self.count, self.hot = StormCount(), []
        self.history = FleetHistory(self.storm.history_s, self.grace_s)

    def forget_nodes(self, nodes: Collection[str]) -> None:
        """Drop what is known of `nodes` (handed to another shard) without resolving their
        alerts: the new owner restores and continues them."""
        for n in nodes:
            self.nodata.pop(n, None)
            self.entered.pop(n, None)
            self.behind.pop(n, None)
            self.restored.pop(n, None)
        self.backfilled -= set(nodes)
        self.missing = {k: v for k, v in self.missing.items() if v[0] not in nodes}
        self.hot = [n for n in self.hot if n not in nodes]

    def nodes(self) -> set[str]:
        """Nodes with fleet-level state here."""
        return {*self.nodata, *self.entered, *self.behind, *self.backfilled, *self.restored,
                *(node for node, _ in self.missing.values())}

    def restore(self, alertname: str, node: str, level: int, entity: str = "") -> None:
        if alertname == NODATA:
            self.nodata[node] = level
        elif alertname == MISSING:
            self.missing[entity] = (node, level)
        elif alertname == STORM:
            self.storm_level = level

    def restore_entry(self, node: str, at: float) -> None:
        """A node at level 2 or above since `at` (an open alert restored): a storm open before
        a restart keeps counting it for the rest of its window rather than ending at once."""
        self.restored[node] = max(at, self.restored.get(node, -math.inf))

    def step(self, now: float, nodes: list[str], node_silent: npt.NDArray[np.bool_],
             node_level: npt.NDArray[np.int8], raised: Mapping[str, int],
             missing: Mapping[str, tuple[int, str]] | None = None,
             fleet_size: int | None = None, fleet: FleetWide | None = None,
             behind: Mapping[str, float] | None = None,
             notifiable: npt.NDArray[np.bool_] | None = None,
             young: Collection[str] = ()) -> list[Transition]:
        """`node_silent`: nothing of the node arrived for the stale limit; `node_level`: the
        highest level of its entities; `raised`: nodes whose level rose to 2 or above this
        tick from their own telemetry (never a derived alert); `missing`: silent GPUs (key ->
        slot, node) of nodes that still report; `fleet_size`: the nodes a storm's fraction
        is of (default: every node named); `behind`: nodes whose data arrived behind the live
        edge, and when (their level changes are no storm entries); `notifiable`: nodes whose
        silence may raise NodeNoData, `young`: silent GPUs that may not raise GpuMissing (no
        history: FleetHistory; an alert already open stays). `fleet`, across shards:
        given this shard's (live, hot) nodes, the fleet's totals, or None where this replica
        does not judge the storm (service.cluster.census; alone, the local counts)."""
        if self.first is None:
            self.first = now
        watching = now - self.first >= self.grace_s
        out: list[Transition] = []
        pos = {name: i for i, name in enumerate(nodes)}
        silent_idx = np.flatnonzero(node_silent).tolist()
        for i in silent_idx if watching else []:
            if notifiable is not None and not notifiable[i]:
                continue
            name = nodes[i]
            if self.nodata.get(name, 0) == 0:
                self.nodata[name] = NODATA_LEVEL
                out.append(Transition(Scope.NODE, i, name, name, 0, NODATA_LEVEL, now, 1.0,
                                      alertname=NODATA))
        silent = {nodes[i] for i in silent_idx}
        for name in [n for n, lv in self.nodata.items() if lv and n not in silent]:
            self.nodata[name] = 0
            slot = pos.get(name, -1)
            out.append(Transition(Scope.NODE, slot, name, name, NODATA_LEVEL, 0, now, 0.0,
                                  alertname=NODATA))
        out += self._missing(now, missing or {}, watching, young)
        self._enter(now, pos, node_level, raised, behind or {}, silent)
        size = max(fleet_size if fleet_size is not None else len(nodes), 1)
        self.hot = sorted((n for n in self.entered if n in pos and node_level[pos[n]] >= 2),
                          key=lambda n: (self.entered[n], n))
        hot = len(self.hot)
        if fleet is not None:
            totals = fleet(size, hot)
            if totals is None:
                return out  # another replica judges the fleet's storm
            size, hot = max(totals[0], 1), totals[1]
        out += self._storm(now, size, hot)
        return out

    def _enter(self, now: float, pos: Mapping[str, int], node_level: npt.NDArray[np.int8],
               raised: Mapping[str, int], behind: Mapping[str, float],
               silent: Collection[str]) -> None:
        """Record this tick's storm entries: a node entering level 2 or above from live data.
        An episode that began while its data arrived behind the live edge, or within
        settle_s after it caught up, is no entry until its level falls below 2."""
        s = self.storm
        for name, at in behind.items():
            self.behind[name] = max(at, self.behind.get(name, -math.inf))
        self.behind = {n: t for n, t in self.behind.items() if now - t <= s.settle_s}
        self.backfilled = {n for n in self.backfilled if n in pos and node_level[pos[n]] >= 2}
        for name, lv in raised.items():
            if lv < 2:
                continue
            if name in self.behind or name in self.backfilled:
                self.backfilled.add(name)
            else:
                self.entered[name] = now
        for name, at in list(self.restored.items()):
            if name in pos and name not in silent:
                del self.restored[name]
                self.entered[name] = max(at, self.entered.get(name, -math.inf))
        self.restored = {n: t for n, t in self.restored.items() if now - t <= s.window_s}
        self.entered = {n: t for n, t in self.entered.items() if now - t <= s.window_s}

    def judge(self, now: float, fleet: int, hot: int) -> list[Transition]:
        """The storm judged on the fleet's totals across shards (the leader's part)."""
        return self._storm(now, max(fleet, 1), hot)

    def need(self, fleet: int) -> int:
        """Hot nodes that make a storm in a fleet of `fleet` nodes; 0 below `min_fleet`."""
        s = self.storm
        if fleet < s.min_fleet:
            return 0
        return max(s.min_nodes, math.ceil(s.fraction * fleet - 1e-9))

    def _storm(self, now: float, fleet: int, hot: int) -> list[Transition]:
        out: list[Transition] = []
        need = self.need(fleet)
        self.count = StormCount(fleet, hot, need)
        share = hot / fleet
        if self.storm_level == 0 and need and hot >= need:
            self.storm_level = 3
            out.append(Transition(Scope.NODE, -1, FLEET, FLEET_NODE, 0, 3, now, share,
                                  hard=False, alertname=STORM))
        elif self.storm_level and hot < need // 2 + 1 and not self._recent(now):
            self.storm_level = 0
            out.append(Transition(Scope.NODE, -1, FLEET, FLEET_NODE, 3, 0, now, share,
                                  alertname=STORM))
        return out

    def levels(self) -> dict[str, int]:
        """Open derived alerts' levels by entity key (a node, a GPU, the fleet)."""
        out = {node: lv for node, lv in self.nodata.items() if lv}
        out.update((key, lv) for key, (_, lv) in self.missing.items())
        if self.storm_level:
            out[FLEET] = self.storm_level
        return out

    def _missing(self, now: float, missing: Mapping[str, tuple[int, str]],
                 watching: bool, young: Collection[str] = ()) -> list[Transition]:
        out = []
        for key, (slot, node) in missing.items() if watching else ():
            if key not in self.missing and key not in young:
                self.missing[key] = (node, MISSING_LEVEL)
                out.append(Transition(Scope.GPU, slot, key, node, 0, MISSING_LEVEL, now, 1.0,
                                      alertname=MISSING))
        for key in [k for k in self.missing if k not in missing]:
            node, level = self.missing.pop(key)
            slot = -1  # reporting again (or its whole node is silent: NodeNoData says so)
            out.append(Transition(Scope.GPU, slot, key, node, level, 0, now, 0.0,
                                  alertname=MISSING))
        return out

    def _recent(self, now: float) -> bool:
        """A storm ends only once no node has entered level 2 for half the window."""
        return any(now - t < self.storm.window_s / 2 for t in self.entered.values())


# ---- explanations and summaries ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HotNode:
    """A node the storm names: its level, and its strongest entity's top signal (None when
    no rule speaks for it now: a level held through its dwell)."""

    node: str
    level: int
    entity: str = ""
    top: Signal | None = None


def duration_text(s: float) -> str:
    """45 s, 2 min 5 s, 10 min, 3 h 20 min, 2 d 4 h."""
    s = max(0, round(s))
    for big, small, a, b in ((86400, 3600, "d", "h"), (3600, 60, "h", "min"),
                             (60, 1, "min", "s")):
        if s >= big:
            hi, lo = divmod(s, big)
            lo //= small
            return f"{hi} {a} {lo} {b}" if lo else f"{hi} {a}"
    return f"{s} s"


def clock_text(ts: float) -> str:
    if not math.isfinite(ts):
        return "never"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))


def short_reason(rule: str, value: object, threshold: object) -> str:
    """A signal in a word or two: its rule, and its value where the rule has no threshold
    (a code, such as an Xid's: "xid 79")."""
    def finite(x: object) -> bool:
        return isinstance(x, int | float) and math.isfinite(x)

    if finite(value) and not finite(threshold):
        return f"{rule} {value:g}"
    return rule


def silence_signal(alertname: str, subject: str, node: str, now: float, last: float,
                   limit_s: float) -> Signal:
    """A NodeNoData or GpuMissing alert's one explanation entry: who is silent, for how long
    when raised (the value, in seconds), when anything of it last arrived (by the service's
    clock; NaN: never since this service started)."""
    also = f" while {node} reports" if alertname == MISSING else ""
    if math.isfinite(last):
        text = (f"{subject} silent for {duration_text(now - last)}{also}, last seen "
                f"{clock_text(last)}")
    else:
        text = f"{subject} silent{also}, not heard from since this service started"
    return Signal(alertname, text, now - last, limit_s, 1.0, False)


def node_signal(h: HotNode) -> Signal:
    """A hot node's entry: "n01 (xid 79): n01:gpu3 xid: Xid code logged in the last 10 min";
    the part before the first colon is what a summary shows (node names have none)."""
    if h.top is None:
        return Signal(STORM_NODE, f"{h.node} (level {h.level})", h.level, 2, 0.0, False)
    t = h.top
    return Signal(STORM_NODE, f"{h.node} ({short_reason(t.rule, t.value, t.threshold)}): "
                  f"{h.entity} {t.rule}: {t.signal}", h.level, 2, t.risk, False)


def hard_signal(entity: str, s: Mapping[str, Any]) -> Signal:
    """A hard fault under the storm, from an entry of its alert's explanation: "n03:gpu2:
    uncorrectable ECC errors since the driver loaded" (the entity, then the fault)."""
    def num(x: object) -> float:
        return float(x) if isinstance(x, int | float) else math.nan

    return Signal(str(s.get("rule", "")), f"{entity}: {s.get('signal', '')}", num(s.get("value")),
                  num(s.get("threshold")), num(s.get("risk")), True)


def storm_signals(count: StormCount, window_s: float, nodes: Sequence[HotNode],
                  hard: Sequence[Signal], muted: int, names: int) -> list[Signal]:
    """The storm's explanation, in this order: the count (value: hot nodes, threshold: how
    many make a storm, risk: their share of the fleet); the first `names` hot nodes; how
    many more; what it mutes (value: per-node level-3 alerts firing under it); then every
    hard fault under it (hard=True)."""
    share = count.hot / max(count.fleet, 1)
    out = [Signal(STORM, f"{count.hot} of {count.fleet} nodes at level >= 2 within "
                  f"{duration_text(window_s)}", count.hot, count.need, share, False)]
    out += [node_signal(h) for h in nodes[:names]]
    more = count.hot - min(len(nodes), names)
    if more > 0:
        out.append(Signal(STORM_MORE, f"+{more} more nodes at level >= 2", more, math.nan, 0.0,
                          False))
    out.append(Signal(STORM_MUTES, MUTES, muted, math.nan, 0.0, False))
    out += hard
    return out


def derived_summary(alertname: str, explanation: Sequence[Mapping[str, Any]], risk: float
                    ) -> str | None:
    """One line for a node or fleet alert from its explanation; None for any other alert.
    FleetStorm: "FleetStorm: 5 of 16 nodes at level >= 2 within 10 min: n01 (xid 79),
    n02 (dbe), ... +3 more; 2 hard faults: n01:gpu3 xid 79, n02:gpu0 dbe";
    NodeNoData: "NodeNoData: n3 silent for 1 min 5 s, last seen 2023-11-14 22:13:20 UTC"."""
    if alertname == STORM:
        return _storm_summary(explanation, risk)
    if alertname in (NODATA, MISSING):
        head = explanation[0].get("signal") if explanation else None
        return f"{alertname}: {head}" if head else None
    return None


def _storm_summary(expl: Sequence[Mapping[str, Any]], risk: float) -> str:
    head = next((e for e in expl if e.get("rule") == STORM), None)
    if head is None:  # stored before storms explained themselves
        return f"{STORM}: {risk:.0%} of the fleet entered level >= 2"
    out = f"{STORM}: {head.get('signal')}"
    names = [str(e.get("signal", "")).split(":", 1)[0] for e in expl
             if e.get("rule") == STORM_NODE][:SUMMARY_NODES]
    hot = head.get("value")
    more = int(hot) - len(names) if isinstance(hot, int | float) else 0
    if names:
        out += ": " + ", ".join(names) + (f" +{more} more" if more > 0 else "")
    hard = [e for e in expl if e.get("hard")]
    if not hard:
        return out + "; no hard fault"
    faults = [f"{str(e.get('signal', '')).split(': ', 1)[0]} "
              f"{short_reason(str(e.get('rule')), e.get('value'), e.get('threshold'))}"
              for e in hard[:SUMMARY_HARD]]
    rest = len(hard) - len(faults)
    return (out + f"; {len(hard)} hard fault{'s' if len(hard) > 1 else ''}: "
            + ", ".join(faults) + (f" +{rest} more" if rest > 0 else ""))
