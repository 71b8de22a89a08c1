#!/usr/bin/env python3
"""Prototypes of the eviction policies tried for issue 38 (docs/replay.md "Eviction policy").

Quick models over a trace's hash ids with the replay's contract (a request finds its leading cached
blocks, then every block is referenced: hits and saves), token-weighted prefix hits, capacities in
512-token blocks. They chose the policy; the figures in docs/replay.md for LRU, the chosen policy and
Belady come from `kvtier replay`, which runs the tiers' own code. Exact sets stand in for the Bloom
filters here. Usage: policy_prototypes.py TRACE.jsonl [CAPACITY_TOKENS,...]
"""
import heapq
import json
import sys
from collections import Counter, OrderedDict

BLOCK = 512


def load(path):
    return [(r["input_length"], r["hash_ids"]) for r in map(json.loads, open(path))]


def replay(trace, policy):
    hit = total = 0
    for tokens, ids in trace:
        total += tokens
        k = 0
        while k < len(ids) and policy.has(ids[k]):
            k += 1
        hit += min(k * BLOCK, tokens)
        policy.request(ids, k)
    return hit / total


class Lru:
    def __init__(self, cap):
        self.cap, self.c = cap, OrderedDict()

    def has(self, b):
        return b in self.c

    def request(self, ids, k):
        for b in ids:
            if b in self.c:
                self.c.move_to_end(b)
                continue
            if len(self.c) >= self.cap:
                self.c.popitem(last=False)
            self.c[b] = 1


def belady(trace, cap):
    """MIN with bypass on block references, prefix-hit accounting (src/eval/replay/belady.h)."""
    refs = [b for _, ids in trace for b in ids]
    never = len(refs) + 1
    nxt, last = [0] * len(refs), {}
    for i in range(len(refs) - 1, -1, -1):
        nxt[i], last[refs[i]] = last.get(refs[i], never), i
    cur, heap, hit, total, p = {}, [], 0, 0, 0
    for tokens, ids in trace:
        total += tokens
        k = 0
        while k < len(ids) and ids[k] in cur:
            k += 1
        hit += min(k * BLOCK, tokens)
        for b in ids:
            n, p = nxt[p], p + 1
            if b not in cur and len(cur) >= cap:
                while cur.get(heap[0][1]) != -heap[0][0]:
                    heapq.heappop(heap)
                if n >= -heap[0][0]:
                    continue  # bypass
                del cur[heapq.heappop(heap)[1]]
            cur[b] = n
            heapq.heappush(heap, (-n, b))
    return hit / total


class Slru:
    """Probation (new) and protected (hit) LRU segments; `prob` is probation's share."""

    def __init__(self, cap, prob):
        self.cap, self.pmax = cap, max(1, int(cap * (1 - prob)))
        self.P, self.M = OrderedDict(), OrderedDict()

    def has(self, b):
        return b in self.P or b in self.M

    def request(self, ids, k):
        for b in ids:
            if self.has(b):
                self.P.pop(b, None)
                self.M[b] = 1
                self.M.move_to_end(b)
                while len(self.M) > self.pmax:
                    self.P[self.M.popitem(last=False)[0]] = 1
                continue
            if len(self.P) + len(self.M) >= self.cap:
                (self.P if self.P else self.M).popitem(last=False)
            self.P[b] = 1


class Lfu:
    """Evict the least referenced block (counts kept for every block ever seen), ties by recency;
    `oracle` uses each block's count over the whole trace instead."""

    def __init__(self, cap, oracle=None):
        self.cap, self.oracle, self.seen, self.st, self.h, self.t = cap, oracle, Counter(), {}, [], 0

    def has(self, b):
        return b in self.st

    def score(self, b):
        return (self.oracle[b] if self.oracle else self.seen[b], self.t)

    def request(self, ids, k):
        for b in ids:
            self.t += 1
            self.seen[b] += 1
            if b not in self.st and len(self.st) >= self.cap:
                while self.st.get(self.h[0][1]) != self.h[0][0]:
                    heapq.heappop(self.h)
                if self.oracle and self.score(b) <= self.h[0][0]:
                    break  # the oracle bypasses what it knows is worth less
                del self.st[heapq.heappop(self.h)[1]]
            v = self.score(b)
            self.st[b] = v
            heapq.heappush(self.h, (v, b))


class TinyLfu:
    """LRU main with TinyLFU admission: a new block replaces the LRU victim only when referenced more
    often (counts halved every 10 x capacity references)."""

    def __init__(self, cap):
        self.cap, self.M, self.f, self.n = cap, OrderedDict(), Counter(), 0

    def has(self, b):
        return b in self.M

    def request(self, ids, k):
        for b in ids:
            self.f[b] += 1
            self.n += 1
            if self.n >= 10 * self.cap:
                self.n = 0
                self.f = Counter({x: c // 2 for x, c in self.f.items() if c // 2})
            if b in self.M:
                self.M.move_to_end(b)
            elif len(self.M) < self.cap:
                self.M[b] = 1
            elif self.f[b] > self.f[next(iter(self.M))]:
                self.M.popitem(last=False)
                self.M[b] = 1


class Ghost:
    """Two sets taking turns, `half` evictions each: the Bloom pair of core/eviction_policy.h."""

    def __init__(self, half):
        self.half, self.a, self.b = max(1, half), set(), set()

    def add(self, x):
        self.a.add(x)
        if len(self.a) >= self.half:
            self.b, self.a = self.a, set()

    def __contains__(self, x):
        return x in self.a or x in self.b


class Window:
    """The chosen policy (core/eviction_policy.h): window (share w) + main + ghost (g x capacity);
    main's tail goes first when older than `stale` x the window tail's age (None: never)."""

    def __init__(self, cap, w=0.02, g=8, stale=16):
        self.cap, self.wmax, self.stale, self.t = cap, max(1, int(cap * w)), stale, 0
        self.W, self.M, self.G = OrderedDict(), OrderedDict(), Ghost(int(cap * g / 2))

    def has(self, b):
        return b in self.W or b in self.M

    def evict(self):
        from_w = len(self.W) > self.wmax or not self.M
        if from_w and self.stale and self.M:
            age_w = self.t - next(iter(self.W.values()))
            age_m = self.t - next(iter(self.M.values()))
            from_w = age_m <= self.stale * age_w
        self.G.add((self.W if from_w else self.M).popitem(last=False)[0])

    def request(self, ids, k):
        for b in ids:
            self.t += 1
            if b in self.M:
                self.M.move_to_end(b)
                self.M[b] = self.t
            elif b in self.W:
                del self.W[b]
                self.M[b] = self.t
            else:
                seen = b in self.G
                while len(self.W) + len(self.M) >= self.cap:
                    self.evict()
                (self.M if seen else self.W)[b] = self.t


def main():
    trace = load(sys.argv[1])
    caps = [float(x) for x in sys.argv[2].split(",")] if len(sys.argv) > 2 else [1e6, 3e6, 10e6]
    counts = Counter(b for _, ids in trace for b in ids)
    policies = {
        "slru-20/80": lambda c: Slru(c, 0.2),
        "slru-50/50": lambda c: Slru(c, 0.5),
        "lfu": lambda c: Lfu(c),
        "oracle-lfu": lambda c: Lfu(c, counts),
        "tinylfu": lambda c: TinyLfu(c),
        "window-no-stale": lambda c: Window(c, stale=None),
        "window": lambda c: Window(c),
    }
    print("capacity_tokens lru belady " + " ".join(policies) + "  (each: ratio/share of LRU-Belady gap closed)")
    for tokens in caps:
        cap = int(tokens // BLOCK)
        lru, opt = replay(trace, Lru(cap)), belady(trace, cap)
        cells = []
        for make in policies.values():
            r = replay(trace, make(cap))
            cells.append(f"{r:.4f}/{(r - lru) / (opt - lru) if opt > lru else 0:+.2f}")
        print(f"{int(tokens)} {lru:.4f} {opt:.4f} " + " ".join(cells), flush=True)


if __name__ == "__main__":
    main()
