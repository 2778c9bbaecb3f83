import { Buffer } from "node:buffer";
import type { IncomingMessage, ServerResponse } from "node:http";
import { expectsContinue } from "../http/request-body.js";
import { REQUEST_ID_HEADER, requestIdOf } from "../http/request-scope.js";
import { make } from "../problems/problem.js";
import { SHED_REASONS, type ShedReason } from "../vocabulary/shed-reasons.js";
import { REFUSALS } from "./admission.js";

/**
 * A refusal answered before express (gate.ts' early handler). Under overload most answers are
 * refusals, and all of one but its request id is the same every time, so each reason's answer is
 * made once, from the same problem sendProblem answers: its status, its headers (Retry-After), and
 * its body's text up to the id. A refusal splices its id in.
 *
 * The splice needs no JSON escaping: the id is the client's only when it is a SANE_REQUEST_ID (an
 * alphabet JSON takes as it is), else a UUID (early-answer.test.ts tries every character the
 * alphabet lets in).
 */
interface Made {
  readonly status: number;
  /** The problem's headers as name, value, …, with the Content-Type. */
  readonly headers: readonly string[];
  /** The body's text up to the request id: `{…,"requestId":"`. */
  readonly head: string;
  /** The body's bytes but the id's. */
  readonly bytes: number;
}

const TAIL = '"}';

function made(reason: ShedReason): Made {
  const problem = make("overloaded", REFUSALS[reason], { reason });
  // requestId last, as sendProblem puts it.
  const whole = JSON.stringify({ ...problem.body, requestId: "" });
  const head = whole.slice(0, -TAIL.length);
  return {
    status: problem.body.status,
    headers: [...Object.entries(problem.headers).flat(), "Content-Type", "application/problem+json; charset=utf-8"],
    head,
    bytes: Buffer.byteLength(head) + TAIL.length,
  };
}

const ANSWERS = new Map(SHED_REASONS.map((reason) => [reason, made(reason)]));

/** Answers the refusal for `reason` on the bare response: the problem, Retry-After, the request id in header and body. */
export function answerRefusal(req: IncomingMessage, res: ServerResponse, reason: ShedReason): string {
  const requestId = requestIdOf(req.headers);
  const answer = ANSWERS.get(reason) as Made;
  // The id is ASCII (above): its length is its bytes.
  const headers = [...answer.headers, "Content-Length", String(answer.bytes + requestId.length), REQUEST_ID_HEADER, requestId];
  // A client waiting for "100 Continue" will not send its body: this connection cannot carry another request.
  if (expectsContinue(req)) headers.push("Connection", "close");
  res.writeHead(answer.status, headers);
  res.end(answer.head + requestId + TAIL);
  return requestId;
}
