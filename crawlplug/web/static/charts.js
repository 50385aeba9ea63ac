// The Overview's charts: the crawl's history (/api/history) drawn by uPlot (static/vendor/).
// A range is the last N (buttons), one run (the select), or a zoom: dragging across a chart
// asks the server again for that range, at the finest points it keeps there.
"use strict";

const Charts = (() => {
  const SPECS = {
    "chart-done": { series: [{ label: "pages/min", key: "pages_per_min", stroke: "#1565c0", fill: "rgba(21,101,192,0.08)" }] },
    "chart-queue": { series: [{ label: "queued", key: "queued", stroke: "#6a1b9a" }, { label: "in flight", key: "in_flight", stroke: "#2e7d32" }] },
    // items and errors are kept in the minute and hour records only (not in the 10 s series)
    "chart-items": { records: true, series: [{ label: "items", key: "items", stroke: "#ef6c00" }, { label: "errors", key: "errors", stroke: "#b3261e" }] },
    "chart-dead": { series: [{ label: "dead letters", key: "dead", stroke: "#b3261e" }] },
  };
  const STEP_WORDS = { "10s": "per 10 s", minute: "per minute", hour: "per hour" };
  const plots = {};
  let xBounds = null;  // [since, until] (s) of the range shown: every chart spans it, whatever its points
  let view = { last: "1h" };  // or { run: id } or { since, until, back: <the view zoomed from> }
  let onChange = () => {};

  function query(extra = "") {
    let q;
    if (view.run) q = `run=${view.run}`;
    else if (view.since) q = `since=${Math.round(view.since)}&until=${Math.round(view.until)}`;
    else q = `since=${view.last}`;
    return q + extra;
  }

  function zoomTo(since, until) {
    if (!(until - since >= 20000)) return;  // less than two 10 s points: nothing finer to show
    view = { since, until, back: view.back || view };
    onChange();
  }

  // a point with no neighbour (a minute between two without records) is drawn as a dot: a line needs two
  function isolated(u, seriesIdx) {
    const d = u.data[seriesIdx];
    const out = [];
    for (let i = 0; i < d.length; i++) {
      if (d[i] !== null && (i === 0 || d[i - 1] === null) && (i === d.length - 1 || d[i + 1] === null)) out.push(i);
    }
    return out;
  }

  function options(id, spec, width) {
    const fmt = v => v === null || v === undefined ? "-" : Number(v).toLocaleString();
    return {
      width, height: 170,
      cursor: { sync: { key: "crawlplug" }, drag: { x: true, y: false, setScale: false } },
      scales: { x: { time: true, range: (u, lo, hi) => xBounds || [lo, hi] } },
      legend: { live: true },
      series: [{}, ...spec.series.map(s => ({ label: s.label, stroke: s.stroke, fill: s.fill, width: 2, spanGaps: false,
        value: (u, v) => fmt(v), points: { show: true, size: 6, fill: s.stroke, filter: isolated } }))],
      axes: [{}, { size: 56, values: (u, vals) => vals.map(fmt) }],
      hooks: {
        setSelect: [u => {
          if (u.select.width < 5) return;
          const a = u.posToVal(u.select.left, "x"), b = u.posToVal(u.select.left + u.select.width, "x");
          u.setSelect({ left: 0, top: 0, width: 0, height: 0 }, false);
          zoomTo(a * 1000, b * 1000);
        }],
      },
    };
  }

  function plot(id, h) {
    const spec = SPECS[id];
    const el = document.getElementById(id);
    const data = [h.t.map(ms => ms / 1000), ...spec.series.map(s => h[s.key].map(v => (v === undefined ? null : v)))];
    const points = data[1].filter(v => v !== null).length;
    el.dataset.step = h.step;
    el.dataset.points = String(points);
    el.dataset.since = String(h.since);
    el.dataset.until = String(h.until);
    const width = Math.max(280, el.clientWidth || 560);
    const old = plots[id];
    if (old && old.series.length === data.length) {
      old.setData(data);
      if (Math.abs(old.width - width) > 2) old.setSize({ width, height: 170 });
    } else {
      if (old) old.destroy();
      plots[id] = new uPlot(options(id, spec, width), data, el);
    }
  }

  function describe(h) {
    const when = ms => new Date(ms).toLocaleString([], { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });
    let what;
    if (view.run) what = `run ${view.run}`;
    else if (view.since) what = `${when(h.since)} to ${when(h.until)}`;
    else what = `last ${view.last}`;
    return `${what}, ${STEP_WORDS[h.step] || h.step}: ${Number(h.totals.done).toLocaleString()} pages, ` +
      (h.step === "10s" ? "" : `${Number(h.totals.items).toLocaleString()} items, ${Number(h.totals.errors).toLocaleString()} errors, `) +
      `${Number(h.totals.admitted).toLocaleString()} admitted`;
  }

  let drawn = 0;  // the latest draw asked for: an older one that answers later is dropped

  async function draw(api) {
    const mine = ++drawn;
    const h = await api(`/api/history?${query()}`);
    // items and errors: minute (or hour) records over the same range
    const r = h.step === "10s" ? await api(`/api/history?${query("&finest=minute")}`) : h;
    if (mine !== drawn) return;
    // from the first bucket of the coarser records (a minute begun before a zoomed range), to the end
    xBounds = [Math.min(h.since, r.t.length ? r.t[0] : h.since) / 1000, h.until / 1000];
    for (const id of Object.keys(SPECS)) plot(id, SPECS[id].records ? r : h);
    document.getElementById("range-text").textContent = describe(h);
    document.getElementById("zoom-out").hidden = !view.back;
    document.querySelectorAll(".range-btn[data-last]").forEach(b => b.classList.toggle("active", !view.run && !view.since && b.dataset.last === view.last));
    document.getElementById("range").dataset.view = JSON.stringify(view);
  }

  function init(changed) {
    onChange = changed;
    document.querySelectorAll(".range-btn[data-last]").forEach(b => {
      b.onclick = () => { view = { last: b.dataset.last }; document.getElementById("run-select").value = ""; onChange(); };
    });
    document.getElementById("run-select").onchange = ev => {
      view = ev.target.value ? { run: ev.target.value } : { last: "1h" };
      onChange();
    };
    document.getElementById("zoom-out").onclick = () => { view = view.back || { last: "1h" }; onChange(); };
    window.addEventListener("resize", () => {
      for (const [id, u] of Object.entries(plots)) u.setSize({ width: Math.max(280, document.getElementById(id).clientWidth), height: 170 });
    });
  }

  return { draw, init, zoomTo, get view() { return view; } };
})();
