"""A load test's report: a summary table in the terminal, and in the report folder
`report.md`, the raw figures as `figures.json`, and `rate.png` and `latency.png`: rates and
latencies over time per sink, with each fault's span shaded.

Over time, the producers' side is what they measured (acknowledged events and request latency
per second); the sinks' side is the routers' own metrics from Prometheus (delivered per second,
delivery latency p50 and p99 over 30 s windows), the same figures the dashboards draw.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure  # the object API: files only, no display or pyplot
from rich.console import Console

from keystone import terminal
from keystone.contracts import metrics as m
from keystone.contracts.settings import Settings
from keystone.dashboards.prometheus import PrometheusError, instant, range_query
from keystone.loadtest.audit import Audit
from keystone.loadtest.driver import Load, Plan
from keystone.loadtest.faults import Fault

WINDOW = "30s"


@dataclass
class Run:
    plan: Plan
    mode: str  # proxy | direct
    command: str
    machine: str
    load: Load
    faults: list[Fault]
    audit: Audit
    ended: float  # wall clock when the audit finished

    @property
    def streams(self) -> list[str]:
        return sorted({o.output.split(".")[0] for o in self.audit.outputs} | {self.plan.stream})


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


def producer_series(load: Load, seconds: int) -> dict[str, list[float | None]]:
    per = [load.seconds.get(s) for s in range(seconds)]
    return {
        "acked": [p.acked if p else 0 for p in per],
        "failed": [p.failed if p else 0 for p in per],
        "request_p50_ms": [(_quantile(p.latencies, 0.5) or 0) * 1000 if p else None for p in per],
        "request_p99_ms": [(_quantile(p.latencies, 0.99) or 0) * 1000 if p else None for p in per],
    }


def sink_series(settings: Settings, run: Run) -> dict[str, Any]:
    """Per output, delivered per second and delivery latency p50/p99 over the run, and the
    run's overall delivery latency quantiles, from Prometheus."""
    start, end = run.load.started, run.ended
    selector = f'stream=~"{"|".join(run.streams)}"'  # validated names
    buckets = f"{m.DELIVERY_LATENCY_SECONDS}_bucket{{{selector}}}"
    queries = {
        "delivered_per_s": f"sum by (stream, output) (rate({m.ROUTER_EVENTS}"
        f'{{{selector},stage="delivered"}}[{WINDOW}]))',
        "latency_p50_s": f"histogram_quantile(0.5, sum by (stream, output, le) "
        f"(rate({buckets}[{WINDOW}])))",
        "latency_p99_s": f"histogram_quantile(0.99, sum by (stream, output, le) "
        f"(rate({buckets}[{WINDOW}])))",
    }
    series: dict[str, Any] = {"times": [], "outputs": {}}
    try:
        for key, promql in queries.items():
            for result in range_query(settings, promql, start, end, 5):
                name = f"{result['metric'].get('stream')}.{result['metric'].get('output')}"
                points = [(float(t) - start, _number(v)) for t, v in result["values"]]
                series["outputs"].setdefault(name, {})[key] = points
        whole = f"{max(60, int(end - start))}s"
        for q in (0.5, 0.99):
            promql = (
                f"histogram_quantile({q}, sum by (stream, output, le) "
                f"(increase({buckets}[{whole}])))"
            )
            for result in instant(settings, promql, at=end):
                name = f"{result['metric'].get('stream')}.{result['metric'].get('output')}"
                series["outputs"].setdefault(name, {})[f"run_p{int(q * 100)}_s"] = _number(
                    result["value"][1]
                )
    except PrometheusError as e:
        series["error"] = str(e)
    return series


def _number(text: str) -> float | None:
    value = float(text)
    return value if math.isfinite(value) else None


# An output's p99 is "back" after a switch of fronting cluster once its 30 s windows stay at or
# under twice what they were before the fault (at least a second): a steady state of its own,
# since objectives hold no latency.
BACK_FACTOR = 2.0
BACK_FLOOR_S = 1.0


def back_under(
    points: list[tuple[float, float | None]], since: float, bound: float
) -> float | None:
    """Seconds from `since` until the series is at or under `bound` for the rest of the run
    (0 if it never went over; None if it is still over at its last sample, or has none after
    `since`)."""
    after = [(t, v) for t, v in points if t >= since and v is not None]
    if not after:
        return None
    over = [t for t, v in after if v > bound]
    if not over:
        return 0.0
    if over[-1] == after[-1][0]:
        return None
    later = next(t for t, _ in after if t > over[-1])
    return round(later - since, 1)


def fault_effects(run: Run, producers: dict[str, list], sinks: dict[str, Any]) -> list[dict]:
    """For each fault: what ingest did while it lasted, and each output while it lasted and
    for 30 s after (a sink catches up after its fault), against the 30 s before it."""
    effects = []
    acked, p99 = producers["acked"], producers["request_p99_ms"]
    for fault in run.faults:
        named = {"output": fault.output} if fault.output is not None else {}
        if fault.began is None:
            effects.append({"fault": fault.name, **named, "notes": fault.notes})
            continue
        begin, end = int(fault.began), int(max(fault.ended or 0, fault.began + 10))
        outputs = {}
        for name, data in sinks.get("outputs", {}).items():

            def values(key: str, low: float, high: float, data=data) -> list[float]:
                return [v for t, v in data.get(key, []) if low <= t < high and v is not None]

            was = values("delivered_per_s", begin - 30, begin)
            now = values("delivered_per_s", begin, end + 30)
            slow = values("latency_p99_s", begin, end + 30)
            outputs[name] = {
                "delivered_per_s_before": round(statistics.fmean(was), 1) if was else None,
                "delivered_per_s_during": round(statistics.fmean(now), 1) if now else None,
                "latency_p99_s_during": round(max(slow), 2) if slow else None,
            }
            steady = values("latency_p99_s", begin - 30, begin)
            later = values("latency_p99_s", fault.switched or math.inf, math.inf)
            if fault.switched is not None and steady and later:
                outputs[name]["latency_p99_back_s"] = back_under(
                    data.get("latency_p99_s", []),
                    fault.switched,
                    max(BACK_FACTOR * statistics.median(steady), BACK_FLOOR_S),
                )
        before = [v for v in p99[max(0, begin - 30) : begin] if v is not None]
        during = [v for v in p99[begin:end] if v is not None]
        effects.append(
            {
                "fault": fault.name,
                **named,
                "what": fault.what,
                "began_s": round(fault.began, 1),
                "ended_s": round(fault.ended, 1) if fault.ended is not None else None,
                "notes": fault.notes,
                "acked_per_s_before": round(
                    statistics.fmean(acked[max(0, begin - 30) : begin] or [0]), 1
                ),
                "acked_per_s_during": round(statistics.fmean(acked[begin:end] or [0]), 1),
                "request_p99_ms_before": round(statistics.median(before), 1) if before else None,
                "request_p99_ms_during": round(max(during), 1) if during else None,
                "events_retried_during": sum(producers["failed"][begin:end]),
                "outputs": outputs,
            }
        )
    return effects


def write(settings: Settings, run: Run, folder: Path) -> dict[str, Any]:
    """Writes the report folder; returns the figures (what figures.json holds)."""
    folder.mkdir(parents=True, exist_ok=True)
    seconds = int(max(run.load.seconds, default=0)) + 1
    producers = producer_series(run.load, seconds)
    sinks = sink_series(settings, run)
    all_latencies = [x for s in run.load.seconds.values() for x in s.latencies]
    statuses: dict[str, int] = {}
    for second in run.load.seconds.values():
        for code, count in second.statuses.items():
            statuses[str(code)] = statuses.get(str(code), 0) + count
    load = run.load
    figures = {
        "plan": {**asdict(run.plan), "batch": run.plan.batch},
        "mode": run.mode,
        "command": run.command,
        "machine": run.machine,
        "started_epoch_s": load.started,
        "ingest": {
            "attempted": load.attempted,
            "acknowledged": len(load.guids),
            "abandoned": load.abandoned,
            "rejected": load.rejected,
            "unavailable_without_retry_after": load.without_retry_after,
            "achieved_per_s": round(len(load.guids) / max(1.0, run.plan.duration), 1),
            "request_p50_ms": _ms(_quantile(all_latencies, 0.5)),
            "request_p99_ms": _ms(_quantile(all_latencies, 0.99)),
            "responses": statuses,
        },
        "audit": {
            "acknowledged": run.audit.acknowledged,  # the load's and any bad events
            "missing_at_ingest": run.audit.missing_at_ingest,
            "drained": run.audit.drained,
            "waited_seconds": run.audit.waited_seconds,
            "lossless": run.audit.lossless,
            "outputs": [o.to_dict() for o in run.audit.outputs],
        },
        "faults": fault_effects(run, producers, sinks),
        "producers_per_second": producers,
        "sinks": sinks,
    }
    (folder / "figures.json").write_text(json.dumps(figures, indent=1))
    _plot_rates(run, producers, sinks, folder / "rate.png")
    _plot_latency(run, producers, sinks, folder / "latency.png")
    (folder / "report.md").write_text(markdown(figures))
    return figures


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)


def _shade(ax, run: Run) -> None:
    for fault in run.faults:
        if fault.began is not None:
            end = max(fault.ended or fault.began, fault.began + 2)
            ax.axvspan(fault.began, end, color="#fdb022", alpha=0.25)
            ax.annotate(
                fault.name,
                (fault.began, 1),
                xycoords=("data", "axes fraction"),
                fontsize=8,
                va="top",
                rotation=90,
                color="#b54708",
            )


def _plot_rates(run: Run, producers: dict, sinks: dict, path: Path) -> None:
    fig = Figure(figsize=(11, 7))
    top, bottom = fig.subplots(2, 1, sharex=True)
    top.plot(producers["acked"], label="acknowledged", color="#2457c5", lw=1)
    top.plot(producers["failed"], label="not acknowledged (sent again)", color="#c01048", lw=1)
    top.set_ylabel("events / s")
    top.set_title(f"Producers: {run.plan.rate:,.0f} events/s asked of {run.plan.stream}")
    for name, data in sorted(sinks.get("outputs", {}).items()):
        points = data.get("delivered_per_s", [])
        if points:
            bottom.plot(
                [t for t, _ in points],
                [v for _, v in points],
                label=name,
                lw=1,
                marker=".",
                markersize=3,
            )
    bottom.set_ylabel("events / s")
    bottom.set_xlabel("seconds into the run")
    bottom.set_title("Delivered per output (router metrics, 30 s rate)")
    for ax in (top, bottom):
        _shade(ax, run)
        ax.grid(alpha=0.3)
        ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _plot_latency(run: Run, producers: dict, sinks: dict, path: Path) -> None:
    fig = Figure(figsize=(11, 7))
    top, bottom = fig.subplots(2, 1, sharex=True)
    for key, style in (("request_p50_ms", "-"), ("request_p99_ms", ":")):
        values = producers[key]
        top.plot(range(len(values)), values, style, label=key.split("_")[1], color="#2457c5")
    top.set_ylabel("ms")
    top.set_yscale("log")
    top.set_title("Proxy request latency (producers' view, per second)")
    for name, data in sorted(sinks.get("outputs", {}).items()):
        for key, style in (("latency_p50_s", "-"), ("latency_p99_s", ":")):
            points = [(t, v) for t, v in data.get(key, []) if v is not None]
            if points:
                bottom.plot(
                    [t for t, _ in points],
                    [v for _, v in points],
                    style,
                    label=f"{name} {key.split('_')[1]}",
                    lw=1,
                )
    bottom.set_ylabel("seconds")
    bottom.set_yscale("log")
    bottom.set_xlabel("seconds into the run")
    bottom.set_title("Delivery latency per output: p50 (solid), p99 (dotted), 30 s windows")
    for ax in (top, bottom):
        _shade(ax, run)
        ax.grid(alpha=0.3)
        ax.legend(loc="upper right", fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def markdown(f: dict[str, Any]) -> str:
    plan, audit = f["plan"], f["audit"]
    verdict = (
        "**No loss**: every acknowledged event reached every output that should have it."
        if audit["lossless"] and audit["drained"]
        else "**LOSS or not drained**: see the outputs below."
    )
    lines = [
        f"# Load test of stream `{plan['stream']}`",
        "",
        f"Command: `{f['command']}`  ",
        f"Machine: {f['machine']}  ",
        f"Load: {plan['rate']:,.0f} events/s for {plan['duration']:.0f} s, "
        f"events of {plan['event_size']} B on average, {plan['producers']} producers, "
        f"{plan['batch']} events a request, {f['mode']}.",
        "",
        verdict,
        "",
        "## Ingest",
        "",
        *ingest_table(f),
        "## Delivery",
        "",
        *delivery_table(f),
        "Duplicates are expected only in Kafka and Keystone outputs after a crash "
        "(at least once); Elasticsearch and Hive writes are idempotent, and a rewind rewrites "
        "them in place or resets them first. Replays are the events a rewind wrote again to a "
        "Kafka or Keystone output, labelled `ks_replay` with its id, counted apart: a "
        "duplicate is a second copy from the same delivery (the first, or one rewind's).",
        "",
    ]
    if f["faults"]:
        lines += ["## Faults", "", *faults_table(f)]
    lines += ["## Over time", "", "![rates](rate.png)", "", "![latency](latency.png)", ""]
    if "error" in f["sinks"]:
        lines += [f"Router metrics unavailable: {f['sinks']['error']}", ""]
    return "\n".join(lines)


def ingest_table(f: dict[str, Any]) -> list[str]:
    ingest = f["ingest"]
    return [
        "| attempted | acknowledged | never acknowledged | rejected | achieved events/s "
        "| request p50 ms | request p99 ms | responses |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
        f"| {ingest['attempted']:,} | {ingest['acknowledged']:,} | {ingest['abandoned']:,} "
        f"| {ingest['rejected']:,} | {ingest['achieved_per_s']:,} | {ingest['request_p50_ms']} "
        f"| {ingest['request_p99_ms']} | "
        + ", ".join(f"{k}: {v:,}" for k, v in sorted(ingest["responses"].items()))
        + " |",
        "",
        f"Acknowledged but missing from the fronting topic: {f['audit']['missing_at_ingest']:,}. "
        f"503s without Retry-After: {ingest.get('unavailable_without_retry_after', 0):,}.",
        "",
    ]


def delivery_table(f: dict[str, Any]) -> list[str]:
    audit = f["audit"]
    lines = [
        f"Waited {audit['waited_seconds']} s after the load for the pipeline to drain: "
        + ("it drained." if audit["drained"] else "**it did not drain in time**."),
        "",
        "| output | sink | guarantee | where | expected | delivered | lost | duplicates | replays "
        "| unexpected | delivery rate | latency p50 s | latency p99 s |",
        "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    latency = f["sinks"].get("outputs", {})
    for o in audit["outputs"]:
        own = latency.get(o["output"], {})
        lines.append(
            f"| {o['output']} | {o['sink']} | {o['guarantee'].replace('_', ' ')} "
            f"| {o['where']} | {o['expected']:,} "
            f"| {o['delivered']:,} | {o['lost']:,} | {o['duplicates']:,} "
            f"| {o['replays']:,} | {o['unexpected']:,} "
            f"| {o['delivery_rate']:.6f} | {_fmt(own.get('run_p50_s'))} "
            f"| {_fmt(own.get('run_p99_s'))} |"
        )
    return [*lines, ""]


def faults_table(f: dict[str, Any]) -> list[str]:
    lines = [
        "Per output: delivered per second in the 30 s before the fault → while it lasted and "
        "for 30 s after, and the worst delivery p99 (30 s windows) in that time; after a switch "
        "of fronting cluster, how long until its p99 stayed at or under twice its p99 before "
        "the fault (at least 1 s).",
        "",
        "| fault | began s | ended s | acked/s before → during | request p99 ms before → "
        "worst | retried | per output: delivered/s before → during; worst p99 | what "
        "happened |",
        "| --- | ---: | ---: | --- | --- | ---: | --- | --- |",
    ]
    for e in f["faults"]:
        if "began_s" not in e:
            lines.append(f"| {e['fault']} | | | | | | | {'; '.join(e['notes'])} |")
            continue
        outputs = "; ".join(
            f"{name}: {v['delivered_per_s_before']} → {v['delivered_per_s_during']}, "
            f"{_fmt(v['latency_p99_s_during'])} s{_back(v)}"
            for name, v in sorted(e["outputs"].items())
        )
        lines.append(
            f"| {e['fault']} | {e['began_s']} | {e['ended_s']} "
            f"| {e['acked_per_s_before']} → {e['acked_per_s_during']} "
            f"| {e['request_p99_ms_before']} → {e['request_p99_ms_during']} "
            f"| {e['events_retried_during']:,} | {outputs} | {'; '.join(e['notes'])} |"
        )
    return [*lines, ""]


def _back(output: dict[str, Any]) -> str:
    if "latency_p99_back_s" not in output:
        return ""
    back = output["latency_p99_back_s"]
    if back is None:
        return ", p99 not back by the end"
    return f", p99 back {back:g} s after the switch"


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def summary(figures: dict[str, Any], console: Console) -> None:
    ingest, audit = figures["ingest"], figures["audit"]
    console.print(
        f"ingest: {ingest['acknowledged']:,} of {ingest['attempted']:,} events acknowledged "
        f"({ingest['achieved_per_s']:,}/s), {ingest['abandoned']:,} never, "
        f"{ingest['rejected']:,} rejected; request p99 {ingest['request_p99_ms']} ms; "
        f"missing at ingest: {audit['missing_at_ingest']:,}"
    )
    table = terminal.table(
        "output",
        "sink",
        "guarantee",
        "expected",
        "delivered",
        "lost",
        "dups",
        "replays",
        "unexpected",
        "delivery rate",
    )
    for o in audit["outputs"]:
        style = "green" if o["lost"] == 0 else "red"
        table.add_row(
            o["output"],
            o["sink"],
            o["guarantee"].replace("_", " "),
            f"{o['expected']:,}",
            f"{o['delivered']:,}",
            f"[{style}]{o['lost']:,}[/]",
            f"{o['duplicates']:,}",
            f"{o['replays']:,}",
            f"{o['unexpected']:,}",
            f"[{style}]{o['delivery_rate']:.6f}[/]",
        )
    console.print(table)
    for e in figures["faults"]:
        console.print(f"fault {e['fault']}: {'; '.join(e['notes'])}")
    if not audit["drained"]:
        console.print(f"[red]not drained after {audit['waited_seconds']} s[/]")
