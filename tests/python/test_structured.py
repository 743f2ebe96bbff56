"""Structured outputs and tool calls through the official OpenAI SDK, against a real sluice
with the real model. Every output is checked with a JSON Schema validator."""
import json
import re
from enum import Enum
from typing import List

import httpx
import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "pattern": "^[A-Z][a-z]+$"},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "role": {"enum": ["admin", "user", "guest"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 12},
                 "minItems": 1, "maxItems": 3},
        "address": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
            "required": ["city", "zip"],
            "additionalProperties": False,
        },
        "contact": {"anyOf": [
            {"type": "object", "properties": {"email": {"type": "string"}}, "required": ["email"],
             "additionalProperties": False},
            {"type": "null"},
        ]},
    },
    "required": ["name", "age", "role", "tags", "address", "contact"],
    "additionalProperties": False,
}

ASK = [{"role": "user", "content": "Describe a person called Anna who lives in Berlin, as JSON."}]


def person_format(strict=True):
    return {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": strict}}


@pytest.mark.parametrize("temperature", [0, 1.0])
def test_json_schema_whole_and_streamed(client, model, temperature):
    args = dict(model=model, messages=ASK, max_tokens=200, temperature=temperature, seed=3,
                response_format=person_format())
    r = client.chat.completions.create(**args)
    assert r.choices[0].finish_reason == "stop"
    whole = r.choices[0].message.content
    jsonschema.validate(json.loads(whole), PERSON)
    parts = []
    for chunk in client.chat.completions.create(stream=True, **args):
        for ch in chunk.choices:
            parts.append(ch.delta.content or "")
    assert "".join(parts) == whole


class Role(str, Enum):
    admin = "admin"
    user = "user"


class City(BaseModel):
    name: str
    population: int = Field(ge=0)


class Report(BaseModel):
    title: str
    role: Role
    cities: List[City] = Field(min_length=1, max_length=2)


def test_sdk_parse_with_pydantic(client, model):
    r = client.chat.completions.parse(
        model=model, messages=[{"role": "user", "content": "Report on two German cities."}],
        response_format=Report, max_tokens=200, temperature=0)
    parsed = r.choices[0].message.parsed
    assert isinstance(parsed, Report)
    jsonschema.validate(json.loads(r.choices[0].message.content), Report.model_json_schema())


def test_json_object_on_completions(client, model):
    r = client.completions.create(model=model, prompt="A JSON object describing a cat:", max_tokens=80,
                                  temperature=0, extra_body={"response_format": {"type": "json_object"}})
    assert r.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(r.choices[0].text), dict)


@pytest.mark.parametrize("field", ["structured_outputs", "guided"])
def test_vllm_regex_choice_and_grammar(client, model, field):
    def body(kind, value):
        if field == "guided":
            return {"guided_" + kind: value}
        return {"structured_outputs": {kind: value}}

    pattern = r"[0-9]{3}-[0-9]{4}"
    r = client.completions.create(model=model, prompt="Call me at", max_tokens=20, temperature=0.7, seed=5,
                                  extra_body=body("regex", pattern))
    assert re.fullmatch(pattern, r.choices[0].text), r.choices[0].text
    r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Is water wet?"}],
                                       max_tokens=10, temperature=0, extra_body=body("choice", ["yes", "no"]))
    assert r.choices[0].message.content in ("yes", "no")
    grammar = 'start: "The answer is " NUMBER "."\nNUMBER: /[1-9][0-9]?/'
    r = client.completions.create(model=model, prompt="2 + 2 =", max_tokens=20, temperature=0,
                                  extra_body=body("grammar", grammar))
    assert re.fullmatch(r"The answer is [1-9][0-9]?\.", r.choices[0].text), r.choices[0].text


def test_too_few_tokens_end_with_length(client, model):
    r = client.chat.completions.create(model=model, messages=ASK, max_tokens=5, temperature=0,
                                       response_format=person_format())
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 5


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather of a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
@pytest.mark.parametrize("extra,param", [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "strin"}}}},
     "response_format"),
    ({"guided_regex": "(unclosed"}, "guided_regex"),
    ({"structured_outputs": {"grammar": "start: undefined_rule"}}, "structured_outputs"),
    ({"guided_choice": []}, "guided_choice"),
    ({"guided_regex": "a", "guided_choice": ["a"]}, "guided_choice"),
    ({"tools": [{"type": "function", "function": {"name": "f"}}],
      "tool_choice": {"type": "function", "function": {"name": "g"}}}, "tool_choice"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "obj"}}}]}, "tools"),
    ({"messages": [{"role": "user", "content": "hi"},
                   {"role": "tool", "tool_call_id": "call_nope", "content": "42"}]}, "messages"),
    ({"guided_choice": ["yes", "no"], "ignore_eos": True}, "ignore_eos"),
    ({"guided_choice": ["yes", "no"], "min_tokens": 3}, "min_tokens"),
    ({"tools": [WEATHER], "tool_choice": "required", "min_tokens": 3}, "min_tokens"),
    ({"tools": [WEATHER], "response_format": {"type": "json_object"}}, "response_format"),
])
def test_bad_constraints_are_400_naming_the_field(base_url, model, extra, param):
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
    body.update(extra)
    r = httpx.post(base_url + "/v1/chat/completions", json=body, timeout=30)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param
    # The server keeps serving.
    ok = httpx.post(base_url + "/v1/chat/completions", json={
        "model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}, timeout=30)
    assert ok.status_code == 200


TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"],
                       "additionalProperties": False},
    },
}
TOOLS = [WEATHER, TIME]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
Q = [{"role": "user", "content": "What is the weather in Paris?"}]


def check_calls(calls):
    assert calls
    for c in calls:
        assert c.type == "function" and c.id.startswith("call_")
        jsonschema.validate(json.loads(c.function.arguments), SCHEMAS[c.function.name])


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_time"}}])
def test_required_and_named_calls_always_parse(client, model, choice):
    r = client.chat.completions.create(model=model, messages=Q, tools=TOOLS, tool_choice=choice,
                                       parallel_tool_calls=False, max_tokens=80, temperature=0.8, seed=1)
    c = r.choices[0]
    assert c.finish_reason == "tool_calls"
    assert c.message.content is None
    check_calls(c.message.tool_calls)
    assert len(c.message.tool_calls) == 1
    if isinstance(choice, dict):
        assert c.message.tool_calls[0].function.name == "get_time"


def test_streamed_calls_assemble_like_whole(client, model):
    args = dict(model=model, messages=Q, tools=TOOLS, tool_choice="required", max_tokens=120, temperature=0)
    whole = client.chat.completions.create(**args).choices[0]
    calls, finish, roles = {}, None, []
    for chunk in client.chat.completions.create(stream=True, **args):
        for ch in chunk.choices:
            finish = ch.finish_reason or finish
            for d in ch.delta.tool_calls or []:
                if d.id:
                    calls[d.index] = {"id": d.id, "name": d.function.name, "arguments": ""}
                    roles.append(d.type)
                calls[d.index]["arguments"] += d.function.arguments or ""
    assert finish == whole.finish_reason
    got = [(c["name"], c["arguments"]) for _, c in sorted(calls.items())]
    want = [(c.function.name, c.function.arguments) for c in whole.message.tool_calls or []]
    assert got == want and got
    assert set(roles) == {"function"}
    for name, arguments in got:
        jsonschema.validate(json.loads(arguments), SCHEMAS[name])


def test_none_and_auto(client, model):
    r = client.chat.completions.create(model=model, messages=Q, tools=TOOLS, tool_choice="none", max_tokens=20,
                                       temperature=0)
    assert r.choices[0].message.tool_calls is None
    assert r.choices[0].message.content
    r = client.chat.completions.create(model=model, messages=Q, tools=TOOLS, max_tokens=60, temperature=0)
    c = r.choices[0]
    if c.message.tool_calls:
        assert c.finish_reason == "tool_calls"
        check_calls(c.message.tool_calls)
    else:
        assert c.message.content


def test_history_with_calls_and_tool_answers(client, model):
    first = client.chat.completions.create(model=model, messages=Q, tools=TOOLS, tool_choice="required",
                                           parallel_tool_calls=False, max_tokens=80, temperature=0)
    call = first.choices[0].message.tool_calls[0]
    msgs = Q + [
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature": 21})},
    ]
    r = client.chat.completions.create(model=model, messages=msgs, tools=TOOLS, tool_choice="none",
                                       max_tokens=30, temperature=0)
    assert r.choices[0].message.content


def test_constrained_requests_are_counted(base_url, client, model):
    client.completions.create(model=model, prompt="x", max_tokens=3, extra_body={"guided_choice": ["a", "b"]})
    text = httpx.get(base_url + "/metrics").text
    # Engine series carry a `model` label too.
    assert re.search(r'sluice_constrained_requests_total\{[^}]*kind="choice"[^}]*\} [1-9]', text)
    assert re.search(r"sluice_grammar_mask_duration_seconds_count\{[^}]*\} [1-9]", text)


def test_sdk_stream_helper_assembles_tool_calls(client, model):
    """The SDK's own stream helper (`chat.completions.stream`) accumulates the deltas."""
    args = dict(model=model, messages=Q, tools=TOOLS, tool_choice="required", parallel_tool_calls=False,
                max_tokens=80, temperature=0)
    whole = client.chat.completions.create(**args).choices[0].message.tool_calls
    with client.chat.completions.stream(**args) as stream:
        final = stream.get_final_completion()
    calls = final.choices[0].message.tool_calls
    assert final.choices[0].finish_reason == "tool_calls"
    check_calls(calls)
    assert [(c.function.name, c.function.arguments) for c in calls] == \
        [(c.function.name, c.function.arguments) for c in whole]


def literal(text):
    """`text` as a regex (metacharacters escaped; Rust's regex refuses Python's `\\ `)."""
    return "".join("\\" + c if c in ".^$*+?()[]{}|\\" else c for c in text)


def test_logprobs_stay_those_of_the_raw_distribution(client, model):
    """A mask changes what may be chosen, not the reported log-probabilities."""
    prompt = "The capital of France is"
    free = client.completions.create(model=model, prompt=prompt, max_tokens=1, temperature=0, logprobs=3)
    first = free.choices[0].logprobs.tokens[0]
    held = client.completions.create(model=model, prompt=prompt, max_tokens=1, temperature=0, logprobs=3,
                                     extra_body={"guided_regex": literal(first) + "[a-z]*"})
    assert held.choices[0].logprobs.tokens == [first]
    assert held.choices[0].logprobs.token_logprobs == pytest.approx(free.choices[0].logprobs.token_logprobs)
    assert held.choices[0].logprobs.top_logprobs == free.choices[0].logprobs.top_logprobs
    # A second-best token forced by the grammar keeps its raw (lower) log-probability.
    alts = sorted(free.choices[0].logprobs.top_logprobs[0].items(), key=lambda kv: -kv[1])
    second, lp = alts[1]
    forced = client.completions.create(model=model, prompt=prompt, max_tokens=1, temperature=0, logprobs=3,
                                       extra_body={"guided_choice": [second]})
    assert forced.choices[0].logprobs.token_logprobs[0] == pytest.approx(lp, abs=1e-4)


def test_an_unsupported_schema_keyword_is_named(base_url, model):
    schema = {"type": "object", "if": {"properties": {"a": {"const": 1}}}, "then": {"required": ["b"]}}
    r = httpx.post(base_url + "/v1/chat/completions", timeout=30, json={
        "model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5,
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["param"] == "response_format"
    assert '"if"' in err["message"] and '"then"' in err["message"]
