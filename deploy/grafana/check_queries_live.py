#!/usr/bin/env python3
"""Runs every line of queries.txt against a live Prometheus and reports
the ones that return no data.

  python3 check_queries_live.py [--prometheus http://127.0.0.1:9090] [--allow-empty N ...]

Exit 1 when a query fails to parse or returns an empty result (unless its
line number is given to --allow-empty). The consumer lag and freshness
queries need the daemon (rankpulse run): a replay exposition has no
rankpulse_consumer_lag or rankpulse_last_event_timestamp_seconds. Only the
Python standard library.
"""

import argparse
import json
import os
import sys
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prometheus", default="http://127.0.0.1:9090")
    ap.add_argument("--queries", default=os.path.join(HERE, "queries.txt"))
    ap.add_argument("--allow-empty", type=int, nargs="*", default=[], metavar="LINE")
    args = ap.parse_args()

    failed = 0
    with open(args.queries, encoding="utf-8") as f:
        lines = [line.strip() for line in f]
    for n, query in enumerate(lines, 1):
        if not query:
            continue
        body = urllib.parse.urlencode({"query": query}).encode()
        try:
            with urllib.request.urlopen(args.prometheus.rstrip("/") + "/api/v1/query", body, timeout=30) as r:
                result = json.load(r)["data"]["result"]
        except Exception as e:  # HTTP 400 carries Prometheus' parse error
            detail = e.read().decode(errors="replace") if hasattr(e, "read") else str(e)
            print(f"{n:3d} ERROR {detail.strip()}\n    {query}")
            failed += 1
            continue
        status = "ok" if result else ("empty (allowed)" if n in args.allow_empty else "EMPTY")
        print(f"{n:3d} {status:16s} {len(result):4d} series  {query[:100]}")
        if not result and n not in args.allow_empty:
            failed += 1
    print(f"{failed} of {sum(1 for q in lines if q)} queries failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
