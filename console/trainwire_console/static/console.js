// trainwire console: the live parts of the pages (server-sent events, uPlot charts).
// Everything else is server-rendered HTML, swapped by htmx.
"use strict";

const trainwire = (() => {
  const TERMINAL = new Set(["SUCCEEDED", "FAILED", "CANCELLED"]);
  const COLOURS = ["#2f6fed", "#e8590c", "#2b8a3e", "#ae3ec9", "#c92a2a", "#1098ad", "#5c940d", "#862e9c"];
  const $ = (sel, root = document) => root.querySelector(sel);
  const $$ = (sel, root = document) => Array.from(root.querySelectorAll(sel));

  function setState(el, state) {
    if (!el || el.textContent === state) return false;
    el.className = el.className.replace(/\b(PENDING|STARTING|RUNNING|RESTARTING|SUCCEEDED|FAILED|CANCELLED)\b/g, "").trim();
    el.classList.add(state);
    el.textContent = state;
    return true;
  }

  function age(seconds) {
    for (const [unit, size] of [["d", 86400], ["h", 3600], ["m", 60]]) {
      if (seconds >= size) return `${Math.floor(seconds / size)}${unit}`;
    }
    return `${Math.floor(seconds)}s`;
  }

  // --- the runs list: rows change state (and colour) as the runs do ----------------------
  // A run newer than every row of the first page: the page reloads its table (htmx, filters kept).
  function isNewer(run) {
    if (new URLSearchParams(location.search).get("page_token")) return false;
    const shown = $$("tr[data-created]").map((row) => Number(row.dataset.created));
    return run.created_s > Math.max(0, ...shown);
  }

  // New runs the filters leave out: not asked about again.
  const filteredOut = new Set();
  let refreshing = null;
  const waiting = new Set();
  function refreshTable(runId) {
    if (filteredOut.has(runId)) return;
    waiting.add(runId);
    if (refreshing) return;
    refreshing = setTimeout(async () => {
      refreshing = null;
      const asked = Array.from(waiting);
      waiting.clear();
      await htmx.ajax("GET", `/runs${location.search}`, { target: "#runs-table", swap: "innerHTML" });
      for (const id of asked) if (!document.getElementById(`run-${id}`)) filteredOut.add(id);
    }, 300);
  }

  function followRuns() {
    const source = new EventSource("/api/runs/live");
    source.addEventListener("run", (e) => {
      const run = JSON.parse(e.data);
      const row = document.getElementById(`run-${run.run_id}`);
      if (!row) {
        if (isNewer(run)) refreshTable(run.run_id);
        return;
      }
      const changed = setState($("[data-field=state]", row), run.state);
      $("[data-field=reason]", row).textContent = run.reason;
      $("[data-field=attempts]", row).textContent = run.attempts;
      $("[data-field=reports]", row).textContent = run.reports;
      if (changed) {
        row.classList.remove("changed");
        void row.offsetWidth; // restart the flash
        row.classList.add("changed");
      }
    });
    setInterval(() => {
      const now = Date.now() / 1000;
      for (const row of $$("tr[data-created]")) $(".age", row).textContent = age(now - Number(row.dataset.created));
    }, 5000);
  }

  // --- a run: curves, timeline, logs ---------------------------------------------------------
  const chart = { runId: "", runs: [], names: {}, series: {}, plots: {}, reports: 0, dirty: false, source: null, pending: null };

  function chosen() {
    const form = $("#curve-form");
    return {
      x: form.x.value,
      metrics: $$("input[name=metric]:checked", form).map((i) => i.value),
      compare: form.compare.value.split(",").map((s) => s.trim()).filter(Boolean),
    };
  }

  function addMetricChoice(name) {
    if ($(`input[name=metric][value="${CSS.escape(name)}"]`)) return;
    const label = document.createElement("label");
    const checked = $$("input[name=metric]:checked").length < 4;
    label.innerHTML = `<input type="checkbox" name="metric" ${checked ? "checked" : ""}> `;
    label.firstChild.value = name;
    label.append(name, " ");
    $("#metric-choices").append(label);
    if (checked) loadCurves();
  }

  // uPlot wants one x array shared by every series: the union of the runs' x values.
  function aligned(perRun) {
    if (perRun.length === 1) return [perRun[0].x, perRun[0].y];
    const xs = Array.from(new Set(perRun.flatMap((s) => s.x))).sort((a, b) => a - b);
    const at = new Map(xs.map((x, i) => [x, i]));
    const ys = perRun.map((s) => {
      const column = new Array(xs.length).fill(null);
      s.x.forEach((x, i) => { column[at.get(x)] = s.y[i]; });
      return column;
    });
    return [xs, ...ys];
  }

  function draw() {
    chart.dirty = false;
    const holder = $("#charts");
    const { metrics, x } = chosen();
    for (const name of Object.keys(chart.plots)) {
      if (!metrics.includes(name)) { chart.plots[name].destroy(); delete chart.plots[name]; $(`#chart-${CSS.escape(name)}`)?.remove(); }
    }
    for (const metric of metrics) {
      const perRun = chart.runs.map((run) => chart.series[run]?.[metric] || { x: [], y: [] });
      const data = aligned(perRun);
      let plot = chart.plots[metric];
      if (!plot) {
        const box = document.createElement("div");
        box.className = "chart";
        box.id = `chart-${metric}`;
        box.innerHTML = "<h3></h3>";
        $("h3", box).textContent = metric;
        holder.append(box);
        const width = Math.max(box.clientWidth || 560, 300);
        plot = chart.plots[metric] = new uPlot({
          width, height: 220,
          scales: { x: { time: false } },
          axes: [{ label: x === "time" ? "seconds since start" : "training iteration" }, {}],
          series: [{}, ...chart.runs.map((run, i) => ({
            label: chart.names[run] || run, stroke: COLOURS[i % COLOURS.length], width: 1.5, spanGaps: true,
            points: { show: data[0].length < 60 },
          }))],
        }, data, box);
      } else {
        plot.setData(data);
      }
    }
    $("#report-count").textContent = chart.reports;
  }

  function redrawSoon() {
    if (chart.dirty) return;
    chart.dirty = true;
    setTimeout(draw, 150);
  }

  function timelineItem(ev) {
    const li = document.createElement("li");
    const when = `<span class="t">+${ev.t.toFixed(1)}s</span>`;
    let text = "";
    if (ev.kind === "state_change") {
      text = `<span class="state ${ev.state}">${ev.state}</span> `;
      li.dataset.state = ev.state;
      if (ev.cause) {
        li.dataset.cause = ev.cause;
        text += `<b class="cause"></b> `;
      }
    } else if (ev.kind === "checkpoint") {
      text = "checkpoint ";
    } else if (ev.kind === "worker_error") {
      text = `<b>worker failure</b> rank ${ev.error.rank}, attempt ${ev.error.attempt + 1}: `;
    }
    li.innerHTML = when + text;
    if (ev.cause) li.querySelector(".cause").textContent = ev.cause;
    if (ev.kind === "state_change") li.append(ev.reason || "");
    if (ev.kind === "checkpoint") li.append(`${ev.checkpoint.id} (index ${ev.checkpoint.index})`);
    if (ev.kind === "worker_error") li.append(`${ev.error.type}: ${ev.error.message}`);
    $("#timeline").append(li);
  }

  async function refreshCheckpoints() {
    const html = await (await fetch(location.pathname)).text();
    const fresh = new DOMParser().parseFromString(html, "text/html");
    const rows = $("#checkpoint-rows", fresh);
    if (rows) $("#checkpoint-rows").replaceWith(rows);
  }

  // Reports that arrive while curves load wait here, then apply those the load did not hold.
  let loads = 0;
  async function loadCurves() {
    const generation = ++loads;
    chart.pending = chart.pending || [];
    const { metrics, x, compare } = chosen();
    const width = Math.max(($("#charts").clientWidth || 1100) / 2, 300) | 0;
    const runs = [chart.runId, ...compare];
    const query = `metrics=${encodeURIComponent(metrics.join(","))}&x=${x}&width=${width}`;
    const answers = await Promise.all(runs.map((run) =>
      fetch(`/api/runs/${encodeURIComponent(run)}/series?${query}`).then((r) => (r.ok ? r.json() : null))));
    if (generation !== loads) return; // a newer choice is loading
    chart.runs = runs;
    chart.names = {};
    chart.series = {};
    answers.forEach((body, i) => {
      if (!body) return;
      chart.series[runs[i]] = body.series;
      chart.names[runs[i]] = `${body.name}`;
    });
    const main = answers[0];
    Object.values(chart.plots).forEach((p) => p.destroy());
    chart.plots = {};
    $("#charts").innerHTML = "";
    const pending = chart.pending;
    chart.pending = null;
    if (main) {
      chart.reports = main.reports;
      main.metrics.forEach(addMetricChoice);
      if (!chart.timelineDrawn && main.complete) {
        main.timeline.forEach(timelineItem);
        chart.timelineDrawn = true;
      }
      pending.filter((ev) => ev.event_id > main.last_event_id).forEach(addReport);
      if (!main.complete) setTimeout(loadCurves, 300); // a long history still arriving at the console
      else if (!chart.source && !chart.ended) follow(main.last_event_id);
    }
    draw();
  }

  function addReport(ev) {
    chart.reports += 1;
    const { x } = chosen();
    const at = x === "time" ? ev.t : ev.report_index;
    const own = chart.series[chart.runId] = chart.series[chart.runId] || {};
    for (const [name, value] of Object.entries(ev.metrics)) {
      const s = own[name] = own[name] || { x: [], y: [] };
      s.x.push(at);
      s.y.push(value);
    }
    for (const name of Object.keys(ev.metrics)) addMetricChoice(name);
    redrawSoon();
  }

  function follow(afterId) {
    // EventSource resumes by itself after a drop, sending the last id it saw (Last-Event-ID).
    const source = chart.source = new EventSource(`/api/runs/${encodeURIComponent(chart.runId)}/events?after=${afterId}`);
    source.addEventListener("metrics", (e) => {
      const ev = JSON.parse(e.data);
      if (chart.pending) chart.pending.push(ev);
      else addReport(ev);
    });
    for (const kind of ["state_change", "checkpoint", "worker_error"]) {
      source.addEventListener(kind, (e) => {
        const ev = JSON.parse(e.data);
        timelineItem(ev);
        if (kind === "state_change") {
          setState($("#run-state"), ev.state);
          $("#run-reason").textContent = ev.reason;
          if (TERMINAL.has(ev.state)) $("#cancel")?.remove();
        }
        if (kind === "checkpoint") refreshCheckpoints();
      });
    }
    source.addEventListener("end", () => { source.close(); chart.ended = true; });
  }

  // Logs: one stream per choice of rank; "follow" keeps it open and scrolled to the end.
  let logSource = null;
  function followLogs() {
    logSource?.close();
    const form = $("#log-form");
    const pre = $("#logs");
    pre.textContent = "";
    const params = new URLSearchParams({ follow: form.follow.checked ? "1" : "0" });
    if (form.rank.value !== "") params.append("rank", form.rank.value);
    const source = logSource = new EventSource(`/api/runs/${encodeURIComponent(chart.runId)}/logs?${params}`);
    source.addEventListener("lines", (e) => {
      const frag = document.createDocumentFragment();
      for (const line of JSON.parse(e.data)) {
        const div = document.createElement("div");
        if (line.stream === "stderr") div.className = "stderr";
        const where = document.createElement("span");
        where.className = "where";
        where.textContent = `(rank=${line.rank}, attempt=${line.attempt}) `;
        div.append(where, line.text);
        frag.append(div);
      }
      pre.append(frag);
      if (form.follow.checked) pre.scrollTop = pre.scrollHeight;
    });
    source.addEventListener("failed", (e) => { pre.append(`\n[${JSON.parse(e.data).message}]`); });
    source.addEventListener("end", () => source.close());
  }

  function followRun(runId, ended) {
    chart.runId = runId;
    chart.ended = ended;
    const form = $("#curve-form");
    form.addEventListener("change", loadCurves);
    form.compare.addEventListener("keyup", (e) => { if (e.key === "Enter") loadCurves(); });
    $("#log-form").addEventListener("change", followLogs);
    loadCurves();
    followLogs();
  }

  async function cancel(runId) {
    const button = $("#cancel");
    button.disabled = true;
    // The header tells the console this came from its own page, not another site's form.
    const answer = await fetch(`/runs/${encodeURIComponent(runId)}/cancel`, {
      method: "POST", headers: { "X-Requested-By": "trainwire-console" },
    });
    const body = await answer.json();
    if (!answer.ok) { button.disabled = false; alert(body.message); return; }
    setState($("#run-state"), body.state);
  }

  // For tests and the curious: how many points the charts hold now.
  function chartPoints() {
    return Object.values(chart.plots).reduce((n, p) => n + p.data.slice(1).flat().filter((v) => v != null).length, 0);
  }

  return { followRuns, followRun, cancel, chartPoints };
})();
window.trainwire = trainwire;
