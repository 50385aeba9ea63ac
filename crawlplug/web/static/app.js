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
  if (location.hash === "#fields") { location.hash = "#sites"; return; }  // the Fields page is part of Sites now
  const page = (location.hash || "#overview").slice(1);
  document.querySelectorAll(".page").forEach(p => { p.hidden = p.id !== page; });
  document.querySelectorAll("nav a").forEach(a => a.classList.toggle("active", a.hash === "#" + page));
  refresh();
}
window.addEventListener("hashchange", show);

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
    await Charts.draw(api);
  }
}

// -- runs: the selects of the Overview, Report and Sites pages ----------------------------
async function runChoices() {
  if (runChoices.at && Date.now() - runChoices.at < 5000) return;
  runChoices.at = Date.now();
  const r = await api("/api/runs");
  const label = x => `run ${x.id} (${x.state || "?"}${x.started ? ", " + new Date(x.started).toLocaleString() : ""})`;
  const fill = (sel, first, pick) => {
    const keep = sel.value;
    sel.innerHTML = `<option value="">${first}</option>` + r.runs.filter(pick).slice().reverse()
      .map(x => `<option value="${x.id}">${esc(label(x))}</option>`).join("");
    sel.value = [...sel.options].some(o => o.value === keep) ? keep : "";
  };
  fill($("#run-select"), "a run…", () => true);
  // a report of an ended run exists while its node stats are kept (the last 20)
  const current = r.runs.length ? r.runs[r.runs.length - 1].id : null;
  document.querySelectorAll("select.run-choice").forEach(sel => fill(sel, "current", x => x.id !== current && r.kept.includes(x.id)));
}

function reportQuery(sel) { return sel.value ? `?run=${encodeURIComponent(sel.value)}` : ""; }

function reportHead(rep) {
  const run = rep.run;
  const from = run.source === "live" ? "the nodes' stats in Redis" : "the node stats kept when it ended";
  return `run ${run.id ?? "-"} (${run.state}), from ${from}: ${rep.nodes.length} node${rep.nodes.length === 1 ? "" : "s"}`;
}

function pct(rate) { return rate === null || rate === undefined ? "-" : (rate * 100).toFixed(1) + "%"; }
function kinds(errors) {
  return Object.entries(errors).sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0])).map(([k, n]) => `${esc(k)} ${fmt(n)}`).join(", ");
}
function allRow(r) { return r.node === "all nodes" ? ' class="total"' : ""; }

async function report() {
  const rep = await api("/api/report" + reportQuery($("#report-run")));
  $("#report-head").textContent = reportHead(rep);
  $("#report-note").hidden = !rep.note;
  $("#report-note").textContent = rep.note || "";
  rows("report-domains", rep.domains.map(r => `<tr${allRow(r)}><td>${esc(r.node)}</td><td>${esc(r.domain)}</td>
    <td class="num">${fmt(r.pages)}</td><td class="num">${fmt(r.items)}</td><td class="num">${fmt(r.errors)}</td>
    <td class="num">${pct(r.success_rate)}</td><td class="num">${r.mean_response_ms === null ? "-" : fmt(Math.round(r.mean_response_ms))}</td>
    <td class="samples">${kinds(r.errors_by_kind)}</td></tr>`));
}

async function sites() {
  const [rep, f, stored] = await Promise.all([api("/api/report" + reportQuery($("#sites-run"))), api("/api/fields"), api("/api/sites")]);
  $("#sites-head").textContent = reportHead(rep);
  rows("sites-table", rep.sites.map(r => `<tr${allRow(r)}><td>${esc(r.node)}</td><td>${esc(r.site)}</td>
    <td class="num">${fmt(r.pages)}</td><td class="num">${fmt(r.items_ok)}</td><td class="num">${fmt(r.items_incomplete)}</td>
    <td class="num">${fmt(r.errors)}</td><td class="num">${pct(r.success_rate)}</td><td>${esc(Object.keys(r.versions).join(", ") || "-")}</td></tr>`));
  rows("fields-report", rep.fields.map(r => `<tr${allRow(r)}${r.missing || r.invalid ? ' data-problem="1"' : ""}><td>${esc(r.node)}</td>
    <td>${esc(r.site)}</td><td>${esc(r.field)}</td><td class="num">${fmt(r.filled)}</td>
    <td class="num${r.missing ? " bad" : ""}">${fmt(r.missing)}</td><td class="num${r.invalid ? " bad" : ""}">${fmt(r.invalid)}</td>
    <td class="num">${fmt(r.defaulted)}</td></tr>`));
  fieldsTable(f);
  const sel = $("#try-site");
  const names = stored.sites.map(x => x.name).join(",");
  if (sel.dataset.names !== names) {  // rebuilt only when the stored definitions change: a choice stays
    const keep = sel.value;
    sel.innerHTML = `<option value="">the definition below</option>` + stored.sites.map(x =>
      `<option value="${esc(x.name)}" data-base="${esc(x.base_url || "")}">${esc(x.name)} (version ${esc(x.version)})</option>`).join("");
    sel.value = [...sel.options].some(o => o.value === keep) ? keep : "";
    sel.dataset.names = names;
  }
}

function showValue(v) { return v === null || v === undefined ? "null" : esc(JSON.stringify(v)); }

function trialHtml(t) {
  const p = t.page;
  let out = `<p class="trial-head">site <b>${esc(t.site)}</b>, definition ${esc(t.version)} from ${esc(t.origin)}:
    <a href="${esc(p.url)}">${esc(p.url)}</a>, HTTP ${p.status}, ${fmt(p.bytes)} bytes, ${fmt(p.ms)} ms</p>`;
  if (t.fields) {
    out += `<table id="try-fields"><thead><tr><th>field</th><th>value</th><th>outcome</th><th>selector</th><th>matched</th></tr></thead><tbody>`;
    out += t.fields.map(f => `<tr class="${f.outcome === "missing" ? "warn" : ""}" data-field="${esc(f.name)}" data-outcome="${esc(f.outcome)}">
      <td>${esc(f.name)}${f.required ? " *" : ""}</td><td>${showValue(f.value)}</td>
      <td>${esc(f.outcome)}${f.why ? ": " + esc(f.why) : ""}</td><td><code>${esc(f.selector)}</code> → ${esc(f.type)}</td>
      <td class="num">${fmt(f.matched)}</td></tr>`).join("");
    out += `</tbody></table><p id="try-verdict" class="${t.complete ? "" : "warn"}">` + (t.complete
      ? "item: complete (every required field has a value)"
      : `item: INCOMPLETE, ${t.missing.map(m => esc(m) + " is null").join(", ")}; ${t.dropped ? "the crawl drops it" : "the crawl keeps it"}`) +
      `</p><p class="muted">* required</p>`;
  }
  for (const b of t.links) {
    out += `<h3>links a page of step ${esc(b.step)} follows: ${b.follow.length} requests</h3><ul class="try-links" data-step="${esc(b.step)}">`;
    out += b.rules.map(r => `<li>rule ${r.rule} (${esc(r.what)}) → step ${esc(r.to)}: ${r.count} links
      <div class="samples">${r.urls.slice(0, 20).map(esc).join("<br>")}${r.count > 20 ? `<br>… and ${r.count - 20} more` : ""}</div></li>`).join("");
    out += "</ul>";
  }
  return out + `<p class="muted">Nothing was stored: no crawl's state was touched.</p>`;
}

async function tryDefinition(ev) {
  ev.preventDefault();
  const f = new FormData(ev.target);
  const body = { url: f.get("url"), step: f.get("step") || null, base_url: f.get("base_url") || null };
  if (f.get("definition").trim()) body.definition = f.get("definition");
  else body.site = f.get("site");
  const box = $("#try-result");
  box.innerHTML = `<p class="muted">fetching ${esc(body.url)} through Scrapy…</p>`;
  box.dataset.state = "running";
  try {
    const t = await api("/api/sites/try", { method: "POST", body: JSON.stringify(body) });
    box.innerHTML = trialHtml(t);
    box.dataset.state = "done";
  } catch (err) {
    box.innerHTML = `<p class="warn">${esc(err.message)}</p>`;
    box.dataset.state = "error";
  }
}

function nodes(st) {
  // a silent or dead node keeps its last numbers; its state says what became of its leases
  rows("nodes-table", st.nodes.map(n => `<tr class="${n.state === "live" ? "" : n.state + "-node"}" data-state="${esc(n.state)}">
    <td>${esc(n.id)}</td><td>${esc(n.host)}</td><td class="num">${esc(n.pid ?? "")}</td><td>${dur(n.uptime)}</td>
    <td>${n.heartbeat_age === null ? "-" : n.heartbeat_age.toFixed(1) + "s ago"}</td>
    <td class="num">${fmt(n.leases)}</td><td class="num">${fmt(n.pages_per_min)}</td><td class="num">${fmt(n.acked)}</td>
    <td class="job">${n.job ? esc(n.job.daemon + " " + n.job.id) : "-"}</td>
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

function fieldsTable(f) {
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

async function alerts() {
  const a = await api("/api/alerts?n=50");
  const when = ms => ms ? new Date(ms).toLocaleString() : "-";
  $("#alerts-active").textContent = a.active.length
    ? `firing: ${a.active.map(r => r.id).join(", ")}` : `no alert firing (${a.rules.length} rules)`;
  $("#alerts-active").className = a.active.length ? "held" : "muted";
  rows("alerts-table", a.rules.map(r => `<tr${r.state === "firing" ? ' class="warn"' : ""}><td>${esc(r.id)}</td>
    <td><code>${esc(r.when || r.unreadable || "")}</code></td><td>${esc(r.state)}${r.why ? `: ${esc(r.why)}` : ""}</td>
    <td class="num">${r.value === null || r.value === undefined ? "-" : esc(String(r.value))}</td>
    <td>${when(r.state === "firing" ? r.fired_ms : r.since_ms)}</td><td class="num">${fmt((r.notify || []).length)}</td></tr>`));
  rows("alert-events", a.events.map(e => `<tr${e.event === "fired" ? ' class="warn"' : ""}><td>${when(e.at)}</td>
    <td>${esc(e.rule)}</td><td>${esc(e.event)}</td><td class="num">${esc(String(e.value))}</td>
    <td>${e.sent ? "sent" : "not sent (cooldown or no URL)"}</td></tr>`));
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
  document.body.dataset.page = page;
  try {
    await runChoices();
    if (page === "overview") await overview(st);
    else if (page === "nodes") nodes(st);
    else if (page === "report") await report();
    else if (page === "sites") await sites();
    else if (page === "errors") await errors();
    else if (page === "domains") await domains();
    else if (page === "dead") await dead();
    else if (page === "alerts") await alerts();
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

$("#try-form").onsubmit = tryDefinition;
$("#try-site").onchange = ev => {
  const base = ev.target.selectedOptions[0]?.dataset.base;
  if (base && !$("#try-form").elements.base_url.value) $("#try-form").elements.base_url.placeholder = `base URL (default ${base})`;
};
$("#report-run").onchange = () => refresh();
$("#sites-run").onchange = () => refresh();
Charts.init(() => { overview.charted = 0; refresh(); });

show();
setInterval(refresh, 2000);
