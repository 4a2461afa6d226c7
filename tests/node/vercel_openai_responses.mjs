// The Vercel AI SDK's OpenAI provider (@ai-sdk/openai) on the Responses API through the local stack: it reads a
// reasoning model's thoughts only from reasoning *summaries*, asked for with reasoningSummary.
// Reads SAGESTREAM_BASE_URL and SAGESTREAM_MODEL; prints what the app saw as one JSON line.
import { createOpenAI } from "@ai-sdk/openai";
import { streamText } from "ai";

// Tests send to loopback only: without this, a missing variable would make the provider call its default host.
const baseURL = process.env.SAGESTREAM_BASE_URL;
if (!baseURL || !baseURL.startsWith("http://127.0.0.1:")) throw new Error(`not a loopback URL: ${baseURL}`);

const openai = createOpenAI({ baseURL, apiKey: "unused" });
const errors = [];
const result = streamText({
  model: openai.responses(process.env.SAGESTREAM_MODEL),
  prompt: "Tell me about rivers",
  maxRetries: 0,
  // forceReasoning: the provider knows reasoning models by OpenAI's names, and sends reasoning options only to those.
  providerOptions: { openai: { reasoningSummary: "auto", forceReasoning: true } },
  onError: ({ error }) => errors.push(String(error)),
});
const types = new Set();
for await (const part of result.fullStream) types.add(part.type);
console.log(
  JSON.stringify({
    types: [...types],
    errors,
    text: await result.text,
    reasoning: (await result.reasoning).map((r) => r.text).join(""),
    finishReason: await result.finishReason,
  }),
);
