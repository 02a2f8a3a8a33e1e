// gpuhealth console: hash-routed pages over the service's JSON API, polled every few seconds.
// No framework and no build step: this file is served as is by the service (service/console).
"use strict";

const POLL_MS = 5000;
const LEVEL_NAMES = ["ok", "record", "email", "page"];
const KEY_METRICS = ["gpu_temp", "mem_temp", "power_draw"];
const VERDICTS = ["failed", "false_alarm", "maintenance", "unknown"];
// The enum readings of the wire schema (docs/metrics.md), in words.
const HEALTH = ["OK", "Warning", "Critical"];
const PSU_STATE = ["delivering", "standby by design", "absent", "not delivering"];
const UNREADABLE = ["readable", "Unknown Error", "requires reset", "lost (off the bus)",
  "nvidia-smi timed out", "not found"];
const MODES = ["M1_hbm", "M2_gpu_hard", "M3_nvlink", "M4_ib_link", "M5_thermal", "M6_sram",
  "M7_unobservable"];
const state = { page: null, arg: null, timer: null, pick: null, busy: false, again: false,
                remediationOff: false, notifyOff: false, offCheckedAt: 0, diagOff: false,
                diagCheckedAt: 0 };

// ---- helpers ----------------------------------------------------------------------------------

function esc(x) {
  return String(x ?? "").replace(/[&<>"']/g, c => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;",
    '"': "&quot;", "'": "&#39;" }[c]));
}
const $ = sel => document.querySelector(sel);
function fmtRisk(r) { return r === null || r === undefined ? "–" : r.toFixed(2); }
// The API's timestamps are RFC 3339 strings; history point arrays (`times`) stay epoch seconds.
function fmtTime(t) {
  if (t === null || t === undefined) return "–";
  const d = typeof t === "number" ? new Date(t * 1000) : new Date(t);
  return isNaN(d) ? String(t) : d.toISOString().replace("T", " ").slice(0, 19) + "Z";
}
// `quiet`: what happened instead of the level's action (an alert muted at level 3 was not
// paged: its badge says so instead of reading "3 page").
function levelBadge(level, quiet) {
  const l = level || 0;
  return quiet
    ? `<span class="lvl lvl-${l} quiet" data-level="${l}" title="level ${l}, ${esc(quiet)}">${l}
        ${LEVEL_NAMES[l] || ""} · ${esc(quiet)}</span>`
    : `<span class="lvl lvl-${l}" data-level="${l}">${l} ${LEVEL_NAMES[l] || ""}</span>`;
}
// A signal's value in words where the API gives them (a state's name, a unit, an Xid).
function valueText(text, v) {
  if (text) return text;
  return v === null || v === undefined ? "" : Number(v).toPrecision(3);
}
function reason(sig) {
  if (!sig) return "";
  const v = valueText(sig.value_text, sig.value);
  return `<b>${esc(sig.rule)}</b>: ${esc(sig.signal)}${v ? " = " + esc(v) : ""}`;
}
function nodeLink(node) {
  return `<a href="#/node/${encodeURIComponent(node)}">${esc(node)}</a>`;
}
// An alert's or entity's name: its node linked, then the rest of its key. A node alert's entity
// is its node; the fleet's (FleetStorm: entity "fleet", node "*") has no node to link.
function entityName(x) {
  if (x.entity === x.node) return nodeLink(x.node);
  if (x.entity.startsWith(`${x.node}:`)) return nodeLink(x.node) + esc(x.entity.slice(x.node.length));
  return `<span class="fleetwide">${esc(x.entity)}${x.node && x.node !== "*" ? "" : " (all nodes)"}</span>`;
}
const DERIVED_REASON = {
  NodeNoData: a => `no data: every GPU, link and port of ${a.node} stopped reporting`,
  GpuMissing: a => `${a.entity} stopped reporting while its node still reports`,
  FleetStorm: a => `${Math.round((a.risk || 0) * 100)}% of the fleet's nodes at level 2 or
    above; per-node alerts are muted under it`,
};
// Why an alert fires: its top signal; a node or fleet alert without signals says what it is.
// A storm lists the hard faults under it (signals with hard=true), so none hides behind it.
function alertReason(a) {
  const ex = a.explanation || [];
  if (!ex.length) {
    const f = DERIVED_REASON[a.alertname];
    return f ? `<span class="derived">${esc(f(a))}</span>` : "";
  }
  if (a.alertname !== "FleetStorm") return reason(ex[0]);
  const hard = ex.filter(e => e.hard);
  const rest = ex.length - 1;
  return `${reason(ex[0])}${rest ? ` <span class="muted">+${rest} more</span>` : ""}${hard.length
    ? `<ul class="hard">${hard.slice(0, 8).map(e => `<li>${reason(e)}</li>`).join("")}${hard.length > 8
      ? `<li class="muted">and ${hard.length - 8} more hard faults</li>` : ""}</ul>` : ""}`;
}
function token() { return sessionStorage.getItem("gpuhealth-token") || ""; }
function newKey() {
  return (self.crypto && crypto.randomUUID) ? crypto.randomUUID()
    : `${Date.now()}-${Math.random().toString(36).slice(2)}`;
}

// Every call answers {ok, status, body}: a failed request is shown on the page, never thrown.
async function api(path, opts = {}) {
  const headers = { Accept: "application/json", ...(opts.headers || {}) };
  const t = token();
  if (t) headers.Authorization = `Bearer ${t}`;
  let body;
  if (opts.json !== undefined) {
    headers["Content-Type"] = "application/json";
    headers["Idempotency-Key"] = newKey();
    body = JSON.stringify(opts.json);
  }
  try {
    const r = await fetch(path, { method: opts.method || "GET", headers, body });
    const text = await r.text();
    let parsed = null;
    try { parsed = text ? JSON.parse(text) : null; } catch (e) { parsed = { detail: text }; }
    return { ok: r.ok, status: r.status, body: parsed };
  } catch (e) {
    return { ok: false, status: 0, body: { detail: `the service did not answer (${e.message})` } };
  }
}
// A whole listing: every list endpoint pages with `limit` and `cursor` and answers
// `next_cursor` (null on the last page). The first page's answer is kept, with `items` holding
// every page's; `maxPages` bounds the reads on a very large fleet.
async function apiAll(path, items, maxPages = 50) {
  const sep = path.includes("?") ? "&" : "?";
  const first = await api(path);
  if (!first.ok) return first;
  let res = first;
  for (let n = 1; res.body.next_cursor && n < maxPages; n++) {
    res = await api(`${path}${sep}cursor=${encodeURIComponent(res.body.next_cursor)}`);
    if (!res.ok) return res;
    first.body[items] = first.body[items].concat(res.body[items]);
  }
  first.body.next_cursor = res.body.next_cursor;
  return first;
}
function problem(res) {
  const d = res.body && (res.body.detail || res.body.title);
  if (res.status === 401) return `needs a token: ${d || "unauthorized"}`;
  if (res.status === 403) return `the token may not do this: ${d || "forbidden"}`;
  return `${res.status || "no answer"}: ${typeof d === "string" ? d : JSON.stringify(d)}`;
}
function flash(msg, ok) {
  const el = $("#flash");
  if (!el) return;
  el.textContent = msg;
  el.className = ok ? "flash ok" : "flash err";
}
function setStatus(ok, msg) {
  const el = $("#status");
  el.textContent = msg;
  el.className = ok ? "status ok" : "status err";
  if (ok) $("#updated").textContent = `updated ${fmtTime(Date.now() / 1000)}`;  // one format: UTC
}

// ---- delivery: what each receiver did with an alert, and what Alertmanager says -------------

// The state a delivery row is in, with what to show after it.
function deliveryDetail(d) {
  const at = d.sent_at ? ` ${fmtTime(d.sent_at)}` : "";
  switch (d.state) {
    case "sent": return `sent${d.level_sent ? ` at level ${d.level_sent}` : ""}${at}`;
    case "muted": return `muted: ${d.why || "inhibited"}`;
    case "silenced": return `silenced by ${d.silence_id || d.why || "a silence"}`;
    case "failed": return `failed${d.failed_at ? ` ${fmtTime(d.failed_at)}` : ""}: ${d.error || d.why
      || "no reason given"}`;
    case "held": return `held: ${d.why || "rate limited"}`;
    case "pending": return `pending${d.why ? `: ${d.why}` : ""}`;
    case "routed": return "routed, not muted";
    default: return `${d.state}${d.why ? `: ${d.why}` : ""}`;
  }
}
// Each receiver's deliveries: the API's `deliveries` where it gives them, else what the
// notification groups say (routed, or muted and why: /v1/groups) for a service without them.
function deliveriesOf(a, groups) {
  if (Array.isArray(a.deliveries)) return a.deliveries;
  if (!groups) return [];
  return (groups.get(a.fingerprint) || []).map(g => g.muted
    ? (g.muted.startsWith("silenced by ")
      ? { receiver: g.receiver, state: "silenced", silence_id: g.muted.slice(12) }
      : { receiver: g.receiver, state: "muted", why: g.muted })
    : { receiver: g.receiver, state: "routed" });
}
// One word for the row: was anything sent? Else the worst that happened.
function outcome(ds) {
  for (const s of ["sent", "failed", "pending", "held", "silenced", "muted", "routed"]) {
    if (ds.some(d => d.state === s)) return s;
  }
  return "none";
}
function amState(m) {
  const why = [...(m.silenced_by || []).map(x => `silenced by ${x}`),
    ...(m.inhibited_by || []).map(x => `inhibited by ${x}`)].join("; ");
  return `${m.state || "absent"}${why ? ` (${why})` : ""}`;
}
function clip(text, n) { return text.length > n ? `${text.slice(0, n - 1)}…` : text; }
function deliveryCell(a, groups) {
  const ds = deliveriesOf(a, groups);
  const am = a.alertmanager || [];
  const rows = ds.map(d => `<li class="dlv dlv-${esc(d.state)}" data-receiver="${esc(d.receiver)}"
      data-state="${esc(d.state)}" title="${esc(deliveryDetail(d))}"><span><b>${esc(d.receiver)}</b>
      ${esc(clip(deliveryDetail(d), 90))}</span></li>`)
    .concat(am.map(m => `<li class="am am-${esc(m.state)}" data-am="${esc(m.receiver)}"
      data-state="${esc(m.state)}" title="${esc(m.url)}, read back ${esc(fmtTime(m.checked_at))}">
      <span><b>Alertmanager</b> ${esc(amState(m))}</span></li>`));
  const none = Array.isArray(a.deliveries) ? "no receiver got it"
    : groups === null ? "notification is off" : groups ? "routed to no receiver" : "unknown";
  return `<td class="delivery" data-outcome="${outcome(ds)}">${rows.length
    ? `<ul>${rows.join("")}</ul>` : `<span class="muted">${esc(a.state === "firing" ? none : "–")}</span>`}</td>`;
}
// Badge text when a firing alert reached no person: muted, silenced, held or failed at every
// receiver of ours. Alertmanager receivers are judged by what Alertmanager says (active: its
// own routes notify), not by our post having arrived there.
function quietNote(a, groups) {
  if (a.state !== "firing" || !a.level) return "";
  const ams = a.alertmanager || [];
  const upstream = new Set(ams.map(m => m.receiver));
  const ds = deliveriesOf(a, groups);
  const own = ds.filter(d => !upstream.has(d.receiver));
  const o = outcome(own.length ? own : ds);
  if (!["muted", "silenced", "failed", "held"].includes(o)) return "";
  // Alertmanager's state reads beside it, in the delivery column.
  return ams.some(m => m.state === "active") ? `${o} here` : `not sent (${o})`;
}
// fingerprint -> [{receiver, muted}] from every notification group; null when notification
// is off (503), undefined when it could not be read.
async function groupsByAlert() {
  const res = await apiAll("/v1/groups", "groups");
  if (res.status === 503) return null;
  if (!res.ok) return undefined;
  const out = new Map();
  const add = (fp, receiver, muted) => {
    if (!out.has(fp)) out.set(fp, []);
    if (!out.get(fp).some(g => g.receiver === receiver)) out.get(fp).push({ receiver, muted });
  };
  for (const g of res.body.groups) {
    for (const [fp, why] of Object.entries(g.muted || {})) add(fp, g.receiver, why);
    for (const fp of g.alerts || []) add(fp, g.receiver, null);
  }
  return out;
}

// ---- charts: inline SVG lines -----------------------------------------------------------------

// Per metric: the scale to draw it on and, for a state, its values in words.
const SERIES_OPTS = {
  risk: { min: 0, max: 1 }, level: { min: 0, max: 3 },
  psu_health: { min: 0, max: 2, words: HEALTH }, fan_health: { min: 0, max: 2, words: HEALTH },
  psu_state: { min: 0, max: 3, words: PSU_STATE },
  psu_redundant: { min: 0, max: 1, words: ["lost", "redundant"] },
  fan_redundant: { min: 0, max: 1, words: ["lost", "redundant"] },
};
// A series drawn dashed on another's chart rather than on its own, with its caption: a fan's
// lower critical speed on its speed, so the gap between them reads at a glance.
const DRAWN_ON = { fan_rpm_lower_critical: ["fan_rpm", "critical under"] };
// Three digits, but a reading in the thousands (a fan's rpm) in full rather than as 9.00e+3.
function fmtNum(v) {
  const n = Number(v);
  return Math.abs(n) >= 1000 ? String(Math.round(n)) : n.toPrecision(3);
}

// `ref`: a second series (a threshold) drawn dashed on the same axes.
function sparkline(series, opts = {}, ref = null) {
  const w = 320, h = 80, pad = 4;
  const t = series.times, v = series.values;
  if (!t.length) return `<div class="chart empty">${esc(series.metric)}: no points in range</div>`;
  const rt = ref ? ref.times : [], rv = ref ? ref.values : [];
  const t0 = Math.min(t[0], ...rt), t1 = Math.max(t[t.length - 1], ...rt);
  let lo = Math.min(...v, ...rv), hi = Math.max(...v, ...rv);
  if (opts.min !== undefined) lo = Math.min(lo, opts.min);
  if (opts.max !== undefined) hi = Math.max(hi, opts.max);
  if (hi === lo) { hi = lo + 1; }
  const x = s => pad + (w - 2 * pad) * ((s - t0) / ((t1 - t0) || 1));
  const y = s => h - pad - (h - 2 * pad) * ((s - lo) / (hi - lo));
  const line = (ts, vs) => ts.map((s, i) => `${x(s).toFixed(1)},${y(vs[i]).toFixed(1)}`).join(" ");
  const last = v[v.length - 1];
  const shown = opts.words && opts.words[last] !== undefined ? opts.words[last] : fmtNum(last);
  return `<figure class="chart" data-metric="${esc(series.metric)}"><figcaption>${esc(series.metric)}
      <span class="unit">${esc(series.unit)}</span> <b>${esc(shown)}</b>${rv.length
        ? ` <span class="ref">${esc(DRAWN_ON[ref.metric][1])} ${esc(fmtNum(rv[rv.length - 1]))}</span>`
        : ""}
      <span class="range">${esc(fmtNum(lo))}–${esc(fmtNum(hi))}</span>
    </figcaption>
    <svg viewBox="0 0 ${w} ${h}" preserveAspectRatio="none" role="img"
      aria-label="${esc(series.metric)} over time"><polyline points="${line(t, v)}"/>${rv.length
        ? `<polyline class="ref" points="${line(rt, rv)}"/>` : ""}</svg></figure>`;
}

// The history endpoints answer 501 where the store keeps no such history (risk on SQLite
// before it kept any): say so instead of drawing nothing. An answer with no point at all says so once (`empty`: why, where known).
async function charts(path, title, opts, keep = () => true, empty = "") {
  const res = await api(path);
  if (res.status === 501) {
    return `<div class="charts"><h3>${esc(title)}</h3><p class="muted">no history on this store</p></div>`;
  }
  if (!res.ok) {
    return `<div class="charts"><h3>${esc(title)}</h3><p class="err">${esc(problem(res))}</p></div>`;
  }
  const all = res.body.series;
  const byName = Object.fromEntries(all.map(s => [s.metric, s]));
  const drawn = all.filter(s => keep(s) && !DRAWN_ON[s.metric]);
  const refOf = s => byName[Object.keys(DRAWN_ON).find(m => DRAWN_ON[m][0] === s.metric)] || null;
  const figs = drawn.every(s => !s.times.length)
    ? `<p class="muted nothing">nothing stored in this range${empty ? `: ${esc(empty)}` : ""}</p>`
    : drawn.map(s => sparkline(s, SERIES_OPTS[s.metric] || opts, refOf(s))).join("");
  // The span is the service's clock: a replay's or the demo's data time, not this browser's.
  const span = `<span class="span">${esc(fmtTime(res.body.start))} – ${esc(fmtTime(res.body.end))}</span>`;
  return `<div class="charts"><h3>${esc(title)} ${span}</h3>${drawn.length ? figs
    : '<p class="muted">no series</p>'}</div>`;
}

// ---- pages ------------------------------------------------------------------------------------

const pages = {};

pages.fleet = {
  shell() {
    return `<section><h2>Fleet</h2><div id="summary" class="summary"></div>
      <div class="legend">${[0, 1, 2, 3].map(l => levelBadge(l)).join(" ")}
        <span class="cell legend-link link">n</span> GPU coloured by a worse NVLink link
        <span class="cell silent legend-silent">n</span> no data
        <span class="port legend-port"></span> IB port
        <span class="chassis legend-chassis">${BOLT}</span> power, fans and the node's own sensors</div>
      <div id="grid" class="grid"></div></section>
      <section><h2>Riskiest</h2><div id="riskiest"></div></section>`;
  },
  async refresh() {
    const res = await apiAll("/v1/fleet?top=15", "nodes");
    if (!res.ok) return problem(res);
    const f = res.body;
    const gpus = f.nodes.reduce((n, x) => n + x.gpus.length, 0);
    const byLevel = [0, 0, 0, 0];
    let quiet = 0;  // a silent GPU is counted apart: its level is frozen, not "ok"
    f.nodes.forEach(n => n.gpus.forEach(g => {
      if (g.silent) quiet += 1; else byLevel[Math.max(g.level, g.link_level)] += 1;
    }));
    const silent = f.nodes.filter(n => n.silent).length;
    const chassisAlerts = f.nodes.filter(n => n.chassis && n.chassis.level > 0).length;
    $("#summary").innerHTML = `<b>${f.total}</b> nodes · <b>${gpus}</b> GPUs · scored at
      ${esc(fmtTime(f.at))} · GPUs by level: ${byLevel.map((c, l) =>
        `<span class="lvl lvl-${l}">${l}: ${c}</span>`).join(" ")}${quiet
        ? ` <span class="lvl quiet-count">no data: ${quiet}</span>` : ""}${chassisAlerts
        ? ` · <span class="chassis-note">${chassisAlerts} node${chassisAlerts > 1 ? "s" : ""} with
          power, fan or node-sensor alerts</span>` : ""}${silent
        ? ` · <span class="silent-note">${silent} node${silent > 1 ? "s" : ""} sending no data</span>` : ""}`;
    $("#grid").innerHTML = f.nodes.map(n => `<div class="row${n.silent ? " silent" : ""}"
        data-node="${esc(n.node)}" data-silent="${n.silent ? "1" : "0"}">
        <span class="node">${nodeLink(n.node)}</span>
        <span class="nrisk">${fmtRisk(n.risk)}</span>
        <span class="cells">${n.gpus.map(cell).join("")}</span>
        <span class="box">${chassisCell(n)}</span>
        <span class="ports">${n.ports.map(p => port(p, n.silent)).join("")}${n.silent
          ? `<span class="nodata">${esc(noDataSince(n.silent_since))}</span>` : ""}</span></div>`).join("")
      || `<p class="muted">no node has reported yet</p>`;
    $("#riskiest").innerHTML = f.riskiest.length ? `<table class="list"><thead><tr>
        <th>entity</th><th>scope</th><th>risk</th><th>level</th><th>reason</th>
        <th>predicted window</th></tr></thead><tbody>${f.riskiest.map(r => `<tr
        data-entity="${esc(r.entity)}"><td>${entityName(r)}</td>
        <td>${esc(r.scope)}</td><td class="num">${fmtRisk(r.risk)}</td><td>${levelBadge(r.level)}</td>
        <td>${reason(r.reason)}</td><td>${esc(r.window ? r.window.text : "–")}</td></tr>`).join("")}
        </tbody></table>` : `<p class="muted">nothing above zero risk</p>`;
    return null;
  },
};

// ---- a node's diagnostics: its active test runs and its repeat-offender record ----------------

function fig(v) { return String(+Number(v).toPrecision(6)); }  // as measured, not rounded to 3
function checkText(c) {
  const where = c.gpu === null || c.gpu === undefined ? "" : ` on GPU ${c.gpu}`;
  let figure = "";
  if (c.figure !== null && c.figure !== undefined) {
    figure = ` ${fig(c.figure)}${c.unit ? ` ${c.unit}` : ""}`;
    if (c.expected !== null && c.expected !== undefined) figure += ` (expected ${fig(c.expected)})`;
  }
  return `${c.name}${where}:${figure}${c.detail ? ` ${c.detail}` : ""}`;
}
function runOutcome(r) {
  const res = r.result;
  if (r.status === "running" || !res) return `<span class="muted">running</span>`;
  if (r.status === "pass") return `${res.checks.length} checks passed`;
  if (r.status === "error") return `could not run: ${esc(res.error || "no reason given")}`;
  const bad = res.checks.filter(c => c.status === "fail");
  return `<ul class="checks">${bad.slice(0, 8).map(c => `<li>${esc(checkText(c))}</li>`).join("")}
    ${bad.length > 8 ? `<li class="muted">and ${bad.length - 8} more</li>` : ""}</ul>`;
}
function offenderHtml(node, o) {
  if (!o || (!o.flagged && !o.returns.length && !o.releases && !o.replaced)) return "";
  const counts = `returns within ${o.soon_days} days of a release: <b>${o.returns_soon}</b>,
    within ${o.window_days} days: <b>${o.returns_window}</b> · ${o.releases} release${
    o.releases === 1 ? "" : "s"} counted${o.last_release_at ? `, the last ${esc(fmtTime(o.last_release_at))}` : ""}${
    o.gpus.length ? ` · GPUs that failed again: ${o.gpus.map(g => `GPU ${g.gpu} (${g.returns_window}×)`).join(", ")}` : ""}${
    o.replaced ? ` · hardware replaced ${esc(fmtTime(o.replaced.at))} by ${esc(o.replaced.by)}: ${esc(o.replaced.reason)}` : ""}`;
  if (o.flagged) {
    return `<div class="offender flagged" data-flagged="1"><b>Needs hardware replacement</b>
      <p class="why">${esc(o.why)}</p><p>${counts}</p><p class="muted">The gate neither tests nor
      releases ${esc(node)} until its hardware is replaced.</p>
      <div class="controls"><label>What was replaced <input id="replreason" size="36"
        placeholder="new GPU baseboard, RMA ticket"></label>
        <button data-do="replaced" data-node="${esc(node)}">Hardware replaced</button></div></div>`;
  }
  return `<div class="offender${o.returns.length ? " repeater" : ""}" data-flagged="0">${
    o.returns.length ? `<b>Came back and failed again</b> · ` : ""}${counts}</div>`;
}
async function diagnosticsPanel(node) {
  const el = $("#diagnostics");
  if (state.diagOff && Date.now() - state.diagCheckedAt < 60000) {
    el.innerHTML = `<p class="muted">diagnostics are off in this service</p>`;
    return;
  }
  const res = await api(`/v1/nodes/${encodeURIComponent(node)}/diagnostics?limit=50`);
  state.diagOff = res.status === 503;
  state.diagCheckedAt = Date.now();
  // The reason being typed survives the 5-s refresh.
  const typing = $("#replreason");
  const kept = typing ? [typing.value, document.activeElement === typing] : null;
  if (!res.ok) {
    el.innerHTML = `<p class="muted">${res.status === 404 ? "never tested"
      : state.diagOff ? "diagnostics are off in this service" : esc(problem(res))}</p>`;
    return;
  }
  const d = res.body;
  el.innerHTML = offenderHtml(node, d.offender) + (d.runs.length ? `<table class="list diagruns">
    <thead><tr><th>started</th><th>suite</th><th>why</th><th>result</th><th>detail</th>
    <th>site</th></tr></thead><tbody>${d.runs.map(r => `<tr data-run="${r.id}"
      data-status="${esc(r.status)}"><td>${esc(fmtTime(r.started_at))}</td>
      <td><b>${esc(r.suite)}</b></td><td>${esc(r.purpose)}${r.drain_id
        ? `<div class="muted small">${esc(r.drain_id)}</div>` : ""}</td>
      <td><span class="diag diag-${esc(r.status)}">${esc(r.status)}</span></td>
      <td>${runOutcome(r)}</td><td>${esc(r.site)}</td></tr>`).join("")}</tbody></table>`
    : `<p class="muted">no diagnostic run on ${esc(node)} yet</p>`);
  const again = $("#replreason");
  if (again && kept) {
    again.value = kept[0];
    if (kept[1]) again.focus();
  }
}

function noDataSince(t) {
  return t ? `no data since ${fmtTime(t)}` : "no data";
}
// A silent GPU is drawn grey and hatched whatever its level: green would read "healthy", and
// its level is frozen on stale data. The level still shows as the cell's border.
function cell(g) {
  const level = Math.max(g.level, g.link_level);
  const unit = g.gpu.slice(g.gpu.lastIndexOf(":") + 1).replace(/^gpu/, "");
  const title = `${g.gpu} risk ${fmtRisk(g.risk)} level ${g.level}` +
    (g.worst_link ? `; worst link ${g.worst_link} risk ${fmtRisk(g.link_risk)} level ${g.link_level}` : "") +
    (g.silent ? `; ${noDataSince(g.silent_since)}` : "");
  const node = g.gpu.slice(0, g.gpu.lastIndexOf(":"));
  return `<a class="cell lvl-${level}${g.link_level > g.level ? " link" : ""}${g.silent ? " silent" : ""}"
    data-entity="${esc(g.gpu)}" data-level="${level}" data-silent="${g.silent ? "1" : "0"}"
    title="${esc(title)}" href="#/node/${encodeURIComponent(node)}">${esc(unit)}</a>`;
}
// A lightning bolt, drawn (no font has to carry a power glyph on a wall screen's browser).
const BOLT = `<svg class="bolt" viewBox="0 0 10 16" aria-hidden="true"><path
  d="M6 0 0 9h4l-1 7 7-10H6z" fill="currentColor"/></svg>`;
// A node's supplies, fans and own sensors (inlet temperature, redundancy, host errors) as one
// cell beside its GPUs, coloured by the worst of them; its title names that one and why.
function chassisCell(n) {
  const c = n.chassis;
  if (!c) return "";
  const what = `${c.psus} supplies, ${c.fans} fans and the node's own sensors`;
  const why = c.worst ? `; worst ${c.worst} risk ${fmtRisk(c.risk)} level ${c.level}${c.reason
    ? `: ${c.reason.rule}: ${c.reason.signal}` : ""}` : "; all clear";
  return `<a class="chassis lvl-${c.level}${n.silent ? " silent" : ""}" data-node="${esc(n.node)}"
    data-level="${c.level}" data-worst="${esc(c.worst || "")}" title="${esc(what + why)}"
    href="#/node/${encodeURIComponent(n.node)}">${BOLT}</a>`;
}
function port(p, silent) {
  return `<span class="port lvl-${p.level}${silent ? " silent" : ""}" data-entity="${esc(p.port)}"
    data-level="${p.level}" title="${esc(`${p.port} risk ${fmtRisk(p.risk)} level ${p.level}`)}"></span>`;
}

// `extra`: more columns, [heading, entity => cell html] each, after the entity's name;
// `window`: whether to show the predicted window (no model predicts a supply or a fan);
// `sub`: a line under the entity's name (a GPU's board).
function entityTable(title, rows, selectable, extra = [], id = "", window = true, sub = null) {
  if (!rows.length) return `<h3>${esc(title)}</h3><p class="muted">none</p>`;
  return `<h3>${esc(title)}</h3><table class="list"${id ? ` id="${id}"` : ""}><thead><tr>
    <th>entity</th>${extra.map(([h]) => `<th>${esc(h)}</th>`).join("")}<th>risk</th>
    <th>level</th><th>reason</th>${window ? "<th>predicted window</th>" : ""}</tr></thead>
    <tbody>${rows.map(e => `<tr data-entity="${esc(e.entity)}" data-level="${e.level}"${selectable
      ? ` class="pick${e.entity === state.pick ? " picked" : ""}"` : ""}>
    <td>${esc(e.entity)}${sub ? sub(e) : ""}</td>${extra.map(([, f]) => f(e)).join("")}<td class="num">${fmtRisk(e.risk)}</td>
    <td>${levelBadge(e.level)}</td>
    <td class="reason">${e.silent ? `<span class="nodata">${esc(noDataSince(e.silent_since))}</span> ` : ""}${
      reason(e.explanation[0])}</td>${window ? `<td>${esc(e.window ? e.window.text : "–")}</td>` : ""}
    </tr>`).join("")}</tbody></table>`;
}

// ---- beside the GPUs: PCIe links, supplies, fans and the node's own sensors ------------------

// name -> value of a list of readings ({name, value}); a reading never reported is absent.
function readingsOf(list) {
  const out = {};
  for (const m of list || []) if (m.value !== null && m.value !== undefined) out[m.name] = m.value;
  return out;
}
function num(v, digits = 0) {
  return v === undefined ? "–" : Number(v).toFixed(digits);
}
function word(words, v) {
  return v === undefined ? "–" : (words[v] ?? String(v));
}
// A width under the maximum is a fault (issue 31's rule); a generation under it is what an
// idle GPU does to save power, so it is shown plainly.
function pcieCell(e) {
  const r = readingsOf(e.readings);
  if (r.pcie_link_width === undefined && r.pcie_link_gen === undefined) {
    return `<td class="pcie muted">–</td>`;
  }
  const narrow = r.pcie_link_width !== undefined && r.pcie_link_width_max !== undefined
    && r.pcie_link_width < r.pcie_link_width_max;
  const slow = r.pcie_link_gen !== undefined && r.pcie_link_gen_max !== undefined
    && r.pcie_link_gen < r.pcie_link_gen_max;
  return `<td class="pcie${narrow ? " bad" : ""}" data-width="${esc(r.pcie_link_width ?? "")}"
    data-width-max="${esc(r.pcie_link_width_max ?? "")}"${narrow
      ? ` title="link narrower than its maximum: a fault"` : ""}><span>x${num(r.pcie_link_width)} /
    x${num(r.pcie_link_width_max)}</span> · <span>gen ${num(r.pcie_link_gen)} / ${num(
      r.pcie_link_gen_max)}</span>${slow
      ? ` <span class="muted small" title="GPUs lower their PCIe generation at idle">idle?</span>`
      : ""}</td>`;
}
function readableCell(e) {
  const v = readingsOf(e.readings).gpu_unreadable;
  return `<td class="readable${v ? " bad" : ""}" data-unreadable="${esc(v ?? "")}">${esc(
    word(UNREADABLE, v))}</td>`;
}
// The board in a GPU slot (issue 33): its serial (what an RMA asks for), the model, UUID, bus
// id, VBIOS and driver on hover; a slot whose board was swapped says when.
function boardLine(e) {
  const b = e.identity;
  if (!b) return "";
  const more = [["", b.model], ["UUID", b.uuid], ["bus", b.pci_bus_id], ["VBIOS", b.vbios],
    ["driver", b.driver]].filter(([, v]) => v).map(([k, v]) => k ? `${k} ${v}` : v);
  const before = (b.previous || []).map(p => `before ${fmtTime(p.until)}: ${p.serial || p.uuid || "?"}`);
  const swapped = b.previous && b.previous.length ? ` <span class="warn small">swapped ${
    esc(fmtTime(b.since))}</span>` : "";
  return `<div class="board muted small" data-serial="${esc(b.serial || "")}"
    data-uuid="${esc(b.uuid || "")}" title="${esc([...more, ...before].join("\n"))}">${esc(
    b.serial ? `serial ${b.serial}` : (b.uuid || "").slice(0, 12))}${swapped}</div>`;
}
function healthCell(v) {
  return `<td class="health${v ? (v >= 2 ? " bad" : " warn") : ""}">${esc(word(HEALTH, v))}</td>`;
}
const PSU_COLUMNS = [
  ["state", e => { const v = readingsOf(e.readings).psu_state;
    return `<td class="state${v === 3 ? " bad" : ""}" data-state="${esc(v ?? "")}">${esc(
      word(PSU_STATE, v))}</td>`; }],
  ["health", e => healthCell(readingsOf(e.readings).psu_health)],
  ["reading", e => {
    const r = readingsOf(e.readings);
    const parts = [[r.psu_output_w, 0, "W out"], [r.psu_input_v, 1, "V in"],
      [r.psu_temp_c, 1, "°C"]].filter(([v]) => v !== undefined);
    return `<td class="reading">${parts.length ? parts.map(([v, d, u]) =>
      `<span>${num(v, d)} ${u}</span>`).join(" · ") : "–"}</td>`;
  }],
];
const FAN_COLUMNS = [
  ["speed", e => {
    const r = readingsOf(e.readings);
    const low = r.fan_rpm !== undefined && r.fan_rpm_lower_critical !== undefined
      && r.fan_rpm < r.fan_rpm_lower_critical;
    const pct = r.fan_pct !== undefined ? ` (${num(r.fan_pct)} %)` : "";
    const floor = r.fan_rpm_lower_critical === undefined ? ""
      : ` <span class="muted small">(critical under ${num(r.fan_rpm_lower_critical)})</span>`;
    return `<td class="reading rpm${low ? " bad" : ""}" data-rpm="${esc(r.fan_rpm ?? "")}">${r.fan_rpm
      === undefined ? (pct ? pct.slice(2, -1) : "–") : `<span>${num(r.fan_rpm)} rpm${pct}</span>`}${floor}</td>`;
  }],
  ["health", e => healthCell(readingsOf(e.readings).fan_health)],
];
function yesNo(v, yes, no) {
  return v === undefined ? `<span class="muted">–</span>`
    : v ? esc(yes) : `<span class="bad">${esc(no)}</span>`;
}
// The node's own sensors: its NodeAtRisk risk and level, then each reading.
function nodeSensors(n) {
  const r = readingsOf(n.sensors);
  const own = n.own;
  if (!own && !Object.keys(r).length) return "";
  const temp = v => (v === undefined ? "–" : `${num(v, 1)} °C`);
  const rows = [
    ["inlet temperature", temp(r.inlet_temp_c), "inlet_temp_c"],
    ["exhaust temperature", temp(r.exhaust_temp_c), "exhaust_temp_c"],
    ["power redundancy", yesNo(r.psu_redundant, "redundant", "lost"), "psu_redundant"],
    ["fan redundancy", yesNo(r.fan_redundant, "redundant", "lost"), "fan_redundant"],
    ["BMC", yesNo(r.bmc_reachable, "reachable", "unreachable"), "bmc_reachable"],
    ["host memory errors", r.edac_ce_total === undefined && r.edac_ue_total === undefined ? "–"
      : `${num(r.edac_ce_total)} corrected · <span class="${r.edac_ue_total ? "bad" : ""}">${num(
        r.edac_ue_total)} uncorrected</span>`, "edac"],
    ["CPU machine checks", r.mce_total === undefined ? "–" : num(r.mce_total), "mce_total"],
    ["BMC event log", r.sel === undefined ? "–" : `last entry ${word(["", "warning", "critical"],
      r.sel)}`, "sel"],
    ["NVSwitch SXid", r.sxid === undefined ? "–" : `last SXid ${num(r.sxid)}`, "sxid"],
  ];
  return `<h3>The node's own sensors</h3><table class="list" id="ownsensors"><tbody>${own
    ? `<tr data-entity="${esc(own.entity)}" data-level="${own.level}"><th>risk and level</th>
      <td>${fmtRisk(own.risk)} ${levelBadge(own.level)} <span class="reason">${
        reason(own.explanation[0])}</span></td></tr>` : ""}${rows.map(([name, html, key]) => `<tr
    data-sensor="${key}"><th>${esc(name)}</th><td>${html}</td></tr>`).join("")}</tbody></table>`;
}
function chassisHtml(n) {
  const own = nodeSensors(n);
  if (!n.psus.length && !n.fans.length && !own) {
    return `<h3>Power and cooling</h3><p class="muted">no BMC or host sensor readings for this
      node (docs/bmc.md says how to point gpuhealth at its BMC)</p>`;
  }
  const title = what => `${what} (click one for its charts)`;
  return entityTable(title("Power supplies"), n.psus, true, PSU_COLUMNS, "psus", false) +
    entityTable(title("Fans"), n.fans, true, FAN_COLUMNS, "fans", false) + own;
}

pages.node = {
  shell(node) {
    return `<section><h2>Node ${esc(node)}</h2><div id="nodehead" class="summary"></div>
      <div id="nodealerts"></div>
      <div class="chartrow"><div id="nodecharts"></div><div id="gpucharts"></div></div>
      <div class="beside"><div id="entities"></div><div id="chassis"></div></div></section>
      <section><h2>Diagnostics</h2><div id="flash" class="flash"></div>
      <div id="diagnostics"></div></section>`;
  },
  async refresh(node) {
    const [res] = await Promise.all([api(`/v1/nodes/${encodeURIComponent(node)}`),
      diagnosticsPanel(node)]);
    if (!res.ok) return problem(res);
    const n = res.body;
    let picked = pickedOf(n);
    if (!picked) {
      const top = [...n.gpus].sort((a, b) => (b.level - a.level) || ((b.risk || 0) - (a.risk || 0)))[0];
      state.pick = top ? top.entity : null;
      picked = pickedOf(n);
    }
    // The same risk and level as the node's row on the fleet grid (one computation, API-side).
    $("#nodehead").innerHTML = `<span>risk <b class="noderisk">${fmtRisk(n.risk)}</b></span> · ${levelBadge(n.level)} ·
      ${n.silent ? `<span class="nodata">${esc(noDataSince(n.silent_since))}</span> · ` : ""}
      ${n.gpus.length} GPUs · ${n.links.length} NVLink links · ${n.ports.length} IB ports ·
      ${n.psus.length} power supplies · ${n.fans.length} fans ·
      ${n.alerts.length} open alerts`;
    const groups = n.alerts.every(a => Array.isArray(a.deliveries)) ? undefined
      : await groupsByAlert();
    $("#nodealerts").innerHTML = n.alerts.length ? `<h3>Open alerts</h3><table class="list"><thead>
      <tr><th>id</th><th>level</th><th>entity</th><th>risk</th><th>reason</th><th>delivery</th>
      </tr></thead><tbody>${n.alerts.map(a => `<tr data-alert="${a.id}"><td class="num"><a
      href="#/alert/${a.id}">${a.id}</a></td><td>${levelBadge(a.level, quietNote(a, groups))}</td>
      <td>${entityName(a)}<div class="muted small">${esc(a.alertname)}</div></td>
      <td class="num">${fmtRisk(a.risk)}</td><td>${alertReason(a)}</td>${deliveryCell(a, groups)}</tr>`)
      .join("")}</tbody></table>` : "";
    $("#entities").innerHTML = entityTable("GPUs (click one for its charts)", n.gpus, true,
      [["PCIe link", pcieCell], ["state", readableCell]], "gpus", true, boardLine) +
      entityTable("NVLink links", n.links.filter(l => l.level || l.risk), false) +
      `<p class="muted">${n.links.filter(l => !l.level && !l.risk).length} links at zero risk not listed</p>` +
      entityTable("InfiniBand ports", n.ports, false);
    $("#chassis").innerHTML = chassisHtml(n);
    // The node's own sensors' history: those it reports (a node without a BMC asks nothing).
    const sensed = NODE_SERIES.filter(m => m in readingsOf(n.sensors));
    const [nodeHtml, sensorHtml, pickHtml] = await Promise.all([
      // A node's level series is its own alert's (no data), as InfluxDB keeps it
      // (docs/influxdb.md), not its GPUs': beside their badge it would read as "all clear".
      charts(`/v1/nodes/${encodeURIComponent(node)}/risk`, `${node} risk`, undefined,
        s => s.metric === "risk"),
      sensed.length ? charts(`/v1/nodes/${encodeURIComponent(node)}/metrics?${sensed.map(m =>
        `metric=${m}`).join("&")}`, `${node} own sensors`) : "",
      picked ? entityCharts(...picked) : ""]);
    $("#nodecharts").innerHTML = nodeHtml + sensorHtml;
    $("#gpucharts").innerHTML = pickHtml;
    return null;
  },
  async act(btn) {
    if (btn.dataset.do !== "replaced") return null;
    const input = $("#replreason");
    const reason = input ? input.value.trim() : "";
    if (!reason) return [{ ok: false, status: 422, body: { detail: "say what was replaced" } }, ""];
    const res = await api(`/v1/nodes/${encodeURIComponent(btn.dataset.node)}/replaced`,
      { method: "POST", json: { reason } });
    if (res.ok && input) input.value = "";
    return [res, `${btn.dataset.node}: hardware replaced; its gate tests it again`];
  },
  click(ev) {
    const row = ev.target.closest("tr.pick");
    if (!row) return false;
    state.pick = row.dataset.entity;
    refresh();
    return true;
  },
};

// What a click on the node page charts: a GPU, a supply or a fan, each from its own history
// endpoints. `reported`: ask only for the metrics the entity reports (a fan reads in RPM or in
// percent; a threshold the BMC does not give is not charted); `empty`: why a risk series can
// have no point (supplies and fans are kept only while at risk, as links and ports are).
const PICKABLE = {
  gpus: { path: "gpus", metrics: KEY_METRICS },
  psus: { path: "psus", metrics: ["psu_output_w", "psu_temp_c", "psu_health", "psu_state"],
    reported: true, empty: "a supply's risk is kept only while above zero" },
  fans: { path: "fans", metrics: ["fan_rpm", "fan_pct", "fan_rpm_lower_critical", "fan_health"],
    reported: true, empty: "a fan's risk is kept only while above zero" },
};
const NODE_SERIES = ["inlet_temp_c", "exhaust_temp_c", "psu_redundant", "fan_redundant"];
// [kind, entity] of the picked entity on this node, or null.
function pickedOf(n) {
  for (const kind of Object.keys(PICKABLE)) {
    const e = (n[kind] || []).find(x => x.entity === state.pick);
    if (e) return [kind, e];
  }
  return null;
}
async function entityCharts(kind, e) {
  const spec = PICKABLE[kind];
  const r = readingsOf(e.readings);
  const some = spec.metrics.filter(m => m in r);
  const q = (spec.reported && some.length ? some : spec.metrics).map(m => `metric=${m}`).join("&");
  const base = `/v1/${spec.path}/${encodeURIComponent(e.entity)}`;
  const [risk, metrics] = await Promise.all([
    charts(`${base}/risk`, `${e.entity} risk and level`, undefined, undefined, spec.empty),
    charts(`${base}/metrics?${q}`, `${e.entity} key metrics`)]);
  return risk + metrics;
}

function verdictText(v) {
  return v ? `${esc(v.verdict.replace("_", " "))}${v.mode ? ` (${esc(v.mode)})` : ""} · ${esc(v.actor)}`
    : "";
}
function verdictPicker(id) {
  return `<select data-verdict-for="${id}" aria-label="verdict on alert ${id}">
    ${VERDICTS.map(v => `<option value="${v}">${v.replace("_", " ")}</option>`).join("")}
    </select><button data-do="verdict" data-id="${id}">Say</button>`;
}
function keepChoices() {
  return new Map([...document.querySelectorAll("select[data-verdict-for]")]
    .map(el => [el.dataset.verdictFor, el.value]));
}
function restoreChoices(chosen) {
  for (const [id, value] of chosen) {
    const el = $(`select[data-verdict-for="${id}"]`);
    if (el) el.value = value;
  }
}
// Ack and verdict, from the alerts list or one alert's page.
async function alertAct(btn) {
  const comment = ($("#comment") && $("#comment").value.trim()) || "seen from the console";
  if (btn.dataset.do === "ack") {
    return [await api(`/v1/alerts/${btn.dataset.id}/ack`, { method: "POST", json: { comment } }),
      `alert ${btn.dataset.id} acknowledged`];
  }
  if (btn.dataset.do === "verdict") {
    const verdict = $(`select[data-verdict-for="${btn.dataset.id}"]`).value;
    const body = { verdict, comment };
    if (verdict === "failed" && $("#vmode") && $("#vmode").value) body.mode = $("#vmode").value;
    return [await api(`/v1/alerts/${btn.dataset.id}/verdict`, { method: "POST", json: body }),
      `alert ${btn.dataset.id}: ${verdict.replace("_", " ")}`];
  }
  return null;
}

pages.alerts = {
  shell() {
    return `<section><h2>Alerts</h2>
      <div class="controls">
        <label>Show <select id="astate"><option value="firing">firing</option>
          <option value="">all</option></select></label>
        <label>Comment <input id="comment" value="seen from the console" size="28"></label>
        <label>Silence for <select id="duration"><option value="3600">1 h</option>
          <option value="14400">4 h</option><option value="86400">24 h</option></select></label>
        <label>Failure mode <select id="vmode"><option value="">the alert's own</option>
          ${MODES.map(m => `<option value="${m}">${m}</option>`).join("")}</select></label>
      </div><div id="flash" class="flash"></div><div id="alerts"></div></section>
      <section><h2>Silences</h2><div id="silences"></div></section>`;
  },
  async refresh() {
    const st = $("#astate").value;
    const res = await api(`/v1/alerts?limit=200${st ? `&state=${st}` : ""}`);
    if (!res.ok) return problem(res);
    const rows = res.body.alerts;
    const more = res.body.next_cursor ? `<p class="muted">the newest ${rows.length} shown</p>` : "";
    const chosen = keepChoices();  // a choice being made survives the 5-s refresh
    // The delivery log comes with each alert; a service without it says what its groups hold.
    const groups = rows.length && !rows.every(a => Array.isArray(a.deliveries))
      ? await groupsByAlert() : undefined;
    $("#alerts").innerHTML = rows.length ? `<table class="list alerts"><thead><tr><th>id</th>
      <th>level</th><th>entity</th><th>risk</th><th>reason</th><th>since</th><th>state</th>
      <th>delivery</th><th>verdict</th><th></th></tr></thead><tbody>${rows.map(a => `<tr
      data-alert="${a.id}" data-alertname="${esc(a.alertname)}">
      <td class="num"><a href="#/alert/${a.id}">${a.id}</a></td>
      <td>${levelBadge(a.level, quietNote(a, groups))}</td>
      <td class="entity">${entityName(a)}<div class="muted small">${esc(a.alertname)}</div></td>
      <td class="num">${fmtRisk(a.risk)}</td><td class="reason">${alertReason(a)}</td>
      <td class="since">${esc(fmtTime(a.started_at))}</td>
      <td>${esc(a.state)}${a.acked_by ? ` · acked by ${esc(a.acked_by)}` : ""}</td>
      ${deliveryCell(a, groups)}
      <td class="verdict">${verdictText(a.verdict)}</td>
      <td class="buttons">${a.state === "firing" && !a.acked_by
        ? `<button data-do="ack" data-id="${a.id}">Ack</button>` : ""}
        <button data-do="silence" data-entity="${esc(a.entity)}">Silence</button>
        ${verdictPicker(a.id)}</td>
      </tr>`).join("")}</tbody></table>${more}` : `<p class="muted">no alerts</p>`;
    restoreChoices(chosen);
    if (!state.notifyOff || Date.now() - state.offCheckedAt > 60000) {
      const s = await apiAll("/v1/silences", "silences");
      state.notifyOff = s.status === 503;
      state.offCheckedAt = Date.now();
      $("#silences").innerHTML = !s.ok ? `<p class="muted">${esc(problem(s))}</p>`
        : s.body.silences.length ? `<table class="list"><thead><tr><th>matchers</th>
          <th>state</th><th>ends</th><th>by</th><th>comment</th><th></th></tr></thead><tbody>
          ${s.body.silences.map(x => `<tr data-silence="${esc(x.id)}">
          <td>${esc((x.matchers || []).join(", "))}</td><td>${esc(x.state)}</td>
          <td>${esc(fmtTime(x.ends_at))}</td><td>${esc(x.author)}</td><td>${esc(x.comment)}</td>
          <td class="buttons">${x.state === "expired" ? ""
            : `<button data-do="expire" data-id="${esc(x.id)}">Expire</button>`}</td></tr>`).join("")}
          </tbody></table>` : `<p class="muted">no silences</p>`;
    }
    return null;
  },
  async act(btn) {
    const comment = $("#comment").value.trim() || "seen from the console";
    const done = await alertAct(btn);
    if (done) return done;
    if (btn.dataset.do === "silence") {
      const res = await api("/v1/silences", { method: "POST", json: {
        matchers: [`entity=${btn.dataset.entity}`], comment,
        duration_s: Number($("#duration").value) } });
      state.offCheckedAt = 0;
      return [res, `silenced ${btn.dataset.entity}`];
    }
    if (btn.dataset.do === "expire") {
      state.offCheckedAt = 0;
      return [await api(`/v1/silences/${encodeURIComponent(btn.dataset.id)}`, { method: "DELETE" }),
        "silence expired"];
    }
    return null;
  },
};

// One alert: what Alertmanager's generatorURL opens (#/alert/{id}).
pages.alert = {
  shell(id) {
    return `<section><h2>Alert ${esc(id)}</h2><div id="alerthead" class="summary"></div>
      <div class="controls"><label>Comment <input id="comment" value="seen from the console"
        size="28"></label><span id="alertbuttons"></span></div><div id="flash" class="flash"></div>
      <div id="alertbody"></div></section>`;
  },
  async refresh(id) {
    const res = await api(`/v1/alerts/${encodeURIComponent(id)}`);
    if (!res.ok) return problem(res);
    const a = res.body;
    const groups = Array.isArray(a.deliveries) ? undefined : await groupsByAlert();
    const chosen = keepChoices();
    $("#alerthead").innerHTML = `<span class="alertname">${esc(a.alertname)}</span>
      <span>${entityName(a)}</span> · ${levelBadge(a.level, quietNote(a, groups))} · risk
      <b class="arisk">${fmtRisk(a.risk)}</b> · <span class="astate">${esc(a.state)}</span> ·
      since ${esc(fmtTime(a.started_at))}${a.resolved_at ? ` · resolved ${esc(fmtTime(a.resolved_at))}`
        : ""}${a.peak_level > a.level ? ` · peak ${levelBadge(a.peak_level)}` : ""}
      ${a.acked_by ? ` · acked by ${esc(a.acked_by)} ${esc(fmtTime(a.acked_at))}` : ""}`;
    const ds = deliveriesOf(a, groups);
    const am = a.alertmanager || [];
    const ex = a.explanation || [];
    $("#alertbody").innerHTML = `
      <h3>Why</h3>${ex.length ? `<table class="list why"><thead><tr><th>rule</th><th>signal</th>
        <th>value</th><th>threshold</th><th>risk</th><th></th></tr></thead><tbody>${ex.map(e => `<tr
        class="${e.hard ? "hardrow" : ""}"><td><b>${esc(e.rule)}</b></td><td>${esc(e.signal)}</td>
        <td class="num">${esc(valueText(e.value_text, e.value) || "–")}</td>
        <td class="num">${esc(valueText(e.threshold_text, e.threshold) || "–")}</td>
        <td class="num">${fmtRisk(e.risk)}</td><td>${e.hard ? "hard fault" : ""}</td></tr>`).join("")}
        </tbody></table>` : `<p class="reason">${alertReason(a) || '<span class="muted">no signals</span>'}</p>`}
      <h3>Delivery</h3>${ds.length ? `<table class="list deliveries"><thead><tr><th>receiver</th>
        <th>state</th><th>detail</th><th>level sent</th><th>sent</th><th>failed</th></tr></thead>
        <tbody>${ds.map(d => `<tr class="d-${esc(d.state)}" data-receiver="${esc(d.receiver)}"
        data-state="${esc(d.state)}"><td>${esc(d.receiver)}</td><td><b>${esc(d.state)}</b></td>
        <td>${esc(deliveryWhy(d))}</td><td>${esc(d.level_sent ?? "–")}</td>
        <td>${esc(fmtTime(d.sent_at))}</td><td>${esc(fmtTime(d.failed_at))}</td></tr>`).join("")}
        </tbody></table>` : `<p class="muted">${groups === null ? "notification is off"
          : "no receiver has a record of it"}</p>`}
      <h3>Alertmanager</h3>${am.length ? `<table class="list amtable"><thead><tr><th>receiver</th>
        <th>Alertmanager</th><th>state</th><th>silenced by</th><th>inhibited by</th>
        <th>read back</th></tr></thead><tbody>${am.map(m => `<tr data-am="${esc(m.receiver)}"
        data-state="${esc(m.state)}"><td>${esc(m.receiver)}</td><td>${esc(m.url)}</td>
        <td><b>${esc(m.state)}</b></td><td>${esc((m.silenced_by || []).join(", ") || "–")}</td>
        <td>${esc((m.inhibited_by || []).join(", ") || "–")}</td><td>${esc(fmtTime(m.checked_at))}</td>
        </tr>`).join("")}</tbody></table>`
        : `<p class="muted">no Alertmanager has been asked about it</p>`}
      <h3>Labels</h3><div class="labels">${Object.entries(a.labels || {}).map(([k, v]) =>
        `<span class="label"><b>${esc(k)}</b>=${esc(v)}</span>`).join("")}</div>
      ${(a.history || []).length ? `<h3>Level changes</h3><table class="list history"><thead><tr>
        <th>at</th><th>from</th><th>to</th><th>risk</th></tr></thead><tbody>${a.history.map(h => `<tr>
        <td>${esc(fmtTime(h.at))}</td><td>${levelBadge(h.old_level)}</td><td>${levelBadge(h.new_level)}</td>
        <td class="num">${fmtRisk(h.risk)}</td></tr>`).join("")}</tbody></table>` : ""}
      <h3>Verdict</h3><p class="verdict">${verdictText(a.verdict) || '<span class="muted">none yet</span>'}</p>`;
    $("#alertbuttons").innerHTML = `${a.state === "firing" && !a.acked_by
      ? `<button data-do="ack" data-id="${a.id}">Ack</button>` : ""} ${verdictPicker(a.id)}`;
    restoreChoices(chosen);
    return null;
  },
  act: alertAct,
};
function deliveryWhy(d) {
  if (d.state === "muted" || d.state === "held" || d.state === "pending") return d.why || "";
  if (d.state === "silenced") return d.silence_id || d.why || "";
  if (d.state === "failed") return d.error || d.why || "";
  return d.why || "";
}

pages.actions = {
  shell() {
    return `<section><h2>Awaiting approval</h2><div id="flash" class="flash"></div>
      <div id="waiting"></div></section>
      <section><h2>Breaker</h2><div id="breaker"></div></section>
      <section><h2>Recent actions</h2><div id="recent"></div></section>`;
  },
  async refresh() {
    const res = await api("/v1/actions?limit=50");
    if (res.status === 503) {
      $("#waiting").innerHTML = `<p class="muted">${esc(problem(res))}</p>`;
      return null;
    }
    if (!res.ok) return problem(res);
    const all = res.body.actions;
    const waiting = all.filter(a => a.state === "awaiting_approval");
    const row = (a, buttons) => `<tr data-action="${esc(a.id)}"><td>${nodeLink(a.node)}</td>
      <td>${esc(a.kind)}</td><td>${levelBadge(a.level)}</td><td>${esc(a.summary)}</td>
      <td>${esc(a.state)}${a.actor ? ` (${esc(a.actor)})` : ""}</td>
      <td>${esc(fmtTime(a.requested_at))}</td><td class="buttons">${buttons}</td></tr>`;
    const head = `<table class="list"><thead><tr><th>node</th><th>action</th><th>level</th>
      <th>why</th><th>state</th><th>requested</th><th></th></tr></thead><tbody>`;
    $("#waiting").innerHTML = waiting.length ? head + waiting.map(a => row(a,
      `<button data-do="approve" data-id="${esc(a.id)}">Approve</button>
       <button data-do="abort" data-id="${esc(a.id)}" class="danger">Abort</button>`)).join("")
      + "</tbody></table>" : `<p class="muted">nothing awaits approval</p>`;
    const rest = all.filter(a => a.state !== "awaiting_approval").slice(0, 20);
    $("#recent").innerHTML = rest.length ? head + rest.map(a => row(a, "")).join("")
      + "</tbody></table>" : `<p class="muted">none</p>`;
    const b = res.body.status.breaker;
    $("#breaker").innerHTML = breakerHtml(b);
    return null;
  },
  async act(btn) {
    if (btn.dataset.do === "reset") {
      return [await api("/v1/breaker/reset", { method: "POST", json: {} }), "breaker reset"];
    }
    const verb = btn.dataset.do;
    return [await api(`/v1/actions/${encodeURIComponent(btn.dataset.id)}/${verb}`,
      { method: "POST", json: {} }), `action ${verb === "approve" ? "approved" : "aborted"}`];
  },
};

// The model: active and challenger, the shadow run's scores with the median lead beside F1,
// and what the fleet has taught (labels per mode against the minimum, the loop's last steps).
pages.models = {
  shell() {
    return `<section><h2>Models</h2><div id="models"></div></section>
      <section><h2>What the fleet has taught</h2><div id="taught"></div></section>`;
  },
  async refresh() {
    const res = await api("/v1/models");
    if (res.status === 503) {
      $("#models").innerHTML = `<p class="muted">${esc(problem(res))}</p>`;
      return null;
    }
    if (!res.ok) return problem(res);
    const m = res.body;
    const ch = m.challenger;
    let html = `<p>active <b>${esc(m.active.version || "no model")}</b>
      ${m.active.loaded ? "" : ` <span class="muted">(not loaded: ${esc(m.active.reason)})</span>`}
      · challenger ${ch ? `<b>${esc(ch.version)}</b> in shadow` : "none"}</p>`;
    if (m.scores) {
      const num = v => v === null || v === undefined ? "–" : Number(v).toPrecision(3);
      const rows = [];
      for (const [stream, views] of Object.entries(m.scores)) {
        for (const [view, s] of Object.entries(views)) {
          rows.push(`<tr data-stream="${esc(stream)}" data-view="${esc(view)}"><td>${esc(stream)}</td>
            <td>${esc(view)}</td><td class="num">${s.failures}</td><td class="num">${s.detected}</td>
            <td class="num">${s.false_alarms}</td><td class="num">${num(s.f1_all)}</td>
            <td class="num lead">${num(s.lead && s.lead.median_h)}</td></tr>`);
        }
      }
      html += `<table class="list scores"><thead><tr><th>stream</th><th>view</th>
        <th>failures</th><th>detected</th><th>false alarms</th><th>F1</th>
        <th>median lead h</th></tr></thead><tbody>${rows.join("")}</tbody></table>`;
      const j = m.judgement;
      html += `<p class="judgement">${j.better ? "the challenger is at least as good"
        : "not promoted unless forced: " + esc(j.reasons.join("; "))}</p>`;
    }
    $("#models").innerHTML = html;
    const t = m.learning;
    const modes = Object.entries(t.labels_per_mode).map(([mode, n]) =>
      `<tr data-mode="${esc(mode)}"><td>${esc(mode)}</td><td class="num">${n}</td>
       <td>${n >= t.min_labels_per_mode ? "enough" : `needs ${t.min_labels_per_mode}`}</td></tr>`);
    const steps = t.history.map(h => `<li>${esc(fmtTime(h.at))}: ${esc(h.action)}
      ${esc(h.version)}${h.reason ? ` (${esc(h.reason)})` : ""}</li>`);
    $("#taught").innerHTML = `<p class="loop">learning loop ${esc(t.why)};
      retrains every ${t.every_days} days on ${t.since_days} days of labels,
      ${t.shadow_days} days in shadow, promoted only if better</p>
      ${t.waiting ? `<p class="muted waiting">${esc(t.waiting)}</p>` : ""}
      <table class="list labels"><thead><tr><th>failure mode</th><th>labels</th><th></th></tr>
      </thead><tbody>${modes.join("") || `<tr><td colspan="3" class="muted">none yet</td></tr>`}
      </tbody></table>${steps.length ? `<ul>${steps.join("")}</ul>` : ""}`;
    return null;
  },
};

function breakerHtml(b) {
  return `<div class="breaker ${b.state === "closed" ? "closed" : "open"}" data-state="${esc(b.state)}">
    <b>${esc(b.state)}</b>${b.reason ? ` · ${esc(b.reason)}` : ""}
    ${b.tripped_at ? ` · tripped ${esc(fmtTime(b.tripped_at))} by ${esc(b.tripped_by)}` : ""}
    · ${b.nodes_in_window.length} of at most ${b.allowed_nodes} nodes acted on in
    ${Math.round(b.window_s / 60)} min (fleet of ${b.fleet_size})
    ${b.state === "closed" ? "" : ` <button data-do="reset">Reset (admin)</button>`}</div>`;
}

async function breakerBadge() {
  if (state.remediationOff && Date.now() - state.offCheckedAt < 60000) return;
  const res = await api("/v1/breaker");
  const el = $("#breaker-badge");
  state.remediationOff = res.status === 503;
  if (state.remediationOff) state.offCheckedAt = Date.now();
  if (!res.ok) {
    el.textContent = state.remediationOff ? "remediation off" : "breaker ?";
    el.className = "badge muted";
    return;
  }
  el.textContent = `breaker ${res.body.state}`;
  el.className = `badge ${res.body.state === "closed" ? "ok" : "err"}`;
}

// ---- routing and polling ----------------------------------------------------------------------

function route() {
  const parts = (location.hash || "#/fleet").slice(2).split("/");
  const page = pages[parts[0]] ? parts[0] : "fleet";
  const arg = parts[1] ? decodeURIComponent(parts.slice(1).join("/")) : null;
  if (page !== state.page || arg !== state.arg) {
    state.page = page;
    state.arg = arg;
    $("#view").innerHTML = pages[page].shell(arg);
    document.querySelectorAll("nav a[data-page]").forEach(a =>
      a.classList.toggle("here", a.dataset.page === page));
  }
  refresh();
}

async function refresh() {
  if (state.busy) { state.again = true; return; }  // run once more when this one is done
  state.busy = true;
  state.again = false;
  try {
    const [err] = await Promise.all([pages[state.page].refresh(state.arg), breakerBadge()]);
    setStatus(!err, err ? err : "live");
  } catch (e) {
    setStatus(false, `console error: ${e.message}`);
  } finally {
    state.busy = false;
  }
  if (state.again) refresh();
}

document.addEventListener("DOMContentLoaded", () => {
  const tok = $("#token");
  tok.value = token();
  tok.addEventListener("change", () => {
    sessionStorage.setItem("gpuhealth-token", tok.value.trim());
    refresh();
  });
  const large = new URLSearchParams(location.search).has("wall")
    || localStorage.getItem("gpuhealth-large") === "1";
  document.body.classList.toggle("large", large);
  $("#large").addEventListener("click", () => {
    const on = document.body.classList.toggle("large");
    localStorage.setItem("gpuhealth-large", on ? "1" : "0");
  });
  $("#view").addEventListener("click", async ev => {
    const p = pages[state.page];
    if (p.click && p.click(ev)) return;
    const btn = ev.target.closest("button[data-do]");
    if (!btn || !p.act) return;
    btn.disabled = true;
    const done = await p.act(btn);
    if (done) {
      const [res, msg] = done;
      flash(res.ok ? msg : problem(res), res.ok);
    }
    await refresh();
  });
  $("#view").addEventListener("change", ev => { if (ev.target.id === "astate") refresh(); });
  window.addEventListener("hashchange", route);
  route();
  state.timer = setInterval(refresh, POLL_MS);
});
