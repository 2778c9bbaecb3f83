// What the anchor servers with PostgreSQL share: the gateway's own copies of express and pg (the
// versions it ships with), one unfenced table, the one statement a write is, and node:http's write
// route. Started by gateway.bench.ts (the shedding anchor by overload-anchor-shed.ts) with
// ANCHOR_POSTGRES_URL, ANCHOR_POOL_SIZE, ANCHOR_API_KEY and ANCHOR_TABLE; each server prints the
// line the benchmark waits for, {"msg":"listening","port":…}, once it listens.
import { Buffer } from "node:buffer";
import { createRequire } from "node:module";
import process from "node:process";
import { URL } from "node:url";

export const require = createRequire(new URL("../packages/gateway/package.json", import.meta.url));
const pg = require("pg");

const env = (name) => {
  const value = process.env[name];
  if (value === undefined || value === "") throw new Error(`${name} is required`);
  return value;
};

export const bearer = `Bearer ${env("ANCHOR_API_KEY")}`;
const table = env("ANCHOR_TABLE");
if (!/^[a-z_][a-z0-9_]*$/.test(table)) throw new Error("ANCHOR_TABLE: a plain lowercase identifier");

const pool = new pg.Pool({ connectionString: env("ANCHOR_POSTGRES_URL"), max: Number(env("ANCHOR_POOL_SIZE")) });
pool.on("error", () => undefined);
await pool.query(`CREATE TABLE IF NOT EXISTS ${table} (key text PRIMARY KEY, value jsonb NOT NULL, version bigint NOT NULL)`);
const UPSERT = `INSERT INTO ${table} AS r (key, value, version) VALUES ($1, $2, 1)
  ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, version = r.version + 1 RETURNING version`;

/** Writes `value` (a parsed JSON value) under `key`; resolves with the new version (a decimal string). */
export async function upsert(key, value) {
  const { rows } = await pool.query(UPSERT, [key, JSON.stringify(value)]);
  return rows[0].version;
}

const PREFIX = "/v1/records/";

/** Answers with `body` as JSON. */
export function answer(res, status, body) {
  const text = JSON.stringify(body);
  res.writeHead(status, { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(text) });
  res.end(text);
}

/**
 * A write as the node:http anchors take it, no framework: the bearer check, the body read whole and
 * JSON.parse'd, the upsert, a JSON answer. Resolves once it is answered.
 */
export function handleWrite(req, res) {
  if (req.method !== "PUT" || !req.url.startsWith(PREFIX)) return Promise.resolve(answer(res, 404, { error: "not found" }));
  if (req.headers.authorization !== bearer) return Promise.resolve(answer(res, 401, { error: "unauthorized" }));
  const chunks = [];
  req.on("data", (chunk) => chunks.push(chunk));
  // A client gone before its body's end is not written for (and its slot, in anchor-shed.js, freed).
  const read = new Promise((resolve) => {
    req.on("end", () => resolve(true));
    req.on("close", () => resolve(false));
  });
  return read.then((whole) => {
    if (!whole) return undefined;
    let value;
    try {
      value = JSON.parse(Buffer.concat(chunks).toString("utf8"));
    } catch {
      return answer(res, 400, { error: "invalid JSON" });
    }
    let key;
    try {
      key = decodeURIComponent(req.url.slice(PREFIX.length));
    } catch {
      return answer(res, 400, { error: "invalid key" });
    }
    return upsert(key, value).then(
      (version) => answer(res, 200, { version }),
      () => answer(res, 500, { error: "internal" }),
    );
  });
}

/** Listens on 127.0.0.1, a free port, with the gateway's keep-alive timeout and listen backlog; stops on SIGTERM. */
export function listen(server) {
  server.keepAliveTimeout = 65_000;
  server.listen(0, "127.0.0.1", 4_096, () =>
    process.stdout.write(`${JSON.stringify({ msg: "listening", port: server.address().port })}\n`),
  );
  process.once("SIGTERM", () => {
    server.close();
    server.closeAllConnections();
    void pool.end();
  });
}
