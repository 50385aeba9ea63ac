// The crawlplug dashboard: reads /api/* every few seconds and draws it.
"use strict";

const $ = (sel, root = document) => root.querySelector(sel);
let actions = false;

function token() { return $("#token").value.trim(); }
$("#token").value = sessionStorage.getItem("crawlplug-token") || "";
$("#token").addEventListener("change", () => sessionStorage.setItem("crawlplug-token", token()));

async function api(path, options = {}) {
  const headers = { "Content-Type": "application/json" };
  if (token()) headers.Authorization = "Bearer " + token();
  const res = await fetch(path, { ...options, headers });
  const body = await res.json().catch(() => ({}));
  if (!res.ok) throw new Error(body.error || res.statusText);
  return body;
}

function say(text, error = false) {
  const box = $("#message");
  box.textContent = text;
  box.className = "message" + (error ? " error" : "");
  box.hidden = false;
  clearTimeout(say.timer);
  say.timer = setTimeout(() => { box.hidden = true; }, 6000);
}

function summary(out) {
  if ("paused" in out) {
    if (!out.changed) return out.paused ? "The crawl was already paused." : "The crawl was not paused.";
    return out.paused ? "Crawl paused: every node stops taking requests within a heartbeat and finishes what it downloads."
                      : "Crawl resumed.";
  }
  if ("stopped" in out) {
    if (!out.changed) return `Nothing stopped: ${out.why}.`;
    return out.drain ? `Run ${out.run} drains: nodes admit no new requests, crawl the queue, then close with 'stopped'.`
                     : `Run ${out.run} stopped: nodes finish what they download and close; nodes started later exit until it is continued.`;
  }
  if ("continued" in out) {
    return out.changed ? `Run ${out.run} continues: nodes started now join it.` : `Nothing continued: ${out.why}.`;
  }
  if ("requeued" in out) {
    const kept = out.kept.length ? ` ${out.kept.length} kept: ${out.kept.map(k => `#${k.index} ${k.why}`).join("; ")}` : "";
    return `${out.requeued} dead letters back in the queue.${kept}`;
  }
  if ("domain" in out) {
    if (!out.override) return `${out.domain}: back to the limits of the settings.`;
    const parts = [];
    if (out.override.delay !== null && out.override.delay !== undefined) parts.push(`delay ${out.override.delay} s`);
    if (out.override.concurrency !== null && out.override.concurrency !== undefined) parts.push(`concurrency ${out.override.concurrency || "unlimited"}`);
    return `${out.domain}: ${parts.join(", ")}, on every node now.`;
  }
  return JSON.stringify(out);
}

async function act(path, body, method = "POST") {
  try {
    const out = await api(path, { method, body: body === undefined ? undefined : JSON.stringify(body) });
    say(summary(out));
    refresh();
    return out;
  } catch (err) {
    say(err.message, true);
  }
}

function fmt(n) { return n === null || n === undefined ? "-" : Number(n).toLocaleString(); }
function dur(s) {
  if (s === null || s === undefined) return "-";
  s = Math.round(s);
  if (s >= 3600) return `${Math.floor(s / 3600)}h${String(Math.floor(s % 3600 / 60)).padStart(2, "0")}m`;
  if (s >= 60) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s`;
  return `${s}s`;
}
function esc(text) {
  return String(text ?? "").replace(/[&<>"']/g, c => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}
function rows(table, html) { $(`#${table} tbody`).innerHTML = html.join("") || `<tr><td colspan="9" class="muted">nothing yet</td></tr>`; }

// -- tabs -------------------------------------------------------------------------------
function show() {
  const page = (location.hash || "#overview").slice(1);
  document.querySelectorAll(".page").forEach(p => { p.hidden = p.id !== page; });
  document.querySelectorAll("nav a").forEach(a => a.classList.toggle("active", a.hash === "#" + page));
  refresh();
}
window.addEventListener("hashchange", show);

// -- charts: SVG polylines over the last hour --------------------------------------------
function chart(svg, t, series) {
  const W = 600, H = 160, L = 40, B = 18;
  const values = series.flatMap(s => s.values.filter(v => v !== null));
  const top = Math.max(1, ...values);
  const x = i => L + (W - L - 4) * i / Math.max(1, t.length - 1);
  const y = v => H - B - (H - B - 6) * v / top;
  let out = `<text class="axis" x="2" y="12">${fmt(top)}</text><text class="axis" x="2" y="${H - B}">0</text>`;
  out += `<text class="axis" x="${L}" y="${H - 2}">-${Math.round(t.length * 10 / 60)} min</text><text class="axis" x="${W - 30}" y="${H - 2}">now</text>`;
  for (const s of series) {
    let d = "", pen = false;
    s.values.forEach((v, i) => {
      if (v === null) { pen = false; return; }
      d += `${pen ? "L" : "M"}${x(i).toFixed(1)},${y(v).toFixed(1)} `;
      pen = true;
    });
    out += `<path class="line" stroke="${s.color}" d="${d}"><title>${esc(s.name)}</title></path>`;
  }
  svg.innerHTML = out;
}

async function drawCharts() {
  const h = await api("/api/history?minutes=60");
  // zoom to the part of the hour the crawl has run (at least 5 minutes)
  const busy = h.t.findIndex((_, i) => h.done[i] || h.admitted[i] || h.queued[i] !== null);
  const from = busy < 0 ? h.t.length - 30 : Math.min(busy, h.t.length - 30);
  for (const k of ["t", "done", "pages_per_min", "admitted", "queued", "in_flight", "dead"]) h[k] = h[k].slice(Math.max(0, from));
  // the server's per-point rate (crawlplug.ops.status.history): the current bucket over the time it covered
  chart($("#chart-done"), h.t, [{ name: "pages/min", values: h.pages_per_min, color: "#1565c0" }]);
  chart($("#chart-queue"), h.t, [
    { name: "queued", values: h.queued, color: "#6a1b9a" },
    { name: "in flight", values: h.in_flight, color: "#2e7d32" },
  ]);
  chart($("#chart-dead"), h.t, [{ name: "dead", values: h.dead, color: "#b3261e" }]);
}

// -- pages -------------------------------------------------------------------------------
async function overview(st) {
  for (const k of ["queued", "in_flight", "done", "failed", "dead"]) $(`#n-${k}`).textContent = fmt(st[k]);
  // every rate and sentence comes from the server (crawlplug.ops.status): the CLI says the same
  $("#n-rate").textContent = fmt(Math.round(st.pages_per_min));
  $("#n-rate-text").textContent = st.rate.text;
  $("#n-eta").textContent = st.eta_seconds === 0 ? "done" : dur(st.eta_seconds);
  $("#n-eta-text").textContent = st.eta_seconds === 0 ? "" : st.eta_text;
  $("#n-nodes").textContent = fmt(st.live_nodes);
  $("#held").hidden = !st.held;
  $("#held").textContent = st.held ? st.held.text : "";
  const total = st.done + st.queued + st.in_flight + st.start_urls;
  $("#progress-bar").style.width = (total ? 100 * st.done / total : 0).toFixed(1) + "%";
  rows("node-rates", st.nodes.filter(n => n.alive).map(n =>
    `<tr><td>${esc(n.id)}</td><td class="num">${fmt(n.pages_per_min)}</td><td class="num">${fmt(n.leases)}</td></tr>`));
  if (!overview.charted || Date.now() - overview.charted > 10000) {
    overview.charted = Date.now();
    await drawCharts();
  }
}

function nodes(st) {
  // a silent or dead node keeps its last numbers; its state says what became of its leases
  rows("nodes-table", st.nodes.map(n => `<tr class="${n.state === "live" ? "" : n.state + "-node"}" data-state="${esc(n.state)}">
    <td>${esc(n.id)}</td><td>${esc(n.host)}</td><td class="num">${esc(n.pid ?? "")}</td><td>${dur(n.uptime)}</td>
    <td>${n.heartbeat_age === null ? "-" : n.heartbeat_age.toFixed(1) + "s ago"}</td>
    <td class="num">${fmt(n.leases)}</td><td class="num">${fmt(n.pages_per_min)}</td><td class="num">${fmt(n.acked)}</td>
    <td class="state">${esc(n.state_text)}</td></tr>`));
}

async function errors() {
  const e = await api("/api/errors");
  rows("errors-table", e.errors.map(x => `<tr><td>${esc(x.kind)}</td><td class="num">${fmt(x.count)}</td>
    <td class="samples">${x.samples.map(esc).join("<br>")}</td></tr>`));
}

const domainSeen = new Map();  // domain -> [time ms, requests leased so far], for rates
async function domains() {
  const d = await api("/api/domains?n=100");
  const now = Date.now();
  const rate = r => {
    const before = domainSeen.get(r.domain);
    domainSeen.set(r.domain, [now, r.leased_total]);
    if (!before || now - before[0] < 500) return "-";
    return fmt(Math.round((r.leased_total - before[1]) * 60000 / (now - before[0])));
  };
  rows("domains-table", d.rows.map(r => `<tr><td>${esc(r.domain)}</td><td class="num">${fmt(r.queued)}</td>
    <td class="num">${fmt(r.in_flight)}</td><td class="num">${rate(r)}</td><td class="num">${r.delay}</td><td class="num">${r.concurrency || "no limit"}</td>
    <td>${r.at_concurrency ? "at its limit" : "in " + r.ready_in.toFixed(1) + "s"}</td></tr>`));
}

async function fields() {
  const f = await api("/api/fields");
  // problems first (a null required field, an invalid value, an exception), then pages and items
  const bad = r => /^(field\/[^/]+\/(missing|invalid)|errors\/)/.test(r.outcome) ? 0 : 1;
  const sorted = [...f.rows].sort((a, b) => a.site.localeCompare(b.site) || bad(a) - bad(b));
  rows("fields-table", sorted.map(r => `<tr${bad(r) ? "" : ' class="warn"'}><td>${esc(r.site)}</td>
    <td title="${esc(r.outcome)}">${esc(r.label)}</td><td class="num">${typeof r.value === "number" ? fmt(r.value) : esc(r.value)}</td></tr>`));
}

async function dead() {
  const d = await api("/api/dead?n=100");
  $("#dead-total").textContent = `${fmt(d.total)} dead letters, newest last`;
  rows("dead-table", d.rows.map(r => `<tr><td>${r.index}</td><td>${r.at ? new Date(r.at).toLocaleString() : "-"}</td>
    <td class="samples">${esc(r.url)}</td><td>${esc(r.reason)}</td><td class="num">${fmt(r.deliveries)}</td>
    <td><button class="action requeue" data-index="${r.index}">Requeue</button></td></tr>`));
  document.querySelectorAll("button.requeue").forEach(b => {
    b.disabled = !actions;
    b.onclick = () => act("/api/dead/requeue", { indexes: [Number(b.dataset.index)] });
  });
}

async function refresh() {
  let st;
  try {
    st = await api("/api/status");
  } catch (err) {
    $("#state").textContent = "Redis unreachable";
    $("#state").className = "badge down";
    return;
  }
  actions = st.actions;
  $("#crawl").textContent = st.crawl;
  $("#redis").textContent = st.redis;
  const ended = st.run && ["stopped", "limit", "draining", "finished"].includes(st.run.state) ? st.run.state : null;
  const label = { stopped: "run stopped", limit: "run ended by a limit", draining: "draining", finished: "finished" };
  $("#state").textContent = st.paused ? "paused" : (ended ? label[ended] : (st.live_nodes ? "running" : "no live node"));
  $("#state").className = "badge" + (st.paused || ended === "draining" ? " paused" : (ended || !st.live_nodes ? " idle" : ""));
  document.querySelectorAll("button.action").forEach(b => { b.disabled = !actions; b.title = actions ? "" : "read-only: no token configured"; });
  const page = (location.hash || "#overview").slice(1);
  try {
    if (page === "overview") await overview(st);
    else if (page === "nodes") nodes(st);
    else if (page === "errors") await errors();
    else if (page === "domains") await domains();
    else if (page === "fields") await fields();
    else if (page === "dead") await dead();
  } catch (err) {
    say(err.message, true);
  }
  document.body.dataset.refreshed = String(Date.now());
}

$("#pause").onclick = () => act("/api/pause");
$("#resume").onclick = () => act("/api/resume");
$("#stop").onclick = () => { if (confirm("Stop the run? Every node finishes what it downloads and closes; nodes started later exit until it is continued.")) act("/api/stop", { drain: false }); };
$("#drain").onclick = () => { if (confirm("Drain the run? Nodes admit no new requests, crawl what is queued, then close.")) act("/api/stop", { drain: true }); };
$("#continue").onclick = () => act("/api/continue");
$("#requeue-all").onclick = () => act("/api/dead/requeue", { all: true });
$("#domain-form").onsubmit = ev => {
  ev.preventDefault();
  const f = new FormData(ev.target);
  const body = {};
  if (f.get("delay")) body.delay = Number(f.get("delay"));
  if (f.get("concurrency")) body.concurrency = Number(f.get("concurrency"));
  act(`/api/domains/${encodeURIComponent(f.get("domain"))}`, body);
};
$("#domain-reset").onclick = () => {
  const domain = new FormData($("#domain-form")).get("domain");
  if (domain) act(`/api/domains/${encodeURIComponent(domain)}`, undefined, "DELETE");
};

show();
setInterval(refresh, 2000);
