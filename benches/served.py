#!/usr/bin/env python3
"""Served benchmark: sluice and llama.cpp's llama-server on the same GGUF, over HTTP.

usage: benches/served [--only sluice|llama] [--model PATH] [--quick] [--seed N] [--repeats R]
       benches/served.py --url http://127.0.0.1:8080 --name sluice [--quick]   # a running server

`benches/served` finds the binaries and the default model (scripts/fetch-model) and runs this
script, which starts ONE server at a time, benchmarks it, stops it (and waits for it to exit)
before starting the next: on a small machine a second idle-but-loaded server skews results.
  sluice serve --model M --port P --slots 32 --context 2048
  llama-server -m M -t 2 -np 32 -c 65536 --port P        (2048 positions per slot)
A missing binary is reported as skipped, by name. Stdlib only; nothing outside the repo is read.

Output: one JSON line per (server, scenario) on stdout, then a markdown table (sluice |
llama-server | sluice/llama-server). Progress and server log paths go to stderr.

Scenarios (every prompt is random words, fresh per request, so no prompt cache helps):
 1. throughput: 32 closed-loop streaming clients, /v1/completions, ~130-token prompts, 64 new
    tokens (ignore_eos), 64 requests; greedy (temperature 0) then sampled (0.8, top_p 0.95).
    tok/s = completion tokens (from usage, else counted) / wall time; sampled/greedy ratio.
 2. hol (head of line): 8 streams generate 400 tokens each; once all are streaming, +1 s, one
    ~1,500-token prompt (max_tokens 16) is sent. Worst inter-token gap of the 8 streams in the
    window [send, its first token + 1 s] (a gap counts if it overlaps the window), the long
    prompt's TTFT under load, then (streams finished, server idle) a fresh same-length prompt's
    TTFT alone; ratio loaded/alone. itl_p50_before is the streams' typical gap before the send.
 3. chat: /v1/chat/completions, fresh ~1,500-token history (system + long user message), turn 1
    streamed, max_tokens 32: TTFT1; turn 2 = same messages + the assistant's text + a short user
    message: TTFT2; ratio TTFT2/TTFT1 (< 1 means the server reused the shared prefix).
 4. n: streamed /v1/completions, fresh ~1,000-token prompt, temperature 0.8, max_tokens 16, n=1
    and n=8 (another fresh prompt): TTFT = first chunk with text for any choice; ratio n8/n1.
    If an n=8 stream shows at most one choice index, or errors, it is reported "unsupported".
Scenarios 2-4 run --repeats times (fresh prompts each) and report medians; raw values are kept.

Seeds: --seed (default: the clock) seeds one generator per scenario; both servers get the same
prompts, which is fair: each server is a fresh process, and within one process no prompt repeats.
Prompt sizes: words are sized in tokens with the server's POST /tokenize (sluice: {"prompt"} ->
count, llama-server: {"content"} -> tokens); the word list here is ~1.0 token/word for SmolLM2.

Fairness notes (checked against llama-server 0.6.0-dev, the llama.cpp-noamx build):
 - llama-server honours per-request `ignore_eos` (finish_reason "length", exact completion_tokens)
   on both endpoints, and `n` > 1 on /v1/completions (choices interleaved by index in the
   stream, all starting together). Results count finish_reason != "length" as `not_length`.
 - `-np 32 -c 65536` gives llama-server 32 slots of 2048 positions (kv_unified false), like
   sluice's --slots 32 --context 2048. Its `cache_prompt` (default on) and slot affinity let
   turn 2 of scenario 3 reuse the KV; `cache_prompt: true` is sent anyway (sluice ignores it).
   It reports `usage.prompt_tokens_details.cached_tokens` (cached_tokens2); sluice may not.
 - Readiness: sluice answers /health 200 while still loading, so /ready is polled (llama-server
   has no /ready: 404, then its /health, which is 503 until loaded).
 - The client shares the machine (Python threads; light, but not free); both servers pay it.
   llama.cpp's threads spin-wait: in a smoke run beside a cargo build llama-server slowed down
   far more than sluice, so only a quiet machine gives a fair comparison.
"""
import argparse, json, os, random, socket, statistics, subprocess, sys, tempfile, threading, time
import urllib.error, urllib.request

WORDS = """time year people way day man thing woman life child world school state family student
group country problem hand part place case week company system program question work government
number night point home water room mother area money story fact month lot right study book eye job
word business issue side kind head house service friend father power hour game line end member law
car city community name president team minute idea body information back parent face others level
office door health person art war history party result change morning reason research girl guy moment
air teacher force education foot boy age policy process music market sense nation plan college
interest death experience effect use class control care field development role effort rate heart drug
show leader light voice wife police mind price report decision son view relationship town road arm
difference value building action model season society tax director position player record paper space
ground form event official matter center couple site project activity star table need court oil
situation cost industry figure street image phone data picture practice piece land product doctor wall
patient worker news test movie north love support technology step baby computer type attention film
tree source organization hair window evidence population green river summer garden bridge""".split()

FULL = dict(clients=32, requests=64, prompt_tokens=130, new_tokens=64, hol_streams=8,
            hol_tokens=400, long_tokens=1500, n_tokens=1000, repeats=3)
QUICK = dict(clients=8, requests=16, prompt_tokens=130, new_tokens=32, hol_streams=4,
             hol_tokens=160, long_tokens=1500, n_tokens=1000, repeats=1)
CPL, CHAT = "/v1/completions", "/v1/chat/completions"


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def http(url, body=None, timeout=30):
    """(status, parsed JSON or None); status None when the server cannot be reached."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, None
    except (OSError, ValueError):
        return None, None


def stream(base, path, body, res=None, timeout=600):
    """One streamed request. `res` fills in as chunks arrive (other threads may watch it):
    t0, stamps (monotonic time of each chunk with text), idx (its choice index), text per
    index, finish per index, usage, err, t1."""
    res = {} if res is None else res
    res.update(t0=time.monotonic(), stamps=[], idx=[], text={}, finish={}, usage=None, err=None)
    body = dict(body, stream=True, stream_options={"include_usage": True})
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            for line in r:
                now = time.monotonic()
                if not line.startswith(b"data: {"):
                    continue
                d = json.loads(line[6:])
                if "error" in d:
                    raise RuntimeError(d["error"])
                if d.get("usage"):
                    res["usage"] = d["usage"]
                for c in d.get("choices") or []:
                    i = c.get("index", 0)
                    piece = c["text"] if "text" in c else (c.get("delta") or {}).get("content")
                    if piece:
                        res["text"][i] = res["text"].get(i, "") + piece
                        res["idx"].append(i)
                        res["stamps"].append(now)
                    if c.get("finish_reason"):
                        res["finish"][i] = c["finish_reason"]
    except urllib.error.HTTPError as e:
        res["err"] = f"HTTP {e.code}: {e.read()[:200]!r}"
    except Exception as e:  # noqa: BLE001 - every failure is reported
        res["err"] = repr(e)[:300]
    res["t1"] = time.monotonic()
    return res


def ttft(r):
    return r["stamps"][0] - r["t0"] if r["stamps"] and not r["err"] else None


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))] if xs else None


def div(a, b):
    return a / b if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else None


def rnd(d):
    return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in d.items()}


class Bench:
    def __init__(self, base, model, cfg, seed):
        self.base, self.model, self.cfg, self.seed = base, model, cfg, seed
        self.tpw = self.calibrate()

    def calibrate(self):
        """Tokens per word of the word list, from POST /tokenize (1.0 when unavailable)."""
        text = " ".join(random.Random(0).choice(WORDS) for _ in range(500))
        for body in ({"prompt": text}, {"content": text}):
            st, d = http(self.base + "/tokenize", body)
            n = d.get("count", len(d.get("tokens") or [])) if st == 200 and isinstance(d, dict) else 0
            if n:
                return n / 500
        return 1.0

    def words(self, rng, tokens):
        return " ".join(rng.choice(WORDS) for _ in range(max(1, round(tokens / self.tpw))))

    def req(self, **kw):
        return dict(model=self.model, cache_prompt=True, **kw)

    def throughput(self, rng, temperature):
        c = self.cfg
        prompts = [self.words(rng, c["prompt_tokens"]) for _ in range(c["requests"])]
        out, lock, nxt = [], threading.Lock(), [0]

        def client():
            while True:
                with lock:
                    i = nxt[0]; nxt[0] += 1
                if i >= len(prompts):
                    return
                out.append(stream(self.base, CPL, self.req(
                    prompt=prompts[i], max_tokens=c["new_tokens"], temperature=temperature,
                    top_p=0.95 if temperature else 1.0, ignore_eos=True)))

        t0 = time.monotonic()
        ts = [threading.Thread(target=client) for _ in range(c["clients"])]
        [t.start() for t in ts]; [t.join() for t in ts]
        wall = time.monotonic() - t0
        ok = [r for r in out if not r["err"]]
        toks = sum((r["usage"] or {}).get("completion_tokens") or len(r["stamps"]) for r in ok)
        itl = [b - a for r in ok for a, b in zip(r["stamps"], r["stamps"][1:])]
        return rnd(dict(temperature=temperature, clients=c["clients"], requests=len(out),
                        errors=len(out) - len(ok), tok_per_s=toks / wall, wall_s=wall,
                        ttft_p50=pct([ttft(r) for r in ok if r["stamps"]], 50),
                        itl_p50=pct(itl, 50), itl_p99=pct(itl, 99),
                        not_length=sum(r["finish"].get(0) != "length" for r in ok),
                        first_error=next((r["err"] for r in out if r["err"]), None)))

    def hol_once(self, rng):
        c = self.cfg
        shorts = [self.words(rng, c["prompt_tokens"]) for _ in range(c["hol_streams"])]
        long_p, alone_p = self.words(rng, c["long_tokens"]), self.words(rng, c["long_tokens"])
        res = [{"stamps": []} for _ in shorts]
        ts = [threading.Thread(target=stream, args=(self.base, CPL, self.req(
            prompt=p, max_tokens=c["hol_tokens"], temperature=0, ignore_eos=True), r))
            for p, r in zip(shorts, res)]
        [t.start() for t in ts]
        deadline = time.monotonic() + 300
        while not all(r["stamps"] or r.get("err") for r in res) and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(1.0)
        L = stream(self.base, CPL, self.req(prompt=long_p, max_tokens=16, temperature=0))
        [t.join() for t in ts]
        send = L["t0"]
        end = (L["stamps"][0] if L["stamps"] else L["t1"]) + 1.0
        gaps = [b - a for r in res for a, b in zip(r["stamps"], r["stamps"][1:]) if b > send and a < end]
        before = [b - a for r in res for a, b in zip(r["stamps"], r["stamps"][1:]) if b <= send]
        time.sleep(1.0)
        A = stream(self.base, CPL, self.req(prompt=alone_p, max_tokens=16, temperature=0))
        errs = [r["err"] for r in res + [L, A] if r.get("err")]
        return dict(gap_max_s=max(gaps) if gaps else None, itl_p50_before=pct(before, 50),
                    ttft_loaded=ttft(L), ttft_alone=ttft(A),
                    ended_early=sum(r["t1"] < end for r in res),
                    prompt_tokens=(L["usage"] or {}).get("prompt_tokens"), err=errs[:1])

    def chat_once(self, rng):
        c = self.cfg
        sys_words = 100
        msgs = [{"role": "system", "content": "You are a careful assistant. Context: "
                 + self.words(rng, sys_words)},
                {"role": "user", "content": "Summarise these notes in one sentence: "
                 + self.words(rng, c["long_tokens"] - sys_words - 30)}]
        r1 = stream(self.base, CHAT, self.req(messages=msgs, max_tokens=32, temperature=0,
                                              ignore_eos=True))
        msgs2 = msgs + [{"role": "assistant", "content": r1["text"].get(0, "")},
                        {"role": "user", "content": "Now say more about " + self.words(rng, 8)}]
        time.sleep(0.3)
        r2 = stream(self.base, CHAT, self.req(messages=msgs2, max_tokens=16, temperature=0))
        u1, u2 = r1["usage"] or {}, r2["usage"] or {}
        return dict(ttft1=ttft(r1), ttft2=ttft(r2), prompt_tokens1=u1.get("prompt_tokens"),
                    prompt_tokens2=u2.get("prompt_tokens"),
                    cached_tokens2=(u2.get("prompt_tokens_details") or {}).get("cached_tokens"),
                    err=[r["err"] for r in (r1, r2) if r["err"]][:1])

    def n_once(self, rng):
        out = {}
        for n in (1, 8):
            r = stream(self.base, CPL, self.req(prompt=self.words(rng, self.cfg["n_tokens"]), n=n,
                                                temperature=0.8, top_p=0.95, max_tokens=16))
            choices = len(set(r["idx"]))
            first = {}
            for t, i in zip(r["stamps"], r["idx"]):
                first.setdefault(i, t)
            out[f"ttft_n{n}"] = ttft(r) if (n == 1 or choices > 1) else "unsupported"
            out[f"choices_n{n}"] = choices
            out[f"err_n{n}"] = r["err"]
            if n == 8 and choices > 1:
                out["ttft_all_n8"] = max(first.values()) - r["t0"]
        return out

    def repeat(self, fn, rng, keys, ratio):
        runs = [rnd(fn(rng)) for _ in range(self.cfg["repeats"])]
        res = {}
        for k in keys:
            vals = [r.get(k) for r in runs]
            if "unsupported" in vals:
                res[k] = "unsupported"
            else:
                res[k] = med(vals) if any(isinstance(v, (int, float)) for v in vals) else vals[0]
        res[ratio[0]] = div(res[ratio[1]], res[ratio[2]])
        return rnd(dict(res, runs=runs))

    def run(self, only=None):
        def rng(name):
            return random.Random(f"{self.seed}:{name}")
        stream(self.base, CPL, self.req(prompt="warm up " + self.words(rng("warm"), 8), max_tokens=4))
        out = {}
        if only in (None, "throughput"):
            g = self.throughput(rng("greedy"), 0.0)
            s = self.throughput(rng("sampled"), 0.8)
            out["throughput"] = dict(greedy=g, sampled=s, tok_per_s_greedy=g["tok_per_s"],
                                     tok_per_s_sampled=s["tok_per_s"],
                                     sampled_over_greedy=div(s["tok_per_s"], g["tok_per_s"]))
        if only in (None, "hol"):
            out["hol"] = self.repeat(self.hol_once, rng("hol"),
                                     ["gap_max_s", "itl_p50_before", "ttft_loaded", "ttft_alone",
                                      "ended_early"], ("loaded_over_alone", "ttft_loaded", "ttft_alone"))
        if only in (None, "chat"):
            out["chat"] = self.repeat(self.chat_once, rng("chat"),
                                      ["ttft1", "ttft2", "prompt_tokens1", "cached_tokens2"],
                                      ("ttft2_over_ttft1", "ttft2", "ttft1"))
        if only in (None, "n"):
            out["n"] = self.repeat(self.n_once, rng("n"), ["ttft_n1", "ttft_n8", "ttft_all_n8"],
                                   ("n8_over_n1", "ttft_n8", "ttft_n1"))
        return out


def port_open(port):
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


class Server:
    """One server process: started, waited for, and always stopped (by its pid) on exit."""

    def __init__(self, name, cmd, port):
        self.name, self.cmd, self.port, self.proc = name, cmd, port, None
        self.base = f"http://127.0.0.1:{port}"

    def __enter__(self):
        if port_open(self.port):
            raise SystemExit(f"port {self.port} is already in use: refusing to benchmark it")
        self.log = tempfile.NamedTemporaryFile(prefix=f"served-{self.name}-", suffix=".log", delete=False)
        log(f"[{self.name}] {' '.join(self.cmd)}  (log: {self.log.name})")
        self.proc = subprocess.Popen(self.cmd, stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"{self.name} exited ({self.proc.returncode}); see {self.log.name}")
                st, _ = http(self.base + "/ready", timeout=2)
                if st == 200 or (st == 404 and http(self.base + "/health", timeout=2)[0] == 200):
                    return self
                time.sleep(0.25)
            raise RuntimeError(f"{self.name} not ready after 600 s; see {self.log.name}")
        except BaseException:
            self.__exit__()
            raise

    def __exit__(self, *exc):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                self.proc.kill(); self.proc.wait()
        while port_open(self.port):
            time.sleep(0.1)
        log(f"[{self.name}] stopped")


def model_id(base):
    st, d = http(base + "/v1/models")
    try:
        return d["data"][0]["id"]
    except (TypeError, KeyError, IndexError):
        return None


def bench_one(name, base, a, cfg):
    b = Bench(base, model_id(base), cfg, a.seed)
    log(f"[{name}] model {b.model!r}, {b.tpw:.3f} tokens/word, seed {a.seed}")
    res = b.run(a.scenario)
    for scen, r in res.items():
        print(json.dumps(dict(server=name, scenario=scen, seed=a.seed, tokens_per_word=b.tpw, **r)),
              flush=True)
    return res


ROWS = [("throughput", "tok_per_s_greedy", "1. tok/s, greedy (T 0)"),
        ("throughput", "tok_per_s_sampled", "1. tok/s, sampled (T 0.8, top_p 0.95)"),
        ("throughput", "sampled_over_greedy", "1. sampled / greedy"),
        ("hol", "gap_max_s", "2. worst inter-token gap of the streams (s)"),
        ("hol", "itl_p50_before", "2. streams' median gap before the long prompt (s)"),
        ("hol", "ttft_loaded", "2. long prompt TTFT under load (s)"),
        ("hol", "ttft_alone", "2. long prompt TTFT alone (s)"),
        ("hol", "loaded_over_alone", "2. TTFT loaded / alone"),
        ("chat", "ttft1", "3. chat turn 1 TTFT (s)"),
        ("chat", "ttft2", "3. chat turn 2 TTFT (s)"),
        ("chat", "ttft2_over_ttft1", "3. TTFT2 / TTFT1"),
        ("n", "ttft_n1", "4. TTFT n=1 (s)"),
        ("n", "ttft_n8", "4. TTFT n=8 (s)"),
        ("n", "n8_over_n1", "4. TTFT n=8 / n=1"),
        ("n", "ttft_all_n8", "4. n=8: time until every choice has a token (s)")]


def table(results, notes):
    def cell(v):
        return "—" if v is None else (f"{v:.3f}" if isinstance(v, float) else str(v))
    names = ["sluice", "llama-server"]
    lines = ["| measurement | sluice | llama-server | sluice / llama-server |", "|---|---|---|---|"]
    for scen, key, label in ROWS:
        vals = []
        for n in names:
            r = results.get(n)
            vals.append(r if isinstance(r, str) else (r or {}).get(scen, {}).get(key))
        if all(v is None for v in vals):
            continue
        lines.append(f"| {label} | {cell(vals[0])} | {cell(vals[1])} | {cell(div(*vals))} |")
    return "\n".join(lines + [""] + [f"- {n}" for n in notes])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--only", choices=["sluice", "llama"])
    p.add_argument("--model", help="GGUF file (benches/served defaults to scripts/fetch-model)")
    p.add_argument("--sluice-bin"); p.add_argument("--llama-bin", help="path of llama-server")
    p.add_argument("--sluice-port", type=int, default=18080)
    p.add_argument("--llama-port", type=int, default=18081)
    p.add_argument("--threads", type=int, default=2, help="llama-server -t")
    p.add_argument("--url", help="benchmark an already running server instead")
    p.add_argument("--name", default="server", help="with --url: its column (sluice/llama-server)")
    p.add_argument("--quick", action="store_true", help="small counts, for smoke tests")
    p.add_argument("--scenario", choices=["throughput", "hol", "chat", "n"], help="run just one")
    p.add_argument("--seed", type=int, default=int(time.time()))
    for k in FULL:
        p.add_argument("--" + k.replace("_", "-"), type=int)
    a = p.parse_args()
    cfg = dict(QUICK if a.quick else FULL)
    cfg.update({k: getattr(a, k) for k in FULL if getattr(a, k) is not None})
    log(f"config {cfg}")
    results, notes = {}, [f"seed {a.seed}; config {json.dumps(cfg)}",
                          "ratios are sluice / llama-server: > 1 is better for tok/s, < 1 for times"]
    if a.url:
        results[a.name] = bench_one(a.name, a.url.rstrip("/"), a, cfg)
    else:
        if not a.model:
            p.error("--model is required (or use benches/served, or --url)")
        runs = [("sluice", a.sluice_bin, a.sluice_port,
                 lambda b, P: [b, "serve", "--model", a.model, "--port", str(P),
                               "--slots", "32", "--context", "2048"]),
                ("llama-server", a.llama_bin, a.llama_port,
                 lambda b, P: [b, "-m", a.model, "-t", str(a.threads), "-np", "32",
                               "-c", str(32 * 2048), "--port", str(P)])]
        for name, binary, port, cmd in runs:
            if a.only and not name.startswith(a.only):
                results[name] = "not run (--only)"
                continue
            if not binary or not os.access(binary, os.X_OK):
                results[name] = "skipped"
                notes.append(f"{name}: skipped, no executable at {binary}")
                log(f"[{name}] skipped: no executable at {binary}")
                continue
            with Server(name, cmd(binary, port), port) as s:
                results[name] = bench_one(name, s.base, a, cfg)
        notes.append(f"model {a.model}; one server at a time, sluice first")
    print("\n" + table(results, notes))


if __name__ == "__main__":
    main()
