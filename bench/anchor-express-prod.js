// The second anchor: an unfenced express 5 + pg service written the way its users run one in
// production — pino-http (a request id on every answer, a child logger per request; a successful
// request logged at debug under an info logger, as the gateway does, so that neither writes a line
// per write), a prom-client histogram of every request, zod validation of the body (any JSON value,
// as the gateway takes), an API-key check on the key's SHA-256 (timingSafeEqual), and the same upsert
// as the lean anchor. Beside the lean anchor, it separates what fencing costs from what being a
// production server costs.
import { createHash, randomUUID, timingSafeEqual } from "node:crypto";
import { createServer } from "node:http";
import pinoHttp from "pino-http";
import { bearer, listen, require, upsert } from "./anchor-pg.js";

// The gateway's own express, zod and prom-client (anchor-pg.js), as the other anchors load express.
const express = require("express");
const { z } = require("zod");
const client = require("prom-client");

const registry = new client.Registry();
const duration = new client.Histogram({
  name: "http_request_duration_seconds",
  help: "Requests by route, method and status",
  labelNames: ["route", "method", "status"],
  registers: [registry],
});
const apiKey = createHash("sha256").update(bearer).digest();
const body = z.json();

const app = express();
app.use(
  pinoHttp({
    genReqId: (req, res) => {
      const id = req.headers["x-request-id"] ?? randomUUID();
      res.setHeader("X-Request-Id", id);
      return id;
    },
    customLogLevel: (_req, res, err) => (err !== undefined || res.statusCode >= 500 ? "error" : res.statusCode >= 400 ? "info" : "debug"),
  }),
);
app.use((req, res, next) => {
  const end = duration.startTimer();
  res.once("finish", () => end({ route: req.route?.path ?? "other", method: req.method, status: res.statusCode }));
  next();
});
app.use((req, res, next) => {
  const presented = createHash("sha256")
    .update(req.headers.authorization ?? "")
    .digest();
  if (timingSafeEqual(presented, apiKey)) next();
  else res.status(401).json({ error: "unauthorized" });
});
app.use(express.json({ strict: false }));
app.put("/v1/records/*key", async (req, res) => {
  const parsed = body.safeParse(req.body);
  if (!parsed.success) return res.status(400).json({ error: "invalid", issues: parsed.error.issues });
  res.json({ version: await upsert(req.params.key.join("/"), parsed.data) });
});
app.get("/metrics", async (_req, res) => {
  res.type(registry.contentType).send(await registry.metrics());
});
listen(createServer(app));
