// The official OpenAI client (npm package `openai`) sending an image_url content part (a data:
// URL) to waste-serve, non-streamed and streamed. Usage:
//   node openai_vision_client.mjs BASE_URL WORK_DIR IMAGE_FILE IMAGE_TOKENS
// Installs the package into WORK_DIR; exits 77 (skip) when npm cannot install it, 1 on a
// mismatch, 0 when both replies parse and report IMAGE_TOKENS image tokens.
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";

const [base, work, image, tokens] = process.argv.slice(2);
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
const fail = (m) => { console.log(m); process.exit(1); };

const url = "data:image/png;base64," + readFileSync(image).toString("base64");
const messages = [{ role: "user", content: [
  { type: "image_url", image_url: { url, detail: "auto" } },
  { type: "text", text: "What is in this picture?" } ] }];

const r = await client.chat.completions.create({ model: "tiny", messages, max_tokens: 8 });
if (typeof r.choices[0].message.content !== "string") fail("non-streamed: no content: " + JSON.stringify(r));
if (r.usage.prompt_tokens_details.image_tokens !== Number(tokens))
  fail("non-streamed: image_tokens " + JSON.stringify(r.usage));

const stream = await client.chat.completions.create({ model: "tiny", messages, max_tokens: 8, stream: true,
  stream_options: { include_usage: true } });
let text = "", usage = null;
for await (const chunk of stream) {
  if (chunk.choices.length > 0 && chunk.choices[0].delta.content) text += chunk.choices[0].delta.content;
  if (chunk.usage) usage = chunk.usage;
}
if (!usage || usage.prompt_tokens_details.image_tokens !== Number(tokens)) fail("streamed: usage " + JSON.stringify(usage));
if (usage.prompt_tokens !== r.usage.prompt_tokens) fail("streamed: prompt_tokens differ");
if (text !== r.choices[0].message.content) fail("streamed text differs: " + JSON.stringify([text, r.choices[0].message.content]));
console.log("openai client: image replies parsed");
