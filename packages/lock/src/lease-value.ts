import { randomFillSync } from "node:crypto";
import { startupSnapshot } from "node:v8";

/** Bytes of entropy in a lease value: 128 bits, so that no two leases ever share one. */
const VALUE_BYTES = 16;
/** Values drawn per refill: one CSPRNG call serves this many acquisitions (as crypto.randomUUID batches its own). */
const VALUES_PER_REFILL = 256;

const pool = Buffer.alloc(VALUE_BYTES * VALUES_PER_REFILL);
let next = pool.length;

/**
 * Built into a startup snapshot (`node --build-snapshot`), the pool and its index are part of the
 * heap every process starts from: each would hand out the same values, hence the same secrets and
 * holder ids. So each process discards what the snapshot holds and refills from its own CSPRNG.
 */
if (startupSnapshot.isBuildingSnapshot()) startupSnapshot.addDeserializeCallback(discardPool);

/** Forgets the pool's bytes and marks it used up: the next value is drawn from a fresh refill. */
function discardPool(): void {
  pool.fill(0);
  next = pool.length;
}

/**
 * A fresh lease value: 32 hex digits from the CSPRNG. Each byte of the pool is handed out once; the
 * pool is refilled, whole, when it runs out. A lease's value is its secret (extend and release act
 * only on keys holding it), so it must be unpredictable and never repeat: both hold for CSPRNG
 * output read once, whether it is drawn 16 bytes at a time or 4 KiB at a time.
 */
export function newLeaseValue(): string {
  if (next === pool.length) {
    randomFillSync(pool);
    next = 0;
  }
  const value = pool.toString("hex", next, next + VALUE_BYTES);
  next += VALUE_BYTES;
  return value;
}
