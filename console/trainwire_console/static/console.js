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

  // --- the runs list: each run's score, best value and sparkline; picking runs to compare ----------
  const sparkQueue = [];
  let sparkLoads = 0;
  const sparkAsked = new Map();

  function drawSpark(row, body) {
    const cell = $("[data-field=spark]", row);
    const best = $("[data-field=best]", row);
    if (!body.score_attribute && body.metric) {
      $("[data-field=score]", row).innerHTML = '<span class="small" title="no checkpoint score attribute: the first reported metric"></span>';
      $("[data-field=score] span", row).textContent = body.metric;
    }
    const value = body.best != null ? body.best : body.last;
    best.textContent = value == null ? "" : fmt(value);
    best.title = body.best != null ? `best ${body.metric} of the run's reports` : body.last != null ? `last ${body.metric}` : "";
    cell.textContent = "";
    const pts = body.points;
    if (!pts.length) return;
    const W = 120, H = 26, P = 2;
    const xs = pts.map((p) => p[0]), ys = pts.map((p) => p[1]);
    const [x0, x1, y0, y1] = [Math.min(...xs), Math.max(...xs), Math.min(...ys), Math.max(...ys)];
    const sx = (v) => P + (x1 > x0 ? (v - x0) / (x1 - x0) : 0.5) * (W - 2 * P);
    const sy = (v) => H - P - (y1 > y0 ? (v - y0) / (y1 - y0) : 0.5) * (H - 2 * P);
    const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
    svg.setAttribute("width", W);
    svg.setAttribute("height", H);
    svg.setAttribute("class", "sparkline");
    const line = document.createElementNS(svg.namespaceURI, "polyline");
    line.setAttribute("points", pts.map(([a, b]) => `${sx(a).toFixed(1)},${sy(b).toFixed(1)}`).join(" "));
    svg.append(line);
    if (body.best != null) {
      const at = pts.find((p) => p[1] === body.best);
      const dot = document.createElementNS(svg.namespaceURI, "circle");
      dot.setAttribute("cx", sx(at[0]).toFixed(1));
      dot.setAttribute("cy", sy(at[1]).toFixed(1));
      dot.setAttribute("r", 2.5);
      svg.append(dot);
    }
    const title = document.createElementNS(svg.namespaceURI, "title");
    title.textContent = `${body.metric} over ${body.reports} reports`;
    svg.append(title);
    cell.append(svg);
    cell.dataset.points = pts.length;
  }

  // A few at a time: each ended run's history is read once by the console, then kept.
  function pumpSparks() {
    while (sparkLoads < 4 && sparkQueue.length) {
      const runId = sparkQueue.shift();
      sparkLoads += 1;
      fetch(`/api/runs/${encodeURIComponent(runId)}/sparkline`)
        .then((r) => (r.ok ? r.json() : null))
        .then((body) => {
          const row = document.getElementById(`run-${runId}`);
          if (body && row) drawSpark(row, body);
        })
        .catch(() => {})
        .finally(() => { sparkLoads -= 1; pumpSparks(); });
    }
  }

  const sparkLater = new Map();
  function loadSpark(runId, force = false) {
    const last = sparkAsked.get(runId);
    if (last && !force) return;
    // A live run's sparkline is asked again at most every 2 s, however often it reports.
    const wait = last ? 2000 - (Date.now() - last) : 0;
    if (wait > 0) {
      if (!sparkLater.has(runId)) {
        sparkLater.set(runId, setTimeout(() => { sparkLater.delete(runId); loadSpark(runId, true); }, wait));
      }
      return;
    }
    sparkAsked.set(runId, Date.now());
    if (!sparkQueue.includes(runId)) sparkQueue.push(runId);
    pumpSparks();
  }

  const picked = [];
  function syncPicks() {
    for (const box of $$("input.pick")) box.checked = picked.includes(box.value);
    const button = $("#compare");
    if (button) {
      button.disabled = picked.length < 2;
      button.textContent = picked.length ? `Compare selected (${picked.length})` : "Compare selected";
    }
  }

  function compareSelected() {
    if (picked.length < 2) return;
    const [first, ...rest] = picked;
    location.href = `/runs/${encodeURIComponent(first)}?compare=${encodeURIComponent(rest.join(","))}`;
  }

  function setUpRows() {
    for (const row of $$("tr[data-run]")) loadSpark(row.dataset.run);
    syncPicks();
  }

  function followRuns() {
    document.addEventListener("change", (e) => {
      if (!e.target.matches("input.pick")) return;
      const at = picked.indexOf(e.target.value);
      if (e.target.checked && at < 0) picked.push(e.target.value);
      if (!e.target.checked && at >= 0) picked.splice(at, 1);
      syncPicks();
    });
    // A table swapped in by htmx (filters, new runs): its rows' sparklines, the picks kept.
    document.body.addEventListener("htmx:afterSwap", setUpRows);
    setUpRows();
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
      if (String(run.reports) !== $("[data-field=reports]", row).textContent.trim() || changed) loadSpark(run.run_id, true);
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

  // The reported metric each x axis is: drawn against itself it would be a straight line.
  const X_METRIC = { training_iteration: "training_iteration", time: "" };
  const xMetric = () => X_METRIC[$("#curve-form").x.value] || "";

  function chosen() {
    const form = $("#curve-form");
    const own = xMetric();
    return {
      x: form.x.value,
      metrics: $$("input[name=metric]:checked", form).map((i) => i.value).filter((m) => m !== own),
      compare: form.compare.value.split(",").map((s) => s.trim()).filter(Boolean),
    };
  }

  // The metric the run is judged by: its checkpoint score attribute, else the first it reported.
  function scoreMetric() {
    const form = $("#curve-form");
    if (form.dataset.scoreAttribute) return form.dataset.scoreAttribute;
    const first = $$("input[name=metric]", form).find((i) => !Object.values(X_METRIC).includes(i.value));
    return first ? first.value : "";
  }

  function addMetricChoice(name) {
    if ($(`input[name=metric][value="${CSS.escape(name)}"]`)) return;
    const label = document.createElement("label");
    label.dataset.metric = name;
    label.hidden = name === xMetric();
    const isScore = name === $("#curve-form").dataset.scoreAttribute;
    const checked = !label.hidden && (isScore || chosen().metrics.length < 4);
    label.innerHTML = `<input type="checkbox" name="metric" ${checked ? "checked" : ""}> `;
    label.firstChild.value = name;
    label.append(name, " ");
    // The score metric leads (its chart is drawn first), whenever it is first reported.
    if (isScore) $("#metric-choices").prepend(label, " ");
    else $("#metric-choices").append(label, " ");
    if (checked) loadCurves();
  }

  // The x axis's own metric is offered only against the other axis.
  function syncChoices() {
    const own = xMetric();
    for (const label of $$("#metric-choices label")) label.hidden = label.dataset.metric === own;
  }

  function fmt(v) {
    if (v == null || Number.isNaN(v)) return "";
    if (Number.isInteger(v)) return String(v);
    const a = Math.abs(v);
    return a >= 1e5 || a < 1e-3 ? v.toExponential(3) : String(Number(v.toPrecision(5)));
  }

  // A legend shows each series' latest value at rest and the value under the cursor on hover (else
  // the run's last report before it: overlaid runs report at other steps), never uPlot's "--".
  function legendValue(u, v, sidx, idx) {
    const column = u.data[sidx] || [];
    for (let i = idx == null ? column.length - 1 : idx; i >= 0; i--) if (column[i] != null) return fmt(column[i]);
    return "no report yet";
  }

  // Kept checkpoints on the score metric's curve: the best one distinct, the served one named.
  function placeMarkers(u, metric) {
    u.over.querySelectorAll(".ckpt").forEach((el) => el.remove());
    const scores = chart.scores;
    if (!scores || metric !== scores.metric) return;
    const { x } = chosen();
    for (const c of scores.checkpoints) {
      const at = x === "time" ? c.t : c.index;
      if (at == null || c.value == null) continue;
      const left = u.valToPos(at, "x");
      const top = u.valToPos(c.value, "y");
      if (!Number.isFinite(left) || !Number.isFinite(top)) continue;
      const el = document.createElement("span");
      // The served label goes where the curve is not: below a minimum, above a maximum.
      const side = scores.order === "min" ? "below" : "above";
      el.className = ["ckpt", c.best && "best", c.served && "served", c.latest && "latest", side].filter(Boolean).join(" ");
      el.dataset.step = c.index;
      el.dataset.checkpoint = c.id;
      el.style.left = `${left}px`;
      el.style.top = `${top}px`;
      const what = [c.best && "best", c.latest && "latest", c.served && "served by default"].filter(Boolean);
      el.title = `${c.id}: ${metric} ${fmt(c.value)} at iteration ${c.index}${what.length ? ` (${what.join(", ")})` : ""}`;
      if (c.served) {
        const name = document.createElement("b");
        name.textContent = "served";
        el.append(name);
      }
      u.over.append(el);
    }
  }

  function describeCheckpoints() {
    const key = $("#checkpoint-key");
    const scores = chart.scores;
    if (!key || !scores) return;
    key.textContent = "";
    if (!scores.checkpoints.length) {
      key.textContent = "No checkpoint yet.";
      return;
    }
    const served = scores.checkpoints.find((c) => c.served);
    const by = scores.score_attribute
      ? `best by ${scores.score_attribute} (${scores.order === "min" ? "lowest" : "highest"})`
      : "no score attribute: the latest is served";
    key.innerHTML = `On <b class="m"></b>: <span class="ckpt-key"></span> kept checkpoint${scores.score_attribute ? ', <span class="ckpt-key best"></span> best' : ""} (${by}). Served by default: <b class="mono served-id"></b>`;
    $(".m", key).textContent = scores.metric;
    $(".served-id", key).textContent = served ? `${served.id} (iteration ${served.index})` : scores.served;
  }

  let scoresLoad = null;
  function loadScores() {
    clearTimeout(scoresLoad);
    scoresLoad = setTimeout(async () => {
      const answer = await fetch(`/api/runs/${encodeURIComponent(chart.runId)}/scores`);
      if (!answer.ok) return;
      chart.scores = await answer.json();
      describeCheckpoints();
      for (const [metric, plot] of Object.entries(chart.plots)) placeMarkers(plot, metric);
    }, 200);
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
        const xLabel = x === "time" ? "seconds since start" : "training iteration";
        plot = chart.plots[metric] = new uPlot({
          width, height: 220,
          scales: { x: { time: false } },
          axes: [{ label: xLabel }, {}],
          series: [{ label: xLabel, value: legendValue }, ...chart.runs.map((run, i) => ({
            label: chart.names[run] || run, stroke: COLOURS[i % COLOURS.length], width: 1.5, spanGaps: true,
            points: { show: data[0].length < 60 }, value: legendValue,
          }))],
          hooks: { draw: [(u) => placeMarkers(u, metric)] },
        }, data, box);
      } else {
        plot.setData(data);
        // At rest the legend follows the newest report.
        if (plot.cursor.idx == null) plot.setLegend({ idx: null });
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
        if (kind === "checkpoint") { refreshCheckpoints(); loadScores(); }
      });
    }
    source.addEventListener("end", () => { source.close(); chart.ended = true; loadScores(); });
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
    form.x.addEventListener("change", syncChoices);
    form.addEventListener("change", loadCurves);
    form.compare.addEventListener("keyup", (e) => { if (e.key === "Enter") loadCurves(); });
    $("#log-form").addEventListener("change", followLogs);
    loadCurves();
    loadScores();
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

  // For tests: a chart's uPlot, by metric.
  const plotOf = (metric) => chart.plots[metric];

  return { followRuns, followRun, cancel, chartPoints, compareSelected, plotOf };
})();
window.trainwire = trainwire;
