// What answering a refusal costs the gateway's early handler (admission/early-answer.ts), in this
// process on the built gateway: its answer on a fresh request and response, as every refusal has,
// against node:http's cheapest 503 (anchor-answer.js's: one constant header object and body) and
// the floor (the request and response made, nothing answered). Neither response has a socket: the
// answer's bytes are made and kept, not written, so the figures are the work that differs, not the
// write both pay. Interleaved rounds; each line the median over rounds. The goal: the gateway's
// answer, request id and all, within 1 µs of node:http's constant one.
import { Buffer } from "node:buffer";
import { IncomingMessage, ServerResponse } from "node:http";
import { Socket } from "node:net";
import { emit, median, nsPerCall, round3 } from "./measure.js";

const { answerRefusal } = (await import(new URL("../packages/gateway/dist/admission/early-answer.js", import.meta.url).href)) as {
  answerRefusal: (req: IncomingMessage, res: ServerResponse, reason: "queue-full") => string;
};

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 7);
const CALLS = 50_000;
const GOAL_NS = 1_000;

const BODY = JSON.stringify({
  type: "/problems/overloaded",
  title: "Overloaded",
  status: 503,
  detail: "the anchor answers every write so",
});
const HEADERS = {
  "Content-Type": "application/problem+json; charset=utf-8",
  "Content-Length": Buffer.byteLength(BODY),
  "Retry-After": "1",
};

const socket = new Socket();
/** A request as the server makes one (no X-Request-Id: the generator sends none), and its response. */
function exchange(): [IncomingMessage, ServerResponse] {
  const req = new IncomingMessage(socket);
  req.method = "PUT";
  req.headers = { "content-type": "application/json", "content-length": "11" };
  return [req, new ServerResponse(req)];
}

const cases = {
  floor: () => exchange(),
  nodeHttp: () => {
    const [, res] = exchange();
    res.writeHead(503, HEADERS);
    res.end(BODY);
    return res;
  },
  gateway: () => {
    const [req, res] = exchange();
    answerRefusal(req, res, "queue-full");
    return res;
  },
};
type Case = keyof typeof cases;
const names = Object.keys(cases) as Case[];
const ns = new Map<Case, number[]>(names.map((n) => [n, []]));
for (let round = -1; round < ROUNDS; round++) {
  // Round -1 warms every path; each later round times the cases in another order.
  const order = round < 0 ? names : [...names.slice(round % names.length), ...names.slice(0, round % names.length)];
  for (const name of order) {
    const f = cases[name];
    const t = nsPerCall([0], () => f(), CALLS);
    if (round >= 0) (ns.get(name) as number[]).push(t);
  }
}
const at = (name: Case, i: number): number => (ns.get(name) as number[])[i] as number;
const over = median((ns.get("gateway") as number[]).map((t, i) => t - at("nodeHttp", i)));
emit({
  bench: "early-refusal-answer",
  gatewayNs: Math.round(median(ns.get("gateway") as number[])),
  nodeHttpNs: Math.round(median(ns.get("nodeHttp") as number[])),
  floorNs: Math.round(median(ns.get("floor") as number[])),
  floorIs: "an IncomingMessage and its ServerResponse made, nothing answered",
  overNodeHttpNs: Math.round(over),
  ratio: round3(median((ns.get("gateway") as number[]).map((t, i) => (t - at("floor", i)) / (at("nodeHttp", i) - at("floor", i))))),
  ratioOf: `(gateway − floor) ÷ (node:http − floor), median of ${ROUNDS} interleaved rounds of ${CALLS} calls`,
  goal: `overNodeHttpNs <= ${GOAL_NS}`,
  met: over <= GOAL_NS,
});
