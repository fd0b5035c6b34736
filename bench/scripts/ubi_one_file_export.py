#!/usr/bin/env python3
"""A one-file OpenSearch UBI `_bulk` export, and the same data as two files.

Writes PREFIX.one.ndjson (an action line before every document; every
ubi_queries document, then every ubi_events document, as OpenSearch tools
export them), PREFIX.queries.ndjson and PREFIX.events.ndjson. Half the
queries carry `query_response_hit_ids`; the others are shown through
`impression` events (0-based ordinals); 0-2 clicks per query. Seeded, so
the files are the same on every machine.

    python3 bench/scripts/ubi_one_file_export.py 400000 /tmp/exp/n400000

docs/performance.md ("A one-file UBI export") measures `rankpulse replay`
on it.
"""
import random, sys, json
n = int(sys.argv[1]); out = sys.argv[2]
random.seed(7)
base = 1767600000000
qs, evs = [], []
for i in range(n):
    t = base + i * 300
    q = {"application":"shop","query_id":f"q{i}","client_id":f"c{i%5000}","user_query":f"q {i}",
         "query_attributes":{"ranker":random.choice(["control","candidate"]),"market":random.choice(["us","de"])},"timestamp":t}
    docs = [f"D{random.randrange(10**6)}" for _ in range(10)]
    hits = random.random() < 0.5
    if hits: q["query_response_hit_ids"] = docs
    qs.append(json.dumps(q))
    if not hits:
        for p, d in enumerate(docs):
            evs.append(json.dumps({"action_name":"impression","query_id":f"q{i}","client_id":f"c{i%5000}","timestamp":t+1,
                 "event_attributes":{"object":{"object_id":d},"position":{"ordinal":p}}}))
    for j in range(random.randrange(3)):
        evs.append(json.dumps({"action_name":"click","query_id":f"q{i}","client_id":f"c{i%5000}","timestamp":t+1000+j,
             "event_attributes":{"object":{"object_id":random.choice(docs)}}}))
with open(out + ".one.ndjson","w") as f:
    for k,q in enumerate(qs): f.write('{"index":{"_index":"ubi_queries","_id":"%d"}}\n%s\n' % (k,q))
    for k,e in enumerate(evs): f.write('{"index":{"_index":"ubi_events","_id":"%d"}}\n%s\n' % (k,e))
with open(out + ".queries.ndjson","w") as f:
    for q in qs: f.write(q+"\n")
with open(out + ".events.ndjson","w") as f:
    for e in evs: f.write(e+"\n")
