#!/usr/bin/env python3
"""Reference rerank scores for tests/embeddings.rs (written to tests/data/rerank.json).

usage: scripts/golden/rerank.py MODEL.gguf OUT.json

transformers loads MODEL.gguf (the default SmolLM2-135M-Instruct Q4_1; its weights
dequantised to f32) and scores each document with the Qwen3-Reranker recipe: its prompt
(system text, `<Instruct>`, `<Query>`, `<Document>`, then the assistant turn with an empty
thinking section), and P(yes) over the `yes` and `no` tokens' logits at the last position.
The prompt text is written here as sluice writes it (src/http/openai/rerank.rs); its token
ids are recorded too. Needs torch, transformers, accelerate and gguf (a venv of its own).
"""
import hashlib
import json
import sys
from pathlib import Path

SYSTEM = ('Judge whether the Document meets the requirements based on the Query and the Instruct '
          'provided. Note that the answer can only be "yes" or "no".')
INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"
QUERY = "What is the capital of France?"
DOCUMENTS = [
    "Paris is the capital and largest city of France.",
    "The Eiffel Tower is a landmark in Paris.",
    "Bananas are rich in potassium.",
    "Berlin is the capital of Germany.",
    "France's capital city is Paris, on the Seine.",
]


def prompt(instruction, query, document):
    return (f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n<Instruct>: {instruction}\n"
            f"<Query>: {query}\n<Document>: {document}<|im_end|>\n<|im_start|>assistant\n"
            "<think>\n\n</think>\n\n")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    model_path, out = Path(sys.argv[1]), sys.argv[2]
    tok = AutoTokenizer.from_pretrained(model_path.parent, gguf_file=model_path.name)
    model = AutoModelForCausalLM.from_pretrained(model_path.parent, gguf_file=model_path.name,
                                                 dtype=torch.float32).eval()
    yes, no = tok.convert_tokens_to_ids("yes"), tok.convert_tokens_to_ids("no")
    ids, scores = [], []
    for d in DOCUMENTS:
        p = tok(prompt(INSTRUCTION, QUERY, d), add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            last = model(torch.tensor([p])).logits[0, -1].double()
        scores.append(float(torch.softmax(last[[yes, no]], 0)[0]))
        ids.append(p)
    Path(out).write_text(json.dumps({
        "about": __doc__, "model_sha256": hashlib.sha256(model_path.read_bytes()).hexdigest(),
        "yes": yes, "no": no, "instruction": INSTRUCTION, "query": QUERY, "documents": DOCUMENTS,
        "ids": ids, "scores": scores, "transformers": __import__("transformers").__version__,
    }, indent=1) + "\n")


if __name__ == "__main__":
    main()
