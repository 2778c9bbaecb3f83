// Pins what a failed S3 request means (failures.ts, conditional.ts's classify), read from the error's
// type, status, S3 code or errno — never its message: which failures of a manifest PUT may have landed,
// which prove nothing was sent, and which typed error a call throws, OutcomeUnknownError whenever
// something it sent may have been applied. The errors are shaped as the AWS SDK v3 shapes them.
import { describe, expect, it } from "vitest";
import { InvalidArgumentError } from "@fenced/fence";
import { Deadline, DeadlineExceeded } from "../deadline.js";
import {
  ContentionError,
  OutcomeUnknownError,
  ResourceMismatchError,
  StaleTokenError,
  StoreSetupError,
  StoreUnavailableError,
  VersionMismatchError,
} from "../errors.js";
import { classify } from "./conditional.js";
import { retriedRefusal } from "../aws/answers.js";
import { neverSent } from "../system-errors.js";
import { isAbsent, typedFailure, type CallContext } from "./failures.js";

/** An S3 answer as the SDK throws it: `name` (or `Code`) the S3 code, `$metadata.httpStatusCode` the status. */
function answered(status: number, name = "Unknown", message = "whatever the server says"): Error {
  return Object.assign(new Error(message), { name, $metadata: { httpStatusCode: status } });
}
/** A failed connection as Node reports it: `code` the errno, no status. */
function system(code: string): Error {
  return Object.assign(new Error(`connect ${code}`), { code });
}

const call = (over: Partial<CallContext> = {}): CallContext => ({
  operation: "put",
  key: "k",
  bucket: "b",
  deadline: undefined,
  open: false,
  ...over,
});

describe("a failed conditional PUT (classify)", () => {
  it("412, and AWS's 404 for If-Match on a missing key, are the condition failing; a missing bucket is fatal", () => {
    expect(classify(answered(412, "PreconditionFailed"))).toBe("precondition");
    expect(classify(answered(404, "NoSuchKey"))).toBe("precondition");
    expect(classify(answered(404, "NoSuchBucket"))).toBe("fatal");
  });

  it("409 is a concurrent conditional write: a conflict to read again after", () => {
    expect(classify(answered(409, "ConditionalRequestConflict"))).toBe("conflict");
  });

  it("no answer, a 5xx, or a 2xx whose reading failed may have landed: ambiguous", () => {
    for (const err of [
      system("ECONNRESET"),
      new Error("socket hang up"),
      answered(500, "InternalError"),
      answered(503, "SlowDown"),
      answered(200),
    ])
      expect(classify(err), String((err as { name: string }).name)).toBe("ambiguous");
  });

  it("any other answer below 500 is fatal: retrying cannot help", () => {
    for (const status of [400, 401, 403, 405, 411, 416]) expect(classify(answered(status)), String(status)).toBe("fatal");
  });

  it("an answer the SDK would retry although nothing was applied (429, throttling codes, a request the server timed out, a clock skew) is throttled", () => {
    for (const err of [
      answered(429),
      answered(400, "SlowDown"),
      answered(400, "RequestTimeout"),
      answered(403, "RequestTimeTooSkewed"),
      answered(403, "SignatureDoesNotMatch"),
    ])
      expect(classify(err), String((err as { name: string }).name)).toBe("throttled");
  });

  it("a connection that never opened proves the PUT was not sent: unsent", () => {
    for (const code of ["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN"]) expect(classify(system(code)), code).toBe("unsent");
  });

  it("reads the status, not the message: a 412 that says 'timeout' is still a precondition", () => {
    expect(classify(answered(412, "PreconditionFailed", "timeout, connection reset, 500"))).toBe("precondition");
    expect(classify(answered(500, "InternalError", "precondition failed"))).toBe("ambiguous");
  });
});

describe("what an error proves", () => {
  it("only a connection never opened proves a request was not sent; a reset or broken pipe proves nothing", () => {
    for (const code of ["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN"]) expect(neverSent(system(code)), code).toBe(true);
    for (const code of ["ECONNRESET", "EPIPE", "ETIMEDOUT", "ECONNABORTED"]) expect(neverSent(system(code)), code).toBe(false);
    expect(neverSent(answered(503))).toBe(false);
    expect(neverSent(null)).toBe(false);
    expect(neverSent("ECONNREFUSED")).toBe(false);
  });

  it("the SDK's retried refusals below 500 (429, throttling codes, request expiry, clock skew) are told apart from final answers", () => {
    expect(retriedRefusal(answered(429))).toBe(true);
    for (const name of ["SlowDown", "RequestTimeout", "RequestTimeTooSkewed", "ThrottlingException", "SignatureDoesNotMatch"])
      expect(retriedRefusal(answered(400, name)), name).toBe(true);
    for (const name of ["PreconditionFailed", "AccessDenied", "NoSuchBucket", "InvalidArgument"])
      expect(retriedRefusal(answered(400, name)), name).toBe(false);
    expect(retriedRefusal(Object.assign(new Error("x"), { Code: "SlowDown" }))).toBe(true);
  });

  it("a 404 says the key is absent unless it is the bucket that is", () => {
    expect(isAbsent(answered(404, "NoSuchKey"))).toBe(true);
    expect(isAbsent(answered(404, "NotFound"))).toBe(true);
    expect(isAbsent(answered(404, "NoSuchBucket"))).toBe(false);
    expect(isAbsent(answered(403, "AccessDenied"))).toBe(false);
    expect(isAbsent(undefined)).toBe(false);
  });
});

describe("the error a failed call throws (typedFailure)", () => {
  const refusals = [
    new StaleTokenError("R", 1n, 2n, null),
    new VersionMismatchError("k", "a", "b"),
    new ResourceMismatchError("k", "R", "S"),
    new ContentionError("k", 3, "gave up"),
    new InvalidArgumentError("key", "bad"),
  ];

  it("while something sent may have been applied, every failure — a refusal, a timeout, anything — is OutcomeUnknownError with it as the cause", () => {
    for (const err of [...refusals, system("ECONNRESET"), answered(503), new DeadlineExceeded(100), new Error("x")]) {
      const typed = typedFailure(err, call({ open: true }));
      expect(typed, (err as Error).name).toBeInstanceOf(OutcomeUnknownError);
      expect(typed).toMatchObject({ backend: "s3", key: "k", operation: "put", cause: err });
    }
  });

  it("with nothing in doubt, a refusal or a give-up stands as it is", () => {
    for (const err of refusals) expect(typedFailure(err, call())).toBe(err);
  });

  it("an OutcomeUnknownError already made passes through, open or not", () => {
    const unknown = new OutcomeUnknownError("s3", "k", "put");
    expect(typedFailure(unknown, call())).toBe(unknown);
    expect(typedFailure(unknown, call({ open: true }))).toBe(unknown);
  });

  it("a refused or unresolved connection, a lost one, a timeout and throttling are StoreUnavailableError with that reason", () => {
    const cases: [unknown, string][] = [
      [system("ECONNREFUSED"), "refused"],
      [system("ENOTFOUND"), "refused"],
      [system("ECONNRESET"), "connection"],
      [system("EPIPE"), "connection"],
      [system("ETIMEDOUT"), "timeout"],
      [answered(504), "timeout"],
      [answered(400, "RequestTimeout"), "timeout"],
      [answered(429), "throttled"],
      [answered(503, "SlowDown"), "throttled"],
      [answered(500, "InternalError"), "connection"],
      [new DeadlineExceeded(100), "timeout"],
    ];
    for (const [err, reason] of cases) {
      const typed = typedFailure(err, call({ operation: "get" }));
      expect(typed, reason).toBeInstanceOf(StoreUnavailableError);
      expect(typed).toMatchObject({ backend: "s3", reason, operation: "get", cause: err });
    }
  });

  it("a missing bucket is StoreSetupError naming it; a 403 or a programming error is thrown as it is", () => {
    const missing = typedFailure(answered(404, "NoSuchBucket"), call({ bucket: "gone" }));
    expect(missing).toMatchObject({ name: "StoreSetupError", problem: "no-such-bucket" });
    expect((missing as Error).message).toContain('"gone"');
    const denied = answered(403, "AccessDenied");
    expect(typedFailure(denied, call())).toBe(denied);
    const bug = new TypeError("x is not a function");
    expect(typedFailure(bug, call())).toBe(bug);
    const setup = new StoreSetupError("s3", "conditional-writes-unsupported", "no");
    expect(typedFailure(setup, call())).toBe(setup);
  });

  it("the caller's own abort throws its reason, even with something in doubt; the deadline passing is a timeout", async () => {
    const controller = new AbortController();
    const aborted = new Deadline(60_000, controller.signal);
    const reason = new Error("the caller gave up");
    controller.abort(reason);
    expect(typedFailure(new Error("aborted request"), call({ deadline: aborted, open: true }))).toBe(reason);
    aborted.end();

    const passed = new Deadline(1, undefined);
    await new Promise<void>((resolve) => passed.signal.addEventListener("abort", () => resolve(), { once: true }));
    expect(typedFailure(new Error("aborted request"), call({ deadline: passed }))).toMatchObject({
      name: "StoreUnavailableError",
      reason: "timeout",
    });
    expect(typedFailure(new Error("aborted request"), call({ deadline: passed, open: true }))).toBeInstanceOf(OutcomeUnknownError);
    passed.end();
  });
});
