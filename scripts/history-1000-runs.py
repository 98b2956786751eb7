#!/usr/bin/env python3
# Usage: python3 scripts/history-1000-runs.py DIR (from the repository root): DIR/runs/run-0000..0999.
# 1,000 runs of one experiment from the clean-sweep fixture: a flag the sweep does not set
# (max-running-requests) flipped every 25 runs, decode 20% slower while it is 32; three-round
# 2% intervals.
import json, os, sys
src = "crates/report/tests/fixtures/runs/clean-sweep"
root = sys.argv[1]
meta = json.load(open(f"{src}/meta.json"))
points = [json.loads(l) for l in open(f"{src}/points.jsonl") if l.strip()]
for i in range(1000):
    m = json.loads(json.dumps(meta))
    m["experiment"]["name"] = "bench"
    m["started_at"] = "%04d-%02d-%02dT%02d:00:00Z" % (2026 + i // 336, 1 + i // 28 % 12, 1 + i % 28, 0)
    chunk = 64 if (i // 25) % 2 == 0 else 32
    m["experiment"]["server"]["args"]["max-running-requests"] = chunk
    d = f"{root}/runs/run-{i:04d}"
    os.makedirs(d, exist_ok=True)
    json.dump(m, open(f"{d}/meta.json", "w"), indent=2)
    with open(f"{d}/points.jsonl", "w") as f:
        for p in points:
            p = json.loads(json.dumps(p))
            s = p["metrics"].get("decode_tok_s")
            if s:
                mean = s["mean"] * (0.8 if chunk == 32 else 1.0)
                s.update(mean=mean, count=3, std=mean * 0.01, ci95_low=mean * 0.98, ci95_high=mean * 1.02, ci_method="repeats")
            f.write(json.dumps(p) + "\n")
