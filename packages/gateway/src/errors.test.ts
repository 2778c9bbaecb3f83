// The error contract across the public packages: every error class any entry point exports extends
// FencedError, with a code from the closed set and an `applied` the table allows; the gateway's
// problem table answers every code, and answers each error as its code says. Server-free.
import { describe, expect, expectTypeOf, it } from "vitest";
import * as fence from "@fenced/fence";
import { ERROR_CODES, FencedError, InvalidArgumentError, MAX_TOKEN, type ErrorCode } from "@fenced/fence";
import { ERROR_CODE_LIST } from "@fenced/fence/internal";
import * as credentials from "@fenced/fence/credentials";
import {
  credentialKeys,
  CredentialError,
  ExpiredCredentialError,
  mintFenceCredential,
  SealError,
  verifyFenceCredential,
} from "@fenced/fence/credentials";
import * as lock from "@fenced/lock";
import { LeaseLostError, LockNotAcquiredError, TokenSpaceExhaustedError } from "@fenced/lock";
import * as store from "@fenced/store";
import {
  ContentionError,
  CorruptStateError,
  OutcomeUnknownError,
  ResourceMismatchError,
  StaleTokenError,
  StoreSetupError,
  StoreUnavailableError,
  VersionMismatchError,
} from "@fenced/store";
import * as postgres from "@fenced/store/postgres";
import * as s3 from "@fenced/store/s3";
import * as gateway from "@fenced/gateway";
import { PROBLEM_KINDS, PROBLEM_OF_CODE, PROBLEM_TYPES, outcomeNames, type ProblemKind } from "./problems/kinds.js";
import { classify } from "./problems/problem.js";

const ENTRIES = {
  "@fenced/fence": fence,
  "@fenced/fence/credentials": credentials,
  "@fenced/lock": lock,
  "@fenced/store": store,
  "@fenced/store/postgres": postgres,
  "@fenced/store/s3": s3,
  "@fenced/gateway": gateway,
};

type ErrorClass = abstract new (...args: never[]) => Error;
const isErrorClass = (value: unknown): value is ErrorClass =>
  typeof value === "function" && (value as { prototype?: unknown }).prototype instanceof Error;

/** Every error class an entry point exports (FencedError itself aside), by name. */
const exported = new Map<string, ErrorClass>(
  Object.values(ENTRIES).flatMap((entry) =>
    Object.entries(entry).flatMap(([name, value]) =>
      isErrorClass(value) && (value as unknown) !== FencedError ? [[name, value] as const] : [],
    ),
  ),
);

const verified = { fence: { resource: "r", token: 7n, holder: "0".repeat(32) }, expiresAt: 1, keyId: "k" };

/** Instances of each exported class, as the packages throw them: every exported class needs one. */
const SAMPLES: Readonly<Record<string, readonly FencedError[]>> = {
  InvalidArgumentError: [new InvalidArgumentError("fence.token", "must be a bigint")],
  CredentialError: [
    new CredentialError("malformed", "not a fence credential"),
    new CredentialError("unknown-key", "unknown key"),
    new CredentialError("bad-signature", "bad signature"),
  ],
  ExpiredCredentialError: [new ExpiredCredentialError(verified)],
  SealError: [new SealError("malformed", "m"), new SealError("unknown-key", "u"), new SealError("bad-signature", "b")],
  LockNotAcquiredError: [new LockNotAcquiredError("r", 3, [{ node: 0, reason: "held" }], ["r", "s"])],
  TokenSpaceExhaustedError: [new TokenSpaceExhaustedError("r", MAX_TOKEN)],
  LeaseLostError: [new LeaseLostError("r", 7n, "quorum-lost"), new LeaseLostError("r", 7n, "expired", [], undefined, { applied: "no" })],
  StaleTokenError: [new StaleTokenError("r", 1n, 2n)],
  VersionMismatchError: [new VersionMismatchError("k", "1", "2")],
  ResourceMismatchError: [new ResourceMismatchError("k", "r", "o")],
  ContentionError: [new ContentionError("k", 3, "gave up")],
  StoreUnavailableError: [new StoreUnavailableError("postgres", "timeout", "put")],
  OutcomeUnknownError: [new OutcomeUnknownError("s3", "k", "put")],
  StoreSetupError: [new StoreSetupError("s3", "no-such-bucket", "no bucket")],
  CorruptStateError: [new CorruptStateError("s3", "manifest", "k", "truncated")],
};
const samples = Object.values(SAMPLES).flat();

describe("the error contract", () => {
  it("every error class of every entry point is a FencedError, and has samples here", () => {
    expect([...exported.keys()].sort()).toEqual(Object.keys(SAMPLES).sort());
    for (const [name, cls] of exported) {
      for (const err of SAMPLES[name] ?? []) {
        expect(err, name).toBeInstanceOf(cls);
        expect(err, name).toBeInstanceOf(FencedError);
        expect(err.name, name).toBe(name);
      }
    }
  });

  it("every sample has a code from the closed set, thrown by its class, and an applied the table allows", () => {
    for (const err of samples) {
      expect(ERROR_CODE_LIST, err.name).toContain(err.code);
      const row = ERROR_CODES[err.code];
      expect(err.name === row.thrownBy || Object.getPrototypeOf(err.constructor as object) === exported.get(row.thrownBy), err.name).toBe(
        true,
      );
      expect(["no", "unknown"], err.name).toContain(err.applied);
      if (row.applied !== "either") expect(err.applied, err.name).toBe(row.applied);
    }
    // Every code is thrown by some class.
    expect(new Set(samples.map((e) => e.code))).toEqual(new Set(ERROR_CODE_LIST));
  });

  it("applied says what the failed call may have done", () => {
    expect(new OutcomeUnknownError("postgres", "k", "put").applied).toBe("unknown");
    for (const err of [
      new StaleTokenError("r", 1n, 2n),
      new StoreUnavailableError("s3", "refused", "get"),
      new InvalidArgumentError("a", "b"),
    ])
      expect(err.applied).toBe("no");
    expect(new LeaseLostError("r", 1n, "quorum-lost").applied).toBe("unknown");
    expect(new LeaseLostError("r", 1n, "expired", [], undefined, { applied: "no" }).applied).toBe("no");
  });

  it("InvalidArgumentError stays a TypeError and is a FencedError; no other TypeError is", () => {
    const err = new InvalidArgumentError("key", "must be a string");
    expect(err).toBeInstanceOf(TypeError);
    expect(err).toBeInstanceOf(FencedError);
    expect({ code: err.code, applied: err.applied, argument: err.argument }).toEqual({
      code: "INVALID_ARGUMENT",
      applied: "no",
      argument: "key",
    });
    expect(new TypeError("x")).not.toBeInstanceOf(FencedError);
    expect(Object.assign(new Error("x"), { code: "STALE_TOKEN", applied: "no" })).not.toBeInstanceOf(FencedError);
    // A subclass's instanceof is the ordinary one: the mark answers only for FencedError itself.
    expect(new StaleTokenError("r", 1n, 2n)).not.toBeInstanceOf(VersionMismatchError);
    expect(err).not.toBeInstanceOf(StaleTokenError);
    expectTypeOf(err).toExtend<FencedError>();
  });

  it("what the packages throw carries the contract: a malformed argument, a credential refused or expired", () => {
    const keys = credentialKeys([{ id: "k1", secret: Buffer.alloc(32, 1) }]);
    const other = credentialKeys([{ id: "k1", secret: Buffer.alloc(32, 2) }]);
    const thrown = (f: () => unknown): unknown => {
      try {
        f();
      } catch (err) {
        return err;
      }
      throw new Error("did not throw");
    };
    expect(thrown(() => fence.assertToken(-1n))).toMatchObject({ code: "INVALID_ARGUMENT", applied: "no" });
    const credential = mintFenceCredential({ resource: "r", token: 1n, holder: "0".repeat(32) }, keys.get("k1")!, { expiresAt: 10 });
    expect(thrown(() => verifyFenceCredential("fc2.x", keys))).toMatchObject({ code: "CREDENTIAL_MALFORMED", problem: "malformed" });
    expect(thrown(() => verifyFenceCredential(credential, other, 5))).toMatchObject({
      code: "CREDENTIAL_INVALID",
      problem: "bad-signature",
    });
    const expired = thrown(() => verifyFenceCredential(credential, keys, 11));
    expect(expired).toBeInstanceOf(ExpiredCredentialError);
    expect(expired).toMatchObject({ code: "CREDENTIAL_EXPIRED", problem: "expired", applied: "no" });
  });
});

describe("the gateway's answers to the contract", () => {
  it("the problem table answers every code (a Record<ErrorCode, ProblemKind>), with a kind it defines", () => {
    expectTypeOf(PROBLEM_OF_CODE).toExtend<Record<ErrorCode, ProblemKind>>();
    expect(Object.keys(PROBLEM_OF_CODE).sort()).toEqual([...ERROR_CODE_LIST].sort());
    for (const kind of Object.values(PROBLEM_OF_CODE)) expect(PROBLEM_KINDS).toContain(kind);
  });

  it("classify() answers each error with the kind its code names, and a body its kind's schema accepts", () => {
    for (const err of samples) {
      const answered = classify(err);
      expect(answered.kind, `${err.name} ${err.code}`).toBe(PROBLEM_OF_CODE[err.code]);
      const t = PROBLEM_TYPES[answered.kind];
      expect(answered.body).toMatchObject({ type: t.type, status: t.status });
      // The extension members are exactly what the kind documents (its schema is strict).
      const { type: _t, title: _ti, status: _s, detail: _d, ...extensions } = answered.body;
      expect(t.extensions.safeParse(extensions).success, `${err.name} ${JSON.stringify(extensions)}`).toBe(true);
    }
  });

  it("a 5xx answer to a store error says what failed from its fields, never its message", () => {
    for (const err of samples.filter((e) => classify(e).body.status >= 500))
      expect(classify(err).body.detail ?? "", err.name).not.toContain(err.message);
  });

  it("each kind's problem type, log field and metric reason are one slug, spelled three ways", () => {
    for (const kind of PROBLEM_KINDS) {
      const t = PROBLEM_TYPES[kind];
      expect(t).toMatchObject(outcomeNames(t.slug));
      expect(t.slug).toMatch(/^[a-z]+(-[a-z]+)*$/);
    }
    expect(PROBLEM_TYPES.stale).toMatchObject({ type: "/problems/stale-token", log: "stale-token", reason: "stale_token" });
    expectTypeOf(PROBLEM_TYPES.stale.reason).toEqualTypeOf<"stale_token">();
    // Clients branch on the types: the slugs are the API's, unchanged.
    expect(new Set(PROBLEM_KINDS.map((k) => PROBLEM_TYPES[k].slug)).size).toBe(PROBLEM_KINDS.length);
  });
});
