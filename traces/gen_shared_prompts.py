#!/usr/bin/env python3
"""A synthetic trace with other statistics than Mooncake's: shared system prompts, multi-turn sessions
and a flood of one-shot long prompts (issue 38). Deterministic: same arguments, same bytes.

Writes JSONL in the format of mooncake_synthetic_trace.jsonl (README.md): timestamp (ms),
input_length, output_length, hash_ids (one per 512-token block, chained: equal leading ids mean an
equal prefix).

- A few long system prompts (tool definitions, documents), picked by Zipf popularity, head every
  session: the shared heads the issue describes.
- Sessions of several turns: each turn resends the session's whole history plus a few new blocks.
- One-shot long prompts (fresh ids, never reused), a quarter of the requests by default: the flood
  that pushes a hot working set out of an LRU.

Usage: gen_shared_prompts.py [--requests N] [--seed S] [--one-shot-share F] > trace.jsonl
"""
import argparse
import json
import random
import sys

BLOCK = 512


def generate(requests, seed, one_shot_share, prompts=12, sessions_live=64):
    rng = random.Random(seed)
    next_id = [0]

    def fresh(n):
        ids = list(range(next_id[0], next_id[0] + n))
        next_id[0] += n
        return ids

    system = [fresh(rng.randint(4, 40)) for _ in range(prompts)]
    weights = [1.0 / (i + 1) for i in range(prompts)]  # Zipf, s = 1

    def new_session():
        head = rng.choices(system, weights)[0]
        return {"ids": list(head), "turns_left": rng.randint(1, 10)}

    live = [new_session() for _ in range(sessions_live)]
    t = 0.0
    out = []
    for _ in range(requests):
        t += rng.expovariate(4.0) * 1000  # Poisson arrivals, 4 requests/s
        if rng.random() < one_shot_share:
            ids = fresh(rng.randint(40, 160))
        else:
            k = rng.randrange(len(live))
            s = live[k]
            s["ids"] += fresh(rng.randint(1, 6))  # the previous answer and the new question
            ids = list(s["ids"])
            s["turns_left"] -= 1
            if s["turns_left"] == 0:
                live[k] = new_session()
        tokens = (len(ids) - 1) * BLOCK + rng.randint(1, BLOCK)
        out.append({"timestamp": int(t), "input_length": tokens,
                    "output_length": rng.randint(16, 512), "hash_ids": ids})
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=4000)
    p.add_argument("--seed", type=int, default=38)
    p.add_argument("--one-shot-share", type=float, default=0.25)
    a = p.parse_args()
    for r in generate(a.requests, a.seed, a.one_shot_share):
        sys.stdout.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
