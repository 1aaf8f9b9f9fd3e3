/* dlsched web view: four views over the JSON API, drawn in the browser.
 *
 *   #/cluster      racks, nodes and GPUs; each GPU coloured by the job holding it, shared GPUs
 *                  outlined (GET /nodes, /allocations, /jobs; live, also GET /timeline for GPUs
 *                  placed for a job whose ranks have not started: dashed); a replay has a
 *                  time slider
 *   #/queue        waiting jobs in the policy's order, with why each waits (GET /jobs)
 *   #/queues       each queue's quota, use and jobs (GET /queues), and each queue's waiting
 *                  jobs with their places and why each waits (GET /queues/{q}/pending)
 *   #/job/<id>     a job's facts, placement history, curves and events
 *   #/timeline     a Gantt chart of jobs over GPUs (GET /timeline)
 *   #/whatif       each policy simulated from the live state (GET /whatif): mean wait, mean
 *                  JCT, utilisation, and each waiting job's predicted start and finish
 *
 * GET /web/config says whether this is a live server ("live": wall-clock times, the cluster
 * and queue views refresh every 5 s) or a simulated run (`dlsched view`, "replay": simulated
 * seconds, `?t=` picks the moment). Charts are Chart.js (vendored, see docs/decisions/0024);
 * the rest is plain DOM. Text from the API is only ever set as text, never parsed as HTML.
 */
"use strict";

const state = { config: null, jobs: null, colors: new Map(), charts: [], timer: null, generation: 0, t: null, window: 3600 };
const PAGES = { cluster: clusterPage, queue: queuePage, queues: queuesPage, job: jobPage, timeline: timelinePage, whatif: whatifPage };
const WAITING = ["queued", "starting"];   // waiting for the scheduler (or its ranks) when /jobs has no queue_position
const REFRESH_MS = 5000;

function h(tag, attrs = {}, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") el.className = v;
    else if (k === "background") el.style.background = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v);
  }
  for (const kid of kids.flat()) if (kid !== null && kid !== undefined) el.append(kid instanceof Node ? kid : String(kid));
  return el;
}

async function api(path) {
  const r = await fetch(path, { credentials: "same-origin", headers: { Accept: "application/json" } });
  if (r.status === 401) { location.reload(); throw new Error("logged out"); }
  if (!r.ok) throw new Error(`${path}: ${r.status} ${(await r.json().catch(() => ({}))).detail || ""}`);
  return r.json();
}

const live = () => state.config.mode === "live";
const pad = (x) => String(x).padStart(2, "0");

function fmtDur(s) {
  s = Math.round(s);
  const d = Math.floor(s / 86400), hh = Math.floor((s % 86400) / 3600), m = Math.floor((s % 3600) / 60), x = s % 60;
  if (d) return `${d}d ${hh}h ${pad(m)}m`;
  if (hh) return `${hh}h ${pad(m)}m ${pad(x)}s`;
  return m ? `${m}m ${pad(x)}s` : `${x}s`;
}

function fmtTime(t) {
  if (t === null || t === undefined) return "";
  if (!live()) return fmtDur(t);
  const d = new Date(t * 1000);
  return `${d.toLocaleDateString()} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

function fmtClock(t) {   // axis ticks: live, the time of day; replay, simulated seconds
  if (!live()) return fmtDur(t);
  const d = new Date(t * 1000);
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

function fmtValue(v) {
  if (typeof v === "number" && !Number.isInteger(v)) return String(Number(v.toPrecision(4)));
  return v === null || v === undefined ? "" : String(v);
}

function colorOf(job) {   // golden-angle hues in submit order: neighbours differ
  if (!state.colors.has(job)) {
    const i = state.colors.size;
    state.colors.set(job, `hsl(${Math.round(i * 137.508) % 360} 60% ${i % 2 ? 40 : 50}%)`);
  }
  return state.colors.get(job);
}

async function jobsList() {   // a replay's jobs do not change: read once
  if (live() || !state.jobs) {
    state.jobs = await api("/jobs");
    state.jobs.forEach((j) => colorOf(j.job_id));
  }
  return state.jobs;
}

const jobLink = (id) => h("a", { href: `#/job/${encodeURIComponent(id)}` }, id);
const swatch = (id) => h("span", { class: "swatch", background: colorOf(id) });

function table(head, rows, numeric = []) {
  return h("table", {},
    h("thead", {}, h("tr", {}, head.map((c, i) => h("th", { class: numeric.includes(i) ? "num" : null }, c)))),
    h("tbody", {}, rows.map((r) => h("tr", {}, r.map((c, i) => h("td", { class: numeric.includes(i) ? "num" : null }, c))))));
}

/* -- cluster ------------------------------------------------------------------------------ */

async function clusterPage(view, arg) {
  const jobs = new Map((await jobsList()).map((j) => [j.job_id, j]));
  const grid = h("div");
  if (live()) {
    view.append(h("h1", {}, "Cluster"), grid);
    await drawCluster(grid, jobs, "");
    return;
  }
  const { t_min: lo, t_max: hi } = state.config;
  const t = Number.isFinite(parseFloat(arg)) ? parseFloat(arg) : state.t ?? lo + (hi - lo) / 2;
  const label = h("strong", {}, `t = ${fmtDur(t)}`);
  const slider = h("input", { type: "range", min: lo, max: hi, step: Math.max((hi - lo) / 1000, 1e-6), value: t, "aria-label": "time" });
  let pending = null;
  slider.addEventListener("input", () => {
    label.textContent = `t = ${fmtDur(+slider.value)}`;
    clearTimeout(pending);
    pending = setTimeout(() => drawCluster(grid, jobs, `?t=${slider.value}`), 120);
  });
  slider.addEventListener("change", () => {
    state.t = +slider.value;
    history.replaceState(null, "", `#/cluster/${slider.value}`);
  });
  view.append(h("h1", {}, "Cluster"), h("div", { class: "bar" }, label, slider), grid);
  await drawCluster(grid, jobs, `?t=${t}`);
}

async function drawCluster(grid, jobs, query) {
  // live: also the placements the scheduler holds (open intervals), for ranks not started yet
  const [nodes, allocs, tl] = await Promise.all([api(`/nodes${query}`), api(`/allocations${query}`),
    live() ? api(`/timeline?since=${Date.now() / 1000}`) : { intervals: [] }]);
  const running = byGpu(Object.entries(allocs).flatMap(([job, ranks]) => ranks.map((r) => [job, r.node, r.gpu_ids])));
  const placed = byGpu(tl.intervals.filter((iv) => iv.end === null).map((iv) => [iv.job_id, iv.node, iv.gpus]));
  const racks = new Map();
  let total = 0, busy = 0, shared = 0, waiting = 0;
  for (const n of nodes) {
    const cells = [];
    for (let g = 0; g < n.gpus; g++) {
      const key = `${n.name}/${g}`;
      const who = running.get(key) || [];
      const pending = who.length ? [] : placed.get(key) || [];
      const load = Math.max((n.gpu_load || [])[g] || 0, who.length);
      total += 1; busy += load > 0 || pending.length > 0; shared += load > 1; waiting += pending.length > 0;
      cells.push(gpuCell(g, who.length ? who : pending, load, pending.length > 0));
    }
    const free = n.free_gpus === undefined ? "" : ` · ${fmtValue(n.free_gpus)} free`;
    const card = h("div", { class: n.up === false ? "node down" : "node" },
      h("div", { class: "name" }, n.name),
      h("div", { class: "meta" }, `${n.gpu_type} · ${n.gpus} GPUs${free}${n.up === false ? " · down" : ""}`),
      h("div", { class: "gpus" }, cells.length ? cells : h("span", { class: "muted" }, "no GPUs")));
    if (!racks.has(n.rack)) racks.set(n.rack, []);
    racks.get(n.rack).push(card);
  }
  const held = [...new Set([...running.values(), ...placed.values()].flat())];
  grid.replaceChildren(
    h("p", {}, `${nodes.length} nodes, ${total} GPUs: ${busy} in use, ${shared} shared, ${total - busy} idle` +
      (waiting ? `; ${waiting} held for jobs whose ranks have not started (dashed)` : "")),
    ...[...racks].map(([rack, cards]) => h("section", { class: "rack" }, h("h3", {}, `rack ${rack}`), h("div", { class: "nodes" }, cards))),
    h("h2", {}, "Jobs on GPUs"),
    held.length ? h("div", { class: "legend" }, held.map((id) => h("span", {}, swatch(id), jobLink(id), jobNote(jobs.get(id)))))
      : h("p", { class: "muted" }, "no job holds a GPU"));
}

function byGpu(places) {   // [job, node, GPU ids] -> Map "node/gpu" -> job ids
  const out = new Map();
  for (const [job, node, gpus] of places) {
    for (const g of gpus) {
      const who = out.get(`${node}/${g}`) || [];
      if (!who.includes(job)) who.push(job);
      out.set(`${node}/${g}`, who);
    }
  }
  return out;
}

function jobNote(j) {   // a replay's job states are final ones, not those at the slider's time
  if (!j) return "";
  return (j.name !== j.job_id ? ` ${j.name}` : "") + (live() ? ` (${j.state})` : "");
}

function gpuCell(g, who, load, pending) {
  const cls = ["gpu", who.length ? "" : "idle", load > 1 ? "shared" : "", pending ? "pending" : ""].join(" ").trim();
  const title = `GPU ${g}: ${who.join(", ") || "idle"}${load > 1 ? ` (shared: ${load} tasks)` : ""}` +
    (pending ? " (placed; its ranks have not started)" : "");
  const text = who.length ? who[0] + (who.length > 1 ? ` +${who.length - 1}` : "") : "idle";
  const colors = who.map(colorOf);
  const background = colors.length > 1
    ? `linear-gradient(135deg, ${colors.map((c, i) => `${c} ${(100 * i) / colors.length}% ${(100 * (i + 1)) / colors.length}%`).join(", ")})`
    : colors[0];
  return h(who.length ? "a" : "div", { class: cls, title, background, href: who.length ? `#/job/${encodeURIComponent(who[0])}` : null },
    h("div", { class: "id" }, `GPU ${g}${load > 1 ? ` ×${load}` : ""}`), text);
}

/* -- queue -------------------------------------------------------------------------------- */

async function queuePage(view) {
  const jobs = await jobsList();
  const ranked = jobs.some((j) => "queue_position" in j);
  // in the policy's order; then the placed jobs whose ranks are still starting (no position)
  const waiting = ranked
    ? jobs.filter((j) => j.queue_position !== null && j.queue_position !== undefined).sort((a, b) => a.queue_position - b.queue_position)
      .concat(jobs.filter((j) => j.state === "starting" && (j.queue_position === null || j.queue_position === undefined)))
    : jobs.filter((j) => WAITING.includes(j.state));
  const now = Date.now() / 1000;
  const rows = waiting.map((j, i) => [
    ranked ? (j.queue_position ? String(j.queue_position) : "–") : String(i + 1), jobLink(j.job_id), j.name, j.state,
    `${j.workers} × ${fmtValue(j.gpus_per_worker)}`, fmtTime(j.submit_time), fmtDur(now - j.submit_time), j.waiting_reason || ""]);
  const running = jobs.filter((j) => j.state === "running").length;
  view.append(h("h1", {}, "Queue"),
    h("p", {}, `${waiting.length} waiting, ${running} running` + (ranked ? ", in the policy's order" : "")),
    ranked ? "" : h("p", { class: "muted" }, "This server gives no queue positions: waiting jobs in submit order."),
    waiting.length ? table(["#", "job", "name", "state", "workers × GPUs", "submitted", "waiting", "why it waits"], rows, [0])
      : h("p", { class: "muted" }, "no job waits"));
}

/* -- queues ------------------------------------------------------------------------------- */

const PENDING_SHOWN = 100;   // waiting jobs listed per queue (GET /queues/{q}/pending?limit=)

function gpuLimit(q) {   // a GPU quota's limit: its own, else nominal + borrowing limit, else none
  const g = q.quotas.gpu || {};
  if (g.limit !== null && g.limit !== undefined) return g.limit;
  if (g.borrowing_limit !== null && g.borrowing_limit !== undefined) return (g.nominal || 0) + g.borrowing_limit;
  return null;
}

async function queuesPage(view) {
  const ans = await api("/queues");
  const dash = (x) => (x === null || x === undefined ? "-" : fmtValue(x));
  const rows = ans.queues.map((q) => [q.name, q.parent || "-", dash((q.quotas.gpu || {}).nominal), dash(gpuLimit(q)),
    dash(q.usage.gpu || 0), dash(q.entitled_gpus), dash(q.borrowed_gpus), String(q.running), String(q.pending)]);
  view.append(h("h1", {}, "Queues"),
    h("p", {}, ans.mode ? `Tenancy ${ans.mode}; GPUs per queue.` : "No queue tree: one queue, no quotas."),
    table(["queue", "parent", "nominal", "limit", "used", "entitled", "borrowed", "running", "pending"], rows,
      [2, 3, 4, 5, 6, 7, 8]));
  const waiting = ans.queues.filter((q) => q.leaf && q.pending > 0);
  const pages = await Promise.all(waiting.map((q) => api(`/queues/${encodeURIComponent(q.name)}/pending?limit=${PENDING_SHOWN}`)));
  view.append(h("h2", {}, "Waiting jobs"));
  if (!pages.length) view.append(h("p", { class: "muted" }, "no job waits"));
  for (const p of pages) {
    view.append(h("h3", {}, `${p.queue}: ${p.total} waiting` + (p.total > p.items.length ? ` (the first ${p.items.length})` : "")),
      table(["in queue", "in parent", "job", "user", "GPUs", "why it waits"],
        p.items.map((j) => [String(j.position_in_queue), String(j.position_in_parent), jobLink(j.job_id), j.user,
          fmtValue(j.gpus), j.reason]), [0, 1, 4]));
  }
}

/* -- job ---------------------------------------------------------------------------------- */

async function jobPage(view, id) {
  await jobsList();
  const enc = encodeURIComponent(id);
  const [job, events, stats, tl] = await Promise.all(
    [api(`/jobs/${enc}`), api(`/jobs/${enc}/events`), api(`/jobs/${enc}/stats`), api(`/timeline?job_id=${enc}`)]);
  const facts = Object.entries(job).filter(([k, v]) => (v === null || typeof v !== "object") && !["job_id", "name"].includes(k))
    .map(([k, v]) => h("div", {}, h("span", { class: "muted" }, k), " ", k.endsWith("_time") ? fmtTime(v) : fmtValue(v)));
  view.append(h("h1", {}, swatch(id), `${id} ${job.name !== id ? job.name : ""} (${job.state})`),
    h("div", { class: "facts" }, facts),
    h("h2", {}, "Placement history"), placementHistory(tl),
    h("h2", {}, live() ? "Training curves" : "Speed"));
  const charts = h("div", { class: "charts" });
  view.append(charts);
  if (live()) {
    const pts = (key, scale = 1) => stats.filter((s) => s[key] !== null && s[key] !== undefined).map((s) => ({ x: s.step, y: s[key] * scale }));
    lineChart(charts, "Loss", pts("loss"), "step", "loss");
    lineChart(charts, "Accuracy", pts("accuracy"), "step", "accuracy");
    lineChart(charts, "Step time", pts("step_s", 1000), "step", "ms per step");
  } else {
    lineChart(charts, "Speed", stats.map((s) => ({ x: s.time, y: s.rate })), "simulated time", "work units / s", true);
  }
  view.append(h("h2", {}, "Events"),
    table(["time", "kind", "detail"], events.map((e) => [fmtTime(e.time), e.kind, e.detail || ""])));
  if (job.spec) view.append(h("h2", {}, "Spec"), h("pre", {}, JSON.stringify(job.spec, null, 2)));
}

function placementHistory(tl) {
  const spells = new Map();            // start -> its intervals (one placement decision)
  for (const iv of tl.intervals) {
    if (!spells.has(iv.start)) spells.set(iv.start, []);
    spells.get(iv.start).push(iv);
  }
  if (!spells.size) return h("p", { class: "muted" }, "never placed");
  const rows = [...spells].map(([start, ivs]) => {
    const end = Math.max(...ivs.map((iv) => iv.end ?? tl.now));
    const open = ivs.some((iv) => iv.end === null);
    const where = ivs.sort((a, b) => a.task - b.task)
      .map((iv) => `rank ${iv.task} → ${iv.node}${iv.gpus.length ? ` GPU ${iv.gpus.join(",")}` : ""}`).join("; ");
    return [fmtTime(start), open ? "now" : fmtTime(end), fmtDur(end - start), where];
  });
  return table(["from", "to", "for", "ranks"], rows);
}

function lineChart(parent, title, points, xTitle, yTitle, stepped = false) {
  const canvas = h("canvas", { "aria-label": title, role: "img" });
  parent.append(h("div", {}, h("h3", {}, title),
    points.length ? h("div", { class: "chart" }, canvas) : h("p", { class: "muted" }, "nothing reported yet")));
  if (!points.length) return;
  state.charts.push(new Chart(canvas, {
    type: "line",
    data: { datasets: [{ label: title, data: points, borderColor: "#2457a6", backgroundColor: "#2457a6",
      borderWidth: 1.5, pointRadius: points.length > 100 ? 0 : 2, stepped }] },
    options: {
      animation: false, maintainAspectRatio: false, parsing: false,
      plugins: { legend: { display: false } },
      scales: {
        x: { type: "linear", title: { display: true, text: xTitle }, ticks: { callback: xTitle === "step" ? undefined : fmtClock } },
        y: { title: { display: true, text: yTitle } },
      },
    },
  }));
}

/* -- timeline ----------------------------------------------------------------------------- */

async function timelinePage(view) {
  await jobsList();
  const controls = h("div", { class: "bar" });
  const box = h("div");
  view.append(h("h1", {}, "Timeline"), controls, box);
  if (live()) {
    const sel = h("select", { "aria-label": "window" },
      [[600, "last 10 min"], [3600, "last hour"], [21600, "last 6 h"], [86400, "last day"], [0, "everything"]]
        .map(([s, text]) => h("option", { value: s, selected: s === state.window ? "" : null }, text)));
    sel.addEventListener("change", () => { state.window = +sel.value; drawTimeline(box); });
    controls.append("Show ", sel);
  }
  await drawTimeline(box);
}

async function drawTimeline(box) {
  const since = live() && state.window ? `?since=${Date.now() / 1000 - state.window}` : "";
  const tl = await api(`/timeline${since}`);
  state.charts.forEach((c) => c.destroy());
  state.charts = [];
  const rows = tl.nodes.flatMap((n) => Array.from({ length: n.gpus }, (_, g) => `${n.name} / GPU ${g}`));
  const byJob = new Map();
  for (const iv of tl.intervals) {
    if (!byJob.has(iv.job_id)) byJob.set(iv.job_id, []);
    for (const g of iv.gpus) byJob.get(iv.job_id).push({ x: [iv.start, iv.end ?? tl.now], y: `${iv.node} / GPU ${g}`, open: iv.end === null });
  }
  const jobs = [...byJob.keys()];
  const note = `${tl.intervals.length} placements of ${jobs.length} jobs on ${rows.length} GPUs` +
    (tl.truncated ? " (the latest only: narrow the window to see the rest)" : "");
  if (!tl.intervals.length) { box.replaceChildren(h("p", {}, note), h("p", { class: "muted" }, "nothing placed in this window")); return; }
  const start = Math.min(...tl.intervals.map((iv) => iv.start));
  const lo = live() && state.window ? Math.max(tl.now - state.window, start) : live() ? start : state.config.t_min;
  const canvas = h("canvas", { "aria-label": "jobs over GPUs", role: "img" });
  const gantt = h("div", { class: "gantt" }, canvas);
  gantt.style.height = `${rows.length * 22 + 110}px`;
  box.replaceChildren(h("p", {}, note), gantt);
  state.charts.push(new Chart(canvas, {
    type: "bar",
    data: { labels: rows, datasets: jobs.map((id) => ({ label: id, data: byJob.get(id), backgroundColor: colorOf(id) })) },
    options: {
      indexAxis: "y", animation: false, maintainAspectRatio: false,
      datasets: { bar: { grouped: false, barPercentage: 0.85, categoryPercentage: 1 } },
      scales: { x: { type: "linear", min: lo, max: tl.now, position: "top", ticks: { callback: fmtClock } }, y: { type: "category" } },
      plugins: {
        legend: { display: jobs.length <= 40, position: "bottom" },
        tooltip: { callbacks: { label: (c) => `${c.dataset.label}: ${fmtTime(c.raw.x[0])} – ${c.raw.open ? "now" : fmtTime(c.raw.x[1])}` } },
      },
      onClick: (e, els) => { if (els.length) location.hash = `#/job/${encodeURIComponent(jobs[els[0].datasetIndex])}`; },
    },
  }));
}

/* -- what if ------------------------------------------------------------------------------ */

async function whatifPage(view, arg) {
  const [pols, hor] = (arg || "").split("@");
  const policies = pols || [...new Set([state.config.policy, "fifo", "tiresias", "gandiva"])].join(",");
  const horizon = hor || "6h";
  const pIn = h("input", { name: "policies", value: policies, size: 40, "aria-label": "policies" });
  const hIn = h("input", { name: "horizon", value: horizon, size: 6, "aria-label": "horizon" });
  const form = h("form", { class: "whatif" }, "policies ", pIn, " horizon ", hIn, " ", h("button", { type: "submit" }, "Simulate"));
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    location.hash = `#/whatif/${encodeURIComponent(pIn.value.trim())}@${encodeURIComponent(hIn.value.trim())}`;
  });
  view.append(h("h1", {}, "What if"),
    h("p", { class: "muted" }, "Each policy simulated from the cluster's state now (running jobs where they are, " +
      "the steps they have left at the speeds measured here, the waiting queue), with the same policy code."), form);
  const ans = await api(`/whatif?policies=${encodeURIComponent(policies)}&horizon=${encodeURIComponent(horizon)}`);
  const names = Object.keys(ans.policies);
  view.append(h("h2", {}, `Per policy (utilisation over ${fmtDur(ans.horizon_s)})`),
    table(["policy", "mean wait", "mean JCT", "utilisation", "last job done in"],
      names.map((n) => { const p = ans.policies[n];
        return [n, fmtDur(p.mean_wait_s), fmtDur(p.mean_jct_s), `${(100 * p.utilisation).toFixed(1)} %`, fmtDur(p.makespan_s)]; }),
      [1, 2, 3, 4]));
  const first = ans.policies[names[0]].jobs;
  const waiting = Object.keys(first).filter((j) => first[j].start_s === null || first[j].start_s >= 0)
    .sort((a, b) => first[a].submit_s - first[b].submit_s || (a < b ? -1 : 1));
  const cell = (n, j) => { const x = ans.policies[n].jobs[j];
    return x.start_s === null ? "-" : `in ${fmtDur(x.start_s)} / ${x.finish_s === null ? "-" : "in " + fmtDur(x.finish_s)}`; };
  view.append(h("h2", {}, "Waiting jobs: predicted start / finish"),
    waiting.length ? table(["job", ...names], waiting.map((j) => [h("span", {}, jobLink(j), first[j].estimated ? " *" : ""),
      ...names.map((n) => cell(n, j))]))
      : h("p", { class: "muted" }, "no job waits"),
    waiting.some((j) => first[j].estimated) ? h("p", { class: "muted" }, "* run time estimated: its model's step time was never measured here") : "");
}

/* -- routing ------------------------------------------------------------------------------ */

async function route() {
  const generation = ++state.generation;
  clearInterval(state.timer);
  state.charts.forEach((c) => c.destroy());
  state.charts = [];
  const [name, ...rest] = location.hash.replace(/^#\/?/, "").split("/");
  const page = name in PAGES ? name : "cluster";
  document.querySelectorAll("header nav a").forEach((a) => a.classList.toggle("active", a.dataset.page === page));
  const main = document.getElementById("main");
  const draw = async () => {
    const view = h("div");
    await PAGES[page](view, decodeURIComponent(rest.join("/")));
    if (generation === state.generation) main.replaceChildren(view);
  };
  const fail = (e) => { if (generation === state.generation) main.replaceChildren(h("p", { class: "error" }, String(e.message || e))); };
  await draw().catch(fail);
  if (live() && ["cluster", "queue", "queues"].includes(page) && generation === state.generation) {
    state.timer = setInterval(() => draw().catch(fail), REFRESH_MS);
  }
}

async function start() {
  state.config = await api("/web/config");
  document.getElementById("title").textContent = state.config.title;
  document.title = state.config.title;
  if (!live()) {
    for (const p of ["queue", "queues", "whatif"]) document.querySelector(`header nav a[data-page="${p}"]`).classList.add("hidden");
  }
  window.addEventListener("hashchange", route);
  await route();
}

start().catch((e) => document.getElementById("main").replaceChildren(h("p", { class: "error" }, String(e.message || e))));
