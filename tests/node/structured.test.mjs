// The Vercel AI SDK (`ai` + `@ai-sdk/openai-compatible`) against a real sluice with the real
// model: generateObject with a zod schema, generateText with a zod tool and a required call.
// Run by scripts/test-node, which starts the server and sets SLUICE_URL.
import assert from "node:assert/strict";
import { test } from "node:test";

import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { generateObject, generateText, tool } from "ai";
import { z } from "zod";

const sluice = createOpenAICompatible({
  name: "sluice",
  baseURL: `${process.env.SLUICE_URL}/v1`,
  supportsStructuredOutputs: true,
});
const model = sluice.chatModel(process.env.SLUICE_MODEL);

test("generateObject returns an object valid against the zod schema", async () => {
  const schema = z.object({
    name: z.string(),
    age: z.number().int().min(0).max(120),
    hobbies: z.array(z.enum(["chess", "hiking", "music"])).min(1).max(3),
  });
  const { object, finishReason } = await generateObject({
    model,
    schema,
    prompt: "Describe a person who likes games.",
    temperature: 0,
    maxOutputTokens: 120,
  });
  assert.equal(finishReason, "stop");
  assert.deepEqual(schema.parse(object), object);
});

test("generateText with toolChoice required calls the zod tool with valid arguments", async () => {
  const args = z.object({ city: z.string(), unit: z.enum(["celsius", "fahrenheit"]) });
  const { toolCalls, finishReason } = await generateText({
    model,
    prompt: "What is the weather in Paris?",
    tools: { getWeather: tool({ description: "The weather of a city", inputSchema: args }) },
    toolChoice: "required",
    temperature: 0,
    maxOutputTokens: 120,
  });
  assert.ok(toolCalls.length >= 1);
  for (const c of toolCalls) {
    assert.equal(c.toolName, "getWeather");
    assert.deepEqual(args.parse(c.input), c.input);
  }
  assert.ok(["tool-calls", "length"].includes(finishReason));
});
