// Pins the lock's pure parts that decide before or without Redis: every option, TTL, held lease and
// client list is checked (options.ts) and refused with InvalidArgumentError naming the argument; a
// node's ACQUIRE reply is read exactly or refused (parseGrant: a counter is never read through a
// double); token exhaustion is told from an ordinary round (ceilingReached); a resource's two keys
// share one Redis Cluster hash slot (keys.ts).
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { InvalidArgumentError, MAX_TOKEN } from "@fenced/fence";
import type { NodeFailure } from "./errors.js";
import { resourceKeys } from "./keys.js";
import { assertTtl, checkAcquireOptions, checkClients, checkHeld, checkSettings, checkTtl, driftMs, MIN_TTL_MS } from "./options.js";
import { ceilingReached, chooseTokens, failures, parseGrant, quorumOf, type Grant, type Reply } from "./quorum.js";
import { INTEGER_REPLY_LIMIT } from "./scripts.js";

const MAX_MS = 2 ** 31 - 1;

/** `check` throws an InvalidArgumentError naming `argument`. */
const refusedAs = (argument: string, check: () => unknown): void =>
  expect(check, argument).toThrow(expect.objectContaining({ constructor: InvalidArgumentError, argument }));

describe("Redlock options", () => {
  it("no options are the documented defaults", () => {
    expect(checkSettings(undefined)).toEqual({
      driftFactor: 0.01,
      retryCount: 10,
      retryDelayMs: 200,
      retryJitterMs: 100,
      nodeTimeoutMs: 200,
      automaticExtensionThresholdMs: undefined,
      extensionAttempts: 3,
      onNodeResult: undefined,
    });
  });

  it("each option out of its range is refused, naming it", () => {
    const bad: [string, unknown][] = [
      ["driftFactor", -0.1],
      ["driftFactor", 1],
      ["driftFactor", Number.NaN],
      ["driftFactor", "0.01"],
      ["retryCount", -1],
      ["retryCount", 1.5],
      ["retryCount", Number.NEGATIVE_INFINITY],
      ["retryDelayMs", -1],
      ["retryDelayMs", MAX_MS + 1],
      ["retryJitterMs", Number.POSITIVE_INFINITY],
      ["nodeTimeoutMs", 0],
      ["nodeTimeoutMs", Number.NaN],
      ["automaticExtensionThresholdMs", -5],
      ["extensionAttempts", 0],
      ["extensionAttempts", 2.5],
      ["onNodeResult", "log"],
    ];
    for (const [name, value] of bad) refusedAs(`options.${name}`, () => checkSettings({ [name]: value }));
    refusedAs("options", () => checkSettings(null));
    refusedAs("options", () => checkSettings(5));
  });

  it("the bounds themselves pass: retryCount Infinity, delays of 0 and 2^31-1 ms, a node timeout of 1 ms", () => {
    const s = checkSettings({
      retryCount: Number.POSITIVE_INFINITY,
      retryDelayMs: 0,
      retryJitterMs: MAX_MS,
      nodeTimeoutMs: 1,
      driftFactor: 0,
    });
    expect(s).toMatchObject({
      retryCount: Number.POSITIVE_INFINITY,
      retryDelayMs: 0,
      retryJitterMs: MAX_MS,
      nodeTimeoutMs: 1,
      driftFactor: 0,
    });
  });

  it("acquire's options: retryCount falls back to the Redlock's; a signal must be an AbortSignal", () => {
    expect(checkAcquireOptions(undefined, 7)).toEqual({ retryCount: 7, signal: undefined });
    expect(checkAcquireOptions({}, 7)).toEqual({ retryCount: 7, signal: undefined });
    const signal = new AbortController().signal;
    expect(checkAcquireOptions({ retryCount: 0, signal }, 7)).toEqual({ retryCount: 0, signal });
    refusedAs("options.signal", () => checkAcquireOptions({ signal: { aborted: false } }, 7));
    refusedAs("options.retryCount", () => checkAcquireOptions({ retryCount: -1 }, 7));
    refusedAs("options", () => checkAcquireOptions("fast", 7));
  });
});

describe("a TTL", () => {
  it(`any integer in [${MIN_TTL_MS}, 2^31-1] ms passes; below, above, fractional or not a number is refused`, () => {
    fc.assert(
      fc.property(fc.integer({ min: MIN_TTL_MS, max: MAX_MS }), (ttl) => {
        expect(() => assertTtl(ttl)).not.toThrow();
      }),
    );
    for (const bad of [MIN_TTL_MS - 1, 0, -1, MAX_MS + 1, 150.5, Number.NaN, Number.POSITIVE_INFINITY, "1000", 1000n, null])
      refusedAs("ttlMs", () => assertTtl(bad));
    expect(() => assertTtl(MIN_TTL_MS - 1)).toThrow(/at least 100 milliseconds/);
  });

  it("must leave at least 1 ms of validity after the drift allowance (driftFactor × TTL + 2)", () => {
    fc.assert(
      fc.property(fc.integer({ min: MIN_TTL_MS, max: 100_000 }), fc.double({ min: 0, max: 0.999, noNaN: true }), (ttl, factor) => {
        const left = ttl - driftMs(ttl, factor);
        if (left >= 1) expect(() => checkTtl(ttl, factor)).not.toThrow();
        else refusedAs("ttlMs", () => checkTtl(ttl, factor));
      }),
    );
    expect(driftMs(1000, 0.01)).toBe(12);
    refusedAs("ttl", () => checkTtl(200, 0.995, "ttl"));
  });
});

describe("a held lease, given back to extend or release", () => {
  const value = "0123456789abcdef0123456789abcdef";

  it("one resource or a set, copied; its value must be a lease value (32 lowercase hex digits)", () => {
    expect(checkHeld({ resource: "r", token: 3n, value })).toEqual({ fences: [{ resource: "r", token: 3n }], value });
    const set = {
      fences: [
        { resource: "a", token: 1n },
        { resource: "b", token: 9n },
      ],
      value,
      validUntil: 5,
    };
    expect(checkHeld(set)).toEqual(set);
    for (const bad of ["", value.toUpperCase(), value.slice(1), `${value}0`, "g".repeat(32), 42])
      refusedAs("held.value", () => checkHeld({ resource: "r", token: 3n, value: bad }));
  });

  it("each field of each fence is checked where it is; a set with a resource twice is refused", () => {
    refusedAs("held.resource", () => checkHeld({ resource: "", token: 1n, value }));
    refusedAs("held.token", () => checkHeld({ resource: "r", token: 1, value }));
    refusedAs("held.fences", () => checkHeld({ fences: "a", value }));
    refusedAs("held.fences[1]", () => checkHeld({ fences: [{ resource: "a", token: 1n }, null], value }));
    refusedAs("held.fences[1].token", () =>
      checkHeld({
        fences: [
          { resource: "a", token: 1n },
          { resource: "b", token: -1n },
        ],
        value,
      }),
    );
    refusedAs("held.fences[1]", () =>
      checkHeld({
        fences: [
          { resource: "a", token: 1n },
          { resource: "a", token: 2n },
        ],
        value,
      }),
    );
    refusedAs("held.validUntil", () => checkHeld({ resource: "r", token: 1n, value, validUntil: Number.NaN }));
    refusedAs("held", () => checkHeld(undefined));
  });

  it("each field is read once: a getter cannot show the check one value and the nodes another", () => {
    let reads = 0;
    const held = {
      resource: "r",
      token: 1n,
      get value(): string {
        reads++;
        return reads === 1 ? value : "not a lease value";
      },
    };
    expect(checkHeld(held).value).toBe(value);
    expect(reads).toBe(1);
  });
});

describe("the clients", () => {
  const client = { evalsha: () => undefined, eval: () => undefined, script: () => undefined };

  it("at least one, each with evalsha, eval and script; the list is copied so the caller cannot move the quorum", () => {
    const clients = [client, client, client];
    const checked = checkClients(clients);
    clients.push(client);
    expect(checked).toHaveLength(3);
    refusedAs("clients", () => checkClients([]));
    refusedAs("clients", () => checkClients(client));
    refusedAs("clients[1]", () => checkClients([client, { evalsha: () => undefined, eval: () => undefined }]));
    refusedAs("clients[0]", () => checkClients([null]));
  });
});

describe("a node's ACQUIRE reply", () => {
  it("reads {flag, counter per resource}: integers below the exact-integer limit, larger ones as decimal strings", () => {
    fc.assert(
      fc.property(fc.boolean(), fc.array(fc.bigInt({ min: 0n, max: MAX_TOKEN }), { minLength: 1, maxLength: 5 }), (granted, counters) => {
        const raw = [granted ? 1 : 0, ...counters.map((c) => (c < BigInt(INTEGER_REPLY_LIMIT) ? Number(c) : c.toString()))];
        expect(parseGrant(raw, counters.length)).toEqual({ granted, counters });
      }),
    );
  });

  it("refuses a reply it cannot read exactly: the wrong length, a counter as a number past the limit, a fraction, a sign", () => {
    const bad: [unknown, number][] = [
      [[1, 5], 2],
      [[1, 5, 6], 1],
      ["OK", 1],
      [[1, INTEGER_REPLY_LIMIT], 1],
      [[1, 2 ** 53 + 1], 1],
      [[1, 1.5], 1],
      [[1, -1], 1],
      [[1, "-1"], 1],
      [[1, "1e3"], 1],
      [[1, null], 1],
    ];
    for (const [raw, resources] of bad) expect(() => parseGrant(raw, resources), JSON.stringify(raw)).toThrow(/unexpected/);
    expect(parseGrant([1, String(INTEGER_REPLY_LIMIT)], 1).counters).toEqual([BigInt(INTEGER_REPLY_LIMIT)]);
    expect(parseGrant([0, 3], 1).granted).toBe(false);
    expect(parseGrant([2, 3], 1).granted).toBe(false);
  });
});

describe("the counter ceiling", () => {
  const grant = (granted: boolean, ...counters: bigint[]): Reply<Grant> => ({ ok: true, value: { granted, counters } });

  it("a candidate token past 2^63-1 is exhaustion, of the first such resource, with the highest counter seen", () => {
    const replies = [grant(true, 1n, MAX_TOKEN), grant(true, 1n, MAX_TOKEN), grant(false, 1n, MAX_TOKEN)];
    const choices = chooseTokens(replies, 2, 2);
    expect(ceilingReached(replies, choices, 2, 2)).toBeUndefined(); // MAX_TOKEN itself is a valid token
    // A refusing node ahead of every grant: the token goes one past it — MAX_TOKEN still valid, one more not.
    const below = [grant(true, 1n, MAX_TOKEN - 2n), grant(true, 1n, MAX_TOKEN - 2n), grant(false, 1n, MAX_TOKEN - 1n)];
    const raised = chooseTokens(below, 2, 2);
    expect(raised?.[1]?.token).toBe(MAX_TOKEN);
    expect(ceilingReached(below, raised, 2, 2)).toBeUndefined();
    const past = [grant(true, 1n, MAX_TOKEN - 1n), grant(true, 1n, MAX_TOKEN - 1n), grant(false, 1n, MAX_TOKEN)];
    expect(ceilingReached(past, chooseTokens(past, 2, 2), 2, 2)).toEqual({ resource: 1, highest: MAX_TOKEN });
    const over = [grant(true, 2n, 5n), grant(true, 2n, 5n), grant(false, MAX_TOKEN, 1n)];
    expect(ceilingReached(over, chooseTokens(over, 2, 2), 2, 2)).toEqual({ resource: 0, highest: MAX_TOKEN });
  });

  it("without a quorum granting: exhaustion only when so many refuse at the ceiling that no quorum is left", () => {
    const atCeiling = grant(false, MAX_TOKEN);
    const failed: Reply<Grant> = { ok: false, failure: { node: 0, reason: "timeout" } };
    expect(ceilingReached([atCeiling, atCeiling, grant(false, 3n)], undefined, 2, 1)).toEqual({ resource: 0, highest: MAX_TOKEN });
    // A node that granted with MAX_TOKEN reached it by its INCR (a valid token): it is not refusing at the ceiling.
    expect(ceilingReached([grant(true, MAX_TOKEN), atCeiling, grant(false, 3n)], undefined, 2, 1)).toBeUndefined();
    // One of three at the ceiling: the other two may still grant with a lower counter.
    expect(ceilingReached([atCeiling, grant(false, 3n), failed], undefined, 2, 1)).toBeUndefined();
    expect(ceilingReached([atCeiling, undefined, undefined, undefined, undefined], undefined, quorumOf(5), 1)).toBeUndefined();
    expect(ceilingReached([atCeiling, atCeiling, atCeiling, undefined, undefined], undefined, quorumOf(5), 1)).toEqual({
      resource: 0,
      highest: MAX_TOKEN,
    });
  });

  it("a round's failures: each failed node's reason and each answer the caller calls a failure, in node order", () => {
    const replies: Reply<number>[] = [
      { ok: true, value: 1 },
      { ok: false, failure: { node: 1, reason: "timeout" } },
      { ok: true, value: 0 },
    ];
    const held = (value: number, node: number): NodeFailure | undefined => (value === 0 ? { node, reason: "held" } : undefined);
    expect(failures(replies, held)).toEqual([
      { node: 1, reason: "timeout" },
      { node: 2, reason: "held" },
    ]);
  });
});

describe("a resource's Redis keys", () => {
  /** What Redis Cluster hashes: the text between the first '{' and the next '}', if not empty; else the whole key. */
  function hashTag(key: string): string {
    const open = key.indexOf("{");
    if (open < 0) return key;
    const close = key.indexOf("}", open + 1);
    return close < 0 || close === open + 1 ? key : key.slice(open + 1, close);
  }

  it("the lease and the counter hash alike for any resource (braces included), and no two resources share a key", () => {
    fc.assert(
      fc.property(
        fc.string({ unit: "grapheme", minLength: 1, maxLength: 20 }),
        fc.string({ unit: "grapheme", minLength: 1, maxLength: 20 }),
        (a, b) => {
          const keys = resourceKeys(a);
          expect(hashTag(keys.lease)).toBe(hashTag(keys.counter));
          expect(hashTag(keys.lease).startsWith("fenced:")).toBe(true);
          expect(keys.lease).not.toBe(keys.counter);
          if (a !== b) expect(resourceKeys(b).lease).not.toBe(keys.lease);
        },
      ),
    );
    expect(resourceKeys("{x}")).toEqual({ lease: "{fenced:{x}}:lease", counter: "{fenced:{x}}:token" });
  });
});
