#!/usr/bin/env python3
"""Prefix-cache benchmark: sluice and llama-server on the same GGUF, over HTTP, one server at
a time (see benches/served.py, whose helpers this uses).

usage: benches/prefix [--only sluice|llama] [--model PATH] [--seed N] [--quick]
       benches/prefix.py --url http://127.0.0.1:8080 --name sluice     # a running server

Servers (each with its default memory, so the comparison is of how the KV memory is shared):
  sluice serve --model M --port P                       (32 slots, a pool of 65,536 positions)
  llama-server -m M -t 2 -np 32 -c 65536 --kv-unified --cache-ram 8192 --port P

Scenarios (random words, fresh for every run, so a repeat never helps):
 1. burst: one request with a new ~1,500-token system prompt and a short user message,
    alone (max_tokens 16): its wall time T1. Then 16 chats sent together with ANOTHER new
    ~1,500-token system prompt (the same for all 16) and distinct short user messages: the
    wall time until all 16 are answered, T16. Reported: T16 / T1 (1.0 would be perfect
    sharing; 16 is no sharing on a saturated machine).
 2. convs: 96 conversations with distinct ~400-token histories. Turn 1 of all (32 at a time,
    max_tokens 24), then turn 2 of all (history + answer + a short question). Hit rate of
    turn 2: sluice: Δ sluice_prefix_cache_hits_total / Δ sluice_prefix_cache_queries_total
    from /metrics over turn 2; llama-server: Σ usage.prompt_tokens_details.cached_tokens /
    Σ prompt_tokens (its own count), and turn 2's wall time.
 3. n8: a fresh ~1,000-token prompt, n=1 then (another prompt) n=8, temperature 0.8,
    max_tokens 16: sluice's peak sluice_kv_blocks_used during each (sampled every 20 ms),
    ratio n8/n1 (sluice only: llama-server exports no comparable gauge).
Stdlib only.
"""
import argparse, json, os, random, sys, threading, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from served import (CHAT, CPL, Server, WORDS, div, http, log, model_id, rnd,  # noqa: E402
                    stream)
import urllib.request  # noqa: E402

FULL = dict(burst=16, system_tokens=1500, convs=96, history_tokens=400, clients=32)
QUICK = dict(burst=4, system_tokens=600, convs=12, history_tokens=200, clients=8)


def metric(base, name):
    """Sum of a metric's samples in /metrics (None if absent)."""
    try:
        with urllib.request.urlopen(base + "/metrics", timeout=10) as r:
            text = r.read().decode()
    except OSError:
        return None
    vals = [float(line.split()[-1]) for line in text.splitlines()
            if line.startswith(name) and (line[len(name)] in " {")]
    return sum(vals) if vals else None


class Bench:
    def __init__(self, base, cfg, seed):
        self.base, self.cfg, self.seed = base, cfg, seed
        self.model = model_id(base)

    def words(self, rng, n):
        return " ".join(rng.choice(WORDS) for _ in range(n))

    def chat(self, msgs, max_tokens, res=None):
        return stream(self.base, CHAT, dict(model=self.model, messages=msgs, max_tokens=max_tokens,
                                            temperature=0, cache_prompt=True), res)

    def burst(self, rng):
        c = self.cfg

        def convo(system):
            return [{"role": "system", "content": system},
                    {"role": "user", "content": "Answer briefly: " + self.words(rng, 12)}]
        t0 = time.monotonic()
        alone = self.chat(convo(self.words(rng, c["system_tokens"])), 16)
        t1 = time.monotonic() - t0
        system = self.words(rng, c["system_tokens"])
        res = [{} for _ in range(c["burst"])]
        ts = [threading.Thread(target=self.chat, args=(convo(system), 16, r)) for r in res]
        t0 = time.monotonic()
        [t.start() for t in ts]; [t.join() for t in ts]
        t16 = time.monotonic() - t0
        errs = [r["err"] for r in res + [alone] if r.get("err")]
        return rnd(dict(alone_s=t1, burst_s=t16, burst_over_alone=div(t16, t1),
                        prompt_tokens=(alone["usage"] or {}).get("prompt_tokens"), err=errs[:1]))

    def convs(self, rng):
        c = self.cfg
        convs = [[{"role": "system", "content": "You are a helpful assistant."},
                  {"role": "user", "content": self.words(rng, c["history_tokens"])
                   + " What is this about?"}] for _ in range(c["convs"])]

        def run_all(max_tokens):
            out, lock, nxt = [None] * len(convs), threading.Lock(), [0]

            def client():
                while True:
                    with lock:
                        i = nxt[0]; nxt[0] += 1
                    if i >= len(convs):
                        return
                    out[i] = self.chat(convs[i], max_tokens)
            ts = [threading.Thread(target=client) for _ in range(c["clients"])]
            t0 = time.monotonic()
            [t.start() for t in ts]; [t.join() for t in ts]
            return out, time.monotonic() - t0

        first, _ = run_all(24)
        for m, r in zip(convs, first):
            m += [{"role": "assistant", "content": r["text"].get(0, "")},
                  {"role": "user", "content": "And then? " + self.words(rng, 6)}]
        q0 = metric(self.base, "sluice_prefix_cache_queries_total")
        h0 = metric(self.base, "sluice_prefix_cache_hits_total")
        second, wall = run_all(8)
        q1 = metric(self.base, "sluice_prefix_cache_queries_total")
        h1 = metric(self.base, "sluice_prefix_cache_hits_total")
        usage = [r["usage"] or {} for r in second]
        prompt = sum(u.get("prompt_tokens") or 0 for u in usage)
        cached = sum((u.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
                     for u in usage)
        rate = div(h1 - h0, q1 - q0) if None not in (q0, q1, h0, h1) else div(cached, prompt)
        errs = [r["err"] for r in first + second if r.get("err")]
        return rnd(dict(turn2_hit_rate=rate, turn2_wall_s=wall, turn2_prompt_tokens=prompt,
                        errors=len(errs), err=errs[:1]))

    def n8(self, rng):
        if metric(self.base, "sluice_kv_blocks_used") is None:
            return dict(peak_n8_over_n1="not exported")
        out = {}
        for n in (1, 8):
            peak, done = [0.0], threading.Event()

            def watch():
                while not done.is_set():
                    peak[0] = max(peak[0], metric(self.base, "sluice_kv_blocks_used") or 0)
                    time.sleep(0.02)
            w = threading.Thread(target=watch)
            w.start()
            r = stream(self.base, CPL, dict(model=self.model, prompt=self.words(rng, 1000), n=n,
                                            temperature=0.8, top_p=0.95, max_tokens=16))
            done.set(); w.join()
            out[f"peak_blocks_n{n}"] = peak[0]
            out[f"err_n{n}"] = r["err"]
        out["peak_n8_over_n1"] = div(out["peak_blocks_n8"], out["peak_blocks_n1"])
        return rnd(out)

    def run(self):
        def rng(name):
            return random.Random(f"{self.seed}:{name}")
        self.chat([{"role": "user", "content": "warm up"}], 4)
        return dict(burst=self.burst(rng("burst")), convs=self.convs(rng("convs")),
                    n8=self.n8(rng("n8")))


ROWS = [("burst", "alone_s", "1. one request, new 1,500-token system prompt (s)"),
        ("burst", "burst_s", "1. 16 together, one new system prompt (s)"),
        ("burst", "burst_over_alone", "1. 16 together / one alone"),
        ("convs", "turn2_hit_rate", "2. 96 conversations, turn 2 prefix hit rate"),
        ("convs", "turn2_wall_s", "2. turn 2 of all 96 (s)"),
        ("n8", "peak_n8_over_n1", "3. peak KV blocks, n=8 / n=1")]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--only", choices=["sluice", "llama"])
    p.add_argument("--model"); p.add_argument("--sluice-bin"); p.add_argument("--llama-bin")
    p.add_argument("--sluice-port", type=int, default=18080)
    p.add_argument("--llama-port", type=int, default=18081)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--url"); p.add_argument("--name", default="server")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--seed", type=int, default=int(time.time()))
    a = p.parse_args()
    cfg = dict(QUICK if a.quick else FULL)
    results = {}
    if a.url:
        results[a.name] = Bench(a.url.rstrip("/"), cfg, a.seed).run()
    else:
        runs = [("sluice", a.sluice_bin, a.sluice_port,
                 lambda b, P: [b, "serve", "--model", a.model, "--port", str(P)]),
                ("llama-server", a.llama_bin, a.llama_port,
                 lambda b, P: [b, "-m", a.model, "-t", str(a.threads), "-np", "32",
                               "-c", str(32 * 2048), "--kv-unified", "--cache-ram", "8192",
                               "--port", str(P)])]
        for name, binary, port, cmd in runs:
            if a.only and not name.startswith(a.only):
                continue
            if not binary or not os.access(binary, os.X_OK):
                results[name] = "skipped"
                log(f"[{name}] skipped: no executable at {binary}")
                continue
            with Server(name, cmd(binary, port), port) as s:
                results[name] = Bench(s.base, cfg, a.seed).run()
    for name, r in results.items():
        print(json.dumps(dict(server=name, seed=a.seed, config=cfg, results=r)), flush=True)
    lines = ["| measurement | sluice | llama-server |", "|---|---|---|"]
    for scen, key, label in ROWS:
        cells = []
        for name in ("sluice", "llama-server"):
            r = results.get(name)
            v = r if isinstance(r, str) else (r or {}).get(scen, {}).get(key)
            cells.append("—" if v is None else (f"{v:.3f}" if isinstance(v, float) else str(v)))
        lines.append(f"| {label} | {cells[0]} | {cells[1]} |")
    print("\n".join(lines + ["", f"- seed {a.seed}; config {json.dumps(cfg)}"]))


if __name__ == "__main__":
    main()
