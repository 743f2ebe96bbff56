#!/usr/bin/env python3
"""Reference embeddings for tests/embeddings.rs (written to tests/data/embeddings.json).

usage: scripts/golden/embeddings.py LLAMA_SERVER MODEL.gguf HF_FAMILIES_DIR OUT.json

- llama.cpp: LLAMA_SERVER (llama.cpp's server binary, scripts/build-llama-cpp) serves
  MODEL.gguf (the default SmolLM2-135M-Instruct Q4_1) with `--embeddings --pooling mean`;
  the texts below are embedded through its /v1/embeddings, and their tokens (as it
  tokenises them for embeddings: with the model's special tokens) read from its /tokenize.
- transformers: the tiny Qwen 3 folder of scripts/golden/hf_families.py (HF_FAMILIES_DIR
  as `hf_families.py write` made it) with last-token pooling, the Qwen3-Embedding recipe:
  the base model's last hidden state (after its final norm) at the last position, scaled to
  unit length, for fixed token-id inputs. Needs torch and transformers (a venv of its own,
  as for hf_families.py reference).
"""
import hashlib
import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "A fast auburn fox leapt over a sleepy hound.",
    "Quarterly revenue grew by twelve percent.",
    "def add(a, b):\n    return a + b",
    "Paris is the capital of France.",
    "Emb",
]
IDS = [[(i * 37) % 300 + 10 for i in range(12)], [(i * 101 + 7) % 310 + 5 for i in range(30)],
       [5, 9, 14]]


def post(url, body):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(req, timeout=120).read())


def llama_cpp(server, model, port=18931):
    proc = subprocess.Popen([server, "-m", model, "--port", str(port), "--embeddings", "--pooling",
                             "mean", "-t", "2", "-c", "2048", "-ub", "2048", "-b", "2048"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                if urllib.request.urlopen(base + "/health", timeout=1).status == 200:
                    break
            except Exception:
                time.sleep(0.2)
        r = post(base + "/v1/embeddings", {"input": TEXTS})
        vectors = [d["embedding"] for d in sorted(r["data"], key=lambda d: d["index"])]
        tokens = [post(base + "/tokenize", {"content": t, "add_special": True})["tokens"] for t in TEXTS]
        version = json.loads(urllib.request.urlopen(base + "/props").read()).get("build_info", "")
    finally:
        proc.terminate()
        proc.wait()
    return {"model_sha256": hashlib.sha256(Path(model).read_bytes()).hexdigest(), "pooling": "mean",
            "build": version, "texts": TEXTS, "tokens": tokens,
            "vectors": [[round(x, 7) for x in v] for v in vectors]}


def transformers(folder):
    import torch
    from transformers import AutoModel
    model = AutoModel.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager").eval()
    vectors = []
    for ids in IDS:
        with torch.no_grad():
            h = model(torch.tensor([ids])).last_hidden_state[0, -1].double()
        vectors.append([round(float(x), 9) for x in h / h.norm()])
    return {"family": "qwen3", "pooling": "last", "ids": IDS, "vectors": vectors,
            "transformers": __import__("transformers").__version__}


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    server, model, folders, out = sys.argv[1:]
    data = {"about": __doc__, "llamacpp": llama_cpp(server, model),
            "transformers": transformers(str(Path(folders) / "qwen3"))}
    Path(out).write_text(json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    main()
