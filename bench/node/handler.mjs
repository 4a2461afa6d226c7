// The node-streamify peer: the design AWS's samples give for streaming a SageMaker endpoint from Lambda.
// A Function URL event in; the endpoint's OpenAI-style SSE out, each PayloadPart's complete lines decoded
// and written on as OpenAI chat.completion.chunk events the moment they arrive, then "data: [DONE]".
// The client is made at init, as any Lambda function makes it; the SDK reads the region, the credentials
// and AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME (the bench's simulated endpoint) from the environment.
import {
  InvokeEndpointWithResponseStreamCommand,
  SageMakerRuntimeClient,
} from "@aws-sdk/client-sagemaker-runtime";

const client = new SageMakerRuntimeClient({});
const endpointName = process.env.SAGEMAKER_ENDPOINT_NAME;
const decoder = new TextDecoder();

function body(event) {
  const text = event.isBase64Encoded ? Buffer.from(event.body, "base64").toString() : event.body;
  return JSON.parse(text || "{}");
}

export const handler = awslambda.streamifyResponse(async (event, responseStream) => {
  const request = body(event);
  const upstream = { messages: request.messages, stream: true };
  if (request.max_tokens != null) upstream.max_tokens = request.max_tokens;
  const response = await client.send(
    new InvokeEndpointWithResponseStreamCommand({
      EndpointName: endpointName,
      ContentType: "application/json",
      Body: JSON.stringify(upstream),
    }),
  );
  const stream = awslambda.HttpResponseStream.from(responseStream, {
    statusCode: 200,
    headers: { "Content-Type": "text/event-stream", "Cache-Control": "no-cache" },
  });
  const id = `chatcmpl-${Date.now().toString(36)}`;
  const created = Math.floor(Date.now() / 1000);
  let tail = "";
  for await (const event of response.Body) {
    if (!event.PayloadPart?.Bytes) continue;
    const lines = (tail + decoder.decode(event.PayloadPart.Bytes, { stream: true })).split("\n");
    tail = lines.pop();
    for (const line of lines) {
      if (!line.startsWith("data:")) continue;
      const data = line.slice(5).trim();
      if (data === "[DONE]") continue;
      const chunk = JSON.parse(data);
      const choice = chunk.choices?.[0];
      if (!choice) continue;
      const out = {
        id,
        object: "chat.completion.chunk",
        created,
        model: endpointName,
        choices: [{ index: 0, delta: choice.delta ?? {}, finish_reason: choice.finish_reason ?? null }],
      };
      stream.write(`data: ${JSON.stringify(out)}\n\n`);
    }
  }
  stream.write("data: [DONE]\n\n");
  stream.end();
});
