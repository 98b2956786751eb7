#!/usr/bin/env python3
"""Writes the small generated traces the trace examples replay (deterministic: seed 36).

  python3 experiments/data/make-agentic-traces.py

agentic-sessions.jsonl: 12 agent sessions, one a line, in the kv-cache-tester format of
SemiAnalysis's AgentX traces (AIPerf's `weka` trace): each request's `hash_ids` are its whole
context in blocks of 64 tokens, growing turn by turn (the previous turn's blocks, then the
reply's and the tool result's); think/tool time between turns; some sessions spawn two
subagents side by side (each its own prefix); session s11 grows past 4,096 tokens, the context
of the example's server, so its replay stops there with the reason said.

mooncake-sample.jsonl: 60 Mooncake-style requests (timestamp ms, input_length, output_length,
hash_ids in blocks of 512): 6 conversations whose requests share their leading blocks, as in
Mooncake's published trace.
"""
import json
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))
BLOCK = 64


def session(rng, k):
    next_id = [1000]

    def fresh(n):
        ids = list(range(next_id[0], next_id[0] + n))
        next_id[0] += n
        return ids

    system = fresh(8)  # a 512-token system prompt and tools
    context = system + fresh(rng.randint(2, 6))
    requests, t = [], 0.0
    turns = 14 if k == 11 else rng.randint(5, 9)
    grow = (6, 10) if k == 11 else (1, 5)
    for turn in range(turns):
        last = rng.randint(1, BLOCK)
        n_in = (len(context) - 1) * BLOCK + last
        out = rng.randint(16, 96)
        api = round(0.05 + n_in / 40000 + out / 400, 3)
        think = round(rng.uniform(0.2, 1.2), 3)
        req = {"t": round(t, 3), "type": "s", "model": "demo-model", "in": n_in,
               "out": out, "hash_ids": list(context), "input_types": ["text"],
               "output_types": ["text"], "stop": "tool_use" if turn < turns - 1 else "end_turn",
               "api_time": api}
        if turn > 0:
            req["think_time"] = think
        requests.append(req)
        t += api + think
        if turn == 2 and k % 3 == 0:
            agents, start = [], t
            for a in range(2):
                sub = fresh(4)
                inner, st = [], start
                for j in range(2):
                    sub = sub + fresh(rng.randint(1, 3))
                    s_in = (len(sub) - 1) * BLOCK + rng.randint(1, BLOCK)
                    s_out = rng.randint(16, 64)
                    s_api = round(0.05 + s_in / 40000 + s_out / 400, 3)
                    inner.append({"t": round(st, 3), "type": "s", "model": "demo-model",
                                  "in": s_in, "out": s_out, "hash_ids": list(sub),
                                  "stop": "tool_use" if j == 0 else "end_turn",
                                  "api_time": s_api})
                    st += s_api + 0.3
                agents.append({"t": round(start, 3), "type": "subagent",
                               "agent_id": f"agent_{k:02d}{a}", "subagent_type": "Explore",
                               "duration_ms": int((st - start) * 1000), "status": "completed",
                               "requests": inner, "models": ["demo-model"]})
            requests.extend(agents)
            t = max(a["t"] + a["duration_ms"] / 1000 for a in agents) + 0.2
        # The reply and the tool's result join the context.
        context = context + fresh(rng.randint(*grow))
    return {"id": f"s{k:02d}", "models": ["demo-model"], "block_size": BLOCK,
            "hash_id_scope": "local", "tool_tokens": 256, "system_tokens": 256,
            "requests": requests}


def mooncake(rng):
    lines, ts, next_id = [], 0, [0]

    def fresh(n):
        ids = list(range(next_id[0], next_id[0] + n))
        next_id[0] += n
        return ids

    chats = [fresh(rng.randint(1, 3)) for _ in range(6)]
    for _ in range(60):
        c = rng.randrange(6)
        chats[c] = chats[c] + fresh(rng.randint(0, 1))
        ids = list(chats[c])
        n_in = (len(ids) - 1) * 512 + rng.randint(1, 512)
        lines.append({"timestamp": ts, "input_length": n_in,
                      "output_length": rng.randint(8, 48), "hash_ids": ids})
        ts += rng.randint(20, 120)
    return lines


def main():
    rng = random.Random(36)
    with open(os.path.join(HERE, "agentic-sessions.jsonl"), "w") as f:
        for k in range(12):
            f.write(json.dumps(session(rng, k), separators=(",", ":")) + "\n")
    with open(os.path.join(HERE, "mooncake-sample.jsonl"), "w") as f:
        for line in mooncake(rng):
            f.write(json.dumps(line, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
