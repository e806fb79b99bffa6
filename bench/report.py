"""Reports for ``bench/diskless_load.py``: results.json, report.md, latency CDF and throughput PNGs.

Pure Python on the results dict (no Spark), so a report can be regenerated from a JSON file::

    python bench/report.py bench/results/<timestamp>/results.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

APIS_ORDER = (
    "CommitBatches",
    "FindDisklessBatches",
    "ListDisklessOffsets",
    "DeleteDisklessRecords",
    "ListDisklessFilesToDelete",
    "DeleteDisklessFiles",
    "InitDisklessTopics",
    "AllocateProducerIds",
    "BrokerRegistration",
    "BrokerHeartbeat",
)
QKEYS = (("p50", "p50"), ("p95", "p95"), ("p99", "p99"), ("p99_9", "p99.9"))
#: throughput series of the commits with at least one acknowledged batch (objects per second)
ACKED_COMMITS = "CommitBatches acknowledged"
_EVENT_STYLE = {  # cluster event -> (color, line style, label)
    "kill": ("red", "--", "SIGKILL coordinator leader"),
    "new_leader": ("orange", ":", "new coordinator leader"),
    "restart": ("green", "-.", "restart killed node"),
    "restarted": ("green", ":", "killed node up"),
}


def _apis(results: dict) -> list[str]:
    have = list(results["apis"])
    return [a for a in APIS_ORDER if a in have] + sorted(a for a in have if a not in APIS_ORDER)


def _ms(us) -> str:
    return "-" if us is None else f"{us / 1000:.2f}"


def headline(results: dict) -> dict:
    """The figures quoted in the README: rates, p99s, lost/duplicated, producer-id blocks
    allocated and the AllocateProducerIds p50/p99 (ms; None without such requests)."""
    a = results["apis"]
    v = results["verification"]
    b = results["kinds"].get("broker", {})
    c = results["kinds"].get("consumer", {})
    pid = results.get("producer_ids", {})
    alloc = a.get("AllocateProducerIds", {})

    def rate(api):
        return a.get(api, {}).get("rate_per_s", 0.0)

    return {
        "commits_per_s": rate("CommitBatches"),
        "batches_per_s": b.get("batches", 0) / max(b.get("rate_window_s", 0) or 1, 1e-9),
        "lookups_per_s": rate("FindDisklessBatches"),
        "partition_lookups_per_s": c.get("partition_lookups", 0)
        / max(c.get("rate_window_s", 0) or 1, 1e-9),
        "list_offsets_per_s": rate("ListDisklessOffsets"),
        "p99_ms": {api: (a[api].get("p99") or 0) / 1000 for api in _apis(results)},
        "lost": v.get("lost", 0),
        "duplicated": v.get("duplicated", 0) + v.get("dup_offset_mismatch", 0),
        "gaps": v.get("gaps", 0),
        "overlaps": v.get("overlaps", 0),
        "producer_id_blocks": pid.get("blocks", 0),
        "allocate_p50_ms": None if alloc.get("p50") is None else alloc["p50"] / 1000,
        "allocate_p99_ms": None if alloc.get("p99") is None else alloc["p99"] / 1000,
        "passed": results["passed"],
    }


def _pid_line(results: dict) -> str | None:
    """One line on the producer-id blocks (None for results without them)."""
    pid = results.get("producer_ids")
    if not pid:
        return None
    h = headline(results)
    v = results["verification"]
    per_role = list(pid.get("blocks_per_role", {}).values()) or [0]
    used = list(pid.get("blocks_used_per_role", {}).values()) or [0]
    p50, p99 = h["allocate_p50_ms"], h["allocate_p99_ms"]
    return (
        f"producer ids (KIP-730): {pid['blocks']} blocks allocated ({min(per_role)}-"
        f"{max(per_role)} per broker role; ids used from {min(used)}-{max(used)} blocks per "
        f"role), {pid.get('ids_generated', 0)} ids generated, {pid.get('ids_used', 0)} used; "
        f"AllocateProducerIds p50 {'-' if p50 is None else f'{p50:.2f}'} ms, p99 "
        f"{'-' if p99 is None else f'{p99:.2f}'} ms, {pid.get('throttled', 0)} throttled; "
        f"ids outside a granted block {v.get('pid_outside_block', 0)} (in the logs "
        f"{v.get('log_pid_outside_block', 0)}), shared by roles {v.get('pid_shared', 0)}, "
        f"block overlaps {v.get('block_overlaps', 0)}"
    )


def _t0(results: dict) -> float:
    """The first second of any throughput series (the plots' time origin; epoch s)."""
    return min((pts[0][0] for pts in results["throughput"].values() if pts), default=0)


def failover_summary(results: dict) -> dict | None:
    """The coordinator-leader kill of a ``--cluster`` run, from ``results["cluster_events"]``
    (None without a kill): times in s since the first request (``kill_s``, ``new_leader_s``,
    ``restart_s``, ``restarted_s``; with ``--replace-node`` instead ``add_node_s``, ``new_node``
    and ``replaced_s``, the reassignment completed with a whole ISR);
    ``acked_commits_per_s_before`` (mean over the whole seconds from the second after the first
    to the one before the kill) and ``_after`` (from the second
    after the last broker role's first acknowledged commit after the kill to the one before the
    last); ``gap_s``: the longest time a broker role went without an acknowledged commit, over
    the roles whose longest gap spans the kill, and ``recovered_s``: from the kill to the last
    such role's next acknowledged commit; ``zero_seconds``: whole seconds after the kill's with
    no acknowledged commit at all; ``errors``: per error code (or exception), summed over
    APIs."""
    ev = results.get("cluster_events") or []
    kill = next((e for e in ev if e["event"] == "kill"), None)
    if kill is None:
        return None
    t0 = _t0(results)
    kt = kill["t"]

    def at(name: str) -> tuple[float | None, int | None]:
        e = next((e for e in ev if e["event"] == name), None)
        return (None, None) if e is None else (e["t"] - t0, e.get("node"))

    series = dict(results["throughput"].get(ACKED_COMMITS) or [])
    gaps = [g for g in (results.get("commit_gaps") or {}).values() if g and g[0] <= kt <= g[1]]
    back = max((g[1] for g in gaps), default=kt)
    secs = sorted(series)
    before = [series[s] for s in secs if secs[0] < s and s + 1 <= kt]
    after = [series.get(s, 0) for s in range(int(back) + 1, secs[-1])] if secs else []
    zero = 0
    for s in range(int(kt) + 1, (secs[-1] if secs else 0) + 1):
        if series.get(s, 0):
            break
        zero += 1
    errors: dict[str, int] = {}
    for a in results["apis"].values():
        for code, n in (a.get("errors") or {}).items():
            errors[code] = errors.get(code, 0) + n
    new_s, new_node = at("new_leader")
    return {
        "kill_s": kt - t0,
        "killed_node": kill.get("node"),
        "new_leader_s": new_s,
        "new_leader": new_node,
        "restart_s": at("restart")[0],
        "restarted_s": at("restarted")[0],
        "add_node_s": at("add_node")[0],
        "replaced_s": at("replaced")[0],
        "new_node": at("add_node")[1],
        "acked_commits_per_s_before": sum(before) / len(before) if before else None,
        "acked_commits_per_s_after": sum(after) / len(after) if after else None,
        "gap_s": max((g[1] - g[0] for g in gaps), default=None),
        "recovered_s": back - kt if gaps else None,
        "zero_seconds": zero,
        "errors": dict(sorted(errors.items())),
    }


def _failover_lines(results: dict) -> list[str]:
    f = results.get("failover") or failover_summary(results)
    if not f:
        return []

    def num(v, fmt="{:.1f}"):
        return "-" if v is None else fmt.format(v)

    if f.get("new_node") is not None:
        then = (f"replaced by new node {f['new_node']} started at {num(f['add_node_s'])} s, "
                f"reassignment completed with a whole ISR at {num(f['replaced_s'])} s")  # fmt: skip
    else:
        then = f"restarted at {num(f['restart_s'])} s, up at {num(f['restarted_s'])} s"
    return [
        f"coordinator leader (node {f['killed_node']}) SIGKILLed at {f['kill_s']:.1f} s; new "
        f"leader node {f['new_leader']} named at {num(f['new_leader_s'])} s; {then}",
        f"acknowledged commits/s before the kill {num(f['acked_commits_per_s_before'])}, after "
        f"recovery {num(f['acked_commits_per_s_after'])}; longest gap without an acknowledged "
        f"commit {num(f['gap_s'], '{:.2f}')} s (all broker roles committing again "
        f"{num(f['recovered_s'], '{:.2f}')} s after the kill; {f['zero_seconds']} whole seconds "
        "with none)",
        "errors per code (all APIs): "
        + (", ".join(f"{k}: {v}" for k, v in f["errors"].items()) or "none"),
    ]


def console_summary(results: dict) -> str:
    h = headline(results)
    lines = [
        f"{'api':28} {'requests':>9} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'p99.9 ms':>9} errors"
    ]
    for api in _apis(results):
        s = results["apis"][api]
        lines.append(
            f"{api:28} {s['requests']:9d} {s['rate_per_s']:9.1f} {_ms(s.get('p50')):>8} "
            f"{_ms(s.get('p99')):>8} {_ms(s.get('p99_9')):>9} "
            f"{s.get('errors') or ''}"
        )
    if (pl := _pid_line(results)) is not None:
        lines.append(pl)
    lines += _failover_lines(results)
    lines.append(
        f"commits/s {h['commits_per_s']:.1f}, batches/s {h['batches_per_s']:.0f}, "
        f"lookups/s {h['lookups_per_s']:.1f}; lost {h['lost']}, duplicated "
        f"{h['duplicated']}, gaps {h['gaps']}, overlaps {h['overlaps']}: "
        f"{'PASSED' if h['passed'] else 'FAILED'}"
    )
    return "\n".join(lines)


def markdown(results: dict, plots: dict[str, str]) -> str:
    h = headline(results)
    cfg = results["config"]
    t = results["timing"]
    v = results["verification"]
    out = [
        f"# Diskless load run `{results['run_id']}`",
        "",
        f"**{'PASSED' if results['passed'] else 'FAILED'}**"
        + ("" if results["passed"] else ": " + "; ".join(results["failures"])),
        "",
        f"Server `{cfg['server']}`, Spark master `{results['master']}`, {results['tasks']} load "
        f"tasks; {cfg['brokers']} brokers (one commit every {cfg['commit_interval_ms']:g} ms), "
        f"{cfg['consumers']} consumers, retention {'on' if cfg['retention'] else 'off'}; "
        f"{cfg['topics']} topics x {cfg['partitions_per_topic']} partitions; {cfg['duration']:g} s "
        "per role.",
        "",
        f"Batches per object `{cfg['batches_per_object']}`, partitions per object "
        f"`{cfg['partitions_per_object']}`, batch bytes `{cfg['batch_bytes']}`, records per batch "
        f"`{cfg['records_per_batch']}`; {cfg['producers_per_broker']} producers per broker, "
        f"{cfg['idempotent_fraction']:.0%} idempotent"
        + (
            f" ({cfg['new_producers_per_s']:g} new per s, ids from controller "
            f"`{cfg['controller']}`)"
            if "new_producers_per_s" in cfg
            else ""
        )
        + f", {cfg['retry_fraction']:.1%} retries.",
        "",
        "## Headline",
        "",
        f"* commits/s: **{h['commits_per_s']:.1f}** ({h['batches_per_s']:.0f} batches/s)",
        f"* lookups/s (FindDisklessBatches requests): **{h['lookups_per_s']:.1f}** "
        f"({h['partition_lookups_per_s']:.0f} partition lookups/s)",
        f"* ListDisklessOffsets/s: {h['list_offsets_per_s']:.1f}",
        "* p99: " + ", ".join(f"{api} {ms:.2f} ms" for api, ms in h["p99_ms"].items()),
        f"* verification: lost **{h['lost']}**, duplicated **{h['duplicated']}**, gaps "
        f"{h['gaps']}, overlaps {h['overlaps']}",
    ]
    if (pl := _pid_line(results)) is not None:
        out.append(f"* {pl}")
    if fl := _failover_lines(results):
        out += ["", "## Failover", ""] + [f"* {x}" for x in fl]
        kinds = results["kinds"].get("broker", {})
        dup, fresh = int(kinds.get("resent_dup", 0)), int(kinds.get("resent_fresh", 0))
        out.append(
            f"* broker roles: {dup + fresh} idempotent batches of unknown outcome settled by "
            f"resending them ({dup} answered IsDuplicate at their first offsets, {fresh} "
            f"written by the resend; {int(kinds.get('resent_batches', 0))} batch resends in "
            f"all), {int(kinds.get('unknown_outcome_batches', 0))} batches left of unknown "
            f"outcome (non-idempotent, or given up: {int(kinds.get('gave_up_batches', 0))}), "
            f"{int(kinds.get('rediscoveries', 0))} coordinator lookups after the first"
        )
        out.append("* events: " + ", ".join(
            f"{e['event']} node {e.get('node')} at {e['t'] - _t0(results):.2f} s"
            for e in results.get("cluster_events", [])))  # fmt: skip
    out += [
        "",
        "Rates are measured inside the Spark tasks: for each API, the sum over roles of the role's "
        "requests divided by its own start-to-end span. Percentiles come from merged log-spaced "
        f"histograms ({results['bucket_scheme']['buckets_per_decade']} buckets per decade, value = "
        "bucket upper bound, so up to ~5 % high).",
        "",
        "## Per API",
        "",
        "| API | requests | req/s | mean ms | p50 ms | p95 ms | p99 ms | p99.9 ms | max ms | "
        "errors |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for api in _apis(results):
        s = results["apis"][api]
        errs = ", ".join(f"{k}: {n}" for k, n in sorted(s.get("errors", {}).items())) or "-"
        out.append(
            f"| {api} | {s['requests']} | {s['rate_per_s']:.1f} | {_ms(s['mean_us'])} | "
            + " | ".join(_ms(s.get(k)) for k, _ in QKEYS)
            + f" | {_ms(s['max_us'])} | {errs} |"
        )
    out += ["", "## Roles", ""]
    for kind, st in sorted(results["kinds"].items()):
        body = ", ".join(
            f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}" for k, v in sorted(st.items())
        )
        out.append(f"* **{kind}**: {body}")
    out += ["", "## Verification", ""]
    for k in sorted(x for x in v if x != "examples"):
        val = v[k]
        out.append(f"* {k}: {val:.2f}" if isinstance(val, float) else f"* {k}: {val}")
    if v.get("examples"):
        out += ["", "Examples:", ""] + [f"* `{e}`" for e in v["examples"][:20]]
    out += ["", "## Timing", ""]
    out += [f"* {k}: {val:.1f} s" for k, val in t.items()]
    if plots:
        out += ["", "## Plots", ""] + [f"![{k}]({Path(p).name})" for k, p in plots.items()]
    return "\n".join(out) + "\n"


def plot_latency_cdf(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bpd = results["bucket_scheme"]["buckets_per_decade"]
    fig, ax = plt.subplots(figsize=(8, 5))
    for api in _apis(results):
        counts = results["histograms"].get(api) or []
        total = sum(counts)
        if not total:
            continue
        xs, ys, cum = [], [], 0
        for i, c in enumerate(counts):
            if c:
                cum += c
                xs.append(10 ** (i / bpd) / 1000)  # ms, bucket upper bound
                ys.append(cum / total)
        ax.step(xs, ys, where="post", label=f"{api} (n={total})")
    ax.set_xscale("log")
    ax.set_xlabel("latency (ms, log scale)")
    ax.set_ylabel("fraction of requests")
    ax.set_title(f"Latency CDF per API - run {results['run_id']}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_throughput(results: dict, path: Path) -> None:
    """Requests completed per second per API (log scale); with cluster events (a ``--cluster``
    run) a first panel on a linear scale shows CommitBatches requests and acknowledged commits
    around the coordinator-leader kill, and every event is a vertical line on both panels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = results["throughput"]
    events = results.get("cluster_events") or []
    t0 = _t0(results)
    if events:
        fig, (top, ax) = plt.subplots(2, 1, figsize=(9, 9), sharex=True,
                                      gridspec_kw={"height_ratios": [2, 3]})  # fmt: skip
    else:
        fig, ax = plt.subplots(figsize=(9, 5.5))
        top = None
    cmap = plt.get_cmap("tab20")
    for i, api in enumerate([*_apis(results), ACKED_COMMITS]):
        pts = series.get(api) or []
        if len(pts) < 1:
            continue
        xs, ys = [p[0] - t0 for p in pts], [p[1] for p in pts]
        if api == ACKED_COMMITS:
            style = {"linewidth": 1.8, "color": "black"}
        elif api == "CommitBatches":  # wide under the acknowledged line: attempts that failed
            style = {"linewidth": 5, "alpha": 0.45, "color": "tab:blue"}
        else:
            style = {"color": cmap(i % 20)}
        ax.plot(xs, ys, marker=".", label=api, **style)
        if top is not None and api in ("CommitBatches", ACKED_COMMITS):
            top.plot(xs, ys, marker=".", label=api, **style)
    for a in (top, ax):
        if a is None:
            continue
        for e in events:
            color, ls, label = _EVENT_STYLE.get(e["event"], ("gray", ":", e["event"]))
            a.axvline(e["t"] - t0, color=color, linestyle=ls,
                      label=f"{label} (node {e.get('node')}) at {e['t'] - t0:.1f} s")  # fmt: skip
        a.grid(True, alpha=0.3)
        a.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_yscale("symlog", linthresh=10)
    ax.set_ylim(bottom=0)  # counts: no negative half of the symlog axis
    ax.set_xlabel("seconds since the first request")
    ax.set_ylabel("requests completed per second")
    if top is not None:
        top.set_ylabel("commits per second")
        f = failover_summary(results)
        top.set_title(
            f"Coordinator failover - run {results['run_id']}: longest commit gap "
            + ("-" if not f or f["gap_s"] is None else f"{f['gap_s']:.2f} s")
        )
    else:
        ax.set_title(f"Throughput over time - run {results['run_id']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_all(results: dict, out: Path, plots: bool = True) -> dict[str, str]:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths: dict[str, str] = {}
    pngs: dict[str, str] = {}
    if plots:
        pngs["latency CDF"] = str(out / "latency_cdf.png")
        plot_latency_cdf(results, Path(pngs["latency CDF"]))
        pngs["throughput"] = str(out / "throughput.png")
        plot_throughput(results, Path(pngs["throughput"]))
    results = dict(results, headline=headline(results), plots=pngs)
    if (failover := failover_summary(results)) is not None:
        results["failover"] = failover
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    paths["results"] = str(out / "results.json")
    (out / "report.md").write_text(markdown(results, pngs))
    paths["report"] = str(out / "report.md")
    paths.update(pngs)
    return paths


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="regenerate report.md and plots from results.json")
    p.add_argument("results")
    p.add_argument("--out", help="default: the results file's directory")
    args = p.parse_args(argv)
    results = json.loads(Path(args.results).read_text())
    results.pop("headline", None)
    results.pop("plots", None)
    results.pop("failover", None)
    for name, path in write_all(results, Path(args.out or Path(args.results).parent)).items():
        print(f"{name}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
