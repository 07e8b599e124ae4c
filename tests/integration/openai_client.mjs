// The official OpenAI client (npm package `openai`) against waste-serve: a non-streamed and a
// streamed chat completion whose reply is a tool call (compute's test hook forces it). Usage:
//   node openai_client.mjs BASE_URL WORK_DIR
// Installs the package into WORK_DIR; exits 77 (skip) when npm cannot install it, 1 on a
// mismatch, 0 when both replies parse into well-formed tool calls.
import { execFileSync } from "node:child_process";
import { createRequire } from "node:module";
import path from "node:path";

const [base, work] = process.argv.slice(2);
try {
  execFileSync("npm", ["install", "--silent", "--no-audit", "--no-fund", "--prefix", work, "openai@4"], {
    stdio: ["ignore", "ignore", "pipe"], timeout: 180000 });
} catch (e) {
  console.log("npm install openai failed: " + String(e.stderr || e.message).slice(0, 400));
  process.exit(77);
}
const require = createRequire(path.join(work, "package.json"));
const OpenAI = require("openai");
const client = new OpenAI({ baseURL: base + "/v1", apiKey: "unused" });

const tools = [
  { type: "function", function: { name: "get_weather", parameters: { type: "object",
    properties: { city: { type: "string" }, days: { type: "integer" } }, required: ["city"] } } },
  { type: "function", function: { name: "search", parameters: { type: "object", properties: { q: { type: "string" } } } } },
];
const messages = [{ role: "user", content: "Weather in Paris?" }];

function check(calls, where) {
  const fail = (m) => { console.log(where + ": " + m + ": " + JSON.stringify(calls)); process.exit(1); };
  if (!Array.isArray(calls) || calls.length !== 2) fail("expected 2 tool calls");
  if (calls[0].function.name !== "get_weather" || calls[1].function.name !== "search") fail("names");
  const a = JSON.parse(calls[0].function.arguments);
  if (a.city !== 'Paris "FR"' || a.days !== 3) fail("arguments of call 0");
  if (JSON.parse(calls[1].function.arguments).q !== "rain") fail("arguments of call 1");
  if (!calls[0].id || calls[0].type !== "function") fail("id/type");
}

const r = await client.chat.completions.create({ model: "tiny", messages, tools, max_tokens: 200 });
if (r.choices[0].finish_reason !== "tool_calls") { console.log("finish_reason " + r.choices[0].finish_reason); process.exit(1); }
check(r.choices[0].message.tool_calls, "non-streamed");

// The SDK's own stream helper accumulates the deltas into a final message.
const stream = client.beta.chat.completions.stream({ model: "tiny", messages, tools, max_tokens: 200, stream: true });
const final = await stream.finalChatCompletion();
check(final.choices[0].message.tool_calls, "streamed");
if (final.choices[0].finish_reason !== "tool_calls") { console.log("streamed finish_reason"); process.exit(1); }
console.log("openai client: both replies parsed");
