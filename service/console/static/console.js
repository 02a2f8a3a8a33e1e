// gpuhealth console: hash-routed pages over the service's JSON API, polled every few seconds.
// No framework and no build step: this file is served as is by the service (service/console).
"use strict";

const POLL_MS = 5000;
const LEVEL_NAMES = ["ok", "record", "email", "page"];
const KEY_METRICS = ["gpu_temp", "mem_temp", "power_draw"];
const VERDICTS = ["failed", "false_alarm", "maintenance", "unknown"];
const MODES = ["M1_hbm", "M2_gpu_hard", "M3_nvlink", "M4_ib_link", "M5_thermal", "M6_sram",
  "M7_unobservable"];
const state = { page: null, arg: null, timer: null, gpu: null, busy: false, again: false,
                remediationOff: false, notifyOff: false, offCheckedAt: 0 };

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
function levelBadge(level) {
  const l = level || 0;
  return `<span class="lvl lvl-${l}" data-level="${l}">${l} ${LEVEL_NAMES[l] || ""}</span>`;
}
function reason(sig) {
  if (!sig) return "";
  const v = sig.value === null || sig.value === undefined ? "" : ` = ${Number(sig.value).toPrecision(3)}`;
  return `<b>${esc(sig.rule)}</b>: ${esc(sig.signal)}${esc(v)}`;
}
function nodeLink(node) {
  return `<a href="#/node/${encodeURIComponent(node)}">${esc(node)}</a>`;
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
  if (ok) $("#updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
}

// ---- charts: inline SVG lines -----------------------------------------------------------------

function sparkline(series, opts = {}) {
  const w = 320, h = 80, pad = 4;
  const t = series.times, v = series.values;
  if (!t.length) return `<div class="chart empty">no points in range</div>`;
  const t0 = t[0], t1 = t[t.length - 1] || t0 + 1;
  let lo = Math.min(...v), hi = Math.max(...v);
  if (opts.min !== undefined) lo = Math.min(lo, opts.min);
  if (opts.max !== undefined) hi = Math.max(hi, opts.max);
  if (hi === lo) { hi = lo + 1; }
  const x = s => pad + (w - 2 * pad) * ((s - t0) / ((t1 - t0) || 1));
  const y = s => h - pad - (h - 2 * pad) * ((s - lo) / (hi - lo));
  const pts = t.map((s, i) => `${x(s).toFixed(1)},${y(v[i]).toFixed(1)}`).join(" ");
  const last = v[v.length - 1];
  return `<figure class="chart"><figcaption>${esc(series.metric)}
      <span class="unit">${esc(series.unit)}</span> <b>${esc(Number(last).toPrecision(3))}</b>
      <span class="range">${esc(Number(lo).toPrecision(3))}–${esc(Number(hi).toPrecision(3))}</span>
    </figcaption>
    <svg viewBox="0 0 ${w} ${h}" preserveAspectRatio="none" role="img"
      aria-label="${esc(series.metric)} over time"><polyline points="${pts}"/></svg></figure>`;
}

// The history endpoints answer 501 where the store keeps no such history (risk on SQLite
// before it kept any): say so instead of drawing nothing.
async function charts(path, title, opts, keep = () => true) {
  const res = await api(path);
  if (res.status === 501) {
    return `<div class="charts"><h3>${esc(title)}</h3><p class="muted">no history on this store</p></div>`;
  }
  if (!res.ok) {
    return `<div class="charts"><h3>${esc(title)}</h3><p class="err">${esc(problem(res))}</p></div>`;
  }
  const figs = res.body.series.filter(keep).map(s => sparkline(s, s.metric === "risk" ? { min: 0, max: 1 }
    : s.metric === "level" ? { min: 0, max: 3 } : opts)).join("");
  return `<div class="charts"><h3>${esc(title)}</h3>${figs || '<p class="muted">no series</p>'}</div>`;
}

// ---- pages ------------------------------------------------------------------------------------

const pages = {};

pages.fleet = {
  shell() {
    return `<section><h2>Fleet</h2><div id="summary" class="summary"></div>
      <div class="legend">${[0, 1, 2, 3].map(levelBadge).join(" ")}
        <span class="cell legend-link link">n</span> GPU coloured by a worse NVLink link
        <span class="port legend-port"></span> IB port</div>
      <div id="grid" class="grid"></div></section>
      <section><h2>Riskiest</h2><div id="riskiest"></div></section>`;
  },
  async refresh() {
    const res = await apiAll("/v1/fleet?top=15", "nodes");
    if (!res.ok) return problem(res);
    const f = res.body;
    const gpus = f.nodes.reduce((n, x) => n + x.gpus.length, 0);
    const byLevel = [0, 0, 0, 0];
    f.nodes.forEach(n => n.gpus.forEach(g => { byLevel[Math.max(g.level, g.link_level)] += 1; }));
    $("#summary").innerHTML = `<b>${f.total}</b> nodes · <b>${gpus}</b> GPUs · scored at
      ${esc(fmtTime(f.at))} · GPUs by level: ${byLevel.map((c, l) =>
        `<span class="lvl lvl-${l}">${l}: ${c}</span>`).join(" ")}`;
    $("#grid").innerHTML = f.nodes.map(n => `<div class="row" data-node="${esc(n.node)}">
        <span class="node">${nodeLink(n.node)}</span>
        <span class="nrisk">${fmtRisk(n.risk)}</span>
        <span class="cells">${n.gpus.map(cell).join("")}</span>
        <span class="ports">${n.ports.map(port).join("")}</span></div>`).join("")
      || `<p class="muted">no node has reported yet</p>`;
    $("#riskiest").innerHTML = f.riskiest.length ? `<table class="list"><thead><tr>
        <th>entity</th><th>scope</th><th>risk</th><th>level</th><th>reason</th>
        <th>predicted window</th></tr></thead><tbody>${f.riskiest.map(r => `<tr
        data-entity="${esc(r.entity)}"><td>${nodeLink(r.node)}${esc(r.entity.slice(r.node.length))}</td>
        <td>${esc(r.scope)}</td><td class="num">${fmtRisk(r.risk)}</td><td>${levelBadge(r.level)}</td>
        <td>${reason(r.reason)}</td><td>${esc(r.window ? r.window.text : "–")}</td></tr>`).join("")}
        </tbody></table>` : `<p class="muted">nothing above zero risk</p>`;
    return null;
  },
};

function cell(g) {
  const level = Math.max(g.level, g.link_level);
  const unit = g.gpu.slice(g.gpu.lastIndexOf(":") + 1).replace(/^gpu/, "");
  const title = `${g.gpu} risk ${fmtRisk(g.risk)} level ${g.level}` +
    (g.worst_link ? `; worst link ${g.worst_link} risk ${fmtRisk(g.link_risk)} level ${g.link_level}` : "");
  const node = g.gpu.slice(0, g.gpu.lastIndexOf(":"));
  return `<a class="cell lvl-${level}${g.link_level > g.level ? " link" : ""}" data-entity="${esc(g.gpu)}"
    data-level="${level}" title="${esc(title)}" href="#/node/${encodeURIComponent(node)}">${esc(unit)}</a>`;
}
function port(p) {
  return `<span class="port lvl-${p.level}" data-entity="${esc(p.port)}" data-level="${p.level}"
    title="${esc(`${p.port} risk ${fmtRisk(p.risk)} level ${p.level}`)}"></span>`;
}

function entityTable(title, rows, selectable) {
  if (!rows.length) return `<h3>${esc(title)}</h3><p class="muted">none</p>`;
  return `<h3>${esc(title)}</h3><table class="list"><thead><tr><th>entity</th><th>risk</th>
    <th>level</th><th>reason</th><th>predicted window</th></tr></thead><tbody>${rows.map(e => `<tr
    data-entity="${esc(e.entity)}"${selectable ? ` class="pick${e.entity === state.gpu ? " picked" : ""}"` : ""}>
    <td>${esc(e.entity)}</td><td class="num">${fmtRisk(e.risk)}</td><td>${levelBadge(e.level)}</td>
    <td>${reason(e.explanation[0])}</td><td>${esc(e.window ? e.window.text : "–")}</td></tr>`).join("")}
    </tbody></table>`;
}

pages.node = {
  shell(node) {
    return `<section><h2>Node ${esc(node)}</h2><div id="nodehead" class="summary"></div>
      <div class="chartrow"><div id="nodecharts"></div><div id="gpucharts"></div></div>
      <div id="entities"></div></section>`;
  },
  async refresh(node) {
    const res = await api(`/v1/nodes/${encodeURIComponent(node)}`);
    if (!res.ok) return problem(res);
    const n = res.body;
    if (!state.gpu || !n.gpus.some(g => g.entity === state.gpu)) {
      const top = [...n.gpus].sort((a, b) => (b.level - a.level) || ((b.risk || 0) - (a.risk || 0)))[0];
      state.gpu = top ? top.entity : null;
    }
    $("#nodehead").innerHTML = `risk <b>${fmtRisk(n.risk)}</b> · ${levelBadge(n.level)} ·
      ${n.gpus.length} GPUs · ${n.links.length} NVLink links · ${n.ports.length} IB ports ·
      ${n.alerts.length} open alerts`;
    $("#entities").innerHTML = entityTable("GPUs (click one for its charts)", n.gpus, true) +
      entityTable("NVLink links", n.links.filter(l => l.level || l.risk), false) +
      `<p class="muted">${n.links.filter(l => !l.level && !l.risk).length} links at zero risk not listed</p>` +
      entityTable("InfiniBand ports", n.ports, false);
    const [nodeHtml, gpuHtml] = await Promise.all([
      // A node's level series is its own alert's (no data), as InfluxDB keeps it
      // (docs/influxdb.md), not its GPUs': beside their badge it would read as "all clear".
      charts(`/v1/nodes/${encodeURIComponent(node)}/risk`, `${node} risk`, undefined,
        s => s.metric === "risk"),
      state.gpu ? gpuCharts(state.gpu) : Promise.resolve("")]);
    $("#nodecharts").innerHTML = nodeHtml;
    $("#gpucharts").innerHTML = gpuHtml;
    return null;
  },
  click(ev) {
    const row = ev.target.closest("tr.pick");
    if (!row) return false;
    state.gpu = row.dataset.entity;
    refresh();
    return true;
  },
};

async function gpuCharts(gpu) {
  const q = KEY_METRICS.map(m => `metric=${m}`).join("&");
  const [risk, metrics] = await Promise.all([
    charts(`/v1/gpus/${encodeURIComponent(gpu)}/risk`, `${gpu} risk and level`),
    charts(`/v1/gpus/${encodeURIComponent(gpu)}/metrics?${q}`, `${gpu} key metrics`)]);
  return risk + metrics;
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
    // A choice being made survives the 5-s refresh.
    const chosen = new Map([...document.querySelectorAll("select[data-verdict-for]")]
      .map(el => [el.dataset.verdictFor, el.value]));
    $("#alerts").innerHTML = rows.length ? `<table class="list"><thead><tr><th>id</th>
      <th>level</th><th>entity</th><th>risk</th><th>reason</th><th>since</th><th>state</th>
      <th>verdict</th><th></th></tr></thead><tbody>${rows.map(a => `<tr data-alert="${a.id}">
      <td class="num">${a.id}</td><td>${levelBadge(a.level)}</td>
      <td>${nodeLink(a.node)}${esc(a.entity.slice(a.node.length))}</td>
      <td class="num">${fmtRisk(a.risk)}</td><td>${reason(a.explanation[0])}</td>
      <td>${esc(fmtTime(a.started_at))}</td>
      <td>${esc(a.state)}${a.acked_by ? ` · acked by ${esc(a.acked_by)}` : ""}</td>
      <td class="verdict">${a.verdict ? `${esc(a.verdict.verdict.replace("_", " "))}${
        a.verdict.mode ? ` (${esc(a.verdict.mode)})` : ""} · ${esc(a.verdict.actor)}` : ""}</td>
      <td class="buttons">${a.state === "firing" && !a.acked_by
        ? `<button data-do="ack" data-id="${a.id}">Ack</button>` : ""}
        <button data-do="silence" data-entity="${esc(a.entity)}">Silence</button>
        <select data-verdict-for="${a.id}" aria-label="verdict on alert ${a.id}">
          ${VERDICTS.map(v => `<option value="${v}">${v.replace("_", " ")}</option>`).join("")}
        </select><button data-do="verdict" data-id="${a.id}">Say</button></td>
      </tr>`).join("")}</tbody></table>${more}` : `<p class="muted">no alerts</p>`;
    for (const [id, value] of chosen) {
      const el = $(`select[data-verdict-for="${id}"]`);
      if (el) el.value = value;
    }
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
    if (btn.dataset.do === "ack") {
      return [await api(`/v1/alerts/${btn.dataset.id}/ack`, { method: "POST", json: { comment } }),
        `alert ${btn.dataset.id} acknowledged`];
    }
    if (btn.dataset.do === "verdict") {
      const verdict = $(`select[data-verdict-for="${btn.dataset.id}"]`).value;
      const body = { verdict, comment };
      if (verdict === "failed" && $("#vmode").value) body.mode = $("#vmode").value;
      return [await api(`/v1/alerts/${btn.dataset.id}/verdict`, { method: "POST", json: body }),
        `alert ${btn.dataset.id}: ${verdict.replace("_", " ")}`];
    }
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
