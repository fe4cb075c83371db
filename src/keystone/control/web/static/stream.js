// The stream page: figures refreshed every 5 s, and the output editor's preview.
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
  const error = document.getElementById("router-error");
  error.textContent = status.router.last_error || "";
  error.hidden = !status.router.last_error;
  const metricsError = document.getElementById("metrics-error");
  metricsError.textContent = status.metrics_error || "";
  metricsError.hidden = !status.metrics_error;
  for (const output of status.outputs) {
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
  }
}

function projectionItems(text) {
  return text.split(/[\n,]/).map((s) => s.trim()).filter((s) => s.length > 0);
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
    const record = document.createElement("td");
    const code = document.createElement("code");
    code.textContent = JSON.stringify(item.record);
    record.append(code);
    row.append(guid, record);
    body.append(row);
  }
}

document.getElementById("preview-button").addEventListener("click", preview);
refresh();
setInterval(refresh, 5000);
