import { StoreSetupError } from "../errors.js";
import { codeOf, unavailableReason } from "../aws/answers.js";
import { typedFailure as typedFailureOf, type BackendErrors, type BackendFailures } from "../cas/failures.js";

/**
 * What a failed DynamoDB request means to this store, by its code, status or system error code
 * (../aws/answers.ts), never by message text; how a conditional write's failure is understood is
 * items.ts's (classify). Which typed error a failed call throws is the algorithm's rule
 * (../cas/failures.ts).
 */

/** DynamoDB's answers: unavailable as AWS's SDK says, a missing table a setup problem. */
function dynamoErrors(table: string): BackendErrors {
  return {
    backend: "dynamodb",
    unavailable: unavailableReason,
    setup: (err) =>
      codeOf(err) === "ResourceNotFoundException"
        ? new StoreSetupError("dynamodb", "no-such-table", `DynamoDB table ${JSON.stringify(table)} does not exist`, { cause: err })
        : undefined,
  };
}

/** A backend that refused a record's own current ETag: its condition on the item does not hold as the store needs. */
function refusedOwnEtag(key: string): StoreSetupError {
  return new StoreSetupError(
    "dynamodb",
    "conditional-writes-unsupported",
    `the DynamoDB backend refused a conditional write of item ${JSON.stringify(key)} on its current etag; run verify() to diagnose`,
  );
}

/** The DynamoDB store's failures, as the algorithm asks for them (../cas/io.ts). */
export function dynamoFailures(table: string): BackendFailures {
  const errors = dynamoErrors(table);
  return { backend: "dynamodb", typed: (err, call) => typedFailureOf(err, call, errors), refusedOwnEtag };
}
