import {
  ConditionalCheckFailedException,
  InternalServerError,
  ProvisionedThroughputExceededException,
  RequestLimitExceeded,
  ResourceNotFoundException,
  TransactionConflictException,
} from "@aws-sdk/client-dynamodb";
import { describe, expect, it } from "vitest";
import { classify } from "./items.js";

/**
 * How a failed conditional PutItem is understood, from the SDK's own exception classes as it throws
 * them (status and code): the answers dynalite cannot give (it never throttles nor conflicts) are
 * classified here, and each is read by type and status, never by message. items.test.ts checks on
 * dynalite and a server answering as DynamoDB does that the refusals it can give are read so.
 */
const meta = (httpStatusCode: number) => ({ message: "m", $metadata: { httpStatusCode } });

describe("classify (DynamoDB)", () => {
  it.each([
    ["ConditionalCheckFailedException", "precondition", new ConditionalCheckFailedException(meta(400))],
    ["TransactionConflictException", "conflict", new TransactionConflictException(meta(400))],
    ["ProvisionedThroughputExceededException", "throttled", new ProvisionedThroughputExceededException(meta(400))],
    ["RequestLimitExceeded", "throttled", new RequestLimitExceeded(meta(400))],
    ["InternalServerError (500: the write may have succeeded)", "ambiguous", new InternalServerError(meta(500))],
    ["ResourceNotFoundException (no such table)", "fatal", new ResourceNotFoundException(meta(400))],
    ["a reset connection (no answer)", "ambiguous", Object.assign(new Error("reset"), { code: "ECONNRESET" })],
    ["a refused connection (never sent)", "unsent", Object.assign(new Error("refused"), { code: "ECONNREFUSED" })],
  ] as const)("%s → %s", (_, failure, err) => {
    expect(classify(err)).toBe(failure);
  });
});
