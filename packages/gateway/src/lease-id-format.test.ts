import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { MAX_RESOURCES, MAX_TOKEN } from "@fenced/fence";
import { credentialKeys } from "@fenced/fence/credentials";
import { MAX_SEALED_LENGTH, seal } from "@fenced/fence/internal";
import { decodeLeaseId, encodeLeaseId, LEASE_ID_PATTERN, leaseBytesProblem, MAX_LEASE_RESOURCE_BYTES } from "./auth/lease-id.js";
import { HttpProblem } from "./problems/problem.js";

/**
 * Lease ids of a set of resources (fl2) without a server: every resource and token sealed, every
 * edit refused, the bound that keeps them within a sealed string. One resource's (fl1): unit.test.ts,
 * "lease ids"; over HTTP: lease-ids.test.ts and lease-sets.test.ts.
 */
describe("lease ids of a set", () => {
  const key = { id: "current", secret: Buffer.alloc(32, 7) };
  const keys = credentialKeys([key, { id: "previous", secret: Buffer.alloc(32, 9) }]);
  const problem = (f: () => unknown): string => {
    try {
      f();
    } catch (err) {
      if (err instanceof HttpProblem) return String(err.kind);
      throw err;
    }
    return "accepted";
  };

  it("of a set: every resource and token sealed in order, one spelling, the one-resource format unchanged", () => {
    // eslint-disable-next-line no-control-regex -- the control characters a resource may not hold
    const resource = fc.string({ unit: "grapheme", minLength: 1, maxLength: 20 }).filter((r) => !/[\u0000-\u001f\u007f-\u009f]/.test(r));
    const fences = fc.uniqueArray(fc.record({ resource, token: fc.bigInt({ min: 0n, max: MAX_TOKEN }) }), {
      minLength: 2,
      maxLength: MAX_RESOURCES,
      selector: (f) => f.resource,
    });
    fc.assert(
      fc.property(fences, fc.stringMatching(/^[0-9a-f]{32}$/), fc.nat(), (set, value, validUntil) => {
        fc.pre(leaseBytesProblem(set.map((f) => f.resource)) === undefined);
        const id = encodeLeaseId({ fences: set, value, validUntil }, key);
        expect(id).toMatch(LEASE_ID_PATTERN);
        expect(id.startsWith("fl2.")).toBe(true);
        expect(decodeLeaseId(id, keys)).toEqual({ fences: set, value, validUntil });
      }),
      { numRuns: 200 },
    );
    // An id issued before sets (fl1, sealed by hand here as the gateway did) still names its lease.
    const before = seal(
      { version: "fl1", domain: "fenced-lease-id/1", fields: 4 },
      ["7", "a".repeat(32), "1800000000000", "orders/1"],
      key,
    );
    expect(decodeLeaseId(before, keys)).toEqual({
      fences: [{ resource: "orders/1", token: 7n }],
      value: "a".repeat(32),
      validUntil: 1_800_000_000_000,
    });
  });

  it("of a set: the largest set the bound lets through fits in a sealed string, and one byte more is refused", () => {
    // 64 resources of 8 three-byte characters each (24 bytes): 1,536 bytes in all, every token at its
    // largest, the longest key id and end: the longest lease id the gateway can issue.
    const longKey = { id: "k".repeat(64), secret: Buffer.alloc(32, 7) };
    const resources = Array.from({ length: MAX_RESOURCES }, (_, i) => `${String.fromCharCode(0x4e00 + i)}${"界".repeat(7)}`);
    expect(resources.reduce((n, r) => n + Buffer.byteLength(r), 0)).toBe(MAX_LEASE_RESOURCE_BYTES);
    expect(leaseBytesProblem(resources)).toBeUndefined();
    const parts = {
      fences: resources.map((r) => ({ resource: r, token: MAX_TOKEN })),
      value: "f".repeat(32),
      validUntil: Number.MAX_SAFE_INTEGER,
    };
    const id = encodeLeaseId(parts, longKey);
    expect(id.length).toBeLessThanOrEqual(MAX_SEALED_LENGTH);
    expect(decodeLeaseId(id, credentialKeys([longKey]))).toEqual(parts);
    expect(leaseBytesProblem([...resources.slice(1), `${resources[0] ?? ""}x`])).toMatch(/at most 1536 bytes of UTF-8.*got 1537/);
    // One resource never meets the bound: 512 UTF-16 units are at most 1,536 bytes.
    expect(leaseBytesProblem(["界".repeat(512)])).toBeUndefined();
    expect(leaseBytesProblem(["😀".repeat(256)])).toBeUndefined();
  });

  it("of a set: an edited, reordered, shortened or re-versioned id is refused, as a 400 or a 403", () => {
    const value = "0".repeat(32);
    const set = [
      { resource: "accounts/alice", token: 5n },
      { resource: "accounts/bob", token: 9n },
    ];
    const id = encodeLeaseId({ fences: set, value, validUntil: 1_800_000_000_000 }, key);
    const [v, k, payload, mac] = id.split(".") as [string, string, string, string];
    const fields = Buffer.from(payload, "base64url").toString("utf8").split("\n");
    const sealedAs = (f: readonly string[], version = v): string =>
      [version, k, Buffer.from(f.join("\n"), "utf8").toString("base64url"), mac].join(".");
    expect(fields).toEqual([value, "1800000000000", "5", "accounts/alice", "9", "accounts/bob"]);
    for (const [what, forged] of [
      ["a token", sealedAs(fields.with(4, "99"))],
      ["a resource", sealedAs(fields.with(5, "accounts/carol"))],
      ["the order", sealedAs([value, "1800000000000", "9", "accounts/bob", "5", "accounts/alice"])],
      ["the tokens' order", sealedAs(fields.with(2, "9").with(4, "5"))],
      ["a resource added", sealedAs([...fields, "1", "accounts/carol"])],
      ["the end", sealedAs(fields.with(1, "1900000000000"))],
      ["a set's seal read as one resource's", sealedAs([fields[2] ?? "", value, "1800000000000", fields[3] ?? ""], "fl1")],
    ] as const)
      expect(
        problem(() => decodeLeaseId(forged, keys)),
        what,
      ).toBe("invalidLeaseId");
    for (const [what, malformed] of [
      ["one resource in the set format", sealedAs(fields.slice(0, 4))],
      ["a resource without its token", sealedAs(fields.slice(0, 5))],
      ["no resource", sealedAs(fields.slice(0, 2))],
      ["too long", `${id}${"A".repeat(5000)}`],
      ["not base64url", `${v}.${k}.${payload}!.${mac}`],
    ] as const)
      expect(
        problem(() => decodeLeaseId(malformed, keys)),
        what,
      ).toBe("invalid");
    // A one-resource id under the set's version: malformed (four fields are no set), not a lease.
    const one = encodeLeaseId({ fences: [{ resource: "a", token: 1n }], value, validUntil: 1 }, key);
    expect(problem(() => decodeLeaseId(one.replace(/^fl1/, "fl2"), keys))).toBe("invalid");
  });
});
