#!/usr/bin/env python3
"""Writes a llama-architecture GGUF with random f16 weights whose widths are multiples of
256 (hidden 768, feed-forward 2048, 30 layers, 12 query and 4 key/value heads of 64), and
the default model's tokenizer, for measuring decode speed on K-quants.

SmolLM2's 576 and Gemma 3 270M's 640 columns are not multiples of 256, so llama-quantize
keeps K-quants off most of their tensors (a Q4_K_M copy of SmolLM2 is 52% Q5_0 by bytes,
8% Q4_K). Quantised from this file (`llama-quantize FILE OUT Q4_K_M`), every matrix is a
K-quant, so the roofline bench (`SLUICE_MODEL=OUT cargo bench --bench roofline`) times
the Q4_K, Q5_K and Q6_K kernels over a whole token. Its text is noise: it is for speed,
never for answers.

usage: scripts/make-synthetic-model.py SOURCE.gguf OUT.gguf
   SOURCE gives the tokenizer (the default model: `scripts/fetch-model`); needs the
   `gguf` and `numpy` packages (the test venv has both: `scripts/venv`).
"""

import sys

import gguf
import numpy as np

DIM, FFN, LAYERS, HEADS, KV_HEADS, HEAD_DIM = 768, 2048, 30, 12, 4, 64


def main() -> None:
    src, dst = sys.argv[1], sys.argv[2]
    reader = gguf.GGUFReader(src)
    vocab = len(reader.fields["tokenizer.ggml.tokens"].data)
    out = gguf.GGUFWriter(dst, "llama")
    out.add_name("synthetic K-quant test model (random weights)")
    for name, field in reader.fields.items():
        if not name.startswith("tokenizer."):
            continue
        kind = field.types[0]
        sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        out.add_key_value(name, field.contents(), kind, sub)
    out.add_block_count(LAYERS)
    out.add_context_length(8192)
    out.add_embedding_length(DIM)
    out.add_feed_forward_length(FFN)
    out.add_head_count(HEADS)
    out.add_head_count_kv(KV_HEADS)
    out.add_rope_freq_base(100000.0)
    out.add_layer_norm_rms_eps(1e-5)
    out.add_vocab_size(vocab)
    out.add_rope_dimension_count(HEAD_DIM)
    out.add_file_type(gguf.LlamaFileType.MOSTLY_F16)

    # Fixed seed: the same file every time.
    rng = np.random.default_rng(0)

    def matrix(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float16)

    ones = np.ones(DIM, dtype=np.float32)
    out.add_tensor("token_embd.weight", matrix(vocab, DIM))
    out.add_tensor("output_norm.weight", ones)
    for layer in range(LAYERS):
        blk = f"blk.{layer}"
        out.add_tensor(f"{blk}.attn_norm.weight", ones)
        out.add_tensor(f"{blk}.attn_q.weight", matrix(HEADS * HEAD_DIM, DIM))
        out.add_tensor(f"{blk}.attn_k.weight", matrix(KV_HEADS * HEAD_DIM, DIM))
        out.add_tensor(f"{blk}.attn_v.weight", matrix(KV_HEADS * HEAD_DIM, DIM))
        out.add_tensor(f"{blk}.attn_output.weight", matrix(DIM, HEADS * HEAD_DIM))
        out.add_tensor(f"{blk}.ffn_norm.weight", ones)
        out.add_tensor(f"{blk}.ffn_gate.weight", matrix(FFN, DIM))
        out.add_tensor(f"{blk}.ffn_up.weight", matrix(FFN, DIM))
        out.add_tensor(f"{blk}.ffn_down.weight", matrix(DIM, FFN))
    out.write_header_to_file()
    out.write_kv_data_to_file()
    out.write_tensors_to_file()
    out.close()
    print(dst)


if __name__ == "__main__":
    main()
