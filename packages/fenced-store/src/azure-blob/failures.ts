import { RestError } from "@azure/storage-blob";
import { StoreSetupError, type UnavailableReason } from "../errors.js";
import { DeadlineExceeded } from "../deadline.js";
import { CONNECTION_LOST, NEVER_SENT, TIMED_OUT_ERRNO, errnoOf } from "../system-errors.js";
import { typedFailure as typedFailureOf, type BackendErrors, type BackendFailures } from "../cas/failures.js";
import { azureCode } from "./blobs.js";

/**
 * What a failed Azure Blob request means to this store, by its status, Azure's error code or the
 * system error code, never by message text; how a conditional write's failure is understood is
 * blobs.ts's (classify). Which typed error a failed call throws is the algorithm's rule
 * (../cas/failures.ts).
 */

/** Why Azure could not serve a request, if the error says so; undefined for any other failure. */
function unavailable(err: unknown): UnavailableReason | undefined {
  if (err instanceof DeadlineExceeded || (err as { cause?: unknown } | null)?.cause instanceof DeadlineExceeded) return "timeout";
  const errno = errnoOf(err);
  if (errno !== undefined && NEVER_SENT.has(errno)) return "refused";
  if (errno !== undefined && CONNECTION_LOST.has(errno)) return "connection";
  if (errno !== undefined && TIMED_OUT_ERRNO.has(errno)) return "timeout";
  if (!(err instanceof RestError) || err.statusCode === undefined) return undefined;
  if (err.statusCode === 503) return "throttled";
  if (err.statusCode === 500 && err.code === "OperationTimedOut") return "timeout";
  if (err.statusCode >= 500) return "connection";
  return undefined;
}

function azureErrors(container: string): BackendErrors {
  return {
    backend: "azure-blob",
    unavailable,
    setup: (err) =>
      azureCode(err) === "ContainerNotFound"
        ? new StoreSetupError("azure-blob", "no-such-container", `Azure Blob container ${JSON.stringify(container)} does not exist`, {
            cause: err,
          })
        : undefined,
  };
}

/** Azure refused a blob's own current ETag: its condition does not hold as the store needs. */
function refusedOwnEtag(key: string): StoreSetupError {
  return new StoreSetupError(
    "azure-blob",
    "conditional-writes-unsupported",
    `the Azure Blob backend refused a conditional write of blob ${JSON.stringify(key)} on its current ETag; run verify() to diagnose`,
  );
}

/** The Azure Blob store's failures, as the algorithm asks for them (../cas/io.ts). */
export function azureFailures(container: string): BackendFailures {
  const errors = azureErrors(container);
  return { backend: "azure-blob", typed: (err, call) => typedFailureOf(err, call, errors), refusedOwnEtag };
}
