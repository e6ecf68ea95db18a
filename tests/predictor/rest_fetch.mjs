// Node's own fetch against the predictor's REST port: node rest_fetch.mjs METHOD URL [BODY_JSON_FILE]
// Prints one JSON line: the status and the parsed JSON answer.
import { readFileSync } from "node:fs";

const [method, url, bodyFile] = process.argv.slice(2);
const init = { method, headers: {} };
if (bodyFile) {
  init.body = readFileSync(bodyFile);
  init.headers["content-type"] = "application/json";
}
const response = await fetch(url, init);
const text = await response.text();
process.stdout.write(JSON.stringify({ status: response.status, body: JSON.parse(text) }) + "\n");
