// Starts aws-lambda-ric on handler.mjs, as the managed nodejs runtime starts a function: the RIC's own `run`,
// with this folder as the task root (its bin script would take the working directory instead).
import { dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { run } from "aws-lambda-ric";

await run(dirname(fileURLToPath(import.meta.url)), "handler.handler");
