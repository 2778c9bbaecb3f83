import { randomBytes } from "node:crypto";
import { StoreSetupError, type StoreBackend } from "../errors.js";
import type { ConditionalPort, WriteOutcome } from "./port.js";

/**
 * Proves that a backend honours the port's conditions on its own records, before a store trusts it
 * (verify()): an emulator or a proxy that takes a condition and ignores it would lose the ratchet
 * silently. Writes two records under `keyPrefix` and removes them, whatever happens. (The S3
 * adapter's own probe also learns how its backend spells an ETag: s3/conditional.ts.)
 */
export async function probePort(port: ConditionalPort, backend: StoreBackend, keyPrefix: string, signal?: AbortSignal): Promise<void> {
  const key = `${keyPrefix}${randomBytes(16).toString("hex")}`;
  const missing = `${key}-missing`;
  const fail = (what: string): never => {
    throw new StoreSetupError(
      backend,
      "conditional-writes-unsupported",
      `${backend} does not honour conditional writes: ${what}. Fenced writes would not be safe on it.`,
    );
  };
  /** A refusal by the condition; any other failure is the backend's, thrown as it is. */
  const refused = (outcome: WriteOutcome, what: string): void => {
    if (outcome.ok) fail(what);
    else if (outcome.failure !== "precondition" && outcome.failure !== "conflict") throw outcome.error;
  };
  try {
    const created = await port.write(key, Buffer.from("probe-1"), { ifNoneMatch: true }, signal);
    if (!created.ok) throw created.error;
    refused(await port.write(key, Buffer.from("probe-2"), { ifNoneMatch: true }, signal), "a create replaced an existing record");
    const swapped = await port.write(key, Buffer.from("probe-3"), { ifMatch: created.etag }, signal);
    if (!swapped.ok) {
      if (swapped.failure !== "precondition") throw swapped.error;
      fail("a write on the current ETag was refused");
    }
    refused(
      await port.write(key, Buffer.from("probe-4"), { ifMatch: created.etag }, signal),
      "a write on a stale ETag replaced the record",
    );
    refused(
      await port.write(missing, Buffer.from("probe-5"), { ifMatch: created.etag }, signal),
      "a write on an ETag created a missing record",
    );
    const now = await port.read(key, signal);
    if (now?.body.toString() !== "probe-3") fail("a refused conditional write changed the record");
    const replaced = await port.readIfChanged(key, created.etag, signal);
    if (replaced.unchanged || replaced.object?.body.toString() !== "probe-3")
      fail("a read on a replaced ETag did not return the current record");
  } finally {
    // Bounded on their own: the call's deadline may have passed already.
    await Promise.allSettled([port.remove(key), port.remove(missing)]);
  }
}
