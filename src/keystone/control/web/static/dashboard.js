// A live dashboard: each chart drawn with uPlot from the page's data source, every 10 s, and the
// alerts with their state. Each chart's figure carries data-points: the values it drew, and
// data-rewinds: the rewinds it marks (a stream's page: dashed lines where its outputs were rewound),
// and data-switches: the switches of fronting cluster it marks (where the writes moved).
"use strict";

const charts = document.getElementById("charts");
const source = charts.dataset.source;
const perStream = charts.dataset.perStream === "true";
const palette = ["#2457c5", "#12805c", "#c01048", "#b54708", "#7a5af8", "#0e9384", "#dd2590", "#667085"];
const plots = new Map();
const rewindColour = "#b54708";
const switchColour = "#7a5af8";

// A value as people read it: percentages, ms or s, and counts with k and M. Axis ticks leave
// out a unit of counts (the chart's title says it); the legend keeps it.
function format(value, unit, tick = false) {
  if (value === null || value === undefined) return "–";
  if (unit === "%") return `${(value * 100).toFixed(value >= 0.9995 || tick ? 0 : 2)}%`;
  if (unit === "s") return value < 1 ? `${(value * 1000).toFixed(0)} ms` : `${value.toFixed(1)} s`;
  const abs = Math.abs(value);
  const text = abs >= 1e6 ? `${(value / 1e6).toFixed(1)}M` : abs >= 1e3 ? `${(value / 1e3).toFixed(1)}k`
    : abs >= 10 || abs === 0 || Number.isInteger(value) ? value.toFixed(0) : value.toFixed(2);
  return unit && !tick ? `${text} ${unit}` : text;
}

function clock(ts, seconds) {
  return new Date(ts * 1000).toISOString().slice(11, seconds ? 19 : 16);  // HH:MM[:SS], UTC
}

// A dashed line at each mark (a rewind, named by its output; a switch, by where the writes went),
// drawn over the chart's series.
function markLines(marks) {
  return (u) => {
    const ratio = uPlot.pxRatio;
    const {ctx} = u;
    const {top, height} = u.bbox;
    ctx.save();
    ctx.lineWidth = ratio;
    ctx.setLineDash([4 * ratio, 3 * ratio]);
    ctx.font = `${11 * ratio}px system-ui, sans-serif`;
    ctx.textAlign = "left";  // uPlot leaves the axes' alignment set
    ctx.textBaseline = "top";
    for (const mark of marks) {
      const x = Math.round(u.valToPos(mark.time, "x", true));
      ctx.strokeStyle = ctx.fillStyle = mark.colour;
      ctx.beginPath();
      ctx.moveTo(x, top);
      ctx.lineTo(x, top + height);
      ctx.stroke();
      ctx.fillText(mark.label, x + 4 * ratio, top + 2 * ratio);
    }
    ctx.restore();
  };
}

function draw(figure, times, panel, rewinds, switches) {
  const box = figure.querySelector(".plot");
  const points = panel.series.reduce((n, s) => n + s.values.filter((v) => v !== null).length, 0);
  // An output's chart marks its own rewinds; the stream's charts every output's. Every chart
  // marks the switches.
  const shown = (m) => times.length > 0 && m.time >= times[0] && m.time <= times[times.length - 1];
  const ours = (m) => !panel.key.startsWith("output-") || panel.key === `output-${m.output}`;
  const rewound = rewinds.filter((m) => shown(m) && ours(m))
    .map((m) => ({time: m.time, label: `rewind ${m.output}`, colour: rewindColour}));
  const moved = switches.filter(shown)
    .map((m) => ({time: m.time, label: `writes → ${m.to}`, colour: switchColour}));
  figure.dataset.points = String(points);
  figure.dataset.rewinds = String(points > 0 ? rewound.length : 0);
  figure.dataset.switches = String(points > 0 ? moved.length : 0);
  figure.querySelector(".empty").hidden = points > 0;
  plots.get(panel.key)?.destroy();
  plots.delete(panel.key);
  box.replaceChildren();
  if (points === 0) return;
  const unit = panel.unit;
  const options = {
    width: box.clientWidth || 520,
    height: 220,
    tzDate: (ts) => uPlot.tzDate(new Date(ts * 1e3), "Etc/UTC"),
    scales: {x: {time: true}, y: {range: (u, min, max) => [Math.min(0, min), max > 0 ? max * 1.1 : 1]}},
    axes: [
      {values: (u, values, axis, space, increment) => values.map((v) => clock(v, increment < 60))},
      {size: 60, values: (u, values) => values.map((v) => format(v, unit, true))},
    ],
    series: [{}, ...panel.series.map((s, i) => ({
      label: s.name, stroke: palette[i % palette.length], width: 1.5, spanGaps: false,
      value: (u, v) => format(v, unit),
    }))],
    hooks: {draw: [markLines([...rewound, ...moved])]},
  };
  plots.set(panel.key, new uPlot(options, [times, ...panel.series.map((s) => s.values)], box));
}

// What Alertmanager did with a rule's alerts: each one firing (and whom it reaches), silenced
// or inhibited (nobody is told).
function notified(rule) {
  return (rule.notified || []).map((n) => {
    const what = n.output ? `${n.state} (${n.output})` : n.state;
    return n.receivers.length ? `${what} → ${n.receivers.join(", ")}` : what;
  }).join("; ");
}

function showAlerts(alerts, alertsError) {
  const body = document.querySelector("#alerts tbody");
  body.replaceChildren();
  for (const rule of alerts) {
    const active = rule.active[0];
    const cells = [rule.state, rule.alert, ...(perStream ? [rule.stream] : []), rule.severity,
      active ? active.summary : "", active && active.since ? active.since.replace("T", " ").slice(0, 19) : "",
      notified(rule)];
    const row = document.createElement("tr");
    row.dataset.alert = rule.alert;
    row.dataset.state = rule.state;
    row.dataset.notified = (rule.notified || []).map((n) => n.state).join(" ");
    cells.forEach((text, i) => {
      const cell = document.createElement("td");
      if (i === 0) {
        const badge = document.createElement("span");
        badge.className = `state state-${rule.state}`;
        badge.textContent = text;
        cell.append(badge);
      } else {
        cell.textContent = text;
      }
      if (i === cells.length - 1) cell.dataset.notified = "";
      row.append(cell);
    });
    body.append(row);
  }
  if (!alerts.length) {
    const row = document.createElement("tr");
    row.innerHTML = '<td colspan="7" class="dim">No alert rules yet.</td>';
    body.append(row);
  }
  const note = document.getElementById("alerts-error");
  note.textContent = alertsError ? `Who was told is unknown: ${alertsError}` : "";
  note.hidden = !alertsError;
}

async function refresh() {
  const minutes = document.getElementById("range").value;
  const error = document.getElementById("dashboard-error");
  let data;
  try {
    const answer = await fetch(`${source}?minutes=${minutes}`, {headers: {Accept: "application/json"}});
    data = await answer.json();
    if (!answer.ok) throw new Error(data.error || data.message || answer.statusText);
  } catch (e) {
    error.textContent = `Figures unavailable: ${e.message}`;
    error.hidden = false;
    return;
  }
  error.hidden = true;
  for (const panel of data.panels) {
    const figure = charts.querySelector(`figure[data-key="${panel.key}"]`);
    if (figure) draw(figure, data.times, panel, data.rewinds || [], data.switches || []);
  }
  showAlerts(data.alerts, data.alerts_error);
  document.getElementById("updated").textContent =
    `Updated ${new Date().toISOString().slice(11, 19)} UTC, one point every ${data.step} s.`;
  charts.dataset.loaded = "true";
}

document.getElementById("range").addEventListener("change", refresh);
refresh();
setInterval(refresh, 10000);
