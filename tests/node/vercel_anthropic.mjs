// The Vercel AI SDK's Anthropic provider (@ai-sdk/anthropic) streaming through the local stack, as an app using
// `streamText` runs it: a text answer with the model's thinking, then a tool call. The provider validates every
// event against its own zod schemas (a null usage count made it fail every stream).
// Reads SAGESTREAM_BASE_URL and SAGESTREAM_MODEL; prints what the app saw as one JSON line.
import { createAnthropic } from "@ai-sdk/anthropic";
import { jsonSchema, streamText, tool } from "ai";

// Tests send to loopback only: without this, a missing variable would make the provider call its default host.
const baseURL = process.env.SAGESTREAM_BASE_URL;
if (!baseURL || !baseURL.startsWith("http://127.0.0.1:")) throw new Error(`not a loopback URL: ${baseURL}`);

const anthropic = createAnthropic({ baseURL, apiKey: "unused" });
const model = anthropic(process.env.SAGESTREAM_MODEL);

async function run(options) {
  const parts = [];
  const result = streamText({ model, maxRetries: 0, ...options, onError: ({ error }) => parts.push({ type: "error", error: String(error) }) });
  for await (const part of result.fullStream) parts.push(part);
  return {
    types: [...new Set(parts.map((p) => p.type))],
    errors: parts.filter((p) => p.type === "error").map((p) => String(p.error)),
    text: await result.text,
    reasoning: (await result.reasoning).map((r) => r.text).join(""),
    toolCalls: (await result.toolCalls).map((c) => ({ name: c.toolName, input: c.input })),
    finishReason: await result.finishReason,
    usage: await result.usage,
  };
}

const text = await run({ prompt: "Tell me about rivers" });
const weather = tool({
  description: "The weather in a city",
  inputSchema: jsonSchema({ type: "object", properties: { city: { type: "string" } }, required: ["city"] }),
});
const call = await run({ prompt: "What is the weather in Paris?", tools: { get_weather: weather } });
console.log(JSON.stringify({ text, call }));
