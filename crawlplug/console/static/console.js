// The console's pages: one Alpine.js component over the API under /api/v1 (crawlplug.console.api).
// Every number shown comes from the API; every action is one API call, and its refusal
// (a 4xx with the reason the CLI prints) is shown where the action was asked for.
"use strict";

const API = "/api/v1";
const REFRESH_MS = 2000;

function cookie(name) {
  const found = document.cookie.split("; ").find((c) => c.startsWith(name + "="));
  return found ? decodeURIComponent(found.split("=")[1]) : "";
}

// one call: JSON in and out; a refusal throws an Error carrying the API's reason
async function call(method, path, body) {
  const headers = { Accept: "application/json" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (method !== "GET") headers["X-CSRF-Token"] = cookie("crawlplug_csrf");
  const res = await fetch(API + path, {
    method, headers, credentials: "same-origin",
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  let data = null;
  try { data = await res.json(); } catch (e) { data = null; }
  if (!res.ok) {
    const detail = data && data.detail;
    const why = typeof detail === "string" ? detail
      : Array.isArray(detail) ? detail.map((d) => (d.loc || []).slice(1).join(".") + ": " + d.msg).join("; ")
      : res.statusText;
    const err = new Error(why || "HTTP " + res.status);
    err.status = res.status;
    throw err;
  }
  return data;
}

// "name=value" lines -> {name: value}; a line without "=" is refused with its number
function pairs(text, what) {
  const out = {};
  (text || "").split("\n").forEach((line, i) => {
    line = line.trim();
    if (!line) return;
    const at = line.indexOf("=");
    if (at < 1) throw new Error(what + ", line " + (i + 1) + ": " + JSON.stringify(line) + " is not NAME=value");
    out[line.slice(0, at).trim()] = line.slice(at + 1).trim();
  });
  return out;
}

function lines(text) {
  return (text || "").split("\n").map((l) => l.trim()).filter(Boolean);
}

function planForm() {
  return { daemons: "", nodes: 1, args: "", settings: "", kind: "", error: "", result: "" };
}

function consoleApp() {
  return {
    ...studio(),
    me: null, checked: false, token: "", loginError: "",
    flash: "", error: "", refreshed: 0,
    route: { page: "home", crawl: null },
    home: [], newCrawl: "", daemons: [], audit: [],
    st: {}, runs: [], limitsNow: null, limits: { pages: "", items: "", errors: "", timeout: "" },
    dead: { total: 0, rows: [], chosen: [] },
    schedules: { rows: [], fires: [], paused: null }, alerts: { rules: [], active: [], events: [], pending: [], failed: [] }, crawlAudit: [],
    nodes: [],
    log: { node: null, level: "", q: "", records: [], summary: null, job: null, jobLog: null, jobQ: "", tail: 200, jobError: "" },
    startForm: { ...planForm(), newRun: false },
    pushForm: { entries: "", lane: "start_urls", error: "", result: "" },
    scheduleForm: { ...planForm(), name: "nightly", cron: "", tz: "UTC", next: [], cronError: "" },
    alertForm: { name: "", when: "", notify: "", then: "", check: "", ok: false, error: "" },

    async start() {
      window.addEventListener("hashchange", () => this.routeFromHash());
      this.routeFromHash();
      try { this.me = await call("GET", "/session"); } catch (e) { this.me = null; }
      this.checked = true;
      if (this.me) this.refresh();
      setInterval(() => { if (this.me && !document.hidden) this.refresh(); }, REFRESH_MS);
    },

    may(permission) { return !!(this.me && this.me.may.includes(permission)); },

    go(hash) { window.location.hash = hash; },

    routeFromHash() {
      const parts = window.location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
      let route = { page: "home", crawl: null };
      if (parts[0] === "crawl" && parts[1]) route = { page: parts[2] === "nodes" ? "nodes" : "crawl", crawl: parts[1] };
      else if (parts[0] === "daemons") route = { page: "daemons", crawl: null };
      else if (parts[0] === "audit") route = { page: "audit", crawl: null };
      else if (parts[0] === "sites") route = { page: "sites", crawl: null };
      else if (parts[0] === "site" && parts[1]) route = { page: "site", crawl: null, site: parts[1] };
      const changed = route.crawl !== this.route.crawl;
      this.route = route;
      if (changed) this.log = { ...this.log, node: null, job: null, jobLog: null, records: [] };
      this.error = "";
      if (this.me) this.refresh();
    },

    async login() {
      this.loginError = "";
      try {
        await call("POST", "/session", { token: this.token.trim() });
        this.token = "";
        this.me = await call("GET", "/session");
        this.refresh();
      } catch (e) { this.loginError = e.message; }
    },

    async logout() {
      try { await call("DELETE", "/session"); } catch (e) { /* gone already */ }
      this.me = null;
    },

    // -- reading ------------------------------------------------------------------------
    async refresh() {
      const r = this.route;
      try {
        if (r.page === "home") this.home = (await call("GET", "/crawls?detail=true")).crawls;
        else if (r.page === "daemons") this.daemons = (await call("GET", "/daemons")).daemons;
        else if (r.page === "audit") this.audit = (await call("GET", "/audit?n=200")).entries;
        else if (r.page === "crawl") await this.refreshCrawl(r.crawl);
        else if (r.page === "nodes") await this.refreshNodes(r.crawl);
        else if (r.page === "sites") await this.refreshSites();
        else if (r.page === "site") await this.refreshSite(r.site);
        this.refreshed += 1;
        document.body.dataset.refreshed = String(Date.now()); // when the page last showed what is now
      } catch (e) {
        if (e.status === 401) { this.me = null; return; }
        this.error = e.message;
      }
    },

    path(tail) { return "/crawls/" + encodeURIComponent(this.route.crawl) + (tail || ""); },

    async refreshCrawl(crawl) {
      if (!crawl) return;
      let st;
      try { st = await call("GET", this.path()); } catch (e) {
        if (e.status === 404) { this.st = {}; this.runs = []; return; } // a crawl not made yet: push to make it
        throw e;
      }
      if (crawl !== this.route.crawl) return;
      this.st = st;
      const [runs, dead, schedules, alerts, audit] = await Promise.all([
        call("GET", this.path("/runs")), call("GET", this.path("/dead?n=50")), call("GET", this.path("/schedules")),
        call("GET", this.path("/alerts")), call("GET", "/audit?n=50&crawl=" + encodeURIComponent(crawl)),
      ]);
      this.runs = runs.runs.slice().reverse();
      this.dead = { ...this.dead, total: dead.total, rows: dead.rows };
      this.schedules = { rows: schedules.schedules, fires: schedules.fires, paused: schedules.paused };
      this.alerts = alerts;
      this.crawlAudit = audit.entries;
      if (this.daemons.length === 0 && this.may("start")) {
        call("GET", "/daemons").then((d) => { this.daemons = d.daemons; }).catch(() => {});
      }
      try { this.limitsNow = await call("GET", this.path("/limits")); } catch (e) { this.limitsNow = null; }
    },

    limitsText() {
      const l = this.limitsNow && this.limitsNow.limits;
      if (!l) return "no run yet";
      const set = Object.entries(l).filter(([, v]) => v).map(([k, v]) => k + " " + v);
      return set.length ? set.join(", ") : "none";
    },

    async refreshNodes() {
      this.nodes = (await call("GET", this.path("/nodes"))).nodes;
      if (this.log.node) await this.loadLog();
    },

    daemonUrls() { return this.daemons.map((d) => d.url); },

    addDaemon(url) {
      const have = lines(this.startForm.daemons);
      if (!have.includes(url)) this.startForm.daemons = [...have, url].join("\n");
    },

    // -- nodes and their logs ----------------------------------------------------------
    async openLog(node) {
      this.log = { ...this.log, node: node.id, job: node.job ? node.job.id : null, jobLog: null, jobError: "" };
      await this.loadLog();
      if (this.log.job) await this.loadJobLog();
    },

    async loadLog() {
      if (!this.log.node) return;
      const q = new URLSearchParams();
      if (this.log.level) q.set("level", this.log.level);
      if (this.log.q) q.set("q", this.log.q);
      try {
        const got = await call("GET", this.path("/nodes/" + encodeURIComponent(this.log.node) + "/log?" + q));
        this.log.records = got.records;
        this.log.summary = got.summary;
      } catch (e) { this.error = e.message; }
    },

    async loadJobLog() {
      const q = new URLSearchParams({ tail: String(this.log.tail || 200) });
      if (this.log.jobQ) q.set("q", this.log.jobQ);
      try {
        this.log.jobLog = await call("GET", this.path("/jobs/" + encodeURIComponent(this.log.job) + "/log?" + q));
        this.log.jobError = "";
      } catch (e) { this.log.jobError = e.message; }
    },

    summaryText(s) {
      if (!s) return "";
      const levels = Object.entries(s.levels || {}).map(([k, v]) => k + " " + v).join(", ");
      const loggers = Object.entries(s.loggers || {}).slice(0, 5).map(([k, v]) => k + " " + v).join(", ");
      return "by level: " + (levels || "none") + "; by logger: " + (loggers || "none");
    },

    // -- actions -----------------------------------------------------------------------
    async act(action, body) {
      this.flash = ""; this.error = "";
      try {
        const out = await call("POST", this.path("/" + action), body);
        if (action === "continue") this.limits = { pages: "", items: "", errors: "", timeout: "" };
        this.flash = action + ": " + (out.state ? "the run is " + out.state : out.changed === false ? "nothing to change" : "done");
        if (action.startsWith("schedules/")) this.flash = out.paused ? "the schedules are paused" : "the schedules fire again";
      } catch (e) { this.error = action + " refused: " + e.message; }
      this.refresh();
    },

    typedLimits() {
      const body = {};
      for (const [k, v] of Object.entries(this.limits)) if (v !== "" && v !== null) body[k] = Number(v);
      return body;
    },

    async setLimits() {
      const body = this.typedLimits();
      this.flash = ""; this.error = "";
      try {
        const out = await call("PUT", this.path("/limits"), body);
        this.flash = "limits of run " + out.run + " set";
        this.limits = { pages: "", items: "", errors: "", timeout: "" };
      } catch (e) { this.error = "limits refused: " + e.message; }
      this.refresh();
    },

    plan(form) {
      return {
        daemons: lines(form.daemons),
        nodes_per_host: Number(form.nodes) || 1,
        args: pairs(form.args, "spider arguments"),
        settings: pairs(form.settings, "settings"),
        incremental: form.kind === "" ? null : form.kind === "incremental",
      };
    },

    async startNodes() {
      const f = this.startForm;
      f.error = ""; f.result = "";
      try {
        const out = await call("POST", this.path("/start"), { ...this.plan(f), new_run: !!f.newRun });
        const started = (out.jobs || []).length;
        f.result = "started " + started + " node" + (started === 1 ? "" : "s") + ((out.refused || []).length ? "; refused: " + out.refused.map((x) => x.daemon + ": " + x.why).join("; ") : "");
      } catch (e) { f.error = e.message; }
      this.refresh();
    },

    readFile(event) {
      const file = event.target.files[0];
      if (!file) return;
      file.text().then((t) => { this.pushForm.entries = t; });
    },

    async push() {
      const f = this.pushForm;
      f.error = ""; f.result = "";
      try {
        const out = await call("POST", this.path("/start-urls"), { entries: lines(f.entries), lane: f.lane || "start_urls" });
        f.result = "pushed " + out.pushed + ", " + out.waiting + " waiting" + (out.skipped.length ? "; skipped " + out.skipped.map((s) => s.entry + ": " + s.why).join("; ") : "");
        f.entries = "";
      } catch (e) { f.error = e.message; }
      this.refresh();
    },

    async deadAct(what) {
      this.flash = ""; this.error = "";
      try {
        const out = await call("POST", this.path("/dead/" + what), { indexes: this.dead.chosen });
        this.flash = what + ": " + JSON.stringify(out);
        this.dead.chosen = [];
      } catch (e) { this.error = what + " refused: " + e.message; }
      this.refresh();
    },

    async cronPreview() {
      const f = this.scheduleForm;
      f.next = []; f.cronError = "";
      if (!f.cron.trim()) return;
      try {
        const q = new URLSearchParams({ cron: f.cron, tz: f.tz || "UTC" });
        f.next = (await call("GET", "/cron?" + q)).next_five_ms;
      } catch (e) { f.cronError = e.message; }
    },

    async addSchedule() {
      const f = this.scheduleForm;
      f.error = "";
      try {
        const out = await call("POST", this.path("/schedules"), { ...this.plan(f), name: f.name, cron: f.cron, tz: f.tz || "UTC" });
        this.flash = "schedule " + f.name + " saved" + (out.warnings && out.warnings.length ? " (" + out.warnings.join("; ") + ")" : "");
      } catch (e) { f.error = e.message; }
      this.refresh();
    },

    async deleteSchedule(name) {
      try { await call("DELETE", this.path("/schedules/" + encodeURIComponent(name))); this.flash = "schedule " + name + " deleted"; }
      catch (e) { this.error = e.message; }
      this.refresh();
    },

    async checkWhen() {
      const f = this.alertForm;
      if (!f.when.trim()) { f.check = ""; return; }
      const out = await call("POST", "/alerts/check", { when: f.when });
      f.ok = out.ok;
      f.check = out.ok ? "reads well" : out.error;
    },

    async addAlert() {
      const f = this.alertForm;
      f.error = "";
      try {
        const body = { when: f.when, notify: lines(f.notify) };
        if (f.then) body.then = f.then;
        if (f.name.trim()) body.name = f.name.trim();
        const out = await call("POST", this.path("/alerts"), body);
        this.flash = "alert rule " + out.rule.id + " saved";
      } catch (e) { f.error = e.message; }
      this.refresh();
    },

    async testAlert(rule) {
      this.flash = ""; this.error = "";
      try { await call("POST", this.path("/alerts/" + encodeURIComponent(rule) + "/test")); this.flash = "test notification of " + rule + " sent"; }
      catch (e) { this.error = "test of " + rule + ": " + e.message; }
    },

    async deleteAlert(rule) {
      try { await call("DELETE", this.path("/alerts/" + encodeURIComponent(rule))); this.flash = "alert rule " + rule + " deleted"; }
      catch (e) { this.error = e.message; }
      this.refresh();
    },

    // -- showing -----------------------------------------------------------------------
    live(c) { return ["running", "draining", "starting"].includes(c.state); },
    num(v) { return v === null || v === undefined || v === "" ? "-" : Number(v).toLocaleString("en-US"); },
    when(ms) {
      if (!ms) return "";
      const d = new Date(Number(ms));
      return isNaN(d) ? String(ms) : d.toISOString().replace("T", " ").slice(0, 19);
    },
  };
}
