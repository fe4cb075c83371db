// The stream page: figures refreshed every 5 s, the output editor's preview, and each output's
// recovery: its restore points, a rewind confirmed once its plan is shown, and its progress.
"use strict";

const stream = document.getElementById("router").dataset.stream;

function figure(value, digits) {
  return value === null || value === undefined ? "–" : Number(value).toFixed(digits);
}

async function refresh() {
  const answer = await fetch(`/ui/streams/${stream}/status`, {headers: {Accept: "application/json"}});
  if (!answer.ok) return;
  const status = await answer.json();
  const state = document.getElementById("router-state");
  state.textContent = status.router.state;
  state.className = `state state-${status.router.state}`;
  const restarts = status.router.restarts || 0;
  document.getElementById("router-detail").textContent = restarts ? `${restarts} restarts` : "";
  const router = status.router;
  document.getElementById("router-size").textContent = router.sized_for
    ? `sized for ${count(router.sized_for)} events/s, peak of the last hour ${count(Math.round(router.peak_per_second || 0))}`
    : "not sized yet";
  const error = document.getElementById("router-error");
  error.textContent = status.router.last_error || "";
  error.hidden = !status.router.last_error;
  const metricsError = document.getElementById("metrics-error");
  metricsError.textContent = status.metrics_error || "";
  metricsError.hidden = !status.metrics_error;
  const archive = status.archive ? [status.archive] : [];
  for (const output of [...status.outputs, ...archive]) {
    const row = document.querySelector(`tr[data-output="${output.name}"]`);
    if (!row) continue;
    for (const cell of row.querySelectorAll("[data-rate]")) {
      cell.textContent = figure(output.rates[cell.dataset.rate] ?? 0, 1);
    }
    for (const cell of row.querySelectorAll("[data-total]")) {
      cell.textContent = figure(output.totals[cell.dataset.total] ?? 0, 0);
    }
    row.querySelector("[data-lag]").textContent = figure(output.lag, 0);
    const p99 = output.latency_p99;
    row.querySelector("[data-p99]").textContent = p99 === null ? "–" : `${(p99 * 1000).toFixed(0)} ms`;
    if (output !== status.archive) {
      showRewind(output.name, output.rewind);
      showBackfill(output.name, output.backfill);
      showShadow(output.name, output.shadow);
    }
  }
  showRedrive(status.redrive);
  showAlerts(status.alerts || [], status.alerts_error);
}

// Alerts: what fires for the stream, as Alertmanager holds it, and who hears it.
function showAlerts(alerts, alertsError) {
  const body = document.querySelector("#stream-alerts tbody");
  body.replaceChildren();
  for (const alert of alerts) {
    const row = document.createElement("tr");
    row.dataset.alert = alert.alert;
    row.dataset.state = alert.state;
    const badge = document.createElement("span");
    badge.className = `state state-${alert.state}`;
    badge.textContent = alert.state;
    const told = alert.state === "firing" ? alert.receivers.join(", ") : `nobody (${alert.state})`;
    const cells = [badge, alert.alert, alert.output || "", alert.summary,
      alert.since ? utc(alert.since) : "", told];
    for (const content of cells) {
      const cell = document.createElement("td");
      cell.append(content);
      row.append(cell);
    }
    body.append(row);
  }
  if (!alerts.length) {
    const row = document.createElement("tr");
    row.innerHTML = '<td colspan="6" class="dim">Nothing fires.</td>';
    body.append(row);
  }
  const error = document.getElementById("alerts-error");
  error.textContent = alertsError || "";
  error.hidden = !alertsError;
}

// Recovery

const count = (n) => Number(n).toLocaleString("en-US");
const utc = (iso) => new Date(iso).toISOString().replace("T", " ").slice(0, 19);
const offsetsText = (offsets) => Object.entries(offsets).map(([p, o]) => `${p}:${o}`).join(", ");

function duration(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  if (seconds < 90) return `${Math.ceil(seconds)} s`;
  if (seconds < 5400) return `${Math.round(seconds / 60)} min`;
  return `${Math.floor(seconds / 3600)} h ${Math.round((seconds % 3600) / 60)} min`;
}

function recoveryOf(output) {
  return document.querySelector(`details.recovery[data-output="${output}"]`);
}

// An output's latest rewind, from the status: its progress while it replays, else its outcome.
function showRewind(output, rewind) {
  const box = recoveryOf(output);
  if (!box) return;
  const summary = box.querySelector("[data-rewind-summary]");
  const progress = box.querySelector("[data-rewind-progress]");
  const button = box.querySelector("[data-rewind-button]");
  box.dataset.rewindState = rewind ? rewind.state : "none";
  if (!rewind) {
    summary.textContent = "not rewound";
    progress.hidden = true;
    button.disabled = false;
    return;
  }
  const replaying = rewind.state === "replaying";
  const where = rewind.restore_point ? `restore point ${rewind.restore_point}` : rewind.target;
  if (replaying) {
    const share = rewind.events ? Math.floor((100 * rewind.replayed) / rewind.events) : 100;
    summary.textContent = `rewind ${rewind.id} to ${where}: replaying, ${share}%`;
    const bar = progress.querySelector("progress");
    bar.max = Math.max(1, rewind.events);
    bar.value = rewind.replayed;
    progress.querySelector("[data-rewind-text]").textContent =
      `${count(rewind.replayed)} of ${count(rewind.events)} events replayed, ` +
      `about ${duration(rewind.eta_seconds)} left (at most ${count(rewind.rate)} events/s)`;
  } else {
    const when = rewind.finished_at ? ` at ${utc(rewind.finished_at)} UTC` : "";
    summary.textContent = `last rewind ${rewind.id} to ${where}: caught up${when}, ` +
      `${count(rewind.events)} events replayed`;
  }
  progress.hidden = !replaying;
  button.disabled = replaying;  // one rewind per output at a time
  button.title = replaying ? "This output is replaying a rewind." : "";
}

async function loadRestorePoints(box) {
  const output = box.dataset.output;
  const body = box.querySelector("[data-restore-points] tbody");
  const select = box.querySelector("select[name=restore_point]");
  const answer = await fetch(`/ui/streams/${stream}/outputs/${output}/restore-points`,
    {headers: {Accept: "application/json"}});
  const result = await answer.json();
  const row = (cells, className) => {
    const tr = document.createElement("tr");
    for (const text of cells) {
      const td = document.createElement("td");
      td.textContent = text;
      if (className) td.className = className;
      tr.append(td);
    }
    return tr;
  };
  if (!answer.ok) {
    body.replaceChildren(row([result.message || `Restore points unavailable (${answer.status})`], "error"));
    return;
  }
  const chosen = select.value;
  select.replaceChildren();
  body.replaceChildren();
  for (const point of result) {  // newest first, as control lists them
    const tr = row([point.id, utc(point.time), offsetsText(point.offsets)]);
    tr.dataset.point = point.id;
    body.append(tr);
    select.append(new Option(`${point.id} · ${utc(point.time)} UTC`, point.id, false, point.id === chosen));
  }
  if (!result.length) {
    const empty = row(["None yet: the output has not committed a batch since it started."], "dim");
    empty.firstChild.colSpan = 3;
    body.append(empty);
  }
}

// The rewind's request from the form: one target, and the rate if one is given.
function rewindRequest(form) {
  const kind = form.elements.kind.value;
  const request = {};
  if (kind === "restore_point") {
    if (!form.elements.restore_point.value) throw new Error("Choose a restore point.");
    request.restore_point = form.elements.restore_point.value;
  } else if (kind === "to") {
    const local = form.elements.to.value;  // what the field shows, taken as UTC
    if (!local) throw new Error("Give a time (UTC).");
    request.to = `${local.length === 16 ? `${local}:00` : local}Z`;
  } else {
    const text = form.elements.offsets.value.trim();
    const pairs = text.split(",").map((s) => s.trim()).filter((s) => s);
    if (!pairs.length || !pairs.every((s) => /^\d+\s*:\s*\d+$/.test(s))) {
      throw new Error("Offsets as partition:offset pairs, like 0:120, 1:98.");
    }
    request.offsets = Object.fromEntries(pairs.map((s) => s.split(":").map((n) => Number(n.trim()))));
  }
  const rate = form.elements.max_events_per_second.value;
  if (rate) request.max_events_per_second = Number(rate);
  return request;
}

// A recovery request to the page's routes; its answer, or an Error saying why it was refused.
async function sendJSON(path, method, request, what) {
  const answer = await fetch(path, {
    method,
    headers: {"Content-Type": "application/json", Accept: "application/json"},
    body: request ? JSON.stringify(request) : undefined,
  });
  const result = await answer.json();
  if (!answer.ok) {
    const problems = (result.problems || []).map((p) => p.message);
    throw new Error([result.message || `The ${what} failed (${answer.status})`, ...problems].join(": "));
  }
  return result;
}

const postRewind = (output, request) =>
  sendJSON(`/ui/streams/${stream}/outputs/${output}/rewind`, "POST", request, "rewind");

// The plan in the dialog; resolves to whether the owner confirmed it.
function confirmPlan(plan) {
  const dialog = document.getElementById("rewind-dialog");
  const put = (name, text) => { dialog.querySelector(`[data-plan="${name}"]`).textContent = text; };
  put("output", `${plan.stream}.${plan.output}`);
  const point = `restore point ${plan.restore_point}`;  // a Hive output starts at one, whatever was asked
  put("target", !plan.restore_point || plan.target === point ? plan.target : `${point} (asked: ${plan.target})`);
  put("events", `${count(plan.events)} events of the fronting topic`);
  put("rate", `${count(plan.rate)} events/s`);
  put("eta", duration(plan.eta_seconds));
  put("kind", plan.sink.kind);
  put("effect", plan.sink.effect || "");
  dialog.returnValue = "";
  dialog.showModal();
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "confirm"), {once: true});
  });
}

async function rewind(event) {
  event.preventDefault();
  const form = event.currentTarget;
  const box = form.closest("details.recovery");
  const error = form.querySelector("[data-rewind-error]");
  const button = form.querySelector("[data-rewind-button]");
  error.hidden = true;
  button.disabled = true;
  try {
    const request = rewindRequest(form);
    const plan = await postRewind(form.dataset.output, {...request, dry_run: true});
    if (!(await confirmPlan(plan))) return;
    await postRewind(form.dataset.output, request);
    await loadRestorePoints(box);  // those after the new start are gone
    await refresh();
  } catch (e) {
    error.textContent = e.message;
    error.hidden = false;
  } finally {
    button.disabled = box.dataset.rewindState === "replaying";
  }
}

// Backfills: the output's latest, from the status; a new one confirmed once its plan is shown.

const utcInput = (local) => `${local.length === 16 ? `${local}:00` : local}Z`;  // shown as UTC

function showBackfill(output, backfill) {
  const box = recoveryOf(output);
  const summary = box && box.querySelector("[data-backfill-summary]");
  if (!summary) return;  // the stream keeps no archive
  const progress = box.querySelector("[data-backfill-progress]");
  const button = box.querySelector("[data-backfill-button]");
  const active = Boolean(backfill) && ["running", "cancelling"].includes(backfill.state);
  box.dataset.backfillState = backfill ? backfill.state : "none";
  if (!backfill) {
    summary.textContent = "not backfilled";
  } else {
    const range = `${utc(backfill.from)} to ${utc(backfill.to)} UTC`;
    const error = backfill.error ? ` (${backfill.error})` : "";
    const unreadable = backfill.unreadable ? `, ${count(backfill.unreadable)} unreadable now (left out)` : "";
    summary.textContent = `backfill ${backfill.id} of ${range}: ${backfill.state}, ` +
      `${count(backfill.read)} events routed, ${count(backfill.delivered)} delivered${unreadable}${error}`;
  }
  if (active) {
    const bar = progress.querySelector("progress");
    bar.max = Math.max(1, backfill.events ?? 1);
    bar.value = backfill.read;
    const of = backfill.events === null || backfill.events === undefined ? "" : ` of ${count(backfill.events)}`;
    progress.querySelector("[data-backfill-text]").textContent =
      `${count(backfill.read)}${of} events routed, ${backfill.hours_done} of ${backfill.hours ?? "?"} hours, ` +
      `about ${duration(backfill.eta_seconds)} left (at most ${count(backfill.rate)} events/s)` +
      (backfill.waiting ? `; waiting for ${backfill.waiting}` : "");
  }
  progress.hidden = !active;
  button.disabled = active;  // one backfill per output at a time
  button.title = active ? "This output is being backfilled." : "";
}

const sendBackfill = (output, method, request) =>
  sendJSON(`/ui/streams/${stream}/outputs/${output}/backfill`, method, request, "backfill");

function confirmBackfill(plan) {
  const dialog = document.getElementById("backfill-dialog");
  const put = (name, text) => { dialog.querySelector(`[data-backfill-plan="${name}"]`).textContent = text; };
  put("output", `${plan.stream}.${plan.output}`);
  put("range", `from ${utc(plan.from)} to ${utc(plan.to)} UTC`);
  put("rate", `${count(plan.rate)} events/s`);
  put("kind", plan.sink.kind);
  put("effect", plan.sink.effect || "");
  dialog.returnValue = "";
  dialog.showModal();
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "confirm"), {once: true});
  });
}

async function backfill(event) {
  event.preventDefault();
  const form = event.currentTarget;
  const box = form.closest("details.recovery");
  const error = form.querySelector("[data-backfill-error]");
  const button = form.querySelector("[data-backfill-button]");
  error.hidden = true;
  button.disabled = true;
  try {
    const request = {from: utcInput(form.elements.from.value), to: utcInput(form.elements.to.value)};
    const rate = form.elements.max_events_per_second.value;
    if (rate) request.max_events_per_second = Number(rate);
    const plan = await sendBackfill(form.dataset.output, "POST", {...request, dry_run: true});
    if (!(await confirmBackfill(plan))) return;
    await sendBackfill(form.dataset.output, "POST", request);
    await refresh();
  } catch (e) {
    error.textContent = e.message;
    error.hidden = false;
  } finally {
    button.disabled = ["running", "cancelling"].includes(box.dataset.backfillState);
  }
}

async function cancelBackfill(event) {
  const box = event.currentTarget.closest("details.recovery");
  if (!confirm(`Cancel the backfill of ${box.dataset.output}? The hours done stay done.`)) return;
  const error = box.querySelector("[data-backfill-error]");
  try {
    await sendBackfill(box.dataset.output, "DELETE");
    await refresh();
  } catch (e) {
    error.textContent = e.message;
    error.hidden = false;
  }
}

// Dead letters: grouped as control lists them, each group (or all) redriven once confirmed.

const deadLetters = document.getElementById("dead-letters-box");

function showRedrive(redrive) {
  if (!deadLetters) return;
  const summary = deadLetters.querySelector("[data-redrive-summary]");
  const progress = deadLetters.querySelector("[data-redrive-progress]");
  const active = Boolean(redrive) && ["running", "cancelling"].includes(redrive.state);
  deadLetters.dataset.redriveState = redrive ? redrive.state : "none";
  summary.textContent = redrive
    ? `· last redrive ${redrive.id}: ${redrive.state}, ${count(redrive.read)} sent, ` +
      `${count(redrive.dead_lettered)} dead-lettered again` +
      (redrive.copies ? `, ${count(redrive.copies)} copies not sent twice` : "")
    : "";
  if (active) {
    const bar = progress.querySelector("progress");
    bar.max = Math.max(1, redrive.events ?? 1);
    bar.value = redrive.read;
    const of = redrive.events === null || redrive.events === undefined ? "" : ` of ${count(redrive.events)}`;
    progress.querySelector("[data-redrive-text]").textContent =
      `${count(redrive.read)}${of} dead letters sent, about ${duration(redrive.eta_seconds)} left`;
  }
  progress.hidden = !active;
  for (const button of deadLetters.querySelectorAll("[data-redrive], [data-redrive-all]")) {
    button.disabled = active;  // one redrive per stream at a time
  }
}

async function loadDeadLetters() {
  const body = deadLetters.querySelector("#dead-letter-groups tbody");
  const answer = await fetch(`/ui/streams/${stream}/dead-letters`, {headers: {Accept: "application/json"}});
  const result = await answer.json();
  const cell = (text) => { const td = document.createElement("td"); td.textContent = text; return td; };
  if (!answer.ok) {
    const tr = document.createElement("tr");
    const td = cell(result.message || `Dead letters unavailable (${answer.status})`);
    td.colSpan = 7;
    td.className = "error";
    tr.append(td);
    body.replaceChildren(tr);
    return;
  }
  body.replaceChildren();
  for (const group of result.groups) {
    const tr = document.createElement("tr");
    const sample = group.samples[0];
    tr.append(cell(group.output), cell(group.reason), cell(count(group.count)),
      cell(count(group.redriven)), cell(utc(group.last)), cell(sample ? sample.event : ""));
    for (const td of [tr.children[2], tr.children[3]]) td.className = "num";
    const action = document.createElement("td");
    const button = document.createElement("button");
    button.type = "button";
    button.className = "link";
    button.textContent = "redrive…";
    button.dataset.redrive = "";
    button.addEventListener("click", () => redriveDeadLetters({output: group.output, reason: group.reason}));
    action.append(button);
    tr.append(action);
    body.append(tr);
  }
  if (!result.groups.length) {
    const tr = document.createElement("tr");
    const td = cell("None: every event was delivered or is on its way.");
    td.colSpan = 7;
    td.className = "dim";
    tr.append(td);
    body.append(tr);
  }
}

const sendRedrive = (method, request) =>
  sendJSON(`/ui/streams/${stream}/dead-letters/redrive`, method, request, "redrive");

// The range the page's fields give, if any: it narrows every redrive asked from the page.
function redriveRange() {
  const fields = deadLetters.querySelector("[data-redrive-range]").elements;
  if (fields.from.validity.badInput || fields.to.validity.badInput) {
    throw new Error("The time range is not a whole date and time: complete it, or clear it.");
  }
  const range = {};
  if (fields.from.value) range.from = utcInput(fields.from.value);
  if (fields.to.value) range.to = utcInput(fields.to.value);
  return range;
}

async function redriveDeadLetters(chosen) {
  const error = deadLetters.querySelector("[data-redrive-error]");
  error.hidden = true;
  try {
    const selection = {...chosen, ...redriveRange()};
    const plan = await sendRedrive("POST", {...selection, dry_run: true});
    const reach = Object.entries(plan.outputs || {}).map(([o, n]) => `${o}: ${count(n)}`).join(", ");
    const copies = plan.copies ? ` (${count(plan.copies)} copies of the same events are not sent twice)` : "";
    const range = selection.from || selection.to
      ? ` dead-lettered ${selection.from ? `from ${selection.from} ` : ""}${selection.to ? `before ${selection.to}` : ""}`.trimEnd()
      : "";
    const question = `Send ${count(plan.events)} dead letters${range} again, each only to the ` +
      `outputs it failed in (${reach}), at most ${count(plan.rate)} events/s?${copies}`;
    if (!confirm(question)) return;
    await sendRedrive("POST", selection);
    await refresh();
    await loadDeadLetters();
  } catch (e) {
    error.textContent = e.message;
    error.hidden = false;
  }
}

if (deadLetters) {
  deadLetters.addEventListener("toggle", () => { if (deadLetters.open) loadDeadLetters(); });
  deadLetters.querySelector("[data-redrive-all]").addEventListener("click", () => redriveDeadLetters({}));
  deadLetters.querySelector("[data-redrive-cancel]").addEventListener("click", async () => {
    if (!confirm("Cancel the redrive? The dead letters sent stay sent.")) return;
    try {
      await sendRedrive("DELETE");
      await refresh();
    } catch (e) {
      const error = deadLetters.querySelector("[data-redrive-error]");
      error.textContent = e.message;
      error.hidden = false;
    }
  });
}

function showTargetField(form) {
  for (const field of form.querySelectorAll("[data-kind]")) {
    field.hidden = field.dataset.kind !== form.elements.kind.value;
  }
}

for (const box of document.querySelectorAll("details.recovery")) {
  box.addEventListener("toggle", () => { if (box.open) loadRestorePoints(box); });
  const form = box.querySelector("form.rewind-form");
  form.elements.kind.addEventListener("change", () => showTargetField(form));
  form.addEventListener("submit", rewind);
  const backfillForm = box.querySelector("form.backfill-form");
  if (backfillForm) {
    backfillForm.addEventListener("submit", backfill);
    box.querySelector("[data-backfill-cancel]").addEventListener("click", cancelBackfill);
  }
}
if (location.hash.startsWith("#recovery-")) {
  const box = document.getElementById(location.hash.slice(1));
  if (box) box.open = true;
}

// An item per line, or several on a line separated by commas outside parentheses and quotes; a
// line that starts with `* except` is one item. As ui.py's _projection splits it.
function projectionItems(text) {
  const items = [];
  for (const line of text.split("\n")) {
    if (line.trim().startsWith("*")) {
      items.push(line.trim());
      continue;
    }
    let depth = 0, quoted = false, start = 0;
    const padded = line + ",";
    for (let i = 0; i < padded.length; i++) {
      const char = padded[i];
      if (char === "'") quoted = !quoted;
      else if (!quoted && (char === "(" || char === ")")) depth += char === "(" ? 1 : -1;
      else if (!quoted && depth <= 0 && char === ",") {
        items.push(padded.slice(start, i).trim());
        start = i + 1;
      }
    }
  }
  return items.filter((s) => s.length > 0);
}

function showFieldError(field, message) {
  const box = document.getElementById(`${field}-error`);
  box.textContent = message || "";
  box.hidden = !message;
}

async function preview() {
  const filter = document.getElementById("out-filter").value.trim();
  const projection = projectionItems(document.getElementById("out-projection").value);
  showFieldError("filter", "");
  showFieldError("projection", "");
  const panel = document.getElementById("preview");
  const summary = document.getElementById("preview-summary");
  const body = document.querySelector("#preview-records tbody");
  body.replaceChildren();
  panel.hidden = false;
  summary.textContent = "Reading recent events…";
  const answer = await fetch(`/ui/streams/${stream}/preview`, {
    method: "POST",
    headers: {"Content-Type": "application/json", Accept: "application/json"},
    body: JSON.stringify({filter: filter || null, projection: projection.length ? projection : null, limit: 50}),
  });
  const result = await answer.json();
  if (!answer.ok) {
    for (const problem of result.problems || []) {
      if (problem.field === "filter" || problem.field === "projection") {
        showFieldError(problem.field, problem.message);
      }
    }
    summary.textContent = result.message || `Preview failed (${answer.status})`;
    return;
  }
  const unreadable = result.unreadable ? `, ${result.unreadable} unreadable (dead letters)` : "";
  summary.textContent = `${result.matched} of the last ${result.scanned} events match${unreadable}.`;
  for (const item of result.records.slice(-20).reverse()) {
    const row = document.createElement("tr");
    const guid = document.createElement("td");
    guid.textContent = item.guid;
    const event = document.createElement("td");
    const before = document.createElement("code");
    before.textContent = JSON.stringify(item.event);
    event.append(before);
    row.append(guid, event, recordCell(item.record, new Set(result.computed)));
    body.append(row);
  }
}

// The record, each field a function made marked (hashed, masked, computed): what the output's
// hygiene does is seen at a glance.
function recordCell(record, computed) {
  const cell = document.createElement("td");
  const code = document.createElement("code");
  code.append("{");
  Object.entries(record).forEach(([name, value], i) => {
    if (i) code.append(", ");
    const member = document.createElement("span");
    member.dataset.member = name;
    member.textContent = `${JSON.stringify(name)}: ${JSON.stringify(value)}`;
    if (computed.has(name)) {
      const mark = document.createElement("mark");
      mark.append(member);
      code.append(mark);
    } else {
      code.append(member);
    }
  });
  code.append("}");
  cell.append(code);
  return cell;
}

// Shadows: a changed output run beside the live one, compared event by event.

function fillRows(body, rows) {
  body.replaceChildren();
  for (const cells of rows) {
    const row = document.createElement("tr");
    for (const content of cells) {
      const cell = document.createElement("td");
      cell.textContent = content;
      row.append(cell);
    }
    body.append(row);
  }
}

function showShadow(output, shadow) {
  const box = document.getElementById(`shadow-${output}`);
  if (!box) return;
  const running = Boolean(shadow) && shadow.state === "running";
  const active = Boolean(shadow) && shadow.state !== "ended";
  box.dataset.shadowState = shadow ? shadow.state : "none";
  const summary = box.querySelector("[data-shadow-summary]");
  box.querySelector("[data-shadow-view]").hidden = !shadow;
  box.querySelector("form.shadow-form").hidden = active;
  if (!shadow) {
    summary.textContent = "no shadow";
    return;
  }
  const ended = shadow.end ? ` (${shadow.end})` : "";
  const until = running ? `, expires ${utc(shadow.expires_at)} UTC` : "";
  summary.textContent = `shadow ${shadow.id}: ${shadow.state}${ended}, ${count(shadow.compared)} ` +
    `events compared, ${count(shadow.counts.differing || 0)} differing${until}`;
  fillRows(box.querySelector("[data-shadow-counts] tbody"),
    Object.entries(shadow.counts).map(([result, n]) => [result, count(n)]));
  fillRows(box.querySelector("[data-shadow-fields] tbody"),
    Object.entries(shadow.fields).map(([field, n]) => [field, count(n)]));
  fillRows(box.querySelector("[data-shadow-samples] tbody"), shadow.samples.flatMap((sample) =>
    Object.entries(sample.fields).map(([field, [before, after]]) =>
      [sample.guid, field, before ?? "(none)", after ?? "(none)"])));
  for (const button of box.querySelectorAll("[data-shadow-promote], [data-shadow-drop]")) {
    button.disabled = !running;
  }
}

const shadowPath = (output) => `/ui/streams/${stream}/outputs/${output}/shadow`;

async function startShadow(event) {
  event.preventDefault();
  const form = event.currentTarget;
  const error = form.querySelector("[data-shadow-error]");
  error.hidden = true;
  try {
    const request = {output: JSON.parse(form.elements.version.value)};
    if (form.elements.expires_in.value) request.expires_in = form.elements.expires_in.value;
    const rate = form.elements.max_events_per_second.value;
    if (rate) request.max_events_per_second = Number(rate);
    await sendJSON(shadowPath(form.dataset.output), "POST", request, "shadow");
    await refresh();
  } catch (e) {
    error.textContent = e.message;
    error.hidden = false;
  }
}

async function endShadow(box, how) {
  const output = box.dataset.output;
  const question = how === "promote"
    ? `Make the shadow's version the output ${output}'s? Its router is deployed again.`
    : `Drop the shadow of ${output}? Its targets are removed.`;
  if (!confirm(question)) return;
  const error = box.querySelector("[data-shadow-error]");
  try {
    const path = how === "promote" ? `${shadowPath(output)}/promote` : shadowPath(output);
    await sendJSON(path, how === "promote" ? "POST" : "DELETE", null, how);
    await refresh();
  } catch (e) {
    error.textContent = e.message;
    error.hidden = false;
    box.querySelector("form.shadow-form").hidden = false;
  }
}

for (const box of document.querySelectorAll("details.shadow")) {
  box.querySelector("form.shadow-form").addEventListener("submit", startShadow);
  box.querySelector("[data-shadow-promote]").addEventListener("click", () => endShadow(box, "promote"));
  box.querySelector("[data-shadow-drop]").addEventListener("click", () => endShadow(box, "drop"));
}

document.getElementById("preview-button").addEventListener("click", preview);
refresh();
setInterval(refresh, 5000);
