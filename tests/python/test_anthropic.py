"""Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens) through the
official anthropic SDK, against the real server and model: whole and streamed answers,
stop reasons, stop sequences, tools over two turns, token counting, x-api-key, and errors in
Anthropic's shape. Greedy answers are compared with the chat endpoint's on the same
conversation."""
import json

import anthropic
import httpx
import pydantic
import pytest

from conftest import serve

WEATHER = {
    "name": "get_weather",
    "description": "The current weather in a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


# The SDK no longer has sampling arguments; older clients send them and the server takes them.
GREEDY = {"temperature": 0}


@pytest.fixture(scope="module")
def claude(base_url):
    return anthropic.Anthropic(base_url=base_url, api_key="unused", max_retries=0)


def chat(client, model, messages, max_tokens, **kw):
    r = client.chat.completions.create(
        model=model, messages=messages, max_tokens=max_tokens, temperature=0, **kw
    )
    return r.choices[0]


def test_create_matches_chat(claude, client, model):
    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    m = claude.messages.create(
        model=model, max_tokens=24, system="Answer briefly.", messages=msgs, extra_body=GREEDY
    )
    c = chat(client, model, [{"role": "system", "content": "Answer briefly."}, *msgs], 24)
    assert m.type == "message" and m.role == "assistant" and m.id.startswith("msg_")
    assert m.content[0].type == "text" and m.content[0].text == c.message.content
    assert m.stop_reason == {"stop": "end_turn", "length": "max_tokens"}[c.finish_reason]
    assert m.stop_sequence is None
    assert m.usage.input_tokens > 0 and 0 < m.usage.output_tokens <= 24


def test_system_blocks_and_multi_turn(claude, client, model):
    m = claude.messages.create(
        model=model,
        max_tokens=16,
        extra_body=GREEDY,
        system=[{"type": "text", "text": "Answer briefly."}],
        messages=[
            {"role": "user", "content": [{"type": "text", "text": "My name is Ada."}]},
            {"role": "assistant", "content": "Hello Ada!"},
            {"role": "user", "content": "What is my name?"},
        ],
    )
    c = chat(
        client,
        model,
        [
            {"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": "My name is Ada."},
            {"role": "assistant", "content": "Hello Ada!"},
            {"role": "user", "content": "What is my name?"},
        ],
        16,
    )
    assert m.content[0].text == c.message.content


def test_max_tokens_and_stop_sequence(claude, model):
    msgs = [{"role": "user", "content": "Write a long story about a dragon and a knight."}]
    long = claude.messages.create(model=model, max_tokens=40, messages=msgs, extra_body=GREEDY)
    assert long.stop_reason == "max_tokens" and long.usage.output_tokens == 40
    text = long.content[0].text
    words = [w for w in text.split() if len(w) > 3]
    stop = words[len(words) // 2]
    m = claude.messages.create(
        model=model, max_tokens=40, messages=msgs, stop_sequences=[stop], extra_body=GREEDY
    )
    assert m.stop_reason == "stop_sequence"
    assert m.stop_sequence == stop
    assert m.content[0].text == text[: text.index(stop)]


def test_stream_matches_whole_answer(claude, model):
    msgs = [{"role": "user", "content": "Say hello in one short sentence."}]
    whole = claude.messages.create(model=model, max_tokens=100, messages=msgs, extra_body=GREEDY)
    kinds, pieces = [], []
    with claude.messages.stream(model=model, max_tokens=100, messages=msgs, extra_body=GREEDY) as s:
        for ev in s:
            kinds.append(ev.type)
            if ev.type == "content_block_delta":
                assert ev.delta.type == "text_delta" and ev.index == 0
                pieces.append(ev.delta.text)
        final = s.get_final_message()
    assert kinds[0] == "message_start"
    assert kinds[1] == "content_block_start"
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert len(pieces) > 1
    assert final.content[0].text == "".join(pieces) == whole.content[0].text
    assert final.stop_reason == whole.stop_reason
    assert final.usage.output_tokens == whole.usage.output_tokens


def test_streamed_text_stream_and_max_tokens(claude, model):
    with claude.messages.stream(
        model=model, max_tokens=7, messages=[{"role": "user", "content": "Tell a story."}],
        extra_body=GREEDY,
    ) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert final.stop_reason == "max_tokens" and final.usage.output_tokens == 7
    assert final.content[0].text == text


def test_count_tokens_is_the_prompt_of_create(claude, model):
    kw = dict(
        model=model,
        system="Be brief.",
        messages=[{"role": "user", "content": "How many legs has a spider?"}],
    )
    n = claude.messages.count_tokens(**kw).input_tokens
    m = claude.messages.create(max_tokens=1, **kw)
    assert n == m.usage.input_tokens > 5
    with_tools = claude.messages.count_tokens(tools=[WEATHER], **kw).input_tokens
    assert with_tools > n


def test_tool_use_round_trip(claude, model):
    m = claude.messages.create(
        model=model,
        max_tokens=100,
        extra_body=GREEDY,
        tools=[WEATHER],
        tool_choice={"type": "any", "disable_parallel_tool_use": True},
        messages=[{"role": "user", "content": "What is the weather in Paris?"}],
    )
    assert m.stop_reason == "tool_use"
    use = [b for b in m.content if b.type == "tool_use"][0]
    assert use.name == "get_weather" and isinstance(use.input["city"], str)
    assert use.id.startswith("toolu_")
    follow = claude.messages.create(
        model=model,
        max_tokens=30,
        extra_body=GREEDY,
        tools=[WEATHER],
        tool_choice={"type": "none"},
        messages=[
            {"role": "user", "content": "What is the weather in Paris?"},
            {"role": "assistant", "content": [b.model_dump() for b in m.content]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": use.id, "content": "Sunny, 21 C"}]},
        ],
    )
    assert follow.content[0].type == "text" and follow.stop_reason in ("end_turn", "max_tokens")


def test_streamed_tool_use(claude, model):
    with claude.messages.stream(
        model=model,
        max_tokens=100,
        extra_body=GREEDY,
        tools=[WEATHER],
        tool_choice={"type": "tool", "name": "get_weather"},
        messages=[{"role": "user", "content": "Weather in Rome?"}],
    ) as s:
        deltas = [ev.delta.type for ev in s if ev.type == "content_block_delta"]
        final = s.get_final_message()
    assert "input_json_delta" in deltas
    use = [b for b in final.content if b.type == "tool_use"][0]
    assert use.name == "get_weather" and "city" in use.input
    assert final.stop_reason == "tool_use"


class City(pydantic.BaseModel):
    name: str
    population: int


def test_output_format_json_schema(claude, model):
    m = claude.messages.parse(
        model=model,
        max_tokens=60,
        output_format=City,
        extra_body=GREEDY,
        messages=[{"role": "user", "content": "Give a city and its population as JSON."}],
    )
    assert m.stop_reason == "end_turn"
    assert isinstance(m.parsed_output, City)
    assert json.loads(m.content[0].text) == m.parsed_output.model_dump()


def test_errors_in_anthropic_shape(claude, model, base_url):
    claude.messages.create(model=model, max_tokens=2, messages=[{"role": "user", "content": "hi"}])
    claude.messages.count_tokens(model=model, messages=[{"role": "user", "content": "hi"}])
    r = httpx.post(base_url + "/v1/messages", json={
        "model": model, "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 400
    body = r.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in body["error"]["message"]
    with pytest.raises(anthropic.BadRequestError) as e:
        claude.messages.create(model=model, max_tokens=10, messages=[])
    assert e.value.body["error"]["type"] == "invalid_request_error"
    with pytest.raises(anthropic.NotFoundError) as e:
        claude.messages.create(model="claude-nope", max_tokens=10,
                               messages=[{"role": "user", "content": "hi"}])
    assert e.value.body["type"] == "error"
    with pytest.raises(anthropic.BadRequestError):
        claude.messages.create(model=model, max_tokens=10, messages=[{"role": "user", "content": [
            {"type": "image", "source": {"type": "url", "url": "http://x/y.png"}}]}])
    r = httpx.post(base_url + "/v1/messages", content=b"{not json",
                   headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    metrics = httpx.get(base_url + "/metrics").text
    assert 'sluice_http_requests_total{route="/v1/messages",status="200"}' in metrics
    assert 'sluice_http_requests_total{route="/v1/messages/count_tokens",status="200"}' in metrics


def test_x_api_key():
    with serve("--api-key", "sk-test-key", "--slots", "2", "--context", "512") as url:
        ok = anthropic.Anthropic(base_url=url, api_key="sk-test-key", max_retries=0)
        model = httpx.get(url + "/v1/models",
                          headers={"x-api-key": "sk-test-key"}).json()["data"][0]["id"]
        m = ok.messages.create(model=model, max_tokens=4,
                               messages=[{"role": "user", "content": "hi"}])
        assert m.usage.output_tokens > 0
        bad = anthropic.Anthropic(base_url=url, api_key="wrong", max_retries=0)
        with pytest.raises(anthropic.AuthenticationError) as e:
            bad.messages.create(model=model, max_tokens=4,
                                messages=[{"role": "user", "content": "hi"}])
        assert e.value.body["error"]["type"] == "authentication_error"
        assert json.loads(json.dumps(e.value.body))["type"] == "error"
