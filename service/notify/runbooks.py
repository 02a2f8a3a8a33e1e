"""Runbooks: for every alertname gpuhealth raises, and every alert of the Prometheus rules it
ships (dashboards/prometheus/rules.yml), what it means, what to check and what to do.

One registry feeds the `runbook_url` of each alert (`{external_url}/v1/runbooks/{alertname}`,
served by service.api.runbooks) and docs/runbooks.md (service.commands.runbooks_doc), so the
page a message links to and the page in the repository cannot drift apart. The text names the
service's own API paths; an alert's own page in the console is its message's link."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

Source = Literal["gpuhealth", "prometheus"]
# Alertmanager accepts any label value; ours are Prometheus-style names, and a name from a URL
# is checked against this before it is looked up or echoed.
NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")


@dataclass(frozen=True, slots=True)
class Runbook:
    name: str
    source: Source  # gpuhealth's receivers, or the Prometheus rules
    severity: str
    means: str
    check: tuple[str, ...]
    act: tuple[str, ...]


def url(external_url: str, alertname: str) -> str:
    """The runbook link an alert carries."""
    return f"{external_url.rstrip('/')}/v1/runbooks/{alertname}"


def _registry(books: Iterable[Runbook]) -> Mapping[str, Runbook]:
    out: dict[str, Runbook] = {}
    for b in books:
        if not NAME.fullmatch(b.name):
            raise ValueError(f"runbook name {b.name!r} is not an alertname")
        if b.name in out:
            raise ValueError(f"two runbooks for {b.name}")
        out[b.name] = b
    return MappingProxyType(out)


_BY_LEVEL = "info, warning or critical: levels 1, 2, 3"
_VERDICT = ("Once the cause is known, say what it was: `POST /v1/alerts/{id}/verdict` "
            "(`failed` with its mode, `false_alarm`, `maintenance`); the fleet's labels "
            "teach the next model.")
_RELEASE = ("A node gpuhealth drained is resumed with `POST /v1/nodes/{node}/release` once "
            "repaired (never one drained by someone else).")
_PREDICTED = (
    "Level 1 (watch) is recorded only; level 2 (warning) means a failure is likely within "
    "about a day; level 3 (critical) means a failure is imminent (its predicted window ends "
    "within the hour) or a hard rule fired.")
_EXPLAIN = ("The alert's page (its message's link, or `GET /v1/alerts/{id}`): the explanation, "
            "strongest signal first, the predicted window where a growth rule gave one, and "
            "its level history. `stale` set means the data stopped: see `NodeNoData` and "
            "`GpuMissing`; `flapping` means it is held at level 2 until it settles.")

RUNBOOKS = _registry([
    Runbook(
        "GpuFailureRisk", "gpuhealth", _BY_LEVEL,
        "gpuhealth's fused failure risk of one GPU held above a level's enter threshold. "
        + _PREDICTED + " The hard rules: uncorrectable (double-bit) ECC errors, row-remap "
        "failure, retired pages at the DCGM limit, a critical Xid (48 DBE, 64 remap failure, "
        "74 NVLink, 79 fallen off the bus, 94/95 ECC, ...) and a GPU within 2 degrees of its "
        "shutdown temperature.",
        (_EXPLAIN,
         "`GET /v1/gpus/{node}:gpu{N}`: the GPU's latest metrics and risk.",
         "On the node: `nvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT,TEMPERATURE` and "
         "`dmesg | grep -i xid`.",
         "Whether remediation acted on it: `GET /v1/actions`."),
        ("Level 3: move the node's jobs off (remediation does it in `auto`; in `approve`, "
         "`POST /v1/actions/{id}/approve`), then run diagnostics (`dcgmi diag -r 3`); a DBE, a "
         "remap failure or a recurring Xid 79 is a hardware replacement.",
         "Level 2: drain the node at the next job boundary and check it then.",
         "Level 1: nothing yet; it is on the console.",
         _VERDICT, _RELEASE)),
    Runbook(
        "NvlinkFailureRisk", "gpuhealth", _BY_LEVEL,
        "The failure risk of one NVLink link of a GPU (`link` label) held above a level's "
        "enter threshold: growing CRC, replay or recovery counts, or the link down (a hard "
        "rule). " + _PREDICTED,
        (_EXPLAIN,
         "`GET /v1/links/{node}:gpu{N}:nvlink{L}/metrics`: the link's counters over time.",
         "On the node: `nvidia-smi nvlink -s -i N` (state) and `nvidia-smi nvlink -e -i N` "
         "(error counters); `dmesg | grep -i xid` for Xid 74.",
         "Whether other links of the same NVSwitch or GPU are rising too (a switch or "
         "baseboard fault rather than one link): `GET /v1/nodes/{node}`."),
        ("Level 3 or a link down: jobs that span the node's GPUs run degraded or hang; move "
         "them off and reset the GPUs (or reboot); a link that stays down after a reset is a "
         "baseboard or NVSwitch repair.",
         "Level 2: drain at the next job boundary.",
         _VERDICT, _RELEASE)),
    Runbook(
        "IbPortFailureRisk", "gpuhealth", _BY_LEVEL,
        "The failure risk of one InfiniBand port (`device`, `port` labels) held above a "
        "level's enter threshold: bit-error rate up a thousandfold or above 1e-12, link "
        "flaps, or the port not ACTIVE for longer than the hard rule's hold. " + _PREDICTED,
        (_EXPLAIN,
         "`GET /v1/ports/{node}:{device}:{port}/metrics`: its counters and state over time.",
         "On the node: `ibstat {device} {port}`, `perfquery` (symbol and link-downed "
         "counters), `mlxlink -d {device} -p {port}` (BER, cable and module).",
         "The switch side: ports of the same leaf switch alerting together point at the "
         "switch, not the node."),
        ("A port down or flapping: multi-node jobs on the node stall; move them off, reseat or "
         "replace the cable or transceiver, then watch the BER fall back.",
         "A rising BER alone (level 2): plan the cable swap; the port still carries traffic.",
         _VERDICT, _RELEASE)),
    Runbook(
        "PsuFailureRisk", "gpuhealth", _BY_LEVEL,
        "One power supply of the node (`entity` n1:psu<id>, the id its BMC gives) failed or "
        "stopped delivering while it is not a spare by design. Level 2: the node's other "
        "supplies carry it, but it has no margin left; level 3: it was the node's last "
        "delivering supply, the node is about to lose power.",
        (_EXPLAIN,
         "`GET /v1/nodes/{node}`: every supply of the node with its state; "
         "`GET /v1/psus/{node}:psu{id}/metrics`: its health, state, input voltage and output "
         "over time.",
         "The BMC: its event log (`ipmitool sel elist`, Redfish LogServices) and the supply's "
         "LEDs; a supply without input (its input voltage 0) is a cord or PDU, not the supply."),
        ("Level 2: replace the supply at the next job boundary (hot-swap where the chassis "
         "allows); do not drain the node for it.",
         "Level 3: move the node's jobs off now (it is drained like a failed GPU), then "
         "restore power to a second supply.", _VERDICT, _RELEASE)),
    Runbook(
        "FanFailureRisk", "gpuhealth", _BY_LEVEL,
        "One chassis fan (`entity` n1:fan<id>) failed or spins below its lower critical "
        "threshold for two readings in a row. The other fans speed up to cover it; GPUs near "
        "it run hotter and may throttle.",
        (_EXPLAIN,
         "`GET /v1/fans/{node}:fan{id}/metrics`: its speed against its threshold; the node's "
         "inlet temperature and its GPUs' temperatures beside it (`GET /v1/nodes/{node}`).",
         "The BMC's event log for the fan and the fan module's seating."),
        ("Replace the fan module at the next job boundary; no drain unless GPU temperature "
         "alerts follow.", _VERDICT, _RELEASE)),
    Runbook(
        "NodeAtRisk", "gpuhealth", _BY_LEVEL,
        "A node-level risk alert from the node's own sensors: inlet temperature over its limit, "
        "power supply redundancy lost, an uncorrectable host memory error, or an NVSwitch SXid. "
        "As the source of the node inhibit rule it mutes the alerts of its own GPUs, links and "
        "ports at its level or below.",
        ("`GET /v1/nodes/{node}`: the node's own sensors (`own`, `sensors`), its supplies, "
         "fans, GPUs, links and ports with risk, level and explanation.", _EXPLAIN),
        ("Inlet temperature: the room or rack's cooling, not the node; check its neighbours.",
         "Redundancy lost (level 2): replace the failed supply at the next job boundary.",
         "Host memory UE or a fatal SXid (level 3): the node is drained; replace the DIMM "
         "(EDAC names it) or reset the NVSwitch fabric (reboot) before it returns.",
         _VERDICT, _RELEASE)),
    Runbook(
        "NodeNoData", "gpuhealth", "warning (level 2)",
        "Every GPU, link and port of the node has telemetry older than `stale_after_s`. Their "
        "levels are frozen (stale data neither raises nor resolves an alert, and nothing is "
        "drained on it), and this alert mutes the node's own alerts of warning or lower; a "
        "critical one still pages. Silence while an agent drains its spool or the service "
        "backfills (data arriving late) is not silence.",
        ("Is the node up: ping, ssh, its BMC's power state and event log (a power supply or "
         "a board fault silences a node first).",
         "Is its agent running and reaching the service: `gpuhealth agent` on the node, its "
         "spool's size, `GET /v1/collectors` (`up` and the reason), network or token errors "
         "in the agent's log.",
         "Many nodes at once: a network, an agent release or the service itself "
         "(`FleetStorm`, `GpuHealthScoringStopped`)."),
        ("Node down: treat it as a node failure (power, board); its jobs are already lost.",
         "Agent down or cut off: restart it or fix the path; spooled data is scored when it "
         "arrives, and hard evidence in it (an Xid 79) alerts then.",
         "Planned downtime: silence the node (`POST /v1/silences`, `node=...`) for the "
         "maintenance window.")),
    Runbook(
        "GpuMissing", "gpuhealth", "warning (level 2)",
        "One GPU stopped reporting while the other GPUs, links or ports of its node still "
        "report: it fell off the bus (Xid 79), or its collector no longer sees it. Its own "
        "level is frozen on stale data, so this alert is what says so.",
        ("On the node: `nvidia-smi -L` (how many GPUs the driver sees), "
         "`lspci | grep -i nvidia` (how many the bus sees), `dmesg | grep -i -e xid -e NVRM`.",
         "The collector: a DCGM exporter or agent configured to skip that GPU, or restarted "
         "with another GPU list (`GET /v1/collectors`)."),
        ("Fallen off the bus: move the node's jobs off and reset or reboot; a GPU that falls "
         "off again is a hardware replacement.",
         "A collector change: fix its GPU list; the alert resolves when the GPU reports.",
         _VERDICT)),
    Runbook(
        "FleetStorm", "gpuhealth", "critical (level 3)",
        "At least `notify.storm.fraction` of the nodes (and `min_nodes`) entered level 2 or "
        "above within `window_s`: something fleet-wide (a driver or firmware roll-out, "
        "cooling, power or fabric) is likelier than that many nodes failing at once. Its "
        "page names the nodes and lists every hard fault under it (DBE, Xid 79, a link down, "
        "near-shutdown); it mutes the per-node critical pages (ours, and Alertmanager's with "
        "the documented rule), which stay visible as firing and muted; and the remediation "
        "breaker trips, so nothing is drained automatically.",
        ("The storm page's nodes and reasons: what do they share (rack, PDU, leaf switch, "
         "driver or firmware version, a recent change)?",
         "`GET /v1/groups`: the muted per-node alerts and what mutes them.",
         "Mostly `NodeNoData`: a monitoring outage (network, agents, the service), not "
         "hardware."),
        ("Handle each hard fault the page lists as its own page: they are real failures.",
         "Fix or roll back the common cause.",
         "Reset the breaker once it is understood: `POST /v1/breaker/reset` (admin); "
         "queued actions from before stay expired. The storm resolves once fewer than half "
         "of its threshold of nodes are at risk and none entered for half the window.")),
    Runbook(
        "ModelRetraining", "gpuhealth", "info (promoted) or warning (not promoted)",
        "The scheduled retraining (`learning.retrain`) finished: a new model was promoted, or "
        "it was not (worse on the agreed metrics, or training failed). Sent only to "
        "`learning.retrain.notify_receiver`.",
        ("`GET /v1/models`: the active model, a challenger in shadow and the audit.",),
        ("Promoted and alerting worse: `POST /v1/models/rollback` (or `gpuhealth model "
         "rollback`) returns to the model before it.",
         "Not promoted: the message says why; the active model keeps scoring.")),
    Runbook(
        "GpuHealthWatchdog", "prometheus", "none",
        "Always firing, by design: it proves that Prometheus evaluates the gpuhealth rules and "
        "that Alertmanager delivers. Route it alone to a dead-man's-switch receiver that pages "
        "when it stops arriving.",
        ("If the switch paged: is Prometheus up and evaluating "
         "(`prometheus_rule_evaluation_failures_total`), does it reach Alertmanager "
         "(`prometheus_notifications_errors_total`), does Alertmanager's route still send "
         "`alertname=\"GpuHealthWatchdog\"` to the switch?",),
        ("Never silence or inhibit it; fix the path it stopped on. While it is broken, no "
         "Prometheus alert (including `GpuHealthDown`) reaches anyone.",)),
    Runbook(
        "GpuHealthDown", "prometheus", "critical",
        "Prometheus cannot scrape a gpuhealth instance (`up == 0` for 5 minutes): the "
        "process is dead, hung or unreachable. While it is, no risk is computed and nothing "
        "is paged; gpuhealth's alerts in Alertmanager expire after `resolve_timeout_s`. This "
        "page may not answer now: the same text is in docs/runbooks.md.",
        ("The process: its unit or container state and log; `GET /healthz` and `GET /readyz` "
         "on the instance.",
         "The scrape: Prometheus's target page names the error (connection refused, "
         "timeout, TLS; 401 when `api.read_requires_token` is set and the scrape sends no "
         "read token).",
         "With replicas: `GET /v1/cluster` on another replica says who holds the leader "
         "lease; a standby takes over paging when the leader dies."),
        ("Restart it; a restart keeps open alerts and neither re-pages nor loses a resolve.",
         "While it stays down, the fleet is unwatched: check nodes by hand (`dmesg | grep -i "
         "xid`, `nvidia-smi`) for anything urgent.")),
    Runbook(
        "GpuHealthAbsent", "prometheus", "critical",
        "Prometheus has no target of the job `gpuhealth` at all for 10 minutes: the service "
        "left service discovery, or the scrape job has another name than the rules select.",
        ("Prometheus's service discovery and targets pages; a failed config reload in its "
         "log.",
         "The job name: the rules select `job=\"gpuhealth\"`; edit them if your scrape job "
         "is named otherwise.",
         "The deployment: a pod or unit that no longer exists."),
        ("Restore the scrape config or the deployment; then `GpuHealthDown` or nothing "
         "says the rest.",)),
    Runbook(
        "GpuHealthMetricsAbsent", "prometheus", "critical",
        "A gpuhealth target answers scrapes (`up == 1`) but without the service's own series "
        "(`gpuhealth_score_ticks_total`, which it always exports) for 10 minutes: something "
        "else answers at that address, or the scrape's `metrics_path` is wrong.",
        ("`curl -s http://{instance}/metrics | grep ^gpuhealth_` from the Prometheus host.",
         "The scrape config's address, `metrics_path` (`/metrics`) and scheme."),
        ("Point the scrape at the service.",)),
    Runbook(
        "GpuHealthScoringStopped", "prometheus", "critical",
        "gpuhealth is up but has run no scoring tick for 10 minutes: no risk is computed, so "
        "no failure will be predicted.",
        ("`GET /readyz` says why; `gpuhealth_score_tick_failures_total` counts ticks that "
         "raised, and the log has their traceback.",
         "A tick that never ends: `gpuhealth_last_tick_duration_seconds`, CPU and memory of "
         "the process; `rate(gpuhealth_score_tick_phase_seconds_total[5m])` says which phase "
         "the time goes to (`lock`: waiting for ingest)."),
        ("Restart the service; if ticks keep failing, roll back the last change (model: "
         "`POST /v1/models/rollback`).",)),
    Runbook(
        "GpuHealthCollectorDown", "prometheus", "warning",
        "A collector (the service's own, or a node agent's: `host` label) has failed for 5 "
        "minutes. Its entities get no new data, so their risk cannot rise; after "
        "`stale_after_s` their node raises `NodeNoData`.",
        ("`gpuhealth_collector_last_error` and `GET /v1/collectors`: the reason.",
         "On the host: the source it reads (DCGM, `nvidia-smi`, sysfs, BMC) answering?"),
        ("Fix the source or the agent; the collector comes back up on its next round.",)),
    Runbook(
        "GpuHealthNotificationsFailing", "prometheus", "warning",
        "Notifications to a receiver failed after their retries in the last 15 minutes: "
        "alerts routed only there are not reaching anyone.",
        ("The service log for the receiver (status, reason); `GET /v1/groups` and the "
         "alerts' delivery state for what was not sent.",
         "The receiver's side: credentials, rate limits, a changed URL."),
        ("Fix the receiver; the group's next flush sends what failed (nothing was written "
         "to the notification log). Meanwhile watch the console.",)),
    Runbook(
        "GpuHealthRemediationBreakerOpen", "prometheus", "warning",
        "Too many nodes were acted on within the breaker's window (or a `FleetStorm` tripped "
        "it): remediation is stopped until an admin resets it.",
        ("`GET /v1/breaker` and `GET /v1/actions`: what tripped it.",),
        ("Once the cause is understood: `POST /v1/breaker/reset` (admin token). Actions "
         "queued before the reset stay expired.",)),
])


def get(name: str) -> Runbook | None:
    return RUNBOOKS.get(name) if NAME.fullmatch(name) else None


def markdown(b: Runbook, heading: str = "#") -> str:
    """One runbook as markdown (the API's markdown answer and a section of docs/runbooks.md)."""
    raised = ("gpuhealth's receivers" if b.source == "gpuhealth"
              else "the Prometheus rules (dashboards/prometheus/rules.yml)")
    lines = [f"{heading} {b.name}", "", f"Raised by {raised}; severity {b.severity}.", "",
             b.means, "", "**Check**", ""]
    lines += [f"- {c}" for c in b.check]
    lines += ["", "**Do**", ""]
    lines += [f"- {a}" for a in b.act]
    return "\n".join(lines) + "\n"
