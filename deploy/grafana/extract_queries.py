#!/usr/bin/env python3
"""Regenerates queries.txt from the rankpulse Grafana dashboard.

queries.txt holds every PromQL expression of dashboards/rankpulse.json, one
per line, in dashboard order, without duplicates, with the template
variables replaced so that each line is plain PromQL that a test can run
against a real Prometheus:

  $ranker, $market (multi-value, "All" = .*)  ->  .*
  $k                                          ->  10
  $window                                     ->  5m
  $__rate_interval                            ->  5m
  $__interval                                 ->  1m
  $__range                                    ->  1h

The variables' own queries, label_values(SELECTOR, LABEL), are listed first
as `count by (LABEL) (SELECTOR)`: they return data exactly when the variable
would have values.

  python3 extract_queries.py            # rewrite queries.txt
  python3 extract_queries.py --check    # exit 1 if queries.txt is out of date
  python3 extract_queries.py --lint     # also parse every query with promtool

Only the Python standard library; promtool only for --lint.
"""

import argparse
import difflib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
DASHBOARD = os.path.join(HERE, "dashboards", "rankpulse.json")
QUERIES = os.path.join(HERE, "queries.txt")

# Values for single-value variables and Grafana's built-in intervals.
FIXED = {
    "k": "10",
    "window": "5m",
    "__rate_interval": "5m",
    "__interval": "1m",
    "__range": "1h",
}
# Regex matching any value, for multi-value / "All" variables.
ANY = ".*"

VAR = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]")
LABEL_VALUES = re.compile(r"^\s*label_values\(\s*(?:(.*),\s*)?(\w+)\s*\)\s*$", re.S)


def panels(items):
    """Every panel, rows' nested panels included, in dashboard order."""
    for p in items:
        yield p
        yield from panels(p.get("panels", []))


def variable_values(dashboard):
    values = dict(FIXED)
    for v in dashboard.get("templating", {}).get("list", []):
        name = v["name"]
        if name in values:
            continue
        if v.get("multi") or v.get("includeAll"):
            values[name] = ANY
    return values


def substitute(expr, values):
    def repl(m):
        name = m.group(1) or m.group(2) or m.group(3)
        if name not in values:
            raise SystemExit(f"extract_queries: no value for template variable ${name} in: {expr}")
        return values[name]

    return VAR.sub(repl, expr)


def one_line(expr):
    return re.sub(r"\s*\n\s*", " ", expr.strip())


def variable_query(v):
    q = v.get("query")
    if isinstance(q, dict):
        q = q.get("query", "")
    m = LABEL_VALUES.match(q or "")
    if not m:
        raise SystemExit(f"extract_queries: variable {v['name']}: unsupported query {q!r}")
    selector, label = m.group(1), m.group(2)
    if not selector:
        selector = "{%s!=\"\"}" % label
    return f"count by ({label}) ({selector.strip()})"


def extract(dashboard):
    values = variable_values(dashboard)
    exprs = []
    for v in dashboard.get("templating", {}).get("list", []):
        if v.get("type") == "query":
            exprs.append(variable_query(v))
    for p in panels(dashboard.get("panels", [])):
        for t in p.get("targets", []):
            if t.get("hide"):
                continue
            if t.get("expr", "").strip():
                exprs.append(t["expr"])
    out, seen = [], set()
    for e in exprs:
        line = one_line(substitute(e, values))
        if line not in seen:
            seen.add(line)
            out.append(line)
    return "".join(line + "\n" for line in out)


def lint(text):
    """Parses every query with promtool (as recording rules)."""
    promtool = shutil.which("promtool")
    if not promtool:
        raise SystemExit("extract_queries: --lint needs promtool on PATH")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "queries.rules.yml")
        with open(path, "w") as f:
            f.write("groups:\n  - name: dashboard-queries\n    rules:\n")
            for i, q in enumerate(text.splitlines()):
                f.write(f"      - record: dashboard_query_{i}\n        expr: {json.dumps(q)}\n")
        r = subprocess.run([promtool, "check", "rules", path], capture_output=True, text=True)
        sys.stdout.write(r.stdout)
        sys.stderr.write(r.stderr)
        if r.returncode != 0:
            raise SystemExit(f"extract_queries: promtool rejected a query (exit {r.returncode})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="fail if queries.txt differs from the dashboard")
    ap.add_argument("--lint", action="store_true", help="parse every query with promtool check rules")
    args = ap.parse_args()

    with open(DASHBOARD, encoding="utf-8") as f:
        text = extract(json.load(f))

    if args.check:
        try:
            with open(QUERIES, encoding="utf-8") as f:
                current = f.read()
        except FileNotFoundError:
            current = ""
        if current != text:
            sys.stderr.writelines(
                difflib.unified_diff(current.splitlines(True), text.splitlines(True), "queries.txt", "from dashboard")
            )
            print("queries.txt is out of date: run deploy/grafana/extract_queries.py", file=sys.stderr)
            return 1
        print(f"queries.txt is up to date ({len(text.splitlines())} queries)")
    else:
        with open(QUERIES, "w", encoding="utf-8") as f:
            f.write(text)
        print(f"wrote {QUERIES} ({len(text.splitlines())} queries)")
    if args.lint:
        lint(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
