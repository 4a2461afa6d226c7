// The Responses API through the openai npm package, as a Node user writes it: a streamed tool call, then the
// tool's result sent back with function_call_output and the answer read through the SDK's stream helper.
// Reads SAGESTREAM_BASE_URL and SAGESTREAM_MODEL; prints what the client saw as one JSON line.
import OpenAI from "openai";

// Tests send to loopback only: without this, a missing variable would make the SDK call its default host.
const baseURL = process.env.SAGESTREAM_BASE_URL;
if (!baseURL || !baseURL.startsWith("http://127.0.0.1:")) throw new Error(`not a loopback URL: ${baseURL}`);

const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0 });
const model = process.env.SAGESTREAM_MODEL;
const ask = "What is the weather in Paris this week?";
const tools = [
  {
    type: "function",
    name: "get_weather",
    parameters: {
      type: "object",
      properties: { city: { type: "string" }, days: { type: "integer" } },
      required: ["city", "days"],
      additionalProperties: false,
    },
    strict: true,
  },
];

const stream = await client.responses.create({ model, input: ask, tools, stream: true });
const seen = { types: [], sequence: [], fragments: [], call: null, status: null };
for await (const event of stream) {
  seen.types.push(event.type);
  seen.sequence.push(event.sequence_number);
  if (event.type === "response.function_call_arguments.delta") seen.fragments.push(event.delta);
  if (event.type === "response.completed") {
    seen.status = event.response.status;
    seen.call = event.response.output.find((item) => item.type === "function_call");
  }
}

// The SDK's own accumulator over the follow-up: it checks the order of the events it is given.
const runner = client.responses.stream({
  model,
  input: [
    { role: "user", content: ask },
    { type: "function_call", call_id: seen.call.call_id, name: seen.call.name, arguments: seen.call.arguments },
    { type: "function_call_output", call_id: seen.call.call_id, output: '{"sky": "clear"}' },
  ],
  tools,
});
const final = await runner.finalResponse();

const finalText = final.output
  .filter((item) => item.type === "message")
  .flatMap((item) => item.content.map((part) => part.text))
  .join("");
console.log(JSON.stringify({ ...seen, finalStatus: final.status, finalText }));
