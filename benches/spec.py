#!/usr/bin/env python3
"""Speculative-decoding benchmark: sluice with and without its n-gram speculation, and
llama-server without and with its own (`--spec-type ngram-simple`), on the same GGUF, one
server at a time (see benches/served.py, whose helpers this uses).

usage: benches/spec [--only sluice|llama] [--model PATH] [--seed N] [--quick] [--rounds R]

Servers, in this order, R rounds (alternating, so drift hits both alike):
  sluice serve --model M --port P                         (speculation on: the default)
  sluice serve --model M --port P --speculative off
  llama-server -m M -t 2 -np 32 -c 65536 --port P
  llama-server -m M -t 2 -np 32 -c 65536 --spec-type ngram-simple --port P

Workloads (random words, fresh for every round; every server of a round gets the same
prompts, each in a fresh process, so no prompt cache helps), greedy, streamed chat:
  edit:  rewrite a ~200-word block of code with one name changed (max_tokens 256)
  rag:   answer from a ~200-word document, quoting it (max_tokens 192)
  chat:  an open question (max_tokens 128)
each with 1 stream and 4 streams at once (chat: 1 and 32). Reported per (workload,
streams): decode tok/s per stream (tokens after the first / time from the first to the
last, mean over streams) and completion tokens/s over the wall time. For sluice, the
drafted and accepted counters over the run, and how many greedy answers are identical
with and without speculation (they must all be).
Stdlib only.
"""
import argparse, json, os, random, statistics, sys, threading, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from served import CHAT, WORDS, Server, div, log, model_id, stream  # noqa: E402
from prefix import metric  # noqa: E402

LOADS = [("edit", 1), ("edit", 4), ("rag", 1), ("rag", 4), ("chat", 1), ("chat", 32)]
MAX = dict(edit=256, rag=192, chat=128)


def words(rng, n):
    return " ".join(rng.choice(WORDS) for _ in range(n))


def code(rng):
    lines = []
    while sum(len(line.split()) for line in lines) < 200:
        a, b, c, d = (rng.choice(WORDS) for _ in range(4))
        lines += [f"def {a}_{b}({c}, {d}):",
                  f"    total = {c} * 2 + {d}",
                  f"    if total > {rng.randint(2, 99)}:",
                  f"        return {c}_{b}(total - {d})",
                  f"    return [{c}, {d}, total]", ""]
    return "\n".join(lines)


def prompt(kind, rng):
    if kind == "edit":
        src = code(rng)
        old = src.split("(")[1].split(",")[0]
        return (f"Rewrite this code with the parameter `{old}` renamed to `value`. "
                f"Output only the code.\n\n{src}")
    if kind == "rag":
        doc = ". ".join(words(rng, 12).capitalize() for _ in range(16)) + "."
        topic = doc.split()[3]
        return (f"Document:\n{doc}\n\nUsing only the document, quote every sentence that "
                f"mentions \"{topic}\", then summarise the document.")
    return f"Tell me about {words(rng, 3)} and why it matters. {words(rng, 8)}?"


def run_load(base, model, kind, n, prompts):
    res = [{} for _ in range(n)]

    def one(i):
        stream(base, CHAT, dict(model=model, messages=[{"role": "user", "content": prompts[i]}],
                                max_tokens=MAX[kind], temperature=0), res[i])
    ts = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    t0 = time.monotonic()
    [t.start() for t in ts]; [t.join() for t in ts]
    wall = time.monotonic() - t0
    rates, total, texts, errs = [], 0, [], []
    for r in res:
        toks = (r.get("usage") or {}).get("completion_tokens") or len(r["stamps"])
        total += toks
        texts.append(r["text"].get(0, ""))
        if r["err"]:
            errs.append(r["err"])
        if len(r["stamps"]) > 1 and r["stamps"][-1] > r["stamps"][0]:
            rates.append((toks - 1) / (r["stamps"][-1] - r["stamps"][0]))
    return dict(per_stream=statistics.mean(rates) if rates else None,
                total=div(total, wall), tokens=total, texts=texts, err=errs[:1])


def bench(base, rng_seed):
    model = model_id(base)
    stream(base, CHAT, dict(model=model, messages=[{"role": "user", "content": "hi"}],
                            max_tokens=4))
    d0 = metric(base, "sluice_spec_draft_tokens_total")
    a0 = metric(base, "sluice_spec_accepted_tokens_total")
    out = {}
    for kind, n in LOADS:
        rng = random.Random(f"{rng_seed}:{kind}:{n}")
        out[f"{kind}x{n}"] = run_load(base, model, kind, n, [prompt(kind, rng) for _ in range(n)])
    d1 = metric(base, "sluice_spec_draft_tokens_total")
    a1 = metric(base, "sluice_spec_accepted_tokens_total")
    if None not in (d0, d1, a0, a1):
        out["drafted"], out["accepted"] = d1 - d0, a1 - a0
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--only", choices=["sluice", "llama"])
    p.add_argument("--model"); p.add_argument("--sluice-bin"); p.add_argument("--llama-bin")
    p.add_argument("--port", type=int, default=18082)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--seed", type=int, default=int(time.time()))
    a = p.parse_args()
    if a.quick:
        LOADS[:] = [("edit", 1), ("chat", 1)]
    P = str(a.port)
    llama = [a.llama_bin, "-m", a.model, "-t", str(a.threads), "-np", "32", "-c", "65536",
             "--port", P]
    servers = [("sluice", [a.sluice_bin, "serve", "--model", a.model, "--port", P]),
               ("sluice-off", [a.sluice_bin, "serve", "--model", a.model, "--port", P,
                               "--speculative", "off"]),
               ("llama", llama),
               ("llama-ngram", llama + ["--spec-type", "ngram-simple"])]
    runs = {name: [] for name, _ in servers}
    for rnd_ in range(a.rounds):
        seed = f"{a.seed}:{rnd_}"
        for name, cmd in servers:
            if a.only and not name.startswith(a.only):
                continue
            if not cmd[0] or not os.access(cmd[0], os.X_OK):
                runs[name] = "skipped"
                log(f"[{name}] skipped: no executable at {cmd[0]}")
                continue
            with Server(name, cmd, a.port) as s:
                r = bench(s.base, seed)
            runs[name].append(r)
            print(json.dumps(dict(server=name, round=rnd_, seed=seed, results={
                k: ({kk: vv for kk, vv in v.items() if kk != "texts"} if isinstance(v, dict) else v)
                for k, v in r.items()})), flush=True)
    same = total = 0
    if isinstance(runs["sluice"], list) and isinstance(runs["sluice-off"], list):
        for on, off in zip(runs["sluice"], runs["sluice-off"]):
            for k, v in on.items():
                if isinstance(v, dict):
                    pairs = list(zip(v["texts"], off[k]["texts"]))
                    same += sum(x == y for x, y in pairs)
                    total += len(pairs)

    def cell(name, key, field):
        r = runs.get(name)
        if isinstance(r, str) or not r:
            return None
        vals = [x[key][field] for x in r if x.get(key, {}).get(field) is not None]
        return statistics.median(vals) if vals else None

    def f(v):
        return "—" if v is None else f"{v:.1f}"
    lines = ["| workload | sluice | sluice --speculative off | ratio | llama-server | "
             "llama-server ngram-simple |", "|---|---|---|---|---|---|"]
    for kind, n in LOADS:
        key = f"{kind}x{n}"
        for field, what in (("per_stream", "tok/s per stream"), ("total", "tok/s total")):
            on, off = cell("sluice", key, field), cell("sluice-off", key, field)
            ratio = div(on, off)
            lines.append(f"| {kind}, {n} stream{'s' if n > 1 else ''}, {what} | {f(on)} | {f(off)} "
                         f"| {'—' if ratio is None else f'{ratio:.2f}x'} | "
                         f"{f(cell('llama', key, field))} | {f(cell('llama-ngram', key, field))} |")
    acc = [(r.get("drafted"), r.get("accepted")) for r in runs["sluice"]] \
        if isinstance(runs["sluice"], list) else []
    print("\n".join(lines + ["", f"- greedy answers identical with and without speculation: "
                             f"{same} of {total}", f"- sluice drafted/accepted per round: {acc}",
                             f"- seed {a.seed}, {a.rounds} rounds (medians)"]))


if __name__ == "__main__":
    main()
