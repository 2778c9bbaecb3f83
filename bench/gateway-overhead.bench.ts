// The gateway's own work per write, with the database taken out: gateway.bench.ts's credential write
// (PUT /v1/records/cred/<w>, a fence credential for cred-writer/<w>, a 3-field JSON value) through a
// gateway (createGateway and serve, as an embedding process runs it) whose records store is
// FencedPostgres on a pool that answers every statement at once with one row: everything of ours on
// the write's path — admission, the request's scope, the key's and the credential's checks, the body,
// the store, the answer, the accounting — and none of PostgreSQL's time, which makes the same
// comparison between two gateway processes vary by more than a few microseconds (docs/benchmarks.md).
// Two anchors answer the same request with the same JSON: a bare node:http server (the floor of any
// server), and the lean express 5 app a user would write (express.json(), a bearer check, res.json();
// the gateway's own express): the gateway's µs per write less express's is what its own code costs,
// fencing included, with the framework's share taken out. The clients (64 keep-alive connections, undici) run in this process too, so every side's
// time a write holds the clients' and the sockets', the same for all; what differs between the lines
// is the server's own. Interleaved rounds; medians of µs per write and of their ratio in a round.
// BENCH_BASE_GATEWAY=<another build's packages/gateway/dist/index.js> adds that build, on its own
// @fenced/store, as a third line in the same rounds: a before/after of the gateway's and store's work.
import { once } from "node:events";
import { createRequire } from "node:module";
import { createServer, type IncomingMessage, type RequestListener, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { pino } from "pino";
import type { Pool } from "undici";
import { createGateway, serve, type GatewayOptions } from "@fenced/gateway";
import { credentialWrites } from "./credential-writes.js";
import { answeringPool } from "./answering-pool.js";
import { emit, median, nsPerOp, overBase, round3, type Op } from "./measure.js";

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 9);
const CLIENTS = 64;
/** Writes a round makes to each server: about half a second each, short enough for pnpm bench. */
const WRITES = Number(process.env.BENCH_WRITES ?? 20_000);
const writes = credentialWrites(CLIENTS);

type Create = (options: GatewayOptions) => { app: Parameters<typeof serve>[0] };
const options = (): GatewayOptions => ({
  ...writes.gatewayKeys,
  records: { pool: answeringPool() as never, schema: "overhead" },
  // At info, as the bench's gateway process logs: a write that succeeds logs no line.
  logger: pino({ level: "info" }, pino.destination({ dest: "/dev/null", sync: false })),
  defaultMetrics: false,
});

/** The floor: the same request read whole and answered with a write's JSON and its headers. */
function bareServer(): Server {
  return createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      const text = JSON.stringify({ version: "7", token: "1" });
      res.writeHead(200, { "content-type": "application/json; charset=utf-8", "content-length": Buffer.byteLength(text), etag: '"7"' });
      res.end(text);
    });
  });
}

/** What the anchor uses of express 5 (loaded from the gateway's dependencies, whose types the bench does not have). */
interface ExpressResponse extends ServerResponse {
  status(code: number): ExpressResponse;
  json(body: unknown): void;
}
type ExpressHandler = (req: IncomingMessage, res: ExpressResponse, next: () => void) => void;
interface ExpressApp extends RequestListener {
  use(handler: unknown): void;
  put(path: string, handler: ExpressHandler): void;
}
interface Express {
  (): ExpressApp;
  json(): unknown;
}

/** The lean express anchor (bench/anchor-express.js's, with no database), on the gateway's own express. */
function expressServer(): Server {
  const express = createRequire(new URL("../packages/gateway/package.json", import.meta.url))("express") as Express;
  const app = express();
  app.use(express.json());
  const check: ExpressHandler = (req, res, next) => {
    if (req.headers.authorization === writes.authorization) next();
    else res.status(401).json({ error: "unauthorized" });
  };
  app.use(check);
  app.put("/v1/records/*key", (_req, res) => {
    res.setHeader("ETag", '"7"');
    res.json({ version: "7", token: "1" });
  });
  return createServer(app);
}

interface Side {
  readonly name: string;
  readonly what: string;
  readonly clients: Pool;
  readonly write: Op;
  close(): Promise<void>;
}

async function gatewaySide(name: string, what: string, create: Create, serveIt: typeof serve): Promise<Side> {
  const serving = await serveIt(create(options()).app, { port: 0, host: "127.0.0.1" });
  const { pool: clients, op: write } = writes.writesTo(serving.port, name);
  return { name, what, clients, write, close: () => serving.drain(2_000).then(() => undefined) };
}

async function anchorSide(name: string, what: string, server: Server): Promise<Side> {
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const { pool: clients, op: write } = writes.writesTo((server.address() as AddressInfo).port, name);
  return { name, what, clients, write, close: () => new Promise((resolve) => server.close(() => resolve())) };
}

/** Microseconds a write: WRITES writes by CLIENTS clients at once, each its own record. */
const usPerWrite = async (side: Side): Promise<number> => (await nsPerOp(side.write, CLIENTS, WRITES)) / 1000;

const ANCHORS = {
  "node-http": "bare node:http reading the request whole and answering a write's JSON",
  express: "lean express 5: express.json(), a bearer check, res.json() of a write's answer",
} as const;
const sides: Side[] = [
  await gatewaySide("gateway", "this checkout's gateway and store, built", createGateway, serve),
  await anchorSide("node-http", ANCHORS["node-http"], bareServer()),
  await anchorSide("express", ANCHORS.express, expressServer()),
];
const baseGateway = process.env.BENCH_BASE_GATEWAY;
if (baseGateway !== undefined) {
  const base = (await import(baseGateway)) as { createGateway: Create; serve: typeof serve };
  sides.push(await gatewaySide("base-gateway", `the gateway of ${baseGateway}`, base.createGateway, base.serve));
}
try {
  for (const side of sides) await usPerWrite(side); // warm: JIT, connections
  const us = new Map<string, number[]>(sides.map((s) => [s.name, []]));
  for (let round = 0; round < ROUNDS; round++) {
    const order = round % 2 === 0 ? sides : [...sides].reverse();
    for (const side of order) us.get(side.name)?.push(await usPerWrite(side));
  }
  const of = (name: string): number[] => us.get(name) ?? [];
  const against = (own: readonly number[], anchor: keyof typeof ANCHORS): number =>
    round3(median(own.map((n, i) => n / (of(anchor)[i] as number))));
  for (const side of sides) {
    if (side.name in ANCHORS) continue;
    const own = of(side.name);
    emit({
      bench: "gateway-overhead",
      impl: side.name,
      what: side.what,
      clients: CLIENTS,
      usPerWrite: round3(median(own)),
      // What the gateway's own code costs a write, fencing included: its µs less the lean express app's.
      usOverExpress: round3(median(own.map((n, i) => n - (of("express")[i] as number)))),
      anchors: Object.fromEntries(
        (Object.keys(ANCHORS) as (keyof typeof ANCHORS)[]).map((anchor) => [
          anchor,
          { is: ANCHORS[anchor], usPerWrite: round3(median(of(anchor))), ratio: against(own, anchor) },
        ]),
      ),
      ratioOf: "the median over rounds of this server's µs per write ÷ the anchor's in the same round (clients and sockets in both)",
      ...(side.name === "base-gateway" ? overBase(of("gateway"), own) : {}),
      rounds: ROUNDS,
    });
  }
} finally {
  for (const side of sides) {
    await side.clients.close();
    await side.close();
  }
}
