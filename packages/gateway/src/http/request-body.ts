import type { IncomingMessage } from "node:http";
import { Readable } from "node:stream";
import type { Request, Response } from "express";
import { ClientGoneError } from "./client-gone.js";
import { HttpProblem } from "../problems/problem.js";

/** Unread request bytes the gateway will still read and discard to keep a keep-alive connection usable. */
const DISCARD_BUDGET = 1024 * 1024;

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
export function sendContinue(req: Request, res: Response): void {
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
      req.once("error", (err) => body.destroy(err));
      req.once("close", () => {
        if (!req.complete && !body.destroyed) body.destroy(new ClientGoneError("body"));
      });
      req.resume();
    },
  });
  return { body, tooLarge: () => over, abandon: () => abandon(req, res, body, received) };
}

function abandon(req: Request, res: Response, body: Readable, received: number): void {
  body.destroy();
  if (req.complete || req.destroyed) return;
  const announced = Number(req.headers["content-length"]);
  if (expectsContinue(req) && res.locals.continued !== true) {
    // The client is waiting for our answer before it sends anything: do not wait for a body.
    res.setHeader("Connection", "close");
    return;
  }
  if (!Number.isFinite(announced) || announced - received > DISCARD_BUDGET) {
    // Too much to read for nothing: answer, then close (the client stops sending when it sees the answer).
    res.setHeader("Connection", "close");
  }
  // Discard what is still coming, so the parser reaches the end of this request and sees the next.
  req.resume();
}

/** A body of known, small length read whole (it goes inline into the manifest: one PUT, no data object). */
export function readSmall(req: Request, res: Response, length: number): Promise<Buffer> {
  sendContinue(req, res);
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on("data", (chunk: Buffer) => {
      size += chunk.length;
      chunks.push(chunk);
    });
    req.once("end", () =>
      size === length ? resolve(Buffer.concat(chunks, size)) : reject(new HttpProblem("invalid", "body: shorter than Content-Length")),
    );
    req.once("close", () => {
      if (!req.complete) reject(new ClientGoneError("body"));
    });
    req.once("error", reject);
  });
}
