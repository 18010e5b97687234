"""scale_out.py's report: Markdown tables from its results (the dicts of its JSON file),
and whether throughput fell anywhere as processes were added.

    .venv/bin/python -m benchmarks._scale_report benchmarks/scale_out.json   # again, later
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Sequence
from typing import Any

from benchmarks.harness import spread

Run = dict[str, Any]
#: A fall of more than this share against the best of fewer processes counts as one.
FALL = 0.10


def scale_runs(runs: Sequence[Run], mode: str, processes: int) -> list[Run]:
    """The runs of one point of the scale section."""
    return [
        r for r in runs
        if r["point"]["section"] == "scale" and r["point"]["mode"] == mode
        and r["point"]["processes"] == processes
    ]  # fmt: skip


def rate(run: Run) -> float:
    """Jobs a second of the backlog's drain, first start to last end."""
    b = run["backlog"]
    return b["tasks"] / b["span"] if b["span"] else float("nan")


def cores(phase: dict[str, Any], key: str = "server_cpu") -> float:
    """CPU seconds of ``key`` over the phase's window: cores busy on average."""
    return phase[key] / phase["seconds"] if phase["seconds"] else float("nan")


def _cells(rs: Sequence[Run]) -> list[str]:
    """The cells every table shares, from one point's runs (medians over its rounds):
    jobs/s, backlog p99, steady p50 / p99, the drain's CPU (PostgreSQL / PgBouncer /
    workers / other work, in cores), PostgreSQL's CPU a job, tasks a capture statement,
    PostgreSQL's cores in the steady phase, and the most server connections (of which
    LISTEN)."""
    backlogs = [r["backlog"] for r in rs]
    steadies = [r["steady"] for r in rs if r["steady"]]
    peaks = [r["peaks"] for r in rs]
    steady = (
        f"{spread([s['p50'] * 1000 for s in steadies], '{:.0f}')} /"
        f" {spread([s['p99'] * 1000 for s in steadies], '{:.0f}')}"
        if steadies else "-"
    )  # fmt: skip
    keys = ("server_cpu", "bouncer_cpu", "workers_cpu", "others_cpu")
    drain_cpu = " / ".join(spread([cores(b, key) for b in backlogs], "{:.2f}") for key in keys)
    return [
        spread([rate(r) for r in rs], "{:,.0f}"),
        spread([b["p99"] for b in backlogs]),
        steady,
        drain_cpu,
        spread([b["server_cpu"] / b["tasks"] * 1e6 for b in backlogs], "{:.0f}"),
        spread([b["tasks"] / b["captures"] for b in backlogs if b.get("captures")], "{:.1f}"),
        spread([cores(s) for s in steadies]) if steadies else "-",
        f"{max(p['sessions'] for p in peaks)} ({max(p['listening'] for p in peaks)})",
    ]


#: The headers of _cells' columns.
CELLS = (
    "jobs/s (busy span) | backlog p99 enqueue->end s | steady p50 / p99 enqueue->start ms"
    " | drain CPU, cores: PostgreSQL / PgBouncer / workers / other work | PostgreSQL CPU µs"
    " a job (drain) | tasks a capture (drain) | PostgreSQL CPU, cores (steady) | server"
    " connections, most (LISTEN)"
)


def scale_table(runs: Sequence[Run], processes: Sequence[int], modes: Sequence[str]) -> list[str]:
    """A row per (mode, process count)."""
    out = [
        f"| mode | processes | namespaces x command | {CELLS} | client addresses"
        " | PgBouncer: clients / servers, most |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for mode in modes:
        for n in processes:
            rs = scale_runs(runs, mode, n)
            if not rs:
                continue
            peaks = [r["peaks"] for r in rs]
            clients = max(p["bouncer_clients"] for p in peaks)
            bouncer = f"{clients} / {max(p['bouncer_servers'] for p in peaks)}"
            bouncer = bouncer if mode == "pooled" else "-"
            cells = _cells(rs)
            out.append(
                f"| {mode} | {n} | {rs[0]['shape']} | {' | '.join(cells)}"
                f" | {max(p['addresses'] for p in peaks)} | {bouncer} |"
            )
    return out


def collapse(runs: Sequence[Run], processes: Sequence[int], modes: Sequence[str]) -> list[str]:
    """For each mode: each count's jobs/s against the best of fewer processes, and whether
    it fell by more than FALL (a collapse) anywhere."""
    out = []
    for mode in modes:
        rates = {
            n: statistics.median(map(rate, rs))
            for n in processes
            if (rs := scale_runs(runs, mode, n))
        }
        best, steps, falls = 0.0, [], []
        for n, r in rates.items():
            if best:
                steps.append(f"{n}: {r / best:.2f}x")
                if r < (1 - FALL) * best:
                    falls.append(n)
            best = max(best, r)
        verdict = f"**falls** at {', '.join(map(str, falls))}" if falls else "no collapse"
        against = ", ".join(steps) or "-"
        out.append(f"- {mode}: {verdict} (jobs/s against the best of fewer processes: {against})")
    return out


def idle_table(runs: Sequence[Run]) -> list[str]:
    """The idle section: the busy ones alone, then beside the idle ones."""
    idle_runs = [r for r in runs if r["point"]["idle"]]
    alone_runs = [r for r in runs if r["point"]["section"] == "idle" and not r["point"]["idle"]]
    if not idle_runs:
        return []
    busy, idle = idle_runs[0]["point"]["processes"], idle_runs[0]["point"]["idle"]
    base = statistics.median(map(rate, alone_runs)) if alone_runs else float("nan")
    out = [
        f"| run | {CELLS.replace(' |', ' | vs alone |', 1)} | PgBouncer: clients / servers,"
        " most | idle alone: transactions/s in all (a worker) | idle alone: PgBouncer"
        " transactions / queries a second | idle alone: PostgreSQL CPU, cores | idle alone:"
        " server connections, most (LISTEN) | idle ones registered in s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for run in [*alone_runs, *idle_runs]:
        p, w = run["point"], run["idle"]
        label = f"{busy} busy alone"
        if p["idle"]:
            label = (
                f"{busy} busy + {idle} idle, {'`--listen-url`' if p['idle_listen'] else 'polling'}"
            )
        peaks = run["peaks"]
        cells = _cells([run])
        bouncer = f"{peaks['bouncer_clients']} / {peaks['bouncer_servers']}"
        if w:
            tx, wp = w["transactions"] / w["seconds"], w["peaks"]
            pgb_tx, pgb_q = (
                w[k] / w["seconds"] for k in ("bouncer_transactions", "bouncer_queries")
            )
            idle_cells = [
                f"{tx:.1f} ({tx / w['workers']:.2f})",
                f"{pgb_tx:.1f} / {pgb_q:.1f}",
                f"{w['server_cpu'] / w['seconds']:.3f}",
                f"{wp['sessions']} ({wp['listening']})",
                f"{w['ready_s']:.0f}",
            ]
        else:
            idle_cells = ["-"] * 5
        shared = " | ".join(cells[1:])
        out.append(
            f"| {label} | {cells[0]} | {rate(run) / base:.2f} | {shared} | {bouncer}"
            f" | {' | '.join(idle_cells)} |"
        )
    return out


def report(payload: dict[str, Any]) -> list[str]:
    """The whole report, as lines of Markdown."""
    args, setting, runs = payload["args"], payload["setting"], payload["runs"]
    others = [r["others"] * 100 for r in runs if r["others"] is not None]
    stderr = sorted({line for r in runs for line in r["stderr"]})
    out = [
        "## scale_out.py" + (f": {payload['label']}" if payload.get("label") else ""),
        "",
        f"{setting['server']} of the run's own (fsync {setting['fsync']}, synchronous_commit"
        f" {setting.get('synchronous_commit', '?')}, shared_buffers"
        f" {setting['shared_buffers']}, max_connections {setting['max_connections']});"
        f" PgBouncer pool {args['pool_size']}; busy workers `--concurrency {args['concurrency']}`,"
        f" {args['per_namespace']} processes a namespace; backlog {args['tasks']:,} no-op tasks;"
        f" steady {args['steady_rate']:g}/s for {args['steady_seconds']:g} s; {args['rounds']}"
        f" round(s). Load average {setting['load_before']} at the start, {setting['load_after']}"
        f" at the end; other work kept {spread(others, '{:.0f}')} % of the CPU busy just before"
        f" the runs; {setting['seconds']:.0f} s in all.",
        "",
        *scale_table(runs, args["processes"], args["modes"]),
        "",
        *collapse(runs, args["processes"], args["modes"]),
        "",
        *idle_table(runs),
        "",
        f"Worker stderr: {sum(r.get('stderr_lines', len(r['stderr'])) for r in runs)} line(s)"
        + (", the first of each run:" if stderr else "."),
        *(f"    {line}" for line in stderr[:20]),
    ]
    return out


if __name__ == "__main__":
    with open(sys.argv[1]) as results:
        print("\n".join(report(json.load(results))))
