#!/usr/bin/env python3
"""Makes tests/data/gemma3-270m.json: golden runs for Gemma 3 270M (Q4_K_M GGUF).

usage: scripts/golden/gemma3.py MODEL.gguf LLAMA_SERVER_BIN OUT.json

- tokens: llama.cpp's tokenizer (llama-server /tokenize, special tokens parsed; raw prompts
  with the model's BOS added, chat prompts as rendered, their <bos> written by the template).
- reference: an independent f32 numpy implementation of Gemma 3 (every weight dequantised
  by the gguf package, no activation quantisation): greedy ids and top-5 raw logprobs.
- llamacpp: llama-server's greedy run and top-5 logprobs, for comparison.

Needs numpy and gguf (pip). Run once; the JSON is committed and CI compares against it.
"""
import json, subprocess, sys, time, urllib.request
import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

RAW = [
    "The capital of France is",
    "Once upon a time, in a small village by the sea,",
    'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n',
    "Q: What is 17 multiplied by 3?\nA:",
    "The three primary colors are",
    "Water boils at a temperature of",
    "Here is a list of fruits: apple, banana,",
    "Translate to French: 'Good morning, my friend.' ->",
    "Café, naïve, résumé and jalapeño are words that",
    "日本の首都は",
    "The emoji 🎉 is often used to",
    "In 1969, the first humans to walk on the Moon were",
    "import numpy as np\n\nx = np.array([1, 2, 3])\nprint(",
    "A haiku about autumn leaves:\n",
    "The quick brown fox jumps over the lazy dog. " * 6 + "The quick brown fox",
    "<start_of_turn>user\nWhat is the largest planet in our solar system?<end_of_turn>\n<start_of_turn>model\n",
]
CHAT = [
    [{"role": "user", "content": "What is the capital of Germany?"}],
    [{"role": "system", "content": "You are a terse assistant."},
     {"role": "user", "content": "Name three colours."}],
    [{"role": "user", "content": "Hi!"}, {"role": "assistant", "content": "Hello! How can I help?"},
     {"role": "user", "content": "Tell me a fact about cats."}],
    [{"role": "user", "content": "Write one sentence about the sea."}],
]
STEPS = 32


def render(messages):
    """Gemma 3's chat template (as in sluice's built-in copy)."""
    out = "<bos>"
    prefix = ""
    if messages[0]["role"] == "system":
        prefix = messages[0]["content"] + "\n\n"
        messages = messages[1:]
    for i, m in enumerate(messages):
        role = "model" if m["role"] == "assistant" else m["role"]
        out += "<start_of_turn>" + role + "\n" + (prefix if i == 0 else "") + m["content"].strip() + "<end_of_turn>\n"
    return out + "<start_of_turn>model\n"


def load(path):
    r = GGUFReader(path)
    meta = {k: f.contents() for k, f in r.fields.items() if k.startswith("gemma3.")}
    W = {}
    for t in r.tensors:
        a = dequantize(t.data, t.tensor_type).astype(np.float32)
        W[t.name] = a.reshape([int(x) for x in reversed(t.shape)])
    return meta, W


def rmsnorm(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def rope_neox(x, pos, base):
    d = x.shape[-1]
    inv = base ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    ang = np.outer(pos, inv)
    c, s = np.cos(ang).astype(np.float32)[:, None, :], np.sin(ang).astype(np.float32)[:, None, :]
    a, b = x[..., : d // 2], x[..., d // 2:]
    return np.concatenate([a * c - b * s, a * s + b * c], -1)


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def forward(meta, W, ids):
    L = int(meta["gemma3.block_count"]); H = int(meta["gemma3.attention.head_count"])
    KV = int(meta["gemma3.attention.head_count_kv"]); hd = int(meta["gemma3.attention.key_length"])
    eps = float(meta["gemma3.attention.layer_norm_rms_epsilon"])
    base = float(meta["gemma3.rope.freq_base"]); window = int(meta["gemma3.attention.sliding_window"])
    emb = W["token_embd.weight"]
    x = emb[ids] * np.float32(np.sqrt(emb.shape[1]))
    T = len(ids)
    pos = np.arange(T)
    causal = np.triu(np.full((T, T), -np.inf, dtype=np.float32), 1)
    local = causal + np.tril(np.full((T, T), -np.inf, dtype=np.float32), -window)
    for l in range(L):
        p = f"blk.{l}."
        swa = l % 6 < 5
        h = rmsnorm(x, W[p + "attn_norm.weight"], eps)
        q = (h @ W[p + "attn_q.weight"].T).reshape(T, H, hd)
        k = (h @ W[p + "attn_k.weight"].T).reshape(T, KV, hd)
        v = (h @ W[p + "attn_v.weight"].T).reshape(T, KV, hd)
        q = rmsnorm(q, W[p + "attn_q_norm.weight"], eps)
        k = rmsnorm(k, W[p + "attn_k_norm.weight"], eps)
        b = 10000.0 if swa else base
        q, k = rope_neox(q, pos, b), rope_neox(k, pos, b)
        k = np.repeat(k, H // KV, axis=1); v = np.repeat(v, H // KV, axis=1)
        att = np.einsum("thd,shd->hts", q, k) / np.float32(np.sqrt(hd)) + (local if swa else causal)
        att = np.exp(att - att.max(-1, keepdims=True)); att /= att.sum(-1, keepdims=True)
        o = np.einsum("hts,shd->thd", att, v).reshape(T, H * hd)
        o = rmsnorm(o @ W[p + "attn_output.weight"].T, W[p + "post_attention_norm.weight"], eps)
        x = x + o
        h = rmsnorm(x, W[p + "ffn_norm.weight"], eps)
        g = h @ W[p + "ffn_gate.weight"].T; u = h @ W[p + "ffn_up.weight"].T
        f = (gelu_tanh(g) * u) @ W[p + "ffn_down.weight"].T
        x = x + rmsnorm(f, W[p + "post_ffw_norm.weight"], eps)
    x = rmsnorm(x[-1], W["output_norm.weight"], eps)
    return W.get("output.weight", emb) @ x


def post(url, body):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=600))


def main():
    model, server_bin, out_path = sys.argv[1:4]
    port = 18093
    srv = subprocess.Popen([server_bin, "-m", model, "--port", str(port), "-t", "2", "-c", "2048",
                            "-np", "1", "--no-warmup"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base_url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(base_url + "/health", timeout=2); break
            except Exception:
                time.sleep(0.5)
        entries = [("raw", {"prompt": t}) for t in RAW] + \
                  [("chat", {"messages": m, "chat_prompt_text": render(m)}) for m in CHAT]
        for sec, e in entries:
            text = e["prompt"] if sec == "raw" else e["chat_prompt_text"]
            e["tokens"] = post(base_url + "/tokenize", {"content": text, "add_special": sec == "raw",
                                                         "parse_special": True})["tokens"]
            r = post(base_url + "/completion", {"prompt": e["tokens"], "n_predict": STEPS, "temperature": 0,
                                                "n_probs": 5, "cache_prompt": False})
            probs = r["completion_probabilities"]
            e["llamacpp"] = {"greedy_ids": [p["id"] for p in probs],
                             "steps": [{"id": p["id"], "top": [[t["id"], t["logprob"]] for t in p["top_logprobs"]]}
                                       for p in probs]}
    finally:
        srv.terminate()
    meta, W = load(model)
    eos = {1, 106}  # <eos>, <end_of_turn>
    for i, (sec, e) in enumerate(entries):
        ids = list(e["tokens"]); gen = []; steps = []
        for _ in range(STEPS):
            logits = forward(meta, W, np.array(ids)).astype(np.float64)
            lp = logits - (np.log(np.exp(logits - logits.max()).sum()) + logits.max())
            top = np.argsort(-lp)[:5]
            t = int(top[0]); gen.append(t); ids.append(t)
            steps.append({"id": t, "top": [[int(j), float(lp[j])] for j in top]})
            if t in eos:
                break
        e["reference"] = {"greedy_ids": gen, "steps": steps}
        print(sec, i, len(gen), flush=True)
    out = {
        "model": "gemma-3-270m-q4_k_m.gguf",
        "model_sha256": "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        "about": "Made by scripts/golden/gemma3.py. tokens come from llama.cpp's tokenizer (raw prompts "
                 "with BOS, chat prompts rendered by Gemma 3's template with its <bos>). reference = an "
                 "independent f32 numpy Gemma 3 (weights dequantised, no activation quantisation): greedy "
                 "ids and top-5 raw logprobs per step, stopping at <eos>/<end_of_turn>. llamacpp = "
                 "llama-server greedy with n_probs=5 (32 steps, no stop), for comparison.",
        "raw": [e for s, e in entries if s == "raw"],
        "chat": [e for s, e in entries if s == "chat"],
    }
    json.dump(out, open(out_path, "w"), ensure_ascii=False)


if __name__ == "__main__":
    main()
