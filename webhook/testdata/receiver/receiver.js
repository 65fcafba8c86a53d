// Test receiver for paygate webhook deliveries.
//
// It verifies every POST with the Standard Webhooks reference library
// (npm "standardwebhooks"), answers 204 when the signature is valid and 400
// when it is not, and records what it got. GET /deliveries returns the record
// as JSON. It listens on 127.0.0.1 on a free port and prints the port on the
// first line of stdout.
//
// Usage: WEBHOOK_SECRET=whsec_... node receiver.js
"use strict";

const http = require("node:http");
const { Webhook } = require("standardwebhooks");

const secret = process.env.WEBHOOK_SECRET;
if (!secret) {
  console.error("WEBHOOK_SECRET is required");
  process.exit(2);
}
const wh = new Webhook(secret);
const deliveries = [];

const server = http.createServer((req, res) => {
  if (req.method === "GET" && req.url === "/deliveries") {
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify(deliveries));
    return;
  }
  if (req.method !== "POST") {
    res.writeHead(405);
    res.end();
    return;
  }
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => {
    const body = Buffer.concat(chunks).toString("utf8");
    const record = {
      id: req.headers["webhook-id"] || "",
      timestamp: req.headers["webhook-timestamp"] || "",
      contentType: req.headers["content-type"] || "",
      userAgent: req.headers["user-agent"] || "",
      body,
      valid: false,
      error: "",
    };
    try {
      wh.verify(body, req.headers);
      record.valid = true;
    } catch (err) {
      record.error = String(err && err.message ? err.message : err);
    }
    deliveries.push(record);
    res.writeHead(record.valid ? 204 : 400);
    res.end();
  });
});

server.listen(0, "127.0.0.1", () => {
  process.stdout.write(`${server.address().port}\n`);
});

// Stop when the parent test closes our stdin, so no receiver outlives its test.
process.stdin.on("end", () => server.close(() => process.exit(0)));
process.stdin.resume();
