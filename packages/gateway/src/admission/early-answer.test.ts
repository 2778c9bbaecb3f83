import { once } from "node:events";
import { createServer, request, type IncomingMessage, type RequestListener, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import express from "express";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { REQUEST_ID_HEADER, SANE_REQUEST_ID } from "../http/request-scope.js";
import { make, sendProblem } from "../problems/problem.js";
import { SHED_REASONS, type ShedReason } from "../vocabulary/shed-reasons.js";
import { REFUSALS } from "./admission.js";
import { answerRefusal } from "./early-answer.js";

/**
 * The refusal made once per reason (early-answer.ts) is the answer express's problem path gives the
 * same problem, byte for byte in its body, for every reason, with the client's id or a new one.
 */
const ID = "X-Test-Id";

let early: Server;
let viaExpress: Server;

async function listening(listener: RequestListener): Promise<Server> {
  const server = createServer(listener).listen(0, "127.0.0.1");
  await once(server, "listening");
  return server;
}

beforeAll(async () => {
  early = await listening((req, res) => void answerRefusal(req, res, req.url?.slice(1) as ShedReason));
  const app = express();
  app.use((req, res) => {
    // As the request scope leaves it (http/request-scope.ts): the id in its header and res.locals.
    const requestId = req.headers[ID.toLowerCase()] as string;
    res.setHeader(REQUEST_ID_HEADER, requestId);
    res.locals.requestId = requestId;
    const reason = req.path.slice(1) as ShedReason;
    sendProblem(res, make("overloaded", REFUSALS[reason], { reason }));
  });
  viaExpress = await listening(app);
});

afterAll(() => {
  early?.close();
  viaExpress?.close();
});

interface Seen {
  readonly status: number;
  readonly headers: Record<string, string | null>;
  readonly body: string;
}

async function ask(server: Server, reason: string, headers: Record<string, string> = {}): Promise<Seen> {
  const res = await fetch(`http://127.0.0.1:${(server.address() as AddressInfo).port}/${reason}`, { headers });
  const body = await res.text();
  const named = ["retry-after", "content-type", "content-length", "x-request-id", "connection"];
  return { status: res.status, headers: Object.fromEntries(named.map((n) => [n, res.headers.get(n)])), body };
}

/** Every character of the Basic Multilingual Plane SANE_REQUEST_ID lets in, as one id (its length within the 128 it allows). */
const SANE_CHARACTERS = Array.from({ length: 0x10000 }, (_, code) => String.fromCharCode(code))
  .filter((c) => SANE_REQUEST_ID.test(c))
  .join("");

describe("a refusal answered before express", () => {
  it.each(SHED_REASONS)("is the problem express answers, with the client's request id (%s)", async (reason) => {
    const given = "req-42.a:b+c/d=e@f_g";
    const mine = await ask(early, reason, { [REQUEST_ID_HEADER]: given });
    const theirs = await ask(viaExpress, reason, { [ID]: given });
    expect(mine).toEqual(theirs);
    expect(mine.status).toBe(503);
    expect(mine.headers["retry-after"]).toBe("1");
    expect(JSON.parse(mine.body)).toMatchObject({ reason, requestId: given, status: 503 });
  });

  it("takes every character of a sane request id as it is into its JSON body", async () => {
    expect(SANE_CHARACTERS.length).toBeLessThanOrEqual(128);
    const mine = await ask(early, "queue-full", { [REQUEST_ID_HEADER]: SANE_CHARACTERS });
    expect((JSON.parse(mine.body) as { requestId: string }).requestId).toBe(SANE_CHARACTERS);
    expect(mine.headers["x-request-id"]).toBe(SANE_CHARACTERS);
    expect(Number(mine.headers["content-length"])).toBe(Buffer.byteLength(mine.body));
  });

  it("closes the connection of a client waiting for 100 Continue, which will not send its body", async () => {
    const port = (early.address() as AddressInfo).port;
    const answer = await new Promise<IncomingMessage>((resolve, reject) => {
      const req = request({
        host: "127.0.0.1",
        port,
        method: "PUT",
        path: "/queue-full",
        headers: { Expect: "100-continue", "Content-Length": "2" },
      });
      req.on("response", resolve).on("error", reject);
      // Node's client sends the body only on "100 Continue", which never comes.
      req.on("continue", () => req.end("{}"));
    });
    answer.resume();
    expect(answer.statusCode).toBe(503);
    expect(answer.headers.connection).toBe("close");
    expect(answer.headers["retry-after"]).toBe("1");
  });

  it("answers with a new id in header and body when the client's is not sane", async () => {
    const mine = await ask(early, "evicted", { [REQUEST_ID_HEADER]: 'a"b' });
    const id = mine.headers["x-request-id"];
    expect(id).toMatch(/^[0-9a-f-]{36}$/);
    expect((JSON.parse(mine.body) as { requestId: string }).requestId).toBe(id);
    expect(Number(mine.headers["content-length"])).toBe(Buffer.byteLength(mine.body));
  });
});
