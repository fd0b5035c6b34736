#!/usr/bin/env python3
"""Writes a replay file of search sessions: 150,000 lists of 10 scored
results and 3 judgments 0.5-1.9 s later, in sessions of 1-10 searches
(two rankers, four markets), sorted by event time. What docs/performance.md
measures `rankpulse replay` on (the session ledger's cost among others).

    python3 bench/scripts/sessions_mix.py > /tmp/sessions.jsonl
"""
import json
import random
import sys

random.seed(7)
T0 = 1_763_780_000_000
events = []
lists = session_no = 0
t = T0
while lists < 150_000:
    session = f"s{session_no}"
    session_no += 1
    ranker = random.choice(["control", "candidate"])
    market = random.choice(["us", "de", "jp", "br"])
    for q in range(random.randint(1, 10)):
        t += random.randint(1, 6)
        results = [
            {"doc_id": f"d{random.randint(0, 5000)}", "position": p + 1, "score": round(random.random(), 4)}
            for p in range(10)
        ]
        events.append((t, json.dumps({
            "type": "impression", "event_id": f"i{lists}", "session_id": session, "query_id": f"q{q}",
            "timestamp": t, "results": results, "dimensions": {"ranker": ranker, "market": market},
        })))
        for j in range(3):
            tj = t + random.randint(500, 1900)
            events.append((tj, json.dumps({
                "type": "judgment", "event_id": f"j{lists}-{j}", "session_id": session, "query_id": f"q{q}",
                "doc_id": results[random.randint(0, 9)]["doc_id"], "grade": random.randint(0, 3), "timestamp": tj,
            })))
        lists += 1
events.sort(key=lambda e: e[0])
out = sys.stdout
for _, e in events:
    out.write(e + "\n")
