// A streamed tool use through the @anthropic-ai/sdk npm package, as a Node user writes it.
// Reads SAGESTREAM_BASE_URL and SAGESTREAM_MODEL; prints what the client saw as one JSON line.
import Anthropic from "@anthropic-ai/sdk";

// Tests send to loopback only: without this, a missing variable would make the SDK call its default host.
const baseURL = process.env.SAGESTREAM_BASE_URL;
if (!baseURL || !baseURL.startsWith("http://127.0.0.1:")) throw new Error(`not a loopback URL: ${baseURL}`);

const client = new Anthropic({ baseURL, apiKey: "unused", maxRetries: 0 });

const tools = [
  {
    name: "get_weather",
    description: "The weather in a city",
    input_schema: {
      type: "object",
      properties: { city: { type: "string" }, days: { type: "integer" } },
      required: ["city", "days"],
    },
  },
];
const messages = [{ role: "user", content: "What is the weather in Paris this week?" }];

// The raw events, as a client that reads the stream itself sees them.
const stream = await client.messages.create({
  model: process.env.SAGESTREAM_MODEL,
  max_tokens: 256,
  messages,
  tools,
  stream: true,
});
const seen = { types: [], head: null, fragments: [], stopReason: null };
for await (const event of stream) {
  seen.types.push(event.type);
  if (event.type === "content_block_start" && event.content_block.type === "tool_use") {
    seen.head = { index: event.index, id: event.content_block.id, name: event.content_block.name };
  }
  if (event.type === "content_block_delta" && event.delta.type === "input_json_delta") {
    seen.fragments.push(event.delta.partial_json);
  }
  if (event.type === "message_delta") seen.stopReason = event.delta.stop_reason;
}

// The SDK's own accumulation of the same request, as MessageStream users get it.
const final = await client.messages.stream({ model: process.env.SAGESTREAM_MODEL, max_tokens: 256, messages, tools }).finalMessage();

console.log(JSON.stringify({ ...seen, finalContent: final.content, finalStopReason: final.stop_reason }));
