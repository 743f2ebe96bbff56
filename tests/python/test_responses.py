"""OpenAI's Responses API (POST /v1/responses) through the official openai SDK, against the
real server and model: whole and streamed (the SDK's `responses.stream()` helper checks the
event sequence, output indexes and item ids), incomplete answers, structured output,
function tools over several turns, statelessness, errors. Greedy answers are compared with
the chat endpoint's on the same conversation: both render the same chat template."""
import json

import httpx
import openai
import pydantic
import pytest

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The current weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


def chat_text(client, model, messages, max_tokens):
    r = client.chat.completions.create(
        model=model, messages=messages, max_tokens=max_tokens, temperature=0
    )
    return r.choices[0].message.content, r.choices[0].finish_reason


def test_create_matches_chat_and_reports_usage(client, model):
    r = client.responses.create(
        model=model, input="What is the capital of France?", max_output_tokens=24, temperature=0
    )
    text, finish = chat_text(
        client, model, [{"role": "user", "content": "What is the capital of France?"}], 24
    )
    assert r.object == "response" and r.id.startswith("resp_")
    assert r.output_text == text and text
    assert r.status == ("completed" if finish == "stop" else "incomplete")
    assert r.output[0].type == "message" and r.output[0].role == "assistant"
    assert r.output[0].content[0].type == "output_text"
    assert r.usage.input_tokens > 0 and 0 < r.usage.output_tokens <= 24
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    assert r.store is False


def test_instructions_and_input_items_are_the_conversation(client, model):
    items = [
        {"role": "user", "content": "My name is Ada."},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Hello Ada!"}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "What is my name?"}]},
    ]
    r = client.responses.create(
        model=model, instructions="Answer briefly.", input=items, max_output_tokens=20,
        temperature=0,
    )
    text, _ = chat_text(
        client,
        model,
        [
            {"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": "My name is Ada."},
            {"role": "assistant", "content": "Hello Ada!"},
            {"role": "user", "content": "What is my name?"},
        ],
        20,
    )
    assert r.output_text == text
    assert r.instructions == "Answer briefly."


def test_budget_ends_incomplete(client, model):
    r = client.responses.create(
        model=model, input="Write a long story about a dragon.", max_output_tokens=5,
        temperature=0,
    )
    assert r.status == "incomplete"
    assert r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 5
    assert r.output[0].status == "incomplete"


def test_stream_helper_sees_the_documented_sequence(client, model):
    prompt = "Say hello in one short sentence."
    whole = client.responses.create(model=model, input=prompt, max_output_tokens=120, temperature=0)
    assert whole.status == "completed", "the prompt must end by itself within the budget"
    deltas, kinds, seqs = [], [], []
    with client.responses.stream(
        model=model, input=prompt, max_output_tokens=120, temperature=0
    ) as stream:
        for ev in stream:
            kinds.append(ev.type)
            seqs.append(ev.sequence_number)
            if ev.type == "response.output_text.delta":
                assert (ev.output_index, ev.content_index) == (0, 0)
                deltas.append(ev.delta)
            if ev.type == "response.output_text.done":
                assert ev.text == "".join(deltas)
        final = stream.get_final_response()
    assert seqs == list(range(len(seqs)))
    head = [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    tail = [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert kinds[:4] == head and kinds[-4:] == tail
    assert set(kinds[4:-4]) == {"response.output_text.delta"} and len(deltas) > 1
    assert final.output_text == "".join(deltas) == whole.output_text
    assert final.status == "completed" and final.usage.output_tokens == whole.usage.output_tokens


def test_streamed_budget_ends_with_response_incomplete(client, model):
    events = list(
        client.responses.create(
            model=model, input="Write a long story.", max_output_tokens=6, stream=True,
            temperature=0,
        )
    )
    last = events[-1]
    assert last.type == "response.incomplete"
    assert last.response.status == "incomplete"
    assert last.response.incomplete_details.reason == "max_output_tokens"
    assert last.response.usage.output_tokens == 6
    done = [e for e in events if e.type == "response.output_item.done"]
    assert done[0].item.status == "incomplete"


class City(pydantic.BaseModel):
    name: str
    population: int


def test_text_format_json_schema_is_followed(client, model):
    r = client.responses.parse(
        model=model,
        input="Give a city and its population as JSON.",
        text_format=City,
        max_output_tokens=60,
        temperature=0,
    )
    assert r.status == "completed"
    city = r.output_parsed
    assert isinstance(city, City)
    assert json.loads(r.output_text) == city.model_dump()


def test_function_call_round_trip(client, model):
    r = client.responses.create(
        model=model,
        input="What is the weather in Paris?",
        tools=[WEATHER],
        tool_choice="required",
        parallel_tool_calls=False,
        temperature=0,
        max_output_tokens=100,
    )
    calls = [o for o in r.output if o.type == "function_call"]
    assert len(calls) == 1 and r.status == "completed"
    call = calls[0]
    assert call.name == "get_weather" and call.call_id.startswith("call_")
    assert isinstance(json.loads(call.arguments)["city"], str)
    follow = client.responses.create(
        model=model,
        input=[
            {"role": "user", "content": "What is the weather in Paris?"},
            {"type": "function_call", "call_id": call.call_id, "name": call.name,
             "arguments": call.arguments},
            {"type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 21 C"},
        ],
        tools=[WEATHER],
        tool_choice="none",
        max_output_tokens=30,
        temperature=0,
    )
    assert follow.output[0].type == "message" and follow.output_text


def test_streamed_function_call(client, model):
    with client.responses.stream(
        model=model,
        input="What is the weather in Rome?",
        tools=[WEATHER],
        tool_choice={"type": "function", "name": "get_weather"},
        temperature=0,
        max_output_tokens=100,
    ) as stream:
        kinds = [ev.type for ev in stream]
        final = stream.get_final_response()
    assert "response.function_call_arguments.delta" in kinds
    assert "response.function_call_arguments.done" in kinds
    call = [o for o in final.output if o.type == "function_call"][0]
    assert call.name == "get_weather" and "city" in json.loads(call.arguments)


def test_stateless_fields_are_refused(client, model):
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=model, input="hi", store=True)
    assert e.value.body["param"] == "store"
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=model, input="hi", previous_response_id="resp_123")
    assert e.value.body["param"] == "previous_response_id"


def test_errors_in_the_openai_shape(client, model, base_url):
    client.responses.create(model=model, input="hi", max_output_tokens=2)
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="no-such-model", input="hi")
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=model, input="hi", max_output_tokens=-3)
    assert e.value.body["param"] == "max_output_tokens"
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=model, input=[{"role": "user", "content": [
            {"type": "input_image", "image_url": "http://x/y.png"}]}])
    assert e.value.body["param"] == "input"
    r = httpx.post(base_url + "/v1/responses", json={"input": "hi", "tools": [{"type": "web_search"}]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "tools"
    metrics = httpx.get(base_url + "/metrics").text
    assert 'sluice_http_requests_total{route="/v1/responses",status="200"}' in metrics
    assert 'sluice_http_requests_total{route="/v1/responses",status="400"}' in metrics
