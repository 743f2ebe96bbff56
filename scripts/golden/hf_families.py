#!/usr/bin/env python3
"""Tiny random Hugging Face folders of every family, and transformers' prompt logprobs on them.

usage:
  scripts/golden/hf_families.py write DIR
      Writes DIR/<family>/ (config.json, model.safetensors in F32, tokenizer.json,
      tokenizer_config.json) for llama, llama3 (its RoPE scaling), mistral (a sliding window
      of 16 the prompts pass), qwen2 (QKV biases, tied head), qwen3 (QK-norm, head size
      != width / heads), phi3 (fused QKV and gate-up, partial rotary, longrope past an
      original context of 32) and gemma3 (sliding window 8 every other layer,
      query_pre_attn_scalar 24 != head size 16), and llama_wide (llama at width 256 and
      feed-forward 512: rows Q4_K's blocks of 256 fit, so `--quantize q4_k` is really
      Q4_K). numpy only (scripts/venv); the weights are those of
      scripts/golden/tiny_models.py, in Hugging Face's names and layout.
  scripts/golden/hf_families.py reference DIR OUT.json
      Writes the folders, loads each with transformers (float32, eager attention) and
      records, for every prompt position, the logprob of the next prompt token and the top 5;
      and the same for a copy whose matrices went through Q4_0 and back (`runs_q4_0`), and
      for llama_wide through Q4_K (`runs_q4_k`, as candle's quantiser, which sluice uses).
      Needs torch and transformers (a venv of its own: they are ~3 GB); run once, and the
      output is committed as tests/data/hf-families.json, which tests/transformers.rs checks
      sluice against (with the folders' SHA-256, so the weights are the ones it ran).
"""
import contextlib, hashlib, json, os, sys
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tiny_models as tm  # noqa: E402

FAMILIES = ["llama", "llama3", "mistral", "qwen2", "qwen3", "phi3", "gemma3", "llama_wide"]
# Longer than every window (8, 16) and phi3's original context (32).
PROMPTS = [[(i * 37) % 300 + 10 for i in range(48)], [(i * 101 + 7) % 310 + 5 for i in range(56)]]
ORIG_CTX = 32


def unpermute(a, heads):
    """The inverse of llama.cpp's Q/K row permutation (GGUF order back to Hugging Face's)."""
    out = a.reshape(heads, a.shape[0] // heads // 2, 2, *a.shape[1:])
    return out.swapaxes(1, 2).reshape(a.shape)


@contextlib.contextmanager
def shape(family):
    """llama_wide's width and feed-forward size in tiny_models' constants while it is made."""
    if family != "llama_wide":
        yield
        return
    saved = tm.DIM, tm.FFN
    tm.DIM, tm.FFN = 256, 512
    try:
        yield
    finally:
        tm.DIM, tm.FFN = saved


def config(family, head, layers):
    base = {"hidden_size": tm.DIM, "intermediate_size": tm.FFN, "num_hidden_layers": layers,
            "num_attention_heads": tm.HEADS, "num_key_value_heads": tm.KV, "head_dim": head,
            "max_position_embeddings": tm.CTX, "rms_norm_eps": 1e-6, "vocab_size": tm.VOCAB,
            "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32",
            "tie_word_embeddings": family in ("qwen2", "gemma3"), "rope_theta": 10000.0,
            "hidden_act": "silu", "attention_bias": False}
    arch = {"llama": "LlamaForCausalLM", "llama3": "LlamaForCausalLM", "llama_wide": "LlamaForCausalLM",
            "mistral": "MistralForCausalLM",
            "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM", "phi3": "Phi3ForCausalLM",
            "gemma3": "Gemma3ForCausalLM"}[family]
    model_type = {"llama3": "llama", "llama_wide": "llama", "gemma3": "gemma3_text"}.get(family, family)
    base.update({"architectures": [arch], "model_type": model_type})
    if family == "llama3":
        base["rope_scaling"] = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                "high_freq_factor": 4.0, "original_max_position_embeddings": ORIG_CTX}
    if family == "mistral":
        base["sliding_window"] = 16
    if family == "qwen2":
        base.update({"use_sliding_window": False, "sliding_window": None})
    if family == "phi3":
        rot = 12
        base.update({"partial_rotary_factor": rot / head, "original_max_position_embeddings": ORIG_CTX,
                     "rope_scaling": {"type": "longrope",
                                      "short_factor": [1.0, 1.1, 1.3, 1.6, 2.0, 2.6],
                                      "long_factor": [2.0, 3.0, 4.0, 6.0, 8.0, 16.0]},
                     "sliding_window": None, "pad_token_id": 0})
    if family == "gemma3":
        base.update({"rope_theta": 1e6, "rope_local_base_freq": 10000.0, "sliding_window": 8,
                     "sliding_window_pattern": 2, "query_pre_attn_scalar": 24,
                     "hidden_activation": "gelu_pytorch_tanh",
                     "layer_types": ["sliding_attention" if (l + 1) % 2 else "full_attention"
                                     for l in range(layers)]})
    return base


def write(family, out):
    with shape(family):
        write_as(family, out)


def write_as(family, out):
    os.makedirs(out, exist_ok=True)
    head, layers = tm.hp(family)
    W = tm.weights(family)
    names = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
             "output.weight": "lm_head.weight"}
    per = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
           "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
           "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
           "ffn_down": "mlp.down_proj", "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
           "attn_qkv": "self_attn.qkv_proj"}
    if family == "phi3":
        per["ffn_up"] = "mlp.gate_up_proj"
    if family == "gemma3":
        per.update({"ffn_norm": "pre_feedforward_layernorm", "post_attention_norm": "post_attention_layernorm",
                    "post_ffw_norm": "post_feedforward_layernorm"})
    tensors = {}
    for name, a in W.items():
        if name.startswith("rope_"):
            continue  # Hugging Face derives the factors from config.json
        if name in names:
            hf = names[name]
        else:
            _, l, rest = name.split(".", 2)
            base, kind = rest.rsplit(".", 1)
            hf = f"model.layers.{l}.{per[base]}.{kind}"
        if family in ("llama", "llama3", "llama_wide", "mistral") and (".attn_q." in name or ".attn_k." in name):
            a = unpermute(a, tm.HEADS if ".attn_q." in name else tm.KV)
        if family == "gemma3" and name.endswith("norm.weight"):
            a = a - 1.0
        tensors[hf] = np.ascontiguousarray(a)
    tm.save_safetensors(tensors, os.path.join(out, "model.safetensors"), "F32")
    json.dump(config(family, head, layers), open(os.path.join(out, "config.json"), "w"), indent=1)
    # The tokenizer files tiny_models.py writes (the comparisons are on ids).
    tmp = out + ".tok"
    tm.write_hf("qwen2", tmp)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        os.replace(os.path.join(tmp, f), os.path.join(out, f))
    for f in os.listdir(tmp):
        os.remove(os.path.join(tmp, f))
    os.rmdir(tmp)


def sha256(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def write_all(d):
    for f in FAMILIES:
        write(f, os.path.join(d, f))


def q4_0_copy(src, dst):
    """The folder with every matrix rounded through Q4_0 (llama.cpp's quantiser, as gguf-py
    has it) and back to F32: what `--quantize q4_0` computes with, give or take the int8
    activations of sluice's kernels."""
    import shutil
    from safetensors.numpy import load_file
    shutil.copytree(src, dst, dirs_exist_ok=True)
    t = load_file(os.path.join(src, "model.safetensors"))
    for k, a in t.items():
        if a.ndim == 2:
            q = tm.gguf.quants.quantize(a, tm.T.Q4_0)
            t[k] = tm.gguf.quants.dequantize(q, tm.T.Q4_0).reshape(a.shape).astype(np.float32)
    tm.save_safetensors(t, os.path.join(dst, "model.safetensors"), "F32")


F32 = np.float32


def round_away(v):
    """Rust's f32::round: halves away from zero (numpy's rounds them to even)."""
    return (np.sign(v) * np.floor(np.abs(v) + F32(0.5))).astype(np.int64)


def qkx1(x, nmax=15, ntry=5):
    """make_qkx1_quants of candle's k_quants (an early ggml's), for every 32-value
    sub-block (the rows of x) at once, in f32 and in its order of summation."""
    b, n = x.shape
    lo, hi = x.min(1), x.max(1)
    flat = hi == lo
    lo = np.minimum(lo, F32(0))
    with np.errstate(divide="ignore", invalid="ignore"):
        iscale = (F32(nmax) / (hi - lo)).astype(F32)
        scale = (F32(1) / iscale).astype(F32)
    ls = np.zeros((b, n), np.int64)
    live = ~flat
    for _ in range(ntry):
        sumlx, suml2, changed = np.zeros(b, F32), np.zeros(b, np.int64), np.zeros(b, bool)
        for i in range(n):
            li = np.clip(round_away((iscale * (x[:, i] - lo)).astype(F32)), 0, nmax)
            changed |= live & (li != ls[:, i])
            ls[:, i] = np.where(live, li, ls[:, i])
            sumlx = (sumlx + (x[:, i] - lo) * li.astype(F32)).astype(F32)
            suml2 += li * li
        with np.errstate(divide="ignore", invalid="ignore"):
            new_scale = (sumlx / suml2.astype(F32)).astype(F32)
            total = np.zeros(b, F32)
            for i in range(n):
                total = (total + (x[:, i] - new_scale * ls[:, i].astype(F32))).astype(F32)
            new_lo = np.minimum((total / F32(n)).astype(F32), F32(0))
            scale = np.where(live, new_scale, scale)
            lo = np.where(live, new_lo, lo)
            iscale = np.where(live, (F32(1) / new_scale).astype(F32), iscale)
        live &= changed
        if not live.any():
            break
    return np.where(flat, F32(0), scale).astype(F32), np.where(flat, F32(0), -lo).astype(F32)


def q4_k_round(a):
    """`a` (rows a multiple of 256 wide) through Q4_K and back, as sluice's `--quantize
    q4_k` rounds it (candle's BlockQ4K::from_float, then its dequantisation)."""
    x = a.reshape(-1, 8, 32).astype(F32)
    scales, mins = qkx1(x.reshape(-1, 32))
    scales, mins = scales.reshape(-1, 8), mins.reshape(-1, 8)
    max_scale = np.maximum(scales.max(1), F32(0))
    max_min = np.maximum(mins.max(1), F32(0))
    with np.errstate(divide="ignore"):
        inv_scale = np.where(max_scale > 0, F32(63) / max_scale, F32(0)).astype(F32)
        inv_min = np.where(max_min > 0, F32(63) / max_min, F32(0)).astype(F32)
    sc = np.minimum(round_away((inv_scale[:, None] * scales).astype(F32)), 63).astype(F32)
    m = np.minimum(round_away((inv_min[:, None] * mins).astype(F32)), 63).astype(F32)
    d = (max_scale / F32(63)).astype(np.float16).astype(F32)
    dmin = (max_min / F32(63)).astype(np.float16).astype(F32)
    dj = (d[:, None] * sc).astype(F32)
    mj = (dmin[:, None] * m).astype(F32)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.clip(round_away(((x + mj[..., None]) / dj[..., None]).astype(F32)), 0, 15)
    q = np.where(dj[..., None] != 0, q, 0).astype(F32)
    return (dj[..., None] * q - mj[..., None]).astype(F32).reshape(a.shape)


def q4_k_copy(src, dst):
    """The folder with every matrix rounded through Q4_K and back to F32 (`runs_q4_k`)."""
    import shutil
    from safetensors.numpy import load_file
    shutil.copytree(src, dst, dirs_exist_ok=True)
    t = load_file(os.path.join(src, "model.safetensors"))
    for k, a in t.items():
        if a.ndim == 2:
            t[k] = q4_k_round(a)
    tm.save_safetensors(t, os.path.join(dst, "model.safetensors"), "F32")


def runs(path):
    import torch
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    out = []
    for p in PROMPTS:
        with torch.no_grad():
            logits = model(torch.tensor([p])).logits[0].double()
        lp = torch.log_softmax(logits, dim=-1)
        top = torch.topk(lp, 5, dim=-1)
        out.append({"next": [float(lp[i, p[i + 1]]) for i in range(len(p) - 1)],
                    "top": [[[int(t), float(v)] for t, v in zip(top.indices[i], top.values[i])]
                            for i in range(len(p))]})
    return out


def reference(d, out_path):
    import torch
    write_all(d)
    out = {"about": __doc__, "prompts": PROMPTS, "transformers": __import__("transformers").__version__,
           "torch": torch.__version__, "models": {}}
    for f in FAMILIES:
        path = os.path.join(d, f)
        q4 = path + "-q4_0"
        q4_0_copy(path, q4)
        out["models"][f] = {"sha256": sha256(os.path.join(path, "model.safetensors")), "runs": runs(path),
                            "runs_q4_0": runs(q4)}
        if f == "llama_wide":
            q4k = path + "-q4_k"
            q4_k_copy(path, q4k)
            out["models"][f]["runs_q4_k"] = runs(q4k)
        print(f, [round(x, 3) for x in out["models"][f]["runs"][0]["next"][:6]], flush=True)
    json.dump(out, open(out_path, "w"), indent=0)


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write_all(sys.argv[2])
    else:
        reference(sys.argv[2], sys.argv[3])
