#!/usr/bin/env python3
"""The shipped alerts, end to end, over simulated weeks of traffic.

For each case: `rankpulse-bench simulate` writes days of rankpulse events
(rankpulse_testkit::traffic: sessions of 1-10 searches, 15-60 lists/min
per arm over the day, quality following the day and the week);
`rankpulse replay - --history` turns them into one exposition per minute
of event time; `promtool tsdb create-blocks-from openmetrics` backfills
them into a Prometheus TSDB; the recording rules of
deploy/prometheus/rankpulse-rules.yml are backfilled level by level with
`promtool tsdb create-blocks-from rules` against a Prometheus server over
that TSDB (a rule reading another rule sees nothing in the same run); and
each alert's `expr` is evaluated every minute with /api/v1/query_range,
its `for:` applied as Prometheus's rule manager applies it (an alert
fires at the first evaluation at which its series has been returned at
every evaluation for at least `for`). See ../shared/BACKFILL.md and
docs/metrics.md, "The pages, end to end".

Before it reads a page, it checks that replay's final counters equal what
the generator encoded (lists, sessions and sum of nDCG@10 of every arm).

Cases (each seeded; --seed changes them all):
  aa       --markets markets of control, candidate (identical) and a
           team-draft interleaved ranker of two equal rankers, --days
           (30): false pages of the comparison and interleaving alerts per
           30-day experiment, and of RankpulseQualityDrop per ranker-day
           once two weeks of history exist.
  worse    --markets markets with a candidate 2% worse and as many 10%
           worse, launched at staggered hours of the first day, --days
           (4): time and lists per arm from launch to the page, against the
           fixed-horizon test's lists.
  quality  --markets rankers whose quality drops 5% and as many 10%, on
           day 14 at staggered hours, --days (16): time to the page.
  smoke    one day: a 10% worse candidate is paged, an A/A pair is not
           (the CI check that every stage above runs).

Usage: alert_backfill.py CASE [--markets N] [--days D] [--seed S] [--keep DIR]
Needs target/testing/{rankpulse,rankpulse-bench}, prometheus and promtool.
"""

import argparse
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RULES = os.path.join(ROOT, "deploy", "prometheus", "rankpulse-rules.yml")
GROUP = "rankpulse.quality"
START = 1_767_571_200  # 2026-01-05T00:00:00Z, a Monday (bench/src/simulate.rs)
STEP = 60
# Families the quality rules read; the rest of each exposition is dropped
# before backfilling (it is not what the alerts are made of).
FAMILIES = re.compile(
    rb"^(rankpulse_ndcg_(sum|count)\{|rankpulse_primary_session|rankpulse_primary_sessions_total"
    rb"|rankpulse_interleaving_outcomes_total|# EOF)"
)
CONFIG = """\
[metrics]
cutoffs = [10]
[dimensions]
labels = ["ranker", "market"]
[windows]
spans = ["15m"]
"""
# z(0.975) + z(0.8): the fixed-horizon test (docs/metrics.md).
Z_SUM = 1.959963984540054 + 0.8416212335729143


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def exe(name):
    path = os.environ.get(f"RANKPULSE_{name.upper().replace('-', '_')}_BIN") or os.path.join(ROOT, "target", "testing", name)
    if not os.path.exists(path):
        sys.exit(f"{path} is missing: cargo build --profile testing -p rankpulse -p rankpulse-bench")
    return path


def launch(i, markets):
    """The day (fraction) experiment i of the worse case starts."""
    return round((i - 1) / markets, 6)


def drop_day(i, markets, seed):
    """The day (fraction) ranker i of the quality case drops: day 14, at
    hours staggered over the day and shifted by the seed."""
    return round(14 + ((i + (seed * 0.6180339887) % 1) / markets), 6)


def arms_of(case, markets, days, seed):
    if case == "aa":
        return [f"m{i}/{r}" for i in range(1, markets + 1) for r in ("control", "candidate")] + [
            f"m{i}/interleaved~interleaved" for i in range(1, markets + 1)
        ]
    if case == "worse":
        # Experiments launched at staggered hours of the first day.
        return [
            a
            for pct in (2, 10)
            for i in range(1, markets + 1)
            for a in (f"w{pct}-{i}/control>{launch(i, markets)}", f"w{pct}-{i}/candidate*{1 - pct / 100}>{launch(i, markets)}")
        ]
    if case == "quality":
        # Drops on day 14, staggered over the day.
        return [f"q/drop{pct}-{i}@{drop_day(i, markets, seed)}*{1 - pct / 100}" for pct in (5, 10) for i in range(markets)]
    if case == "smoke":
        return ["s10/control", "s10/candidate*0.90", "saa/control", "saa/candidate", "saa/interleaved~interleaved"]
    sys.exit(f"unknown case {case}")


# --- events -> history -> TSDB -----------------------------------------------


def simulate(work, arms, days, seed):
    """Generator | replay --history, the history filtered as it is written."""
    config = os.path.join(work, "sim.toml")
    with open(config, "w") as f:
        f.write(CONFIG)
    fifo = os.path.join(work, "history.fifo")
    os.mkfifo(fifo)
    history = os.path.join(work, "history.om")
    final = os.path.join(work, "final.prom")
    t0 = time.monotonic()
    gen = subprocess.Popen(
        [exe("rankpulse-bench"), "simulate", "--days", str(days), "--seed", str(seed)] + [f"--arm={a}" for a in arms],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    with open(final, "wb") as out:
        replay = subprocess.Popen(
            [exe("rankpulse"), "replay", "-C", config, "-", "--history", fifo, "--step", "1m"],
            stdin=gen.stdout,
            stdout=out,
        )
        gen.stdout.close()
        samples = 0
        # One file per day of event time: promtool re-reads its whole input
        # for every two-hour block it writes, so one file of a month costs
        # 360 readings of the month.
        days_written = []
        dst = None
        with open(fifo, "rb") as src:
            for line in src:
                if not FAMILIES.match(line) or line.startswith(b"# EOF"):
                    continue
                day = int(float(line.rsplit(b" ", 1)[1]) - START) // 86400
                if not days_written or days_written[-1][0] != day:
                    if dst:
                        dst.write(b"# EOF\n")
                        dst.close()
                    days_written.append((day, f"{history}.{day}"))
                    dst = open(days_written[-1][1], "wb")
                dst.write(line)
                samples += 1
        if dst:
            dst.write(b"# EOF\n")
            dst.close()
        history = [path for _, path in days_written]
        if replay.wait() != 0:
            sys.exit("rankpulse replay failed")
    truth = json.loads(gen.stderr.read())
    if gen.wait() != 0:
        sys.exit("rankpulse-bench simulate failed")
    log(f"  simulated and replayed in {time.monotonic() - t0:.0f} s: {samples} samples kept")
    return history, parse_exposition(final), truth


def parse_exposition(path):
    values = {}
    for line in open(path):
        if line.startswith("#") or not line.strip():
            continue
        name_labels, value = line.rsplit(" ", 1)
        values[name_labels] = float(value)
    return values


def counter(final, name, ranker, market, extra=""):
    key = f'{name}{{{extra}ranker="{ranker}",market="{market}"}}'
    return final.get(key, 0.0)


def check_truth(final, truth):
    """Replay's counters against what the generator encoded."""
    for arm, t in truth.items():
        market, ranker = arm.split("/")
        lists = counter(final, "rankpulse_ndcg_count", ranker, market, 'k="10",')
        total = counter(final, "rankpulse_ndcg_sum", ranker, market, 'k="10",')
        sessions = counter(final, "rankpulse_primary_sessions_total", ranker, market, 'metric="ndcg",k="10",')
        if lists != t["lists"] or sessions != t["sessions"] or abs(total - t["sum"]) > 1e-9 * max(1.0, t["sum"]):
            sys.exit(f"{arm}: replay counted {lists} lists, {sessions} sessions, sum {total}; the generator encoded {t}")
    log(f"  replay's counters equal the generator's for all {len(truth)} arms")


class Prometheus:
    def __init__(self, work):
        self.data = os.path.join(work, "tsdb")
        self.config = os.path.join(work, "prometheus.yml")
        with open(self.config, "w") as f:
            f.write("global:\n  evaluation_interval: 1m\n")
        self.proc = None
        self.url = None

    def start(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen(
            [
                "prometheus",
                f"--config.file={self.config}",
                f"--storage.tsdb.path={self.data}",
                "--storage.tsdb.retention.time=100y",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=open(self.data + ".log", "ab"),
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            if self.proc.poll() is not None:
                sys.exit(f"prometheus exited: see {self.data}.log")
            time.sleep(0.2)
        sys.exit("prometheus not ready within 120 s")

    def stop(self):
        if self.proc:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=120)
            self.proc = None

    def query_range(self, expr, start, end):
        """Every series' timestamps within [start, end], in chunks of at
        most 10,000 points (the server's limit is 11,000 per series)."""
        present = {}
        t = start
        while t <= end:
            stop = min(end, t + 10_000 * STEP - STEP)
            q = urllib.parse.urlencode({"query": expr, "start": t, "end": stop, "step": STEP})
            with urllib.request.urlopen(f"{self.url}/api/v1/query_range?{q}", timeout=600) as r:
                body = json.load(r)
            if body["status"] != "success":
                sys.exit(f"query failed: {body}")
            for series in body["data"]["result"]:
                key = tuple(sorted(series["metric"].items()))
                present.setdefault(key, set()).update(round(float(ts), 3) for ts, _ in series["values"])
            t = stop + STEP
        return present


def needed(group, alerts):
    """The group with only `alerts` and the recording rules they read,
    directly or through other rules (the dashboards' rules are not
    backfilled: nothing pages on them).

    >>> g = {"rules": [{"record": "a", "expr": "m"}, {"record": "b", "expr": "a + 1"},
    ...                {"record": "c", "expr": "m"}, {"alert": "X", "expr": "b > 0"}, {"alert": "Y", "expr": "c > 0"}]}
    >>> [r.get("record") or r["alert"] for r in needed(g, ["X"])["rules"]]
    ['a', 'b', 'X']
    """
    names = [r["record"] for r in group["rules"] if "record" in r]
    reads = lambda expr: {n for n in names if re.search(r"(?<![\w:])" + re.escape(n) + r"(?![\w:])", expr)}
    wanted = [r for r in group["rules"] if r.get("alert") in alerts]
    keep = set()
    todo = [n for r in wanted for n in reads(r["expr"])]
    while todo:
        n = todo.pop()
        if n not in keep:
            keep.add(n)
            todo.extend(reads(next(r for r in group["rules"] if r.get("record") == n)["expr"]))
    rules = [r for r in group["rules"] if r.get("record") in keep or r.get("alert") in alerts]
    return {**group, "rules": rules}


def rule_levels(group):
    """The group's recording rules by level: a rule is one level above the
    highest rule it reads.

    >>> rules = [{"record": "a:x", "expr": "sum(m)"}, {"record": "a:y", "expr": "a:x * 2"},
    ...          {"record": "a:x2", "expr": "a:x + a:y"}, {"record": "b", "expr": "m"}]
    >>> [[r["record"] for r in level] for level in rule_levels({"rules": rules})]
    [['a:x', 'b'], ['a:y'], ['a:x2']]
    """
    records = [r for r in group["rules"] if "record" in r]
    names = {r["record"] for r in records}
    level = {}

    def depth(rule):
        name = rule["record"]
        if name not in level:
            reads = [n for n in names if n != name and re.search(r"(?<![\w:])" + re.escape(n) + r"(?![\w:])", rule["expr"])]
            level[name] = 1 + max((depth(by_name[n]) for n in reads), default=0)
        return level[name]

    by_name = {r["record"]: r for r in records}
    for r in records:
        depth(r)
    out = {}
    for r in records:
        out.setdefault(level[r["record"]], []).append(r)
    return [out[k] for k in sorted(out)]


ALERTS = {
    "aa": ["RankpulseCandidateWorseThanControl", "RankpulseInterleavingCandidateLoses", "RankpulseQualityDrop"],
    "worse": ["RankpulseCandidateWorseThanControl"],
    "quality": ["RankpulseQualityDrop"],
    "smoke": ["RankpulseCandidateWorseThanControl", "RankpulseInterleavingCandidateLoses", "RankpulseQualityDrop"],
}


def backfill(work, history, end, alerts):
    prom = Prometheus(work)
    t0 = time.monotonic()
    for day in history:
        subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", "-q", day, prom.data], check=True, stdout=subprocess.DEVNULL)
    log(f"  samples backfilled in {time.monotonic() - t0:.0f} s")
    group = needed(next(g for g in yaml.safe_load(open(RULES))["groups"] if g["name"] == GROUP), alerts)
    levels = rule_levels(group)
    for i, rules in enumerate(levels, 1):
        t0 = time.monotonic()
        prom.start()
        # Every level in the same file under the shipped group's name:
        # Prometheus staggers a group's evaluations by a hash of its file
        # and name, and one group's rules are evaluated at one instant,
        # each seeing the rules before it. Levels with different offsets
        # would read each other a minute late.
        with open(os.path.join(work, "rules.yml"), "w") as f:
            yaml.safe_dump({"groups": [{"name": GROUP, "interval": "1m", "rules": rules}]}, f)
        out = os.path.join(work, f"level{i}")
        subprocess.run(
            [
                "promtool", "tsdb", "create-blocks-from", "rules", "-q",
                f"--start={START}", f"--end={end}", f"--url={prom.url}",
                f"--output-dir={out}", "--eval-interval=60s", "rules.yml",
            ],
            cwd=work,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=open(os.path.join(work, f"level{i}.log"), "wb"),
        )
        prom.stop()
        for block in os.listdir(out):
            shutil.move(os.path.join(out, block), os.path.join(prom.data, block))
        log(f"  level {i}: {len(rules)} recording rules in {time.monotonic() - t0:.0f} s")
    prom.start()
    return prom, group


def parse_duration(s):
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    return sum(int(n) * units[u] for n, u in re.findall(r"(\d+)([smhdw])", s))


def fire_times(present, start, end, hold):
    """Prometheus's `for:`: an alert becomes active at the first evaluation
    returning its series and fires once it has been returned at every
    evaluation for at least `hold` seconds; a missing evaluation resets
    it. Returns the start of each firing episode.

    With `for: 5m`, returned from minute 2 on fires at minute 7 (six
    evaluations); a gap restarts the count:
    >>> fire_times({120, 180, 240, 300, 360, 420, 480}, 0, 600, 300)
    [420]
    >>> fire_times({120, 180, 240, 300, 360, 480, 540}, 0, 600, 300)
    []
    >>> fire_times({0, 60, 180}, 0, 240, 0)
    [0, 180]
    """
    fires = []
    active_at = None
    firing = False
    for i in range(int((end - start) // STEP) + 1):
        t = round(start + i * STEP, 3)
        if t in present:
            if active_at is None:
                active_at = t
            if not firing and t - active_at >= hold:
                firing = True
                fires.append(t)
        else:
            active_at, firing = None, False
    return fires


def evaluation_offset(prom, group):
    """Seconds past the minute at which the group was evaluated: the
    timestamps of a recorded series' raw samples."""
    first = next(r["record"] for r in group["rules"] if "record" in r)
    q = urllib.parse.urlencode({"query": f"{first}[5m]", "time": START + 86400 // 2})
    with urllib.request.urlopen(f"{prom.url}/api/v1/query?{q}", timeout=60) as r:
        result = json.load(r)["data"]["result"]
    offsets = {round(float(ts) % STEP, 3) for series in result for ts, _ in series["values"]}
    if len(offsets) != 1:
        sys.exit(f"the recorded samples of {first} are not one minute apart at one offset: {offsets}")
    return offsets.pop()


def alerts(prom, group, end):
    """Each alert evaluated as the group's rule manager would: at the
    group's instants, one minute apart."""
    offset = evaluation_offset(prom, group)
    log(f"  the group is evaluated at {offset} s past each minute")
    out = {}
    for rule in group["rules"]:
        if "alert" not in rule:
            continue
        hold = parse_duration(rule.get("for", "0s"))
        # An alert's labels are its series' without the name: a range
        # query returns one series per name (`a or b` gives a's name at
        # some instants, b's at others), which are one alert. Two at one
        # instant would fail the rule's evaluation in Prometheus.
        alerts_present = {}
        for key, ts in prom.query_range(rule["expr"], START + offset, end).items():
            labels = tuple((k, v) for k, v in key if k != "__name__")
            seen = alerts_present.setdefault(labels, set())
            if seen & ts:
                sys.exit(f"{rule['alert']}: two series of labels {labels} at one evaluation")
            seen |= ts
        for labels, ts in alerts_present.items():
            labels = dict(labels)
            fires = fire_times(ts, START + offset, end, hold)
            out.setdefault(rule["alert"], {})[(labels.get("ranker", ""), labels.get("market", ""))] = fires
    return out


# --- reading the pages ------------------------------------------------------


def robust_variance(final, ranker, market):
    """Per-list variance times the design effect: the session-clustered
    variance of the since-start mean times the lists (docs/metrics.md)."""
    extra = 'metric="ndcg",k="10",'
    n = counter(final, "rankpulse_ndcg_count", ranker, market, 'k="10",')
    mean = counter(final, "rankpulse_ndcg_sum", ranker, market, 'k="10",') / n
    ss = counter(final, "rankpulse_primary_session_sum_squares_total", ranker, market, extra)
    sn = counter(final, "rankpulse_primary_session_sum_lists_total", ranker, market, extra)
    nn = counter(final, "rankpulse_primary_session_lists_squares_total", ranker, market, extra)
    s = counter(final, "rankpulse_primary_sessions_total", ranker, market, extra)
    return mean, max(ss - 2 * mean * sn + mean * mean * nn, 0.0) / n * s / (s - 1)


def lists_at(prom, ranker, market, t):
    q = urllib.parse.urlencode({"query": f'rankpulse_ndcg_count{{k="10",ranker="{ranker}",market="{market}"}}', "time": t})
    with urllib.request.urlopen(f"{prom.url}/api/v1/query?{q}", timeout=60) as r:
        result = json.load(r)["data"]["result"]
    return float(result[0]["value"][1]) if result else float("nan")


def in_market(fired, market):
    """An alert's firing times in a market, whatever its other labels."""
    return [t for (_, m), ts in fired.items() if m == market for t in ts]


def percentile(values, p):
    values = sorted(values)
    return values[max(0, math.ceil(len(values) * p) - 1)]


def report(case, prom, fired, final, markets, days, seed):
    lines = []
    worse = fired.get("RankpulseCandidateWorseThanControl", {})
    interleaving = fired.get("RankpulseInterleavingCandidateLoses", {})
    quality = fired.get("RankpulseQualityDrop", {})
    result = {"case": case, "days": days}
    if case in ("aa", "smoke"):
        ms = [f"m{i}" for i in range(1, markets + 1)] if case == "aa" else ["saa"]
        month_end = START + min(days, 30) * 86400
        paged = [m for m in ms if any(t < month_end for t in in_market(worse, m))]
        il = [m for m in ms if any(t < month_end for t in interleaving.get(("interleaved", m), []))]
        result["comparison_months_paged"] = [len(paged), len(ms)]
        result["interleaving_months_paged"] = [len(il), len(ms)]
        lines.append(f"A/A RankpulseCandidateWorseThanControl: {len(paged)} of {len(ms)} experiments paged within 30 days {paged}")
        lines.append(f"A/A RankpulseInterleavingCandidateLoses: {len(il)} of {len(ms)} experiments paged within 30 days {il}")
        if days > 14:
            series = [(r, m) for m in ms for r in ("control", "candidate", "interleaved")]
            pages = sum(len(quality.get(k, [])) for k in series)
            ranker_days = len(series) * (days - 14)
            result["quality_false_pages"] = [pages, ranker_days]
            lines.append(
                f"no change RankpulseQualityDrop: {pages} pages in {ranker_days} ranker-days from day 14 "
                f"({90 * pages / ranker_days:.2f} per 90 days)"
            )
    if case in ("worse", "smoke"):
        groups = [(2, [f"w2-{i}" for i in range(1, markets + 1)]), (10, [f"w10-{i}" for i in range(1, markets + 1)])]
        if case == "smoke":
            groups = [(10, ["s10"])]
        for pct, ms in groups:
            deltas, variances, hours, lists = [], [], [], []
            for m in ms:
                mc, vc = robust_variance(final, "control", m)
                mb, vb = robust_variance(final, "candidate", m)
                deltas.append(mc - mb)
                variances.append(vc + vb)
                t = sorted(in_market(worse, m))
                start = START + (launch(int(m.split("-")[1]), markets) * 86400 if case == "worse" else 0)
                hours.append((t[0] - start) / 3600 if t else math.inf)
                lists.append(lists_at(prom, "candidate", m, t[0]) if t else math.inf)
            delta = sum(deltas) / len(deltas)
            fixed = Z_SUM**2 * (sum(variances) / len(variances)) / delta**2
            rate = 37.5 * 60  # the model's mean lists per hour per arm (rankpulse_testkit::traffic)
            med, p90 = percentile(lists, 0.5), percentile(lists, 0.9)
            result[f"worse{pct}"] = {
                "delta": delta, "fixed_lists": fixed, "fixed_hours": fixed / rate,
                "hours": hours, "lists": lists, "median_ratio": med / fixed, "p90_ratio": p90 / fixed,
            }
            lines.append(
                f"candidate {pct}% worse (δ = {delta:.4f}): fixed horizon {fixed:.0f} lists per arm (~{fixed / rate:.1f} h); "
                f"paged in {len(ms) - sum(math.isinf(h) for h in hours)} of {len(ms)} markets, median {percentile(hours, 0.5):.1f} h "
                f"= {med:.0f} lists ({med / fixed:.2f}x), 90% by {percentile(hours, 0.9):.1f} h ({p90 / fixed:.2f}x)"
            )
        if case == "smoke":
            result["smoke_aa_quiet"] = not in_market(worse, "saa") and not interleaving.get(("interleaved", "saa"))
    if case == "quality":
        for pct in (5, 10):
            delays = []
            for i in range(markets):
                drop = START + drop_day(i, markets, seed) * 86400
                name = f"drop{pct}-{i}"
                after = [t for t in quality.get((name, "q"), []) if t >= drop]
                before = [t for t in quality.get((name, "q"), []) if t < drop]
                if before:
                    lines.append(f"  {name}: paged before its drop at {[(t - START) / 86400 for t in before]} days")
                delays.append((after[0] - drop) / 3600 if after else math.inf)
            result[f"drop{pct}"] = delays
            lines.append(
                f"quality {pct}% drop: paged in {sum(not math.isinf(d) for d in delays)} of {len(delays)}, "
                f"median {percentile(delays, 0.5):.1f} h, 90% by {percentile(delays, 0.9):.1f} h "
                f"(delays {', '.join(f'{d:.1f}' for d in sorted(delays))})"
            )
    return result, lines


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("case", choices=["aa", "worse", "quality", "smoke"])
    p.add_argument("--markets", type=int, default=3)
    p.add_argument("--days", type=float)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--keep", help="keep the work directory here")
    p.add_argument("--json", help="write the result as JSON here")
    p.add_argument("--reread", action="store_true", help="evaluate the alerts again over the TSDB a --keep run left")
    a = p.parse_args()
    days = a.days or {"aa": 30, "worse": 4, "quality": 16, "smoke": 1}[a.case]
    arms = arms_of(a.case, a.markets, days, a.seed)
    work = a.keep or tempfile.mkdtemp(prefix="rankpulse-alerts-")
    os.makedirs(work, exist_ok=True)
    end = START + int(days * 86400)
    log(f"{a.case}: {len(arms)} arms, {days} days, seed {a.seed}, in {work}")
    t0 = time.monotonic()
    if a.reread:
        final = parse_exposition(os.path.join(work, "final.prom"))
        prom = Prometheus(work)
        prom.start()
        group = needed(next(g for g in yaml.safe_load(open(RULES))["groups"] if g["name"] == GROUP), ALERTS[a.case])
    else:
        history, final, truth = simulate(work, arms, days, a.seed)
        check_truth(final, truth)
        prom, group = backfill(work, history, end, ALERTS[a.case])
    try:
        fired = alerts(prom, group, end)
        result, lines = report(a.case, prom, fired, final, a.markets, days, a.seed)
    finally:
        prom.stop()
    result["seed"] = a.seed
    result["seconds"] = round(time.monotonic() - t0)
    for line in lines:
        print(line)
    print(f"({a.case}, seed {a.seed}: {result['seconds']} s)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
    if not a.keep:
        shutil.rmtree(work)
    if a.case == "smoke":
        ok = result["smoke_aa_quiet"] and result["worse10"]["hours"][0] < math.inf
        sys.exit(0 if ok else f"smoke: expected the 10% worse candidate paged and the A/A pair quiet: {result}")


if __name__ == "__main__":
    main()
