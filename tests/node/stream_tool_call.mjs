// A streamed tool call through the openai npm package, as a Node user writes it.
// Reads SAGESTREAM_BASE_URL, SAGESTREAM_MODEL and SAGESTREAM_API_KEY (optional); prints what the client saw as one JSON line.
import OpenAI from "openai";

// Tests send to loopback only: without this, a missing variable would make the SDK call its default host.
const baseURL = process.env.SAGESTREAM_BASE_URL;
if (!baseURL || !baseURL.startsWith("http://127.0.0.1:")) throw new Error(`not a loopback URL: ${baseURL}`);

const client = new OpenAI({
  baseURL,
  apiKey: process.env.SAGESTREAM_API_KEY || "unused", // a bearer token where the stack checks one
  maxRetries: 0,
});

const tools = [
  {
    type: "function",
    function: {
      name: "get_weather",
      parameters: {
        type: "object",
        properties: { city: { type: "string" }, days: { type: "integer" } },
        required: ["city", "days"],
      },
    },
  },
];

const stream = await client.chat.completions.create({
  model: process.env.SAGESTREAM_MODEL,
  messages: [{ role: "user", content: "What is the weather in Paris this week?" }],
  tools,
  stream: true,
});

const seen = { ids: new Set(), head: null, fragments: [], finishReason: null };
for await (const chunk of stream) {
  seen.ids.add(chunk.id);
  const choice = chunk.choices[0];
  if (!choice) continue;
  for (const call of choice.delta.tool_calls ?? []) {
    if (call.id) seen.head = { index: call.index, id: call.id, type: call.type, name: call.function?.name };
    else seen.fragments.push(call.function.arguments);
  }
  if (choice.finish_reason) seen.finishReason = choice.finish_reason;
}

// The SDK's own accumulation of the same stream, as ChatCompletionStream users get it.
const runner = client.chat.completions.stream({
  model: process.env.SAGESTREAM_MODEL,
  messages: [{ role: "user", content: "What is the weather in Paris this week?" }],
  tools,
});
const final = await runner.finalChatCompletion();

console.log(
  JSON.stringify({
    ids: [...seen.ids],
    head: seen.head,
    fragments: seen.fragments,
    finishReason: seen.finishReason,
    finalToolCalls: final.choices[0].message.tool_calls,
  }),
);
