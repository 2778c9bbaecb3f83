import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MAX_TOKEN } from "@fenced/fence";
import { FUZZ_LIMITS, leaseRequest, RATCHETED, storeRequest, type BadRequest } from "./fuzz-test-support.js";
import { runGateway, snapshot, startBackends, type Backends, type RunningGateway, recordsSchema } from "./test-support.js";

/**
 * Hostile input: at least 10,000 generated bad requests — malformed, huge and negative tokens,
 * traversal and control characters in keys, wrong media types, oversized bodies, missing and forged
 * keys, resources outside a key's scope, stale tokens and wrong versions. Every answer must be one
 * of the documented 4xx (the exact one when a request has a single defect), and afterwards Postgres
 * and S3, read directly, must hold exactly what they held before.
 */
const BATCH = 64;
const RUNS = 160;

let backends: Backends;
let gw: RunningGateway;
let schema: string;
let prefix: string;

beforeAll(async () => {
  backends = await startBackends({ redis: 3, postgres: true, s3: true });
  const options = backends.gatewayOptions({ limits: { recordBytes: FUZZ_LIMITS.recordBytes, objectBytes: FUZZ_LIMITS.objectBytes } });
  const { objects } = options;
  if (options.records === undefined || objects === undefined || !("bucket" in objects)) throw new Error("backends missing");
  schema = recordsSchema(options) ?? "";
  prefix = objects.prefix ?? "";
  gw = await runGateway({ ...options, objects: { ...objects, inlineLimit: FUZZ_LIMITS.inlineLimit } });
  // A resource whose ratchet is at the top: every lower token is stale, on every key, in both stores.
  const fence = { resource: RATCHETED, token: MAX_TOKEN };
  await gw.gateway.records?.put("fuzz/ratcheted", { at: "max" }, { fence });
  await gw.gateway.objects?.put("fuzz/ratcheted", "at max", { fence });
});
afterAll(async () => {
  await gw?.close();
  await backends?.stop();
});

const DOCUMENTED = [400, 401, 403, 404, 405, 409, 412, 413, 415];

const anyRequest: fc.Arbitrary<BadRequest> = fc.oneof(
  { weight: 5, arbitrary: storeRequest({ minLength: 1, maxLength: 1 }) },
  { weight: 3, arbitrary: storeRequest({ minLength: 2, maxLength: 4 }) },
  { weight: 2, arbitrary: leaseRequest },
);

describe("the gateway under hostile input", () => {
  it(`answers ${BATCH * RUNS} bad requests with documented 4xx problems and writes nothing`, async () => {
    const before = await snapshot(backends.pool, schema, backends.s3Client, backends.bucket);
    expect(before).toContain(prefix); // the snapshot does see the store's objects
    let sent = 0;
    const statuses = new Map<number, number>();

    await fc.assert(
      fc.asyncProperty(fc.array(anyRequest, { minLength: BATCH, maxLength: BATCH }), async (batch) => {
        const answers = await Promise.all(batch.map((r) => gw.client.send(r)));
        answers.forEach((answer, i) => {
          const r = batch[i] as BadRequest;
          sent++;
          statuses.set(answer.status, (statuses.get(answer.status) ?? 0) + 1);
          const where = `${r.what}: ${r.method} ${r.path.slice(0, 120)} → ${answer.status} ${answer.text().slice(0, 300)}`;
          expect(DOCUMENTED, where).toContain(answer.status);
          expect(r.expect, where).toContain(answer.status);
          if (r.method !== "HEAD") {
            expect(answer.headers["content-type"], where).toMatch(/^application\/problem\+json/);
            const problem = answer.json<{ status: unknown; type: unknown }>();
            expect(problem.status, where).toBe(answer.status);
            expect(String(problem.type), where).toMatch(/^\/problems\//);
          }
        });
      }),
      { numRuns: RUNS },
    );

    expect(sent).toBeGreaterThanOrEqual(10_000);
    // Each documented code was produced by something (the generators reach every branch).
    for (const status of DOCUMENTED)
      expect(statuses.get(status) ?? 0, `status ${status}: ${JSON.stringify([...statuses])}`).toBeGreaterThan(0);
    expect(await snapshot(backends.pool, schema, backends.s3Client, backends.bucket)).toBe(before);
    const metrics = await gw.gateway.metrics.registry.getSingleMetricAsString("fenced_gateway_writes_accepted_total");
    expect(metrics).not.toMatch(/^fenced_gateway_writes_accepted_total\{[^}]*\} [1-9]/m);
    // About 20 s alone; several times that while the chaos run shares the two cores.
  }, 240_000);
});
