import type { IncomingMessage } from "node:http";
import { Readable } from "node:stream";
import type { Request, Response } from "express";
import { ClientGoneError } from "./client-gone.js";
import { HttpProblem } from "../problems/problem.js";

/** Unread request bytes the gateway will still read and discard to keep a keep-alive connection usable. */
const DISCARD_BUDGET = 1024 * 1024;

/**
 * What an 'error' of the request means while its body is read: Node destroys a request with an error
 * (ECONNRESET "aborted") when its connection closes before the body is complete, or the server's
 * request timeout cuts it — either way the client's request is gone, as nginx's 499 says, never a
 * failure of the gateway's.
 */
const bodyGone = (): ClientGoneError => new ClientGoneError("body");

/**
 * Node's own reading of `Expect` (its continueExpression, in _http_common): a request it matches is the
 * one Node hands over as waiting for "100 Continue" (checkContinue), "100-continue" among others too.
 * Read any other way, such a client would wait for a "100 Continue" nobody sends.
 */
const CONTINUE = /(?:^|\W)100-continue(?:$|\W)/i;

/** Whether the client sent `Expect: 100-continue`: it waits for "100 Continue" (or an answer) before it sends its body. */
export function expectsContinue(req: IncomingMessage): boolean {
  return CONTINUE.test(req.headers.expect ?? "");
}

/**
 * Sends "100 Continue" once, when the body is first wanted. A client that sent `Expect: 100-continue`
 * (curl does for large uploads) then sends nothing at all for a request refused on its headers or
 * by the ratchet: a stale holder's 512 MiB upload never leaves its machine.
 */
function sendContinue(req: Request, res: Response): void {
  if (res.locals.continued === true) return;
  res.locals.continued = true;
  if (expectsContinue(req) && !res.headersSent) res.writeContinue();
}

export interface Upload {
  /** The request body as a stream the store reads at its own pace; reading it starts the transfer. */
  readonly body: Readable;
  /** True once more than `limit` bytes arrived (the body was destroyed with a 413). */
  readonly tooLarge: () => boolean;
  /** After a refusal: stop feeding the body and leave the connection in a state fit for the answer. */
  abandon(): void;
}

/**
 * Streams the request body with backpressure (never more than a stream buffer in memory) and a byte
 * limit. Nothing is read from the socket until the consumer reads, so a write refused before its
 * body is needed has consumed none of it.
 */
export function streamUpload(req: Request, res: Response, limit: number): Upload {
  let started = false;
  let received = 0;
  let over = false;
  const body = new Readable({
    read() {
      if (started) {
        req.resume();
        return;
      }
      started = true;
      sendContinue(req, res);
      req.on("data", (chunk: Buffer) => {
        if (body.destroyed) return; // abandoned: the bytes are being discarded
        received += chunk.length;
        if (received > limit) {
          over = true;
          body.destroy(new HttpProblem("tooLarge", `body: more than ${limit} bytes`));
          return;
        }
        if (!body.push(chunk)) req.pause();
      });
      req.once("end", () => body.push(null));
      req.once("error", () => body.destroy(bodyGone()));
      req.once("close", () => {
        if (!req.complete && !body.destroyed) body.destroy(bodyGone());
      });
      req.resume();
    },
  });
  return { body, tooLarge: () => over, abandon: () => abandon(req, res, body, received) };
}

function abandon(req: Request, res: Response, body: Readable, received: number): void {
  body.destroy();
  discardRest(req, res, received);
}

/**
 * After a refusal with `received` bytes of the body read: discard what is still coming, so that the
 * parser reaches the end of this request and reads the next, or close the connection when that is
 * cheaper or the client waits for the answer before sending anything. A length announced: closed
 * after the answer when more than DISCARD_BUDGET is left. A length not announced (chunked): read and
 * discarded up to DISCARD_BUDGET, the connection closed only past it — a client that sends a little
 * too much keeps its connection, and reads the answer before any close could reset it.
 */
function discardRest(req: Request, res: Response, received: number): void {
  if (req.complete || req.destroyed) return;
  const announced = Number(req.headers["content-length"]);
  if (expectsContinue(req) && res.locals.continued !== true) {
    // The client is waiting for our answer before it sends anything: do not wait for a body.
    res.setHeader("Connection", "close");
    return;
  }
  if (Number.isFinite(announced)) {
    // Too much to read for nothing: answer, then close (the client stops sending when it sees the answer).
    if (announced - received > DISCARD_BUDGET) res.setHeader("Connection", "close");
  } else {
    let discarded = 0;
    const count = (chunk: Buffer): void => {
      discarded += chunk.length;
      if (discarded <= DISCARD_BUDGET) return;
      req.off("data", count);
      req.socket.destroy();
    };
    req.on("data", count);
  }
  // Discard what is still coming, so the parser reaches the end of this request and sees the next.
  req.resume();
}

/**
 * A body read whole, up to `limit` bytes: 413 at once when Content-Length announces more, or as soon
 * as more arrives, the rest discarded or the connection closed after the answer (discardRest);
 * ClientGoneError when the client leaves before its end. "100 Continue" is sent when reading starts.
 */
export function readWhole(req: Request, res: Response, limit: number): Promise<Buffer> {
  // Gone before its body was wanted (a request that waited for admission): Node destroyed the request
  // with its connection, so no 'data', 'end' or 'close' will come to wait for.
  if (req.destroyed) return Promise.reject(bodyGone());
  const announced = Number(req.headers["content-length"]);
  const tooLarge = (): HttpProblem => new HttpProblem("tooLarge", `body: more than ${limit} bytes`);
  if (announced > limit) {
    discardRest(req, res, 0);
    return Promise.reject(tooLarge());
  }
  sendContinue(req, res);
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (chunk: Buffer): void => {
      size += chunk.length;
      if (size <= limit) {
        chunks.push(chunk);
        return;
      }
      stop();
      discardRest(req, res, size);
      reject(tooLarge());
    };
    const onEnd = (): void => {
      stop();
      resolve(chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks, size));
    };
    // 'close' or 'error' before 'end' (which stops listening): the body will not be complete.
    const onGone = (): void => {
      stop();
      reject(bodyGone());
    };
    function stop(): void {
      req.off("data", onData);
      req.off("end", onEnd);
      req.off("close", onGone);
      req.off("error", onGone);
    }
    req.on("data", onData);
    req.on("end", onEnd);
    req.on("close", onGone);
    req.on("error", onGone);
    // Flowing even if something paused it.
    req.resume();
  });
}

/** A body of known, small length read whole (it goes inline into the manifest: one PUT, no data object). */
export async function readSmall(req: Request, res: Response, length: number): Promise<Buffer> {
  const bytes = await readWhole(req, res, length);
  if (bytes.length !== length) throw new HttpProblem("invalid", "body: shorter than Content-Length");
  return bytes;
}
