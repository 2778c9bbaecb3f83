import { ownHandler, type SdkClient } from "./own-sockets.js";

/**
 * How a conditional write (S3's conditional PUT, DynamoDB's conditional PutItem) goes through the
 * caller's AWS SDK v3 client: once, at once, never again by the SDK (PROTOCOL.md, "S3", "What the
 * store takes from the SDK"). Below, "PUT" is that write, whichever service it goes to.
 *
 * INVARIANT: the PUT goes on the wire at most once per send(), and nothing of the SDK's waits between
 * the send() the store makes in the turn its fence read admitted the write and the PUT's bytes
 * leaving: every try of a conditional PUT must follow a fence read of the store's, and a resend, or a
 * send held back, would land that much after the read it was checked against. Four middlewares of the
 * PUT's own command, from the outside in:
 *
 *   fencedAnswer       initialize, outermost   the failure as the server or the connection gave it, to the store
 *   retryMiddleware    finalizeRequest, high   the SDK's retry middleware replaced: no retry loop, no
 *                                              adaptive mode's rate limiter, no retry token to wait for
 *   fencedOneTry       finalizeRequest, low    inside the signer: each failure withheld (Withheld); a
 *                                              second run for the same PUT (a caller's own middleware,
 *                                              a retry middleware of another name) sends nothing
 *   fencedOwnSockets   deserialize, low        in place of the client's handler: connections of the
 *                                              store's own (own-sockets.ts)
 *
 * Withheld and fencedOneTry hold even if the SDK's retry middleware is ever renamed, so that the
 * replacement above misses it: what the retry would read is not there, and a second try is refused.
 */

/**
 * A failure of a conditional PUT as every middleware between fencedAnswer and fencedOneTry sees it:
 * nothing its retry decision reads —
 * - `$metadata` (the HTTP status: 5xx and 429 are retried) and `$metadata.clockSkewCorrected`, which
 *   the SigV4 signer sets on any error answered with a `Date` 4 minutes or more off the client's
 *   clock whenever the offset it derives moved — a 412 or a 409 included;
 * - `$response` (the signer derives the offset from its `Date`; the retry reads its Retry-After; the
 *   region redirect its 301);
 * - `$retryable`, `name` (throttling, clock-skew and timeout codes), `code` (ECONNRESET and other
 *   system errors), `cause` (searched for any of these), and TypeError (a browser's network error).
 */
class Withheld extends Error {
  constructor(readonly original: unknown) {
    super("conditional PUT failed (its failure is withheld from the SDK's retry decision)");
  }
}

/** A second run of fencedOneTry for one PUT: refused before anything is sent. */
class SecondTry extends Error {
  constructor() {
    super("conditional PUT: a second try refused (one try per PUT)");
  }
}

/** What sendOnce adds its middlewares to: any AWS SDK v3 command's stack (typed loosely: each service's stack is its own type). */
interface OneCommand {
  readonly middlewareStack: {
    add(
      middleware: (next: (args: { request: unknown }) => Promise<unknown>) => (args: { request: unknown }) => Promise<unknown>,
      options: object,
    ): void;
  };
}

/**
 * Sends the conditional write `command` of `client` (`send`: the client's send of it, with these
 * options), with `options` (its deadline's signal) for the store's own connections too. Rejects
 * with the failure as the server or the connection gave it.
 */
export function sendOnce<Output>(
  client: SdkClient,
  command: object,
  send: (options: { abortSignal: AbortSignal }) => Promise<Output>,
  options: { abortSignal: AbortSignal },
): Promise<Output> {
  const stack = (command as unknown as OneCommand).middlewareStack;
  stack.add(
    (next) => async (args) => {
      try {
        return await next(args);
      } catch (err) {
        throw err instanceof Withheld ? err.original : err;
      }
    },
    { step: "initialize", priority: "high", name: "fencedAnswer" },
  );
  stack.add((next) => (args) => next(args), {
    step: "finalizeRequest",
    priority: "high",
    name: "retryMiddleware",
    tags: ["RETRY"],
    override: true,
  });
  let started = false;
  let failed: Withheld | undefined;
  stack.add(
    (next) => async (args) => {
      // Again after a failure: that failure, as if the try had been made. Again while the first is in
      // flight (or after its success): refused, with nothing sent.
      if (started) throw failed ?? new Withheld(new SecondTry());
      started = true;
      try {
        return await next(args);
      } catch (err) {
        failed = new Withheld(err);
        throw failed;
      }
    },
    { step: "finalizeRequest", priority: "low", name: "fencedOneTry" },
  );
  stack.add(
    (next) => (args) => {
      const own = ownHandler(client, (args.request as { protocol?: string }).protocol ?? "https:");
      return own === undefined ? next(args) : own.handle(args.request, options);
    },
    { step: "deserialize", priority: "low", name: "fencedOwnSockets" },
  );
  return send(options);
}
