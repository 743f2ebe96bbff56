"""Prompt scoring, best_of, shared prefills and prefix reuse against a real sluice:
`echo` + `logprobs` (the legacy shape, `max_tokens: 0` scores without generating), vLLM's
`prompt_logprobs`, `best_of`, `n` sharing one prefill, `cache_prompt`, /tokenizer_info, and
a 400 naming the field for each bad value.
"""
import json
import math
import re

import httpx
import pytest

WORDS = ("river stone light valley morning keeper boat bridge quiet window garden letter "
         "winter market candle harbor").split()


def long_prompt(salt, n_words=300):
    return f"Note {salt}: " + " ".join(WORDS[(i * 7 + salt) % len(WORDS)] for i in range(n_words))


def post(base_url, path, body):
    return httpx.post(base_url + path, json=body, timeout=120)


def counter(base_url, name):
    text = httpx.get(base_url + "/metrics", timeout=10).text
    # Engine series carry a `model` label; this server has one model.
    return sum(float(v) for v in re.findall(rf"^{name}(?:\{{[^}}]*\}})? (\S+)$", text, re.M))


def tokens_of(base_url, text):
    return post(base_url, "/tokenize", {"prompt": text}).json()["tokens"]


def test_echo_with_logprobs_scores_the_prompt_without_generating(base_url, model):
    prompt = "The capital of France is Paris, and the capital of Italy is Rome."
    r = post(base_url, "/v1/completions", {"model": model, "prompt": prompt, "echo": True,
                                           "logprobs": 2, "max_tokens": 0})
    assert r.status_code == 200, r.text
    c = r.json()["choices"][0]
    assert c["text"] == prompt
    lp = c["logprobs"]
    ids = tokens_of(base_url, prompt)
    assert len(lp["tokens"]) == len(ids)
    assert "".join(lp["tokens"]) == prompt
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    assert all(x <= 0 for x in lp["token_logprobs"][1:])
    assert all(1 <= len(t) <= 2 for t in lp["top_logprobs"][1:])
    assert lp["text_offset"][0] == 0
    assert [prompt[o:o + len(t)] for o, t in zip(lp["text_offset"], lp["tokens"])] == lp["tokens"]
    assert r.json()["usage"]["completion_tokens"] == 0


def test_a_scored_token_has_the_logprob_it_had_when_generated(base_url, model):
    prompt = "Once upon a time, in a small village by the sea,"
    gen = post(base_url, "/v1/completions", {"model": model, "prompt": prompt, "max_tokens": 1,
                                             "temperature": 0, "logprobs": 1}).json()
    choice = gen["choices"][0]
    text, generated_lp = choice["text"], choice["logprobs"]["token_logprobs"][0]
    scored = post(base_url, "/v1/completions", {"model": model, "prompt": prompt + text,
                                                "echo": True, "logprobs": 0, "max_tokens": 0})
    lps = scored.json()["choices"][0]["logprobs"]["token_logprobs"]
    assert math.isclose(lps[-1], generated_lp, abs_tol=1e-4), (lps[-1], generated_lp)


def test_streamed_echo_sends_the_scored_prompt_first(base_url, model):
    prompt = "Water boils at one hundred degrees"
    with httpx.stream("POST", base_url + "/v1/completions", timeout=60, json={
            "model": model, "prompt": prompt, "echo": True, "logprobs": 1, "max_tokens": 3,
            "temperature": 0, "stream": True}) as r:
        assert r.status_code == 200
        chunks = [line[6:] for line in r.iter_lines() if line.startswith("data: {")]
    first = json.loads(chunks[0])["choices"][0]
    assert first["text"] == prompt
    assert first["logprobs"]["token_logprobs"][0] is None
    assert len(first["logprobs"]["tokens"]) == len(tokens_of(base_url, prompt))


def test_prompt_logprobs_in_vllm_shape(base_url, model):
    prompt = "Red, green and blue are colours."
    ids = tokens_of(base_url, prompt)
    r = post(base_url, "/v1/completions", {"model": model, "prompt": prompt, "max_tokens": 1,
                                           "prompt_logprobs": 2, "temperature": 0})
    assert r.status_code == 200, r.text
    pl = r.json()["choices"][0]["prompt_logprobs"]
    assert len(pl) == len(ids) and pl[0] is None
    for pos, entry in enumerate(pl[1:], start=1):
        own = entry[str(ids[pos])]
        assert own["rank"] >= 1 and own["logprob"] <= 0
        assert 1 <= len(entry) <= 3
        best = [e for e in entry.values() if e["rank"] == 1]
        assert best and max(e["logprob"] for e in entry.values()) == best[0]["logprob"]
    chat = post(base_url, "/v1/chat/completions", {
        "model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1,
        "prompt_logprobs": 0})
    assert chat.status_code == 200, chat.text
    assert chat.json()["prompt_logprobs"][0] is None


def test_best_of_returns_the_most_likely_of_its_choices(base_url, model):
    body = {"model": model, "prompt": "My favourite animal is", "max_tokens": 6,
            "temperature": 1.0, "seed": 42}
    many = post(base_url, "/v1/completions", {**body, "n": 3, "logprobs": 0}).json()
    best = post(base_url, "/v1/completions", {**body, "best_of": 3}).json()
    assert len(best["choices"]) == 1
    totals = {c["text"]: sum(c["logprobs"]["token_logprobs"]) for c in many["choices"]}
    assert best["choices"][0]["text"] == max(totals, key=totals.get)
    assert best["usage"]["completion_tokens"] == many["usage"]["completion_tokens"]


def test_choices_share_one_prefill_even_without_the_prompt_cache(base_url, model):
    prompt = long_prompt(1)
    n_ids = len(tokens_of(base_url, prompt))
    before = counter(base_url, "sluice_prefix_cache_hits_total")
    r = post(base_url, "/v1/completions", {"model": model, "prompt": prompt, "n": 4,
                                           "max_tokens": 1, "cache_prompt": False})
    assert r.status_code == 200, r.text
    assert len(r.json()["choices"]) == 4
    # Each of the other three reuses at least the prompt's whole 16-token blocks (all but
    # the last token when it shares a sibling's table that is still running).
    gained = counter(base_url, "sluice_prefix_cache_hits_total") - before
    assert 3 * ((n_ids - 1) // 16 * 16) <= gained <= 3 * (n_ids - 1)


def test_a_repeated_prompt_reuses_its_prefix_unless_told_not_to(base_url, model):
    prompt = long_prompt(2)
    n_ids = len(tokens_of(base_url, prompt))
    body = {"model": model, "prompt": prompt, "max_tokens": 8, "temperature": 0}
    first = post(base_url, "/v1/completions", body).json()["choices"][0]["text"]
    hits = counter(base_url, "sluice_prefix_cache_hits_total")
    queries = counter(base_url, "sluice_prefix_cache_queries_total")
    again = post(base_url, "/v1/completions", body).json()["choices"][0]["text"]
    assert again == first
    # Whole cached blocks, all but the last token at most.
    assert counter(base_url, "sluice_prefix_cache_hits_total") - hits == (n_ids - 1) // 16 * 16
    assert counter(base_url, "sluice_prefix_cache_queries_total") - queries == n_ids
    hits = counter(base_url, "sluice_prefix_cache_hits_total")
    off = post(base_url, "/v1/completions", {**body, "cache_prompt": False})
    assert off.json()["choices"][0]["text"] == first
    assert counter(base_url, "sluice_prefix_cache_hits_total") == hits


def test_beam_search_returns_the_n_best_beams(base_url, model):
    body = {"model": model, "prompt": "The three primary colours are", "max_tokens": 8,
            "use_beam_search": True, "best_of": 4, "n": 2, "logprobs": 0}
    r = post(base_url, "/v1/completions", body)
    assert r.status_code == 200, r.text
    choices = r.json()["choices"]
    assert [c["index"] for c in choices] == [0, 1]
    assert choices[0]["text"] != choices[1]["text"]
    for c in choices:
        assert c["finish_reason"] in ("stop", "length")
        assert all(x <= 0 for x in c["logprobs"]["token_logprobs"])
    # Deterministic: the same request gives the same beams.
    assert post(base_url, "/v1/completions", body).json()["choices"] == choices
    # Width 1 is greedy.
    one = post(base_url, "/v1/completions", {**body, "best_of": 1, "n": 1}).json()
    greedy = post(base_url, "/v1/completions", {"model": model, "prompt": body["prompt"],
                                                "max_tokens": 8, "temperature": 0}).json()
    assert one["choices"][0]["text"] == greedy["choices"][0]["text"]


def test_tokenizer_info(base_url):
    r = httpx.get(base_url + "/tokenizer_info", timeout=10)
    assert r.status_code == 200
    info = r.json()
    assert info["eos_token"] and info["model_max_length"] == 1024


@pytest.mark.parametrize("extra,param", [
    ({"best_of": 1, "n": 2}, "best_of"),
    ({"best_of": 3, "stream": True}, "best_of"),
    ({"best_of": 1000}, "best_of"),
    ({"prompt_logprobs": 21}, "prompt_logprobs"),
    ({"prompt_logprobs": -1}, "prompt_logprobs"),
    ({"logprobs": 21, "echo": True}, "logprobs"),
    ({"use_beam_search": True, "temperature": 0.7}, "use_beam_search"),
    ({"use_beam_search": True, "stream": True}, "use_beam_search"),
    ({"use_beam_search": True, "best_of": 64}, "best_of"),
    ({"use_beam_search": True, "n": 9}, "use_beam_search"),
    ({"length_penalty": 0.5}, "length_penalty"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_tokens": 0, "echo": True}, "max_tokens"),
])
def test_bad_scoring_fields_are_400s_naming_them(base_url, model, extra, param):
    r = post(base_url, "/v1/completions", {"model": model, "prompt": "Hello", **extra})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param


def test_streamed_chat_with_prompt_logprobs_is_a_400(base_url, model):
    r = post(base_url, "/v1/chat/completions", {
        "model": model, "messages": [{"role": "user", "content": "Hi"}], "stream": True,
        "prompt_logprobs": 1})
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "prompt_logprobs"
