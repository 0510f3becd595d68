// spot-broker cost dashboard. Plain JS, no dependencies: it must work offline.
// Every figure comes from GET /v1/costs (or /v1/costs/jobs/{id}); money arrives as integer
// micro-dollars with a display string, and the page shows the display string as given.
"use strict";

const TOKEN_KEY = "spot-broker-token";
const TIERS = ["onprem", "ondemand", "spot"];
const ROWS = 20;  // the most rows the budget burn and the queue show
const REFRESH_MS = 30000;  // a running job's cost grows: the page asks again this often while it is in view
const SVG = "http://www.w3.org/2000/svg";
const $ = (id) => document.getElementById(id);

function token() { return localStorage.getItem(TOKEN_KEY); }

function takeTokenFromUrl() {
  // #token=… is never sent to the server (a ?token=… is, and lands in a load balancer's request log); both are taken
  const url = new URL(window.location.href);
  const m = /^#token=(.+)$/.exec(url.hash);
  let t = url.searchParams.get("token");
  if (m) {
    try { t = decodeURIComponent(m[1]); } catch (err) { t = m[1]; }
    url.hash = "";
  }
  if (t) {
    localStorage.setItem(TOKEN_KEY, t);
    url.searchParams.delete("token");
    history.replaceState(null, "", url.pathname + url.search + url.hash);  // keep it out of history
  }
}

async function api(path) {
  let resp;
  try {
    resp = await fetch(path, { headers: { Authorization: "Bearer " + token() } });
  } catch (err) {
    throw new Error("The broker did not answer (" + err.message + ").");
  }
  if (resp.status === 401) { showLogin("That token was not accepted."); throw new Error("unauthorized"); }
  // a proxy in front of the broker may answer an error with an HTML page
  const body = await resp.json().catch(() => null);
  if (!resp.ok || body === null) throw new Error((body && body.detail) || ("The broker answered HTTP " + resp.status + "."));
  return body;
}

// micro-dollars → "$1,234.57", as the broker writes money (pricing/money.py fmt): rounded up (away from zero) to
// the cent, and under a dollar to a hundredth of a cent when that is not a whole cent ("$0.0046", not "$0.01")
function usd(micros) {
  const sign = micros < 0 ? "-" : "";
  const abs = Math.abs(micros);
  if (abs < 1000000 && abs % 10000) {
    const tenThousandths = Math.ceil(abs / 100);
    if (tenThousandths % 100) return sign + "$0." + String(tenThousandths).padStart(4, "0");
  }
  const cents = Math.ceil(abs / 10000);
  return sign + "$" + Math.floor(cents / 100).toLocaleString("en-US") + "." + String(cents % 100).padStart(2, "0");
}

// a saving in words, as the broker says it (broker/views.py saving_words): work that cost more than on-demand
// "paid $0.10 (10%) more than on-demand", never "saved -$0.10 (-10%)"; more than MANY_TIMES the on-demand cost
// "over 10 times the on-demand cost", not "(449900%)" for a job whose on-demand equivalent is a few micro-dollars
const MANY_TIMES = 10;
function manyTimes(pct) { return pct !== null && pct < 100 - 100 * MANY_TIMES; }  // spent > 10 × on-demand, exactly

const NOTHING_TO_COMPARE = "nothing to compare with on-demand";

// saving.usd is rounded down by the broker (a saving is a claim, never overstated); an amount paid more is a cost,
// rounded up (usd). Nothing to compare (no on-demand figure, nothing saved: a job billed 0 s, a broker with no spend)
// reads as the Saved card says it, never "saved $0.00"
function savingWords(saving, pct, versus) {
  if (pct === null && saving.micros === 0) return NOTHING_TO_COMPARE;
  const than = versus ? " than " + versus : "";
  if (saving.micros < 0) {
    if (manyTimes(pct)) return "paid " + usd(-saving.micros) + " more" + than + `, over ${MANY_TIMES} times the on-demand cost`;
    return "paid " + usd(-saving.micros) + (pct === null ? "" : ` (${-pct}%)`) + " more" + than;
  }
  return "saved " + saving.usd + (pct === null ? "" : ` (${pct}%)`);
}

// a saving in a table's cell (broker/views.py saving_cell): "—" with no on-demand figure to weigh it against
function savingCell(saving, pct) { return pct === null ? "—" : savingWords(saving, pct); }

// an on-demand equivalent in a table's cell (broker/views.py ondemand_cell): "—" where there is nothing to compare,
// as the Saved card decides it: on-prem spend read as its own "same time on-demand" under "nothing to compare"
function ondemandCell(equivalent, saving, pct) {
  return pct === null && saving.micros === 0 ? "—" : equivalent.usd;
}

// "45 s", "12 min", "6.0 h", as the CLI and Slack write a span (broker/views.py duration)
function duration(seconds) {
  seconds = Math.floor(seconds);
  if (seconds < 60) return seconds + " s";
  if (seconds < 3600) return Math.floor(seconds / 60) + " min";
  const tenths = Math.floor(seconds / 360);  // whole tenths of an hour, rounded down, as broker/views.py's duration
  return Math.floor(tenths / 10) + "." + (tenths % 10) + " h";
}

// broker/lifecycle.py's FINAL_STATES: a job in one has ended
const ENDED_STATES = new Set(["succeeded", "failed", "cancelled", "stopped_budget"]);

// "2025-01-30T12:00:00Z" → "2025-01-30 12:00:00 UTC"
function utc(iso) { return iso.replace("T", " ").replace("Z", " UTC"); }

function el(tag, text, attrs) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  return e;
}

function svg(tag, attrs) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  return e;
}

// a job's cell: its name on one line, cut with an ellipsis where long (the whole in its title), then its id, never
// broken; reads "name (id)". The whole is a real link that opens the job (Tab, then Enter or Space): the row stays a
// table row, whose cells a screen reader reads with their column's header (a row with role="link" was one long link)
function jobCell(name, id, suffix) {
  const td = el("td", null, { class: "name" });
  const a = el("a", null, { class: "open", href: "#job=" + encodeURIComponent(id) });
  if (name) {
    a.appendChild(el("span", name, { class: "jobname", title: name }));
    a.appendChild(document.createTextNode(" "));
  }
  a.appendChild(el("span", (name ? "(" + id + ")" : id) + (suffix || ""), { class: "jobid" }));
  a.addEventListener("click", (e) => {
    e.stopPropagation();  // (the row's own click would open it twice)
    if (e.ctrlKey || e.metaKey || e.shiftKey || e.altKey) return;  // a new tab or window: the link's #job=ID opens it
    e.preventDefault();
    openJob(id, a);
  });
  a.addEventListener("keydown", (e) => {  // a link opens on Enter by itself; Space too, as a row did
    if (e.key === " ") { e.preventDefault(); openJob(id, a); }
  });
  td.appendChild(a);
  return { node: td };
}

// a row that opens a job (`job`; `key` tells apart two rows of one job, a job's two preemptions): a click anywhere on
// it opens the job, the keyboard reaches it through the link in its job cell
function row(cells, job, key) {
  const tr = el("tr");
  for (const c of cells) {
    const td = typeof c === "object" && c !== null && c.node ? c.node : el("td", c && c.text !== undefined ? c.text : c);
    if (c && c.num) td.className = "num";
    if (c && c.name) td.className = "name";  // a job's name, which may hold no space to wrap at
    if (c && c.wrap) td.classList.add("wrap");  // words and amounts ("saved $15.00 (75%)"): wraps on a phone
    if (c && c.clip) {  // long words (a queued job's reason naming what holds it): two lines, the whole on hover
      td.textContent = "";
      td.appendChild(el("div", c.text, { class: "clip" }));
      td.title = c.text;
    }
    tr.appendChild(td);
  }
  if (job !== undefined) {
    tr.className = "clickable";
    tr.dataset.job = job;
    tr.dataset.key = key === undefined ? job : key;
    tr.addEventListener("click", () => openJob(job, tr.querySelector("a.open")));
  }
  return tr;
}

// The row that had the keyboard's focus before its table was built again (every 30 s): focus went to the page's
// start, and the next Tab landed on another job's row. It goes back to the same job's row, else to the row now in
// its place, else to the table
function focusedRow(tbody) {
  const a = document.activeElement;
  const tr = a && a !== document.body && tbody.contains(a) ? a.closest("tr") : null;
  return tr ? { key: tr.dataset.key, index: [...tbody.rows].indexOf(tr) } : null;
}

function refocus(table, tbody, was) {
  const rows = [...tbody.querySelectorAll("tr[data-key]")];
  const same = rows.find((r) => r.dataset.key === was.key) || rows[Math.min(was.index, rows.length - 1)];
  const target = same ? same.querySelector("a.open") : null;
  if (target) { target.focus({ preventScroll: true }); return; }
  table.tabIndex = -1;
  table.focus({ preventScroll: true });
}

// The first `limit` rows, then one line saying how many more there are (`more(n)`): a queue of 500 jobs drew 500
// rows and pushed the rest of the page 25,000 px down
function fill(tableId, rows, empty, limit, more) {
  const tbody = $(tableId).querySelector("tbody");
  const cols = $(tableId).querySelectorAll("th").length;
  const note = (text) => { const tr = el("tr"); tr.appendChild(el("td", text, { colspan: cols, class: "empty" })); return tr; };
  const was = focusedRow(tbody);
  if (limit !== undefined && rows.length > limit) {
    tbody.replaceChildren(...rows.slice(0, limit), note(more(rows.length - limit)));
  } else {
    tbody.replaceChildren(...rows);
  }
  if (!rows.length) tbody.appendChild(note(empty));
  if (was) refocus($(tableId), tbody, was);
}

// Each amount column of a table to the same decimals, as the cards are (sameDecimals): "$0.23" read as rounded or
// stale beside "$0.0856". Nothing ("$0.00") is left as it is: no rounding to mistake there
function sameDecimalsByColumn(tableId, columns) {
  const rows = [...$(tableId).querySelectorAll("tbody tr")];
  for (const i of columns) {
    sameDecimals(rows.map((r) => r.cells[i]).filter((c) => c && c.colSpan === 1 && c.textContent !== "$0.00"));
  }
}

// The cards side by side to the same decimals: under a dollar the broker writes a hundredth of a cent unless the
// amount is a whole cent, so a total of 89,942 micro-dollars (rounded up to $0.0900) read "$0.09" beside "$0.2357".
// Where one card shows four decimals, an amount under a dollar in whole cents shows them too ("$0.0900": the same
// value, neither rounded again nor overstated)
function sameDecimals(nodes) {
  const four = /^-?\$0\.\d{4}$/, two = /^-?\$0\.\d{2}$/;
  if (!nodes.some((n) => four.test(n.textContent))) return;
  for (const n of nodes) if (two.test(n.textContent)) n.textContent += "00";
}

function money(id, m) {
  const node = $(id);
  node.textContent = m.usd;
  node.dataset.micros = String(m.micros);
}

// Also closes the open job: after "Change token" (or a token refused mid-session) the next token's page kept the
// job the last one opened, another team's attempts and spend, refreshed never (its request was refused)
function showLogin(message) {
  $("error").hidden = true;  // "did not answer" of before, over the prompt, read as the reason for it
  jobs++;
  if (shown !== null && jobInUrl() !== null) setJobInUrl(null);  // the job the last token opened; a link kept
  shown = null;
  $("job").hidden = true;
  $("team").replaceChildren();  // the team the last token picked: another token's first load asked for it (403)
  $("main").hidden = true;
  $("controls").hidden = true;  // a team list, a period and "Change token" that did nothing before the token field
  $("login").hidden = false;
  $("login-error").textContent = message || "";  // role="alert": a screen reader says it
  const input = $("token-input");
  if (message) { input.setAttribute("aria-invalid", "true"); input.setAttribute("aria-describedby", "login-error"); }
  else { input.removeAttribute("aria-invalid"); input.removeAttribute("aria-describedby"); }
}

function setTeams(body) {
  const sel = $("team");
  const current = sel.value;
  const admin = body.viewer.admin;
  const options = admin ? [["", "All teams"], ...body.teams.map((t) => [t, t])] : body.teams.map((t) => [t, t]);
  sel.replaceChildren(...options.map(([v, label]) => el("option", label, { value: v })));
  sel.value = options.some(([v]) => v === current) ? current : options[0][0];
  sel.disabled = !admin;
}

// Each load and each job shown counts its request: an answer that comes after a later request's is dropped, or it
// would draw the team or period picked before over the one picked last
let loads = 0, jobs = 0;
let shown = null;  // the job whose attempts are open, refreshed with the page

async function load() {
  const mine = ++loads;
  const params = new URLSearchParams({ period: $("period").value });
  if ($("team").value) params.set("team", $("team").value);
  let body;
  try {
    body = await api("/v1/costs?" + params);
  } catch (err) {
    if (mine === loads && err.message !== "unauthorized") {
      $("error").hidden = false; $("error").textContent = err.message;
      $("controls").hidden = false;  // a token, not yet answered (the broker restarting): no sign-in screen
    }
    return;
  }
  if (mine !== loads) return;
  $("error").hidden = true;
  // signed in from the form: the keyboard goes on at the report, not from the token field now hidden
  const signedIn = !$("login").hidden && $("login").contains(document.activeElement);
  $("login").hidden = true;
  $("main").hidden = false;
  $("controls").hidden = false;
  setTeams(body);
  render(body);
  if (signedIn) $("content").focus();
  if (shown === null && jobInUrl() !== null) showJob(jobInUrl());  // opened from a link to a job
  // in UTC, as every other time on the page: the browser's own clock, unnamed, read "Updated 10:40" beside "19:06 UTC"
  $("updated").textContent = "Updated " + new Date().toISOString().slice(11, 19) + " UTC · refreshes every " +
    REFRESH_MS / 1000 + " s";
}

// Ask again while the page is in view (a hidden tab asks nothing, and asks at once when it is shown again): the
// figures of running jobs, the queue and the open job follow without a reload. Never over a login prompt (no 401
// loop), but a page whose first load failed (the broker restarting) asks again: it said "did not answer" for good.
function refresh() {
  if (document.visibilityState !== "visible" || !token() || !$("login").hidden) return;
  load();
  if (shown !== null && !$("job").hidden) showJob(shown, false);
}

function render(r) {
  const t = r.totals;
  money("total-spent", t.spent);
  money("total-ondemand", t.ondemand_equivalent);
  money("total-saving", t.saving);
  // spend dearer than on-demand (on-prem against a cheap quote) read "Saved -$12.00": it says what it is
  const dearer = t.saving.micros < 0;
  const pct = t.saving_percent;
  // no on-demand price for any of the spend: its "equivalent" is the spend itself, which read as if on-demand would
  // have cost the same; `broker costs` says there is nothing to compare, and so does this card
  const compared = !(pct === null && t.saving.micros === 0);
  if (!compared) $("total-ondemand").textContent = "—";
  $("total-ondemand-note").textContent = compared ? "" : NOTHING_TO_COMPARE;
  $("total-saving-label").textContent = dearer ? "Paid more than on-demand" : "Saved";
  if (dearer) $("total-saving").textContent = t.saving.usd.replace(/^-/, "");
  if (pct === null) $("total-saving").textContent = "—";  // nothing ran at a price: no on-demand figure to weigh
  $("total-saving-pct").textContent = pct === null ? "nothing to compare with on-demand"
    : manyTimes(pct) ? `over ${MANY_TIMES} times the cost of all on-demand`
    : pct < 0 ? -pct + "% more than all on-demand" : pct + "% less than all on-demand";
  $("total-saving").parentElement.classList.toggle("good", t.saving.micros >= 0 && pct !== null);
  sameDecimals([$("total-spent"), $("total-ondemand"), $("total-saving")]);
  $("preempt-count").textContent = r.preemptions.count;
  // a node lost without notice (an on-prem pool's: a pool is not preempted) is not counted as a preemption
  const lostNodes = r.preemptions.lost || 0;
  $("preempt-lost").textContent = duration(r.preemptions.recovery_seconds) + " lost waiting to resume"
    + (lostNodes ? ` · ${lostNodes} node${lostNodes === 1 ? "" : "s"} lost, not preempted` : "");
  // " · " between the tiers: with a margin alone they were read "On-prem $0.0437On-demand $0.2516"
  const amounts = [];
  $("tiers").replaceChildren(...TIERS.flatMap((k, i) => {
    const s = el("span", ({ onprem: "On-prem ", ondemand: "On-demand ", spot: "Spot " })[k]);
    const amount = el("span", t.by_tier[k].usd, { class: "amount" });
    s.appendChild(amount); amounts.push(amount);
    s.dataset.tier = k; s.dataset.micros = String(t.by_tier[k].micros);
    return i ? [el("span", " · ", { class: "sep" }), s] : [s];
  }));
  sameDecimals(amounts.filter((a) => a.textContent !== "$0.00"));
  drawDays(r.by_day);
  $("teams-section").hidden = r.by_team.length < 2 && r.team !== null;
  fill("teams", r.by_team.map((x) => row([x.team, { text: x.spent.usd, num: 1 },
    { text: ondemandCell(x.ondemand_equivalent, x.saving, x.saving_percent), num: 1 },
    { text: savingCell(x.saving, x.saving_percent), num: 1, wrap: 1 }])), "No spend in this period.");
  sameDecimalsByColumn("teams", [1, 2]);
  // rows are rounded one by one, totals once from the exact sums: said when the shown rows do not add up
  $("rounding-note").textContent = r.rounding_note || "";
  $("rounding-note").hidden = !r.rounding_note;
  // jobs the retention policy deleted are in no total: said when the window reaches back past its horizon
  $("retention-note").textContent = r.retention_note || "";
  $("retention-note").hidden = !r.retention_note;
  // each team in view with a monthly cap: this month's spend, what its jobs not ended hold, what is free
  $("monthly-caps").replaceChildren(...(r.monthly_caps || []).map((c) => {
    const p = el("p", `Team ${c.team}: ${c.text}`);
    p.dataset.team = c.team; p.dataset.free = String(c.free.micros);
    return p;
  }));
  $("monthly-caps").hidden = !(r.monthly_caps || []).length;
  const hottest = [...r.budget_burn].sort((a, b) => (b.percent ?? -1) - (a.percent ?? -1) || (a.id < b.id ? -1 : 1));
  fill("burn", hottest.map((b) => {
    const bar = el("div", null, { class: "bar" + (b.percent >= 80 ? " hot" : "") });
    const inner = el("div"); inner.style.width = Math.min(100, b.percent || 0) + "%"; bar.appendChild(inner);
    const td = el("td"); td.appendChild(bar); td.appendChild(el("span", (b.percent ?? 0) + "%"));
    return row([jobCell(b.name, b.id), { node: td }, { text: b.spent_of_budget.spent + " / " + b.spent_of_budget.budget, num: 1, wrap: 1 },
      { text: b.hours_left === null ? "–" : b.hours_left + " h at " + b.price_per_hour.usd + "/h", num: 1, wrap: 1 }],
      b.id);
  }), "Nothing running.", ROWS, (n) => `and ${n} more running`);
  // a deadline beside the start it must follow: "due" only where the job has one
  fill("queue", r.queue.map((q) => row([{ text: q.position ?? "–", num: 1 }, jobCell(q.name, q.id),
    (q.estimated_start ? utc(q.estimated_start) : "–") + (q.deadline ? " · due " + utc(q.deadline) : ""),
    { text: q.reason || "", clip: 1 }],
    q.id)), "Nothing waiting.", ROWS, (n) => `and ${n} more waiting (broker queue lists them all)`);
  fill("top", r.top_jobs.map((j) => row([jobCell(j.name, j.id), j.team, j.state, { text: j.spent.usd, num: 1 },
    { text: savingCell(j.saving, j.saving_percent), num: 1, wrap: 1 }], j.id)), "No spend in this period.");
  const after = (p) => p.waiting ? " (waiting)" : p.recovered ? "" : " (job ended)";  // ended: it never resumed
  // a preempted job's name where the report names it elsewhere (the events carry the id alone): "j-7609f6b079 #1"
  // alone was read out with no name
  const failures = r.failures || { count: 0, jobs: [] };
  const names = new Map([...r.top_jobs, ...r.budget_burn, ...r.queue, ...failures.jobs].map((j) => [j.id, j.name]));
  fill("preemptions", r.preemptions.events.map((p) => row([utc(p.time),
    jobCell(names.get(p.job_id), p.job_id, " #" + p.attempt), p.zone + (p.state === "lost" ? " (node lost)" : ""), { text: duration(p.recovery_seconds) + after(p), num: 1, wrap: 1 }],
    p.job_id, p.job_id + "#" + p.attempt)), "No preemptions in this period.", ROWS,
    (n) => `and ${r.preemptions.count + lostNodes - ROWS} more in this period`);
  // jobs that failed or were stopped at their budget: one that spent nothing was in no other table
  fill("failures", failures.jobs.map((f) => row([f.ended ? utc(f.ended) : "–", jobCell(f.name, f.id),
    { text: failureText(f), clip: 1 },
    { text: f.spent.usd, num: 1 }], f.id)), "No failures or budget stops in this period.");
  if (failures.count > failures.jobs.length) {
    const tr = el("tr");
    tr.appendChild(el("td", `and ${failures.count - failures.jobs.length} more in this period`, { colspan: 4, class: "empty" }));
    $("failures").querySelector("tbody").appendChild(tr);
  }
  $("window").textContent = "From " + utc(r.window.since) + " to " + utc(r.window.until) + " · " + (r.team || "all teams");
}

// The width a chart is drawn at: its box's own, so a unit of the drawing is a pixel and its 10 px labels stay 10 px.
// A fixed 800-unit drawing squeezed into a phone's 300 px box drew them under 4 px tall.
function chartWidth(id) { return Math.max(200, Math.floor($(id).clientWidth) || 800); }
const LABEL_PX = 60;  // room for one date ("12-31") and the space around it

let lastDays = null;  // the days drawn, drawn again at the new width when the window is resized

// The chart's figures also as a table, under "Spend by day as a table": they were only in hover titles inside
// role="img", which neither a screen reader, a keyboard nor a finger reaches
function dayTable(days) {
  fill("days", days.map((d) => row([d.date, ...TIERS.map((k) => ({ text: d[k].usd, num: 1 })),
    { text: d.total.usd, num: 1 }])), "No spend in this period.");
  sameDecimalsByColumn("days", [1, 2, 3, 4]);
}

function drawDays(days) {
  lastDays = days;
  dayTable(days);
  const W = chartWidth("chart"), H = 200, pad = 30;
  const highest = Math.max(0, ...days.map((d) => d.total.micros));
  const peak = days.find((d) => d.total.micros === highest);
  const span = days.length ? `, ${days[0].date} to ${days[days.length - 1].date}` : "";
  const box = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "Spend by day and tier" + span + ": " +
    (peak && highest ? `highest ${peak.total.usd} on ${peak.date} (every day in the table below)` : "no spend") });
  const max = Math.max(1, highest);
  // about ten dates, whatever the period, fewer where they would not fit side by side (at least two)
  const every = Math.ceil(days.length / Math.max(2, Math.min(10, Math.floor((W - pad) / LABEL_PX))));
  const bw = (W - pad) / Math.max(1, days.length);
  days.forEach((d, i) => {
    let y = H - 20;
    for (const k of TIERS) {
      const h = (d[k].micros / max) * (H - 40);
      if (h > 0) {
        const r = svg("rect", { x: pad + i * bw + 2, y: y - h, width: Math.max(1, bw - 4), height: h, class: k });
        const title = svg("title"); title.textContent = `${d.date} ${k}: ${d[k].usd}`; r.appendChild(title);
        box.appendChild(r);
        y -= h;
      }
    }
    if (i % every === 0) {
      const label = svg("text", { x: pad + i * bw + bw / 2, y: H - 5, "text-anchor": "middle" });
      label.textContent = d.date.slice(5);
      box.appendChild(label);
    }
  });
  const top = svg("text", { x: 0, y: 15 }); top.textContent = usd(highest); box.appendChild(top);
  // an empty axis under "$0.00" said nothing, where every table says its empty state
  $("chart").replaceChildren(box, ...(highest ? [] : [el("p", "No spend in this period.", { class: "empty" })]));
}

// The open job is in the address (#job=ID): a link to it can be sent, bookmarked or reloaded, and opens it again
function jobInUrl() {
  const m = /^#job=(.+)$/.exec(window.location.hash);
  if (!m) return null;
  try {
    const id = decodeURIComponent(m[1]);
    return id === "." || id === ".." ? null : id;  // a path step, not a job: fetch would ask another route
  } catch (err) {
    return null;  // a malformed %-escape: no job, rather than a page that never shows its sign-in
  }
}

function setJobInUrl(id) {
  const url = new URL(window.location.href);
  url.hash = id === null ? "" : "job=" + encodeURIComponent(id);
  history.replaceState(null, "", url.pathname + url.search + url.hash);
}

let opener = null;  // the row a job was opened from ({table, key}): Escape and Close give it the focus back

function openJob(id, from) {
  const tr = from ? from.closest("tr") : null;
  opener = tr ? { table: tr.closest("table").id, key: tr.dataset.key } : null;
  setJobInUrl(id);
  showJob(id);
}

// The job panel closed (its Close button, Escape): the focus back on the row that opened it, built again since
// maybe (a refresh), else the page's main content
function closeJob() {
  jobs++;
  shown = null;
  $("job").hidden = true;
  setJobInUrl(null);
  const back = opener && $(opener.table)
    ? [...$(opener.table).querySelectorAll("tbody tr[data-key]")].find((r) => r.dataset.key === opener.key) : null;
  opener = null;
  const link = back ? back.querySelector("a.open") : null;
  if (link) link.focus(); else $("content").focus();
}

// the panel's heading takes the focus when a job is opened, so that a screen reader says which job, and a keyboard
// goes on from there (the row that opened it had scrolled off the screen)
function focusJob() {
  $("job").scrollIntoView({ behavior: "instant", block: "start" });
  $("job-heading").focus({ preventScroll: true });
}

async function showJob(id, scroll = true) {
  const mine = ++jobs;
  shown = id;
  let j;
  try {
    j = await api("/v1/costs/jobs/" + encodeURIComponent(id));
  } catch (err) {
    // say why where the job would be: a click on a row whose job the broker refused did nothing at all
    if (mine === jobs && err.message !== "unauthorized") {
      $("job").hidden = false;
      $("job-title").textContent = id;
      $("job-summary").textContent = err.message;
      $("attempts").querySelector("tbody").replaceChildren();
      $("loss").replaceChildren();
      if (scroll) focusJob();
    }
    return;
  }
  if (mine !== jobs) return;
  $("job").hidden = false;
  $("job-title").textContent = j.job.name + " (" + j.job.id + ")";
  const compared = !(j.saving_percent === null && j.saving.micros === 0);  // no on-demand figure: none named
  // a job not ended with a deadline says it, as the queue's row does; an ended job's deadline is history
  const due = j.job.deadline && !ENDED_STATES.has(j.job.state) ? " · due " + utc(j.job.deadline) : "";
  $("job-summary").textContent = `${j.job.state}${due} · spent ${j.spent_of_budget.spent} of ${j.spent_of_budget.budget} · ` +
    // the same billed seconds at on-demand prices, time redone after a preemption included: not "the same work"
    (compared ? `the same time on on-demand would have cost ${j.ondemand_equivalent.usd}, ` : "") +
    savingWords(j.saving, j.saving_percent, "on-demand") +
    (j.job.reason ? " · " + j.job.reason : "") +
    (j.rounding_note ? " · " + j.rounding_note : "");  // attempts that do not add up, as shown, to the total: said
  // an attempt of several nodes says how many: its cost is for all of them ("2 nodes of g5.xlarge in sim-a")
  fill("attempts", j.attempts.map((a) => row([{ text: a.n, num: 1 }, a.tier,
    (a.num_nodes > 1 ? a.num_nodes + " nodes of " : "") + (a.instance_type || "") + " in " + a.zone,
    { text: attemptState(a), clip: 1 }, { text: duration(a.seconds), num: 1 },  // 15 s read "0.00" hours
    // nothing to compare: each attempt's "equivalent" is its own cost, which the summary no longer names
    { text: a.cost.usd, num: 1 }, { text: compared ? a.ondemand_equivalent.usd : "—", num: 1 }])), "No attempts yet.");
  drawLoss(j.metrics);
  if (scroll) focusJob();
}

// a failure's or budget stop's words: "Failed: <reason>", "Stopped at its budget: <reason>", but a reason that
// already begins with those words ("Stopped at its budget after step 469 …", "failed: exit 1") is shown alone, where
// "Stopped at its budget: Stopped at its budget after step 469" said it twice
function failureText(f) {
  const lead = f.state === "stopped_budget" ? "Stopped at its budget" : "Failed";
  if (!f.reason) return lead;
  if (!new RegExp("^" + lead + "(?![A-Za-z])", "i").test(f.reason)) return lead + ": " + f.reason;
  return f.reason.charAt(0).toUpperCase() + f.reason.slice(1);
}

// an attempt's state and why: a reason that begins with the state ("succeeded: the run command exited 0") is
// shown alone, where "succeeded — succeeded: ..." said it twice
function attemptState(a) {
  if (!a.reason) return a.state;
  return new RegExp("^" + a.state + "\\b").test(a.reason) ? a.reason : a.state + " — " + a.reason;
}

let lastLoss = null;  // the points drawn, as lastDays

// "loss" if the job reports one, else the first metric any point holds a number for: a first report with none (its
// step alone, or a value gone to NaN, kept as null and left out) drew "No metrics reported yet." under all the rest
function drawLoss(points) {
  lastLoss = points;
  const named = (p) => Object.keys(p.metrics).find((k) => typeof p.metrics[k] === "number");
  const key = points.some((p) => typeof p.metrics.loss === "number") ? "loss" : points.map(named).find((k) => k);
  const pts = points.filter((p) => key && typeof p.metrics[key] === "number" && typeof p.step === "number");
  if (!pts.length) { $("loss").replaceChildren(el("p", "No metrics reported yet.", { class: "empty" })); return; }
  const W = chartWidth("loss"), H = 200, pad = 40;
  const xs = pts.map((p) => p.step), ys = pts.map((p) => p.metrics[key]);
  const x0 = Math.min(...xs), x1 = Math.max(...xs, x0 + 1), y0 = Math.min(...ys), y1 = Math.max(...ys, y0 + 1e-9);
  const box = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": key + " by step" });
  const line = svg("polyline", { points: pts.map((p) =>
    `${(pad + (p.step - x0) / (x1 - x0) * (W - pad - 10)).toFixed(1)},${(10 + (y1 - p.metrics[key]) / (y1 - y0) * (H - 40)).toFixed(1)}`).join(" ") });
  box.appendChild(line);
  const labels = [[0, 15, y1.toPrecision(3)], [0, H - 30, y0.toPrecision(3)], [pad, H - 5, "step " + x0], [W - 80, H - 5, "step " + x1]];
  for (const [x, y, text] of labels) { const t = svg("text", { x, y }); t.textContent = text; box.appendChild(t); }
  $("loss").replaceChildren(box);
}

document.addEventListener("DOMContentLoaded", () => {
  takeTokenFromUrl();
  $("login-form").addEventListener("submit", (e) => {
    e.preventDefault();
    localStorage.setItem(TOKEN_KEY, $("token-input").value.trim());
    load();
  });
  $("logout").addEventListener("click", () => { localStorage.removeItem(TOKEN_KEY); showLogin(""); });
  $("job-close").addEventListener("click", closeJob);
  document.addEventListener("keydown", (e) => {
    if (e.key === "Escape" && !$("job").hidden && !e.defaultPrevented) { e.preventDefault(); closeJob(); }
  });
  // to the main content without a change of address: "#content" there would drop the open job's #job=ID
  $("skip").addEventListener("click", (e) => { e.preventDefault(); $("content").focus(); });
  $("team").addEventListener("change", () => { jobs++; $("job").hidden = true; setJobInUrl(null); load(); });
  window.addEventListener("hashchange", () => { const id = jobInUrl(); if (id !== null && !$("main").hidden) showJob(id); });
  $("period").addEventListener("change", load);
  if (token()) load(); else showLogin("");
  setInterval(refresh, REFRESH_MS);
  let resized = null;  // a phone turned on its side: the charts drawn again at their boxes' new width
  window.addEventListener("resize", () => {
    clearTimeout(resized);
    resized = setTimeout(() => {
      if (lastDays && !$("main").hidden) drawDays(lastDays);
      if (lastLoss && !$("job").hidden) drawLoss(lastLoss);
    }, 150);
  });
  document.addEventListener("visibilitychange", refresh);
});
