import type { Response } from "express";

/**
 * The client went away before its answer was complete: it closed the connection (its own timeout),
 * or the drain cut it. Not a failure of the gateway: nobody is left to answer, and the request is
 * accounted as cut (499, or 503 for the drain), not logged as an error.
 */
export class ClientGoneError extends Error {
  constructor(what: "answer" | "body") {
    super(`the client closed the connection before the ${what} was complete`);
    this.name = "ClientGoneError";
  }
}

/**
 * Aborted (with a ClientGoneError) when the client goes away before its answer is complete: the
 * store or lock calls in flight stop what they can (a transaction not yet committed rolls back, S3
 * requests are cancelled, a lease acquisition gives up). A write already committed stays committed;
 * the client, gone, learns its outcome by reading.
 */
export function clientGone(res: Response): AbortSignal {
  const controller = new AbortController();
  res.once("close", () => {
    if (!res.writableFinished) controller.abort(new ClientGoneError("answer"));
  });
  return controller.signal;
}
