"""Authorizer micro-bench: checks/s of the indexed StandardAuthorizer (``authorize``) vs the
plain scan of every ACL (``authorize_scan``), side by side on the same ACLs and queries.

ACLs (``--acls``, default 10,000; a fixed seed): topic ACLs, LITERAL by name (3/4) and
PREFIXED (1/4), ALLOW and DENY, over 200 principals, plus a few cluster ACLs and a ``User:*``
wildcard one; half in the authorizer's own map (``add_acl``), half in an image map (as the
metadata log's). Queries: random principal, operation and topic name (most with an ACL, some
without). Each round times the index then the scan (alternated, ``--rounds``), and the answers
of both are compared on every query first. In-process, one core; prints a table and writes
JSON to bench/results/authorizer-<timestamp>.json.

    python bench/authorizer.py [--acls 10000] [--rounds 5] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from pyrsistent import pmap  # noqa: E402

from kafka_rpc.security.authorizer import (  # noqa: E402
    CLUSTER_NAME,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    StandardAuthorizer,
)

_OPS = [AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE,
        AclOperation.DELETE, AclOperation.ALTER, AclOperation.ALL]  # fmt: skip


def build(n: int, seed: int = 1) -> tuple[StandardAuthorizer, list[tuple]]:
    """An authorizer with ``n`` ACLs (half local, half in the image map) and 2,000 queries."""
    rnd = random.Random(seed)
    principals = [f"User:u{i}" for i in range(200)]
    topics = [f"team{i % 50}.topic{i}" for i in range(n)]
    acls = []
    for i in range(n - 11):
        if i % 4 == 3:
            name, pattern = f"team{rnd.randrange(50)}.", PatternType.PREFIXED
        else:
            name, pattern = rnd.choice(topics), PatternType.LITERAL
        perm = AclPermissionType.DENY if rnd.random() < 0.1 else AclPermissionType.ALLOW
        acls.append(AclBinding(ResourceType.TOPIC, name, pattern, rnd.choice(principals), "*",
                               rnd.choice(_OPS), perm))  # fmt: skip
    for i in range(10):
        acls.append(AclBinding(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL,
                               principals[i], "*", AclOperation.CLUSTER_ACTION,
                               AclPermissionType.ALLOW))  # fmt: skip
    acls.append(AclBinding(ResourceType.TOPIC, "public.", PatternType.PREFIXED, "User:*", "*",
                           AclOperation.READ, AclPermissionType.ALLOW))  # fmt: skip
    a = StandardAuthorizer(["User:admin"], allow_everyone_if_no_acl=False)
    half = len(acls) // 2
    for i, acl in enumerate(acls[:half]):
        a.add_acl(i, acl)
    image = pmap(dict(enumerate(acls[half:])))
    a.image_acls = lambda: image
    queries = []
    for _ in range(2000):
        r = rnd.random()
        if r < 0.05:
            q = (rnd.choice(principals), "127.0.0.1", AclOperation.CLUSTER_ACTION,
                 ResourceType.CLUSTER, CLUSTER_NAME)  # fmt: skip
        else:
            name = rnd.choice(topics) if r < 0.9 else f"other{rnd.randrange(1000)}"
            q = (rnd.choice(principals), "127.0.0.1", rnd.choice(_OPS[:-1]),
                 ResourceType.TOPIC, name)  # fmt: skip
        queries.append(q)
    return a, queries


def rate(fn, queries: list[tuple], budget_s: float) -> float:
    """Checks/s of ``fn`` over ``queries`` repeated for about ``budget_s`` seconds."""
    done = 0
    t0 = time.perf_counter()
    while True:
        for q in queries:
            fn(*q)
        done += len(queries)
        elapsed = time.perf_counter() - t0
        if elapsed >= budget_s:
            return done / elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--acls", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=1.0, help="per side per round")
    ap.add_argument("--json", default=None, help="JSON path (default bench/results/...)")
    a = ap.parse_args()
    authz, queries = build(a.acls)
    answers = [authz.authorize(*q) for q in queries]
    assert answers == [authz.authorize_scan(*q) for q in queries], "index != scan"
    scan_queries = queries[:200]  # the scan is slow; fewer queries per pass
    rounds = []
    for _ in range(a.rounds):
        indexed = rate(authz.authorize, queries, a.seconds)
        scan = rate(authz.authorize_scan, scan_queries, a.seconds)
        rounds.append({"indexed": indexed, "scan": scan, "speedup": indexed / scan})
        print(f"  indexed {indexed:,.0f}/s scan {scan:,.0f}/s", file=sys.stderr, flush=True)
    med = statistics.median
    speedups = [r["speedup"] for r in rounds]
    row = {
        "acls": a.acls,
        "allowed_share": sum(answers) / len(answers),
        "indexed_checks_per_s": med(r["indexed"] for r in rounds),
        "scan_checks_per_s": med(r["scan"] for r in rounds),
        "speedup": med(speedups),
        "rounds": rounds,
    }
    print(
        f"\nStandardAuthorizer.authorize, {a.acls:,} ACLs (half local, half image), "
        f"{a.rounds} alternated rounds of {a.seconds:g} s per side, medians [range]\n"
    )
    print("| ACLs | indexed checks/s | scan checks/s | speedup |")
    print("|---|---|---|---|")
    print(f"| {a.acls:,} | {row['indexed_checks_per_s']:,.0f} | {row['scan_checks_per_s']:,.0f} "
          f"| {row['speedup']:,.0f}x [{min(speedups):,.0f}-{max(speedups):,.0f}] |")  # fmt: skip
    out = Path(a.json) if a.json else (
        HERE / "results" / f"authorizer-{time.strftime('%Y%m%dT%H%M%S')}.json"
    )  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(row, indent=2))
    print(f"\nJSON: {out}")


if __name__ == "__main__":
    main()
