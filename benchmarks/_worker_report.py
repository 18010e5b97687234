"""bench_worker.py's report tables: the drains (with CPU per 1,000 jobs), jobq and PGQueuer
side by side, the bulk enqueues and the latencies."""

from __future__ import annotations

from benchmarks._backend_cpu import per_thousand, ratio
from benchmarks._drains import Drain, Latency
from benchmarks._enqueue_bench import Enqueue
from benchmarks.harness import markdown_table


def pgqueuer_rows(drains: list[Drain]) -> dict[tuple[int, int], Drain]:
    """PGQueuer-asyncpg's drains by (concurrency, tasks)."""
    return {(d.concurrency, d.tasks): d for d in drains if d.kind == "pgqueuer-asyncpg"}


def print_drains(drains: list[Drain], bares: list[Drain]) -> None:
    pgq = pgqueuer_rows(drains)
    print(
        "| queue | database | concurrency | tasks | seconds | jobs/s "
        "| ratio to pgqueuer (asyncpg) | worker CPU ms / 1,000 jobs "
        "| server CPU ms / 1,000 jobs | notes |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
    # Stable sort: each concurrency's rows stay in run order; the bare loops come last.
    for d in [*sorted(drains, key=lambda d: (d.concurrency, d.tasks)), *bares]:
        peer_row = pgq.get((d.concurrency, d.tasks))
        ratio = f"{d.rate / peer_row.rate:.2f}" if peer_row and d.kind != "bare" else ""
        print(
            f"| {d.queue} | {d.database} | {d.concurrency} | {d.tasks:,} | {d.seconds:.2f} "
            f"| {d.rate:,.0f} | {ratio} | {per_thousand(d.worker_cpu, d.tasks)} "
            f"| {per_thousand(d.server_cpu, d.tasks)} | {d.note} |"
        )


def print_side_by_side(drains: list[Drain]) -> None:
    """jobq's better PostgreSQL drain and PGQueuer-asyncpg's at each size and concurrency:
    jobs/s and CPU per 1,000 jobs, and jobq's ratios (CPU: jobq's over PGQueuer's, lower
    is cheaper)."""
    pgq = pgqueuer_rows(drains)
    rows = []
    for (conc, n), peer_row in sorted(pgq.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        best = best_jobq(drains, "PostgreSQL", conc, n)
        if best is None:
            continue
        cpu = [
            (d.worker_cpu, d.server_cpu,
             None if d.worker_cpu is None or d.server_cpu is None
             else d.worker_cpu + d.server_cpu)
            for d in (best, peer_row)
        ]  # fmt: skip
        rows.append([
            f"{n:,}", str(conc), f"{best.rate:,.0f}", f"{peer_row.rate:,.0f}",
            f"{best.rate / peer_row.rate:.2f}",
            *(f"{per_thousand(a, n)} / {per_thousand(b, n)}" for a, b in zip(*cpu, strict=True)),
            *(ratio(a, b) for a, b in zip(*cpu, strict=True)),
            best.queue,
        ])  # fmt: skip
    if not rows:
        return
    print("\nSide by side (issue 42): jobq's better PostgreSQL row against PGQueuer (asyncpg); "
          "CPU in ms per 1,000 jobs, jobq / PGQueuer; CPU ratios jobq over PGQueuer (lower "
          "is cheaper):\n")  # fmt: skip
    header = [
        "tasks", "concurrency", "jobq jobs/s", "pgqueuer jobs/s", "jobs/s ratio",
        "worker CPU", "server CPU", "worker + server CPU", "worker CPU ratio",
        "server CPU ratio", "total CPU ratio", "jobq row",
    ]  # fmt: skip
    print(markdown_table(header, "rrrrrrrrrrrl", rows))


def print_enqueues(enqueues: list[Enqueue], repeat: int) -> None:
    pgq = next((e for e in enqueues if e.kind == "pgqueuer-asyncpg"), None)
    print(
        f"\n| bulk enqueue | database | tasks | seconds (best of {repeat}) | jobs/s "
        "| ratio to pgqueuer (asyncpg) | notes |"
    )
    print("|---|---|---:|---:|---:|---:|---|")
    for e in enqueues:
        ratio = f"{e.rate / pgq.rate:.2f}" if pgq else ""
        runs = ", ".join(f"{s:.2f}" for s in e.runs)
        print(
            f"| {e.who} | {e.database} | {e.tasks:,} | {e.seconds:.2f} | {e.rate:,.0f} "
            f"| {ratio} | {e.note}; runs: {runs} s |"
        )


def print_latencies(latencies: list[Latency], spacing: float) -> None:
    print("\n| queue | enqueue->start latency | samples | p50 ms | p99 ms | max ms |")
    print("|---|---|---:|---:|---:|---:|")
    for lat in latencies:
        print(
            f"| {lat.queue} | PostgreSQL, LISTEN/NOTIFY, {spacing * 1000:.0f} ms apart "
            f"| {len(lat.samples)} | {lat.pct(50) * 1000:.2f} | {lat.pct(99) * 1000:.2f} "
            f"| {max(lat.samples) * 1000:.2f} |"
        )


def best_jobq(
    drains: list[Drain], database: str, conc: int, tasks: int | None = None
) -> Drain | None:
    """jobq's faster logs-on drain (sync or async) on ``database`` at ``conc`` (of
    ``tasks`` tasks, else of any size)."""
    rows = [
        d for d in drains
        if d.kind == "jobq" and d.database == database and d.concurrency == conc
        and tasks in (None, d.tasks)
    ]  # fmt: skip
    return max(rows, key=lambda d: d.rate, default=None)
