// The console's Sites pages: the site studio. Every definition with its versions (who, when,
// what changed as a diff); an editor checked as the operator types (errors at their line);
// Try on a URL or on the URLs the crawls parsed last; Apply (a new version the running nodes
// pick up) and Roll back; the site's minutes in one crawl (pages, items, a field's null rate)
// with each version's moment marked, and its outcomes per definition version.
// Mixed into consoleApp (console.js): `call`, `this.error`, `this.flash` are the console's.
"use strict";

const CHECK_AFTER_MS = 400;

function studio() {
  return {
    sites: [],
    studio: {
      name: null, stored: null, versions: [], inForce: null, diff: null, diffOf: null,
      text: "", loadedFor: null, check: null, checking: false,
      url: "", trial: null, trying: false, tryError: "",
      crawl: "", crawls: [], field: "", minutes: null, recent: [],
    },
    _checkTimer: null,

    async refreshSites() {
      this.sites = (await call("GET", "/sites")).sites;
    },

    sitePath(tail) { return "/sites/" + encodeURIComponent(this.route.site) + (tail || ""); },

    async refreshSite(name) {
      const s = this.studio;
      if (s.name !== name) {
        Object.assign(s, { name, stored: null, versions: [], diff: null, diffOf: null, text: "", loadedFor: null,
          check: null, trial: null, tryError: "", minutes: null, recent: [], field: "" });
      }
      const [stored, versions, recent, crawls] = await Promise.all([
        call("GET", this.sitePath()), call("GET", this.sitePath("/versions")),
        call("GET", this.sitePath("/recent?n=20")), call("GET", "/crawls"),
      ]);
      if (name !== this.route.site) return;
      s.stored = stored;
      s.versions = versions.versions;
      s.inForce = versions.in_force;
      s.recent = recent.urls;
      s.crawls = crawls.crawls.map((c) => c.crawl || c.name || c).filter(Boolean);
      if (!s.crawl) {
        const used = s.recent.length ? s.recent[0].crawl : null;
        s.crawl = used && s.crawls.includes(used) ? used : (s.crawls.includes("site-" + name) ? "site-" + name : "");
      }
      if (s.loadedFor !== stored.version) this.loadText(stored.doc, stored.version);
      if (s.crawl) await this.loadMinutes();
    },

    loadText(doc, version) {
      this.studio.text = JSON.stringify(doc, null, 2);
      this.studio.loadedFor = version;
      this.studio.check = { valid: true, errors: [] };
    },

    async loadMinutes() {
      const s = this.studio;
      try {
        s.minutes = await call("GET", "/crawls/" + encodeURIComponent(s.crawl) + "/sites/" + encodeURIComponent(s.name) + "/minutes?minutes=60");
      } catch (e) { s.minutes = null; if (e.status !== 404) throw e; return; }
      const fields = Object.keys(s.minutes.fields || {});
      if (!s.field || !fields.includes(s.field)) s.field = fields.includes("price") ? "price" : (fields[0] || "");
    },

    // -- the editor --------------------------------------------------------------------
    typed() {
      clearTimeout(this._checkTimer);
      this._checkTimer = setTimeout(() => this.checkText(), CHECK_AFTER_MS);
    },

    async checkText() {
      const s = this.studio;
      const text = s.text;
      s.checking = true;
      try {
        const got = await call("POST", "/sites/check", { definition: text });
        if (text === s.text) s.check = got;
      } catch (e) { s.check = { valid: false, errors: [{ line: null, message: e.message }] }; }
      s.checking = false;
    },

    goToLine(line) {
      const area = document.getElementById("site-text");
      if (!area || !line) return;
      const rows = this.studio.text.split("\n");
      const start = rows.slice(0, line - 1).reduce((n, r) => n + r.length + 1, 0);
      area.focus();
      area.setSelectionRange(start, start + (rows[line - 1] || "").length);
    },

    lineNumbers() {
      return this.studio.text.split("\n").map((_, i) => i + 1).join("\n");
    },

    errorLines() { return ((this.studio.check && this.studio.check.errors) || []).map((e) => e.line).filter(Boolean); },

    // -- trying ----------------------------------------------------------------------------
    async tryUrl() {
      const s = this.studio;
      s.trying = true; s.tryError = ""; s.trial = null;
      try {
        const got = await call("POST", "/sites/try", { definition: s.text, url: s.url.trim(), site: s.name });
        s.trial = { trials: [got], summary: null };
      } catch (e) { s.tryError = e.message; }
      s.trying = false;
    },

    async tryRecent(n) {
      const s = this.studio;
      s.trying = true; s.tryError = ""; s.trial = null;
      try {
        s.trial = await call("POST", "/sites/try-recent", { site: s.name, definition: s.text, n, step: this.detailStep() });
      } catch (e) { s.tryError = e.message; }
      s.trying = false;
    },

    detailStep() {
      const doc = this.studio.stored && this.studio.stored.doc;
      if (!doc) return null;
      if (doc.last_step) return doc.last_step;
      const steps = doc.steps || [];
      return steps.length ? steps[steps.length - 1].name : null;
    },

    trialFieldsText(summary) {
      if (!summary) return "";
      return Object.entries(summary.fields).map(([f, o]) => f + ": " + Object.entries(o).map(([k, v]) => k + " " + v).join(", ")).join("; ");
    },

    // -- applying and rolling back --------------------------------------------------------
    async apply() {
      const s = this.studio;
      try {
        const got = await call("PUT", "/sites", { definition: s.text });
        this.flash = got.unchanged ? "site " + got.name + ": unchanged, nothing stored (v" + got.n + " is this definition)"
          : "site " + got.name + ": stored as v" + got.n + " (" + got.version + "); running nodes switch to it within a refresh";
        s.loadedFor = null;
        this.refresh();
      } catch (e) { this.error = e.message; }
    },

    async rollback(n) {
      try {
        const got = await call("POST", this.sitePath("/rollback"), { to: n });
        this.flash = "site " + got.name + ": v" + n + " is in force again, as v" + got.n;
        this.studio.loadedFor = null;
        this.refresh();
      } catch (e) { this.error = e.message; }
    },

    async showDiff(v) {
      const s = this.studio;
      const prev = s.versions.find((x) => x.n < v.n);
      if (!prev) { s.diff = "(the first version: nothing before it)"; s.diffOf = v.n; return; }
      try {
        const got = await call("GET", this.sitePath("/diff?a=" + prev.n + "&b=" + v.n));
        s.diff = got.diff || "(no difference)";
        s.diffOf = v.n;
      } catch (e) { this.error = e.message; }
    },

    // every number a document had (a roll back stores an old document again: "v1, v3")
    versionName(digest) {
      const ns = this.studio.versions.filter((x) => x.version === digest).map((x) => x.n).sort((a, b) => a - b);
      return ns.length ? ns.map((n) => "v" + n).join(", ") : digest;
    },

    // -- the site's minutes ------------------------------------------------------------------
    windowRate() {
      // the field's null rate over the last 10 minutes, as the server computes it for null_rate(SITE.FIELD, 10m)
      const m = this.studio.minutes;
      const r = m && m.null_rate_10m ? m.null_rate_10m[this.studio.field] : null;
      return r === undefined ? null : r;
    },

    percent(v) { return v === null || v === undefined ? "-" : (100 * v).toFixed(1) + " %"; },

    versionRows() {
      const m = this.studio.minutes;
      if (!m || !m.by_version) return [];
      return Object.entries(m.by_version).map(([digest, row]) => {
        const f = (row.fields || {})[this.studio.field] || {};
        return { digest, name: this.versionName(digest), pages: row.pages, ok: row.items_ok, incomplete: row.items_incomplete,
          filled: f.filled || 0, missing: f.missing || 0, invalid: f.invalid || 0 };
      });
    },

    // an SVG chart: pages a minute (bars) and the field's null rate (line, 0-100 %), versions marked
    chart() {
      const m = this.studio.minutes;
      const W = 720, H = 160, P = 24;
      if (!m || !m.t.length) return { w: W, h: H, bars: [], line: "", marks: [], max: 0 };
      const t0 = m.t[0], t1 = m.t[m.t.length - 1] + 60000;
      const x = (t) => P + ((t - t0) / (t1 - t0)) * (W - 2 * P);
      const max = Math.max(1, ...m.pages);
      const bw = Math.max(1, (W - 2 * P) / m.t.length - 1);
      const bars = m.t.map((t, i) => ({ x: x(t), y: H - P - (m.pages[i] / max) * (H - 2 * P), w: bw, h: (m.pages[i] / max) * (H - 2 * P) }));
      const rates = (m.null_rate || {})[this.studio.field] || [];
      const pts = [];
      rates.forEach((r, i) => { if (r !== null) pts.push(x(m.t[i] + 30000).toFixed(1) + "," + (H - P - r * (H - 2 * P)).toFixed(1)); });
      const marks = (m.applied || []).filter((a) => a.at_ms >= t0 && a.at_ms <= t1).map((a) => ({ x: x(a.at_ms), label: "v" + a.n }));
      return { w: W, h: H, bars, line: pts.join(" "), marks, max };
    },

    // the chart as SVG text (Alpine's x-for does not run inside <svg>): numbers and "v<n>" only
    chartSvg() {
      const c = this.chart();
      const f = (v) => Number(v).toFixed(1);
      const bars = c.bars.map((b) => `<rect class="bar" x="${f(b.x)}" y="${f(b.y)}" width="${f(b.w)}" height="${f(b.h)}"></rect>`);
      const marks = c.marks.map((m) => `<g class="applied"><line class="mark" x1="${f(m.x)}" x2="${f(m.x)}" y1="10" y2="${c.h - 20}"></line>`
        + `<text x="${f(m.x + 3)}" y="20">v${Number(m.label.slice(1))}</text></g>`);
      const dots = c.line ? c.line.split(" ").map((p) => { const [x, y] = p.split(","); return `<circle class="dot" cx="${x}" cy="${y}" r="2.5"></circle>`; }) : [];
      return `<svg class="chart" width="${c.w}" height="${c.h}">${bars.join("")}<polyline class="rate" points="${c.line}"></polyline>${dots.join("")}${marks.join("")}</svg>`;
    },
  };
}
