"""The official OpenAI Python SDK against a real sluice with the real model."""
import httpx
import openai
import pytest


def count_tokens(base_url, text):
    return httpx.post(base_url + "/tokenize", json={"prompt": text}).json()["count"]


def test_models(client, model):
    assert model == "SmolLM2-135M-Instruct.Q4_1"
    assert client.models.retrieve(model).id == model


def test_completion_length_and_usage(client, model, base_url):
    prompt = "The capital of France is"
    r = client.completions.create(model=model, prompt=prompt, max_tokens=7, temperature=0, logprobs=2,
                                  extra_body={"ignore_eos": True})
    c = r.choices[0]
    assert c.finish_reason == "length"
    assert r.usage.prompt_tokens == count_tokens(base_url, prompt)
    assert r.usage.completion_tokens == 7 == len(c.logprobs.tokens)
    assert r.usage.total_tokens == r.usage.prompt_tokens + 7
    assert "".join(c.logprobs.tokens) == c.text
    assert all(len(t) == 2 for t in c.logprobs.top_logprobs)
    assert r.system_fingerprint


def test_completion_stream_equals_whole(client, model):
    args = dict(model=model, prompt="Once upon a time", max_tokens=20, temperature=0.9, seed=11)
    whole = client.completions.create(**args).choices[0].text
    parts, finish = [], None
    for chunk in client.completions.create(stream=True, **args):
        for ch in chunk.choices:
            parts.append(ch.text)
            finish = ch.finish_reason or finish
    assert "".join(parts) == whole
    assert finish in ("stop", "length")


def test_chat_whole_and_streamed(client, model, base_url):
    msgs = [{"role": "user", "content": "What is the capital of Germany?"}]
    r = client.chat.completions.create(model=model, messages=msgs, temperature=0, max_tokens=40)
    text = r.choices[0].message.content
    assert r.choices[0].message.role == "assistant"
    assert "Berlin" in text
    assert r.choices[0].finish_reason == "stop"
    rendered = httpx.post(base_url + "/tokenize", json={"messages": msgs}).json()["count"]
    assert r.usage.prompt_tokens == rendered
    stream = client.chat.completions.create(model=model, messages=msgs, temperature=0, max_tokens=40,
                                            stream=True, stream_options={"include_usage": True})
    parts, usage = [], None
    for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
        for ch in chunk.choices:
            if ch.delta.content:
                parts.append(ch.delta.content)
    assert "".join(parts) == text
    assert usage.completion_tokens == r.usage.completion_tokens


def test_chat_logprobs_and_n(client, model):
    msgs = [{"role": "user", "content": "Say something."}]
    r = client.chat.completions.create(model=model, messages=msgs, max_tokens=8, n=2, temperature=1.0,
                                       seed=3, logprobs=True, top_logprobs=4)
    assert len(r.choices) == 2
    assert r.choices[0].message.content != r.choices[1].message.content
    for c in r.choices:
        lp = c.logprobs.content
        assert len(lp) >= 1 and all(len(t.top_logprobs) == 4 for t in lp)
        assert all(t.logprob <= 0 for t in lp)
        assert "".join(t.token for t in lp) == c.message.content


def test_seed_reproducible_and_stop(client, model):
    args = dict(model=model, prompt="List of fruits: apple,", max_tokens=16, temperature=1.0, top_p=0.9)
    a = client.completions.create(seed=42, **args).choices[0].text
    b = client.completions.create(seed=42, **args).choices[0].text
    assert a == b
    full = client.completions.create(model=model, prompt="1, 2, 3, 4,", max_tokens=12, temperature=0).choices[0]
    assert " 6" in full.text
    cut = client.completions.create(model=model, prompt="1, 2, 3, 4,", max_tokens=12, temperature=0, stop=[" 6"])
    assert cut.choices[0].finish_reason == "stop"
    assert cut.choices[0].text == full.text[: full.text.index(" 6")]


def test_errors_raise_sdk_exceptions(client, model):
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=model, prompt="x", temperature=5)
    assert e.value.body["param"] == "temperature"
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="no-such-model", prompt="x")


def test_embeddings_through_the_sdk():
    """`embeddings.create` as the SDK sends it (base64 unless asked for floats)."""
    import math

    from openai import OpenAI

    from conftest import serve

    with serve("--pooling", "mean", "--slots", "2", "--context", "512") as url:
        client = OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        texts = ["The cat sat on the mat.", "A cat was sitting on a mat.", "Stock prices fell."]
        r = client.embeddings.create(model=client.models.list().data[0].id, input=texts)
        vecs = [d.embedding for d in r.data]
        assert [d.index for d in r.data] == [0, 1, 2]
        assert all(len(v) == 576 and abs(math.fsum(x * x for x in v) - 1) < 1e-4 for v in vecs)
        dot = lambda a, b: math.fsum(x * y for x, y in zip(a, b))  # noqa: E731
        # The two sentences about a cat are closer to each other than to the third.
        assert dot(vecs[0], vecs[1]) > dot(vecs[0], vecs[2])
        assert r.usage.prompt_tokens == r.usage.total_tokens > 0
        floats = client.embeddings.create(model=r.model, input=texts[0], encoding_format="float")
        assert max(abs(a - b) for a, b in zip(floats.data[0].embedding, vecs[0])) < 1e-6
        short = client.embeddings.create(model=r.model, input=texts[0], dimensions=32)
        assert len(short.data[0].embedding) == 32
        with pytest.raises(openai.BadRequestError) as e:
            client.embeddings.create(model=r.model, input="")
        assert e.value.body["param"] == "input"
