#!/usr/bin/env python3
"""Tiny random-weight models of every family sluice runs, and llama.cpp's runs on them.

usage:
  scripts/golden/tiny_models.py write DIR
      Writes DIR/<family>-<type>.gguf (deterministic: fixed seeds; the gguf package pinned in
      scripts/venv) and Hugging Face folders DIR/hf-<family>/ for qwen2 and gemma3 with the
      same weights (F32; and F16 / BF16 copies, hf-qwen2-f16 and hf-gemma3-bf16). The tests
      run this, then check each GGUF's SHA-256 against the golden file.
  scripts/golden/tiny_models.py golden DIR LLAMA_SERVER_BIN OUT.json
      Runs llama-server on every GGUF: greedy continuations of fixed token-id prompts with
      the top-5 logprobs of every step, stopping at </s>. Writes OUT.json (committed as tests/data/tiny-models.json).

Families: llama, llama3 (rope_freqs factors), mistral (llama with a sliding window the prompts
stay inside), qwen2 (QKV bias, tied head), qwen3 (QK-norm, head size != dim/heads), phi3
(fused QKV and gate-up, partial rotary, longrope short factors and attention factor),
gemma3 (sliding window 8 every other layer, post norms, GeGLU, sqrt(dim) embedding scale).
Types: F32 (llama.cpp's greedy ids must be matched exactly) and Q8_0 (close).
"""
import hashlib, json, os, subprocess, sys, time, urllib.request
import numpy as np
import gguf
from gguf import GGMLQuantizationType as T

DIM, HEADS, KV, FFN, VOCAB, CTX = 64, 4, 2, 128, 320, 4096
FAMILIES = ["llama", "llama3", "mistral", "qwen2", "qwen3", "phi3", "gemma3"]
TYPES = ["f32", "q8_0"]
PROMPTS = [[5, 17, 200], [40, 41, 42, 43, 44, 45, 46, 47, 48],
           [(i * 37) % 300 + 10 for i in range(17)], [(i * 101) % 310 + 5 for i in range(30)]]
STEPS = 16


def vocab():
    """A SentencePiece-type vocabulary of whole ASCII pieces (no byte tokens, so every
    generated token is complete text and llama-server reports one probability entry per
    token)."""
    toks = ["<unk>", "<s>", "</s>", "\n", "\u2581"]
    toks += [c for c in map(chr, range(33, 127))]
    toks += ["\u2581" + a + b for a in "etaoinshrdlu" for b in "etaoinshrdlucmfwypvbgkqjxz"]
    toks = toks[:VOCAB]
    assert len(toks) == VOCAB and len(set(toks)) == VOCAB
    types = [2, 3, 3] + [1] * (VOCAB - 3)
    scores = [0.0] * 3 + [-float(i) for i in range(VOCAB - 3)]
    return toks, scores, types


def hp(family):
    head = 32 if family == "qwen3" else DIM // HEADS
    layers = 3 if family == "gemma3" else 2
    return head, layers


def weights(family):
    """The model as named arrays (GGUF names, numpy shape (out, in) for matrices)."""
    rng = np.random.default_rng(sum(map(ord, family)))
    head, layers = hp(family)
    mat = lambda o, i: (rng.standard_normal((o, i)) / np.sqrt(i)).astype(np.float32)
    vec = lambda n, c=1.0, s=0.1: (c + s * rng.standard_normal(n)).astype(np.float32)
    # Gemma multiplies embeddings by sqrt(DIM): keep its residual stream at unit scale too.
    scale = 1 / np.sqrt(DIM) if family == "gemma3" else 1.0
    W = {"token_embd.weight": (scale * rng.standard_normal((VOCAB, DIM))).astype(np.float32),
         "output_norm.weight": vec(DIM)}
    if family not in ("qwen2", "gemma3"):
        W["output.weight"] = mat(VOCAB, DIM)
    q, kv = HEADS * head, KV * head
    for l in range(layers):
        p = f"blk.{l}."
        W[p + "attn_norm.weight"] = vec(DIM)
        W[p + "ffn_norm.weight"] = vec(DIM)
        if family == "phi3":
            W[p + "attn_qkv.weight"] = mat(q + 2 * kv, DIM)
            W[p + "ffn_up.weight"] = mat(2 * FFN, DIM)
        else:
            W[p + "attn_q.weight"], W[p + "attn_k.weight"], W[p + "attn_v.weight"] = mat(q, DIM), mat(kv, DIM), mat(kv, DIM)
            W[p + "ffn_gate.weight"], W[p + "ffn_up.weight"] = mat(FFN, DIM), mat(FFN, DIM)
        # Outputs of the blocks large enough to move the residual off the input embedding
        # (with a tied head, a small update just repeats the last token).
        W[p + "attn_output.weight"] = 3 * mat(DIM, q)
        W[p + "ffn_down.weight"] = 3 * mat(DIM, FFN)
        if family == "qwen2":
            for t, n in (("q", q), ("k", kv), ("v", kv)):
                W[p + f"attn_{t}.bias"] = vec(n, 0.0, 0.5)
        if family in ("qwen3", "gemma3"):
            W[p + "attn_q_norm.weight"] = vec(head)
            W[p + "attn_k_norm.weight"] = vec(head)
        if family == "gemma3":
            W[p + "post_attention_norm.weight"] = vec(DIM, 3.0)
            W[p + "post_ffw_norm.weight"] = vec(DIM, 3.0)
    if family == "llama3":
        W["rope_freqs.weight"] = np.array([1.0] * 3 + [1.5, 2.5, 4.0, 8.0, 8.0], dtype=np.float32)
    if family == "phi3":
        W["rope_factors_short.weight"] = np.array([1.0, 1.1, 1.3, 1.6, 2.0, 2.6], dtype=np.float32)
        W["rope_factors_long.weight"] = np.array([2.0, 3.0, 4.0, 6.0, 8.0, 16.0], dtype=np.float32)
    return W


def write_gguf(family, typ, path):
    arch = {"llama3": "llama", "mistral": "llama"}.get(family, family)
    head, layers = hp(family)
    w = gguf.GGUFWriter(path, arch)
    # Not "phi3" in the name: llama.cpp keys Phi-3 tokenizer quirks on it.
    w.add_name(f"tiny-{family}".replace("phi3", "p3"))
    w.add_block_count(layers); w.add_context_length(CTX); w.add_embedding_length(DIM)
    w.add_feed_forward_length(FFN); w.add_head_count(HEADS); w.add_head_count_kv(KV)
    w.add_layer_norm_rms_eps(1e-6); w.add_rope_freq_base(10000.0 if family != "gemma3" else 1e6)
    w.add_key_length(head); w.add_value_length(head)
    w.add_file_type(0 if typ == "f32" else 7)
    if family == "phi3":
        w.add_rope_dimension_count(12)
        w.add_float32(f"{arch}.rope.scaling.attn_factor", 1.1)
        w.add_uint32(f"{arch}.rope.scaling.original_context_length", CTX)
    if family == "mistral":
        w.add_sliding_window(2048)
    if family == "gemma3":
        w.add_sliding_window(8)
        w.add_uint32("gemma3.attention.sliding_window_pattern", 2)
    toks, scores, types = vocab()
    w.add_tokenizer_model("llama"); w.add_tokenizer_pre("default")
    w.add_token_list(toks); w.add_token_scores(scores); w.add_token_types(types)
    w.add_bos_token_id(1); w.add_eos_token_id(2); w.add_unk_token_id(0); w.add_add_bos_token(False)
    for name, a in weights(family).items():
        if typ == "q8_0" and a.ndim == 2:
            w.add_tensor(name, gguf.quants.quantize(a, T.Q8_0), raw_dtype=T.Q8_0)
        else:
            w.add_tensor(name, a)
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()


def save_safetensors(tensors, path, dtype):
    """Writes a safetensors file of F32, F16 or BF16 (numpy has no bfloat16: its bytes
    are the f32 bytes' upper halves, rounded to nearest even)."""
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(tensors):
        a = tensors[name].astype(np.float32)
        if dtype == "F16":
            raw = a.astype(np.float16).tobytes()
        elif dtype == "BF16":
            u = a.view(np.uint32).astype(np.uint64)
            u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
            raw = u.astype(np.uint16).tobytes()
        else:
            raw = a.tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little")); f.write(h)
        for b in blobs:
            f.write(b)


def write_hf(family, out, dtype="F32"):
    """A Hugging Face folder with the same weights (safetensors of `dtype`)."""
    os.makedirs(out, exist_ok=True)
    head, layers = hp(family)
    W = weights(family)
    names = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
             "output.weight": "lm_head.weight"}
    per = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
           "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
           "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
           "ffn_down": "mlp.down_proj", "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm"}
    if family == "gemma3":
        per.update({"ffn_norm": "pre_feedforward_layernorm", "post_attention_norm": "post_attention_layernorm",
                    "post_ffw_norm": "post_feedforward_layernorm"})
    tensors = {}
    for name, a in W.items():
        if name in names:
            hf = names[name]
        else:
            _, l, rest = name.split(".", 2)
            base, kind = rest.rsplit(".", 1)
            hf = f"model.layers.{l}.{per[base]}.{kind}"
        if family == "gemma3" and name.endswith("norm.weight"):
            a = a - 1.0  # Hugging Face Gemma stores w; GGUF stores 1 + w
        tensors[hf] = np.ascontiguousarray(a)
    # Two shards, as large checkpoints come.
    keys = sorted(tensors)
    half = len(keys) // 2
    index = {"metadata": {}, "weight_map": {}}
    for i, part in enumerate((keys[:half], keys[half:])):
        fname = f"model-{i + 1:05d}-of-00002.safetensors"
        save_safetensors({k: tensors[k] for k in part}, os.path.join(out, fname), dtype)
        index["weight_map"].update({k: fname for k in part})
    json.dump(index, open(os.path.join(out, "model.safetensors.index.json"), "w"), indent=1)
    cfg = {"architectures": ["Qwen2ForCausalLM" if family == "qwen2" else "Gemma3ForCausalLM"],
           "model_type": "qwen2" if family == "qwen2" else "gemma3_text",
           "hidden_size": DIM, "intermediate_size": FFN, "num_hidden_layers": layers,
           "num_attention_heads": HEADS, "num_key_value_heads": KV, "head_dim": head,
           "max_position_embeddings": CTX, "rms_norm_eps": 1e-6, "vocab_size": VOCAB,
           "tie_word_embeddings": True, "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32"}
    if family == "qwen2":
        cfg.update({"rope_theta": 10000.0, "hidden_act": "silu"})
    else:
        cfg.update({"rope_theta": 1e6, "rope_local_base_freq": 10000.0, "sliding_window": 8,
                    "sliding_window_pattern": 2, "query_pre_attn_scalar": head,
                    "hidden_activation": "gelu_pytorch_tanh",
                    "layer_types": ["sliding_attention" if (l + 1) % 2 else "full_attention" for l in range(layers)]})
    json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=1)
    toks, scores, _ = vocab()
    tok = {"version": "1.0", "added_tokens": [
               {"id": i, "content": toks[i], "single_word": False, "lstrip": False, "rstrip": False,
                "normalized": False, "special": True} for i in range(3)],
           "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
           "pre_tokenizer": None, "post_processor": None,
           "decoder": {"type": "Sequence", "decoders": [
               {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
               {"type": "ByteFallback"}, {"type": "Fuse"}]},
           "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                     "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                     "vocab": {t: i for i, t in enumerate(toks)}, "merges": []}}
    json.dump(tok, open(os.path.join(out, "tokenizer.json"), "w"), ensure_ascii=False)
    json.dump({"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": False,
               "chat_template": "{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                                "{% if add_generation_prompt %}<s>assistant: {% endif %}"},
              open(os.path.join(out, "tokenizer_config.json"), "w"))


def sha256(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def write_all(d):
    os.makedirs(d, exist_ok=True)
    for f in FAMILIES:
        for t in TYPES:
            write_gguf(f, t, os.path.join(d, f"{f}-{t}.gguf"))
    for f in ("qwen2", "gemma3"):
        write_hf(f, os.path.join(d, f"hf-{f}"))
    write_hf("qwen2", os.path.join(d, "hf-qwen2-f16"), "F16")
    write_hf("gemma3", os.path.join(d, "hf-gemma3-bf16"), "BF16")


def post(url, body):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=600))


def golden(d, server_bin, out_path):
    write_all(d)
    out = {"about": __doc__, "prompts": PROMPTS, "steps": STEPS, "models": {}}
    for f in FAMILIES:
        for t in TYPES:
            path = os.path.join(d, f"{f}-{t}.gguf")
            port = 18094
            srv = subprocess.Popen([server_bin, "-m", path, "--port", str(port), "-t", "2", "-c", "256", "-np", "1",
                                    "--no-warmup"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            url = f"http://127.0.0.1:{port}"
            try:
                for _ in range(120):
                    try:
                        urllib.request.urlopen(url + "/health", timeout=2); break
                    except Exception:
                        time.sleep(0.25)
                runs = []
                for p in PROMPTS:
                    r = post(url + "/completion", {"prompt": p, "n_predict": STEPS, "temperature": 0, "n_probs": 5,
                                                   "cache_prompt": False})
                    probs = r["completion_probabilities"]
                    runs.append({"greedy_ids": [x["id"] for x in probs],
                                 "steps": [{"id": x["id"], "top": [[y["id"], y["logprob"]] for y in x["top_logprobs"]]}
                                           for x in probs]})
            finally:
                srv.terminate(); srv.wait()
            out["models"][f"{f}-{t}"] = {"sha256": sha256(path), "llamacpp": runs}
            print(f, t, [r["greedy_ids"][:6] for r in runs], flush=True)
    json.dump(out, open(out_path, "w"), indent=0)


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write_all(sys.argv[2])
    else:
        golden(*sys.argv[2:5])
