// Pins what the S3 store checks before any request (options.ts, body.ts) — each bad input refused
// with InvalidArgumentError naming it, a caller's aborted signal refused with its own reason — and
// what the manifest's version check answers (intent.ts, refusal): absent, any, "exists", a version,
// and a tombstone's version never shown to a caller.
import { Readable } from "node:stream";
import { describe, expect, it } from "vitest";
import { InvalidArgumentError } from "@fenced/fence";
import { ResourceMismatchError, StaleTokenError, VersionMismatchError } from "../errors.js";
import { assertBody, assertContentLength, assertContentType, toPayload } from "../objects/body.js";
import { NeverWrittenError, refusal } from "../cas/intent.js";
import type { Snapshot } from "../cas/io.js";
import { newId } from "../cas/layout.js";
import { nextHeader, type ManifestHeader } from "../cas/manifest.js";
import { transferOptions } from "../cas/options.js";
import { sweepOptions, validateOptions, writeOptions } from "./options.js";

/** `check` throws an InvalidArgumentError naming `argument`. */
const refusedAs = (argument: string, check: () => unknown): void =>
  expect(check, argument).toThrow(expect.objectContaining({ constructor: InvalidArgumentError, argument }));

const fence = { resource: "R", token: 5n, holder: "h1" };

describe("FencedS3's options", () => {
  it("defaults: prefix fenced/, 64 KiB inline, fence objects checked, 64 attempts, 8 MiB parts", () => {
    expect(validateOptions({ bucket: "my-bucket" })).toMatchObject({
      bucket: "my-bucket",
      prefix: "fenced/",
      inlineLimit: 64 * 1024,
      checkResourceFence: true,
      maxAttempts: 64,
      partSize: 8 * 1024 * 1024,
    });
  });

  it("a bucket must be a valid S3 bucket name", () => {
    for (const bucket of ["ab", "a".repeat(64), "My-Bucket", "-bucket", "bucket-", "bu_cket", "bu cket", 42, undefined])
      refusedAs("bucket", () => validateOptions({ bucket }));
    for (const bucket of ["abc", "a".repeat(63), "my.bucket-1", "0bucket"]) expect(validateOptions({ bucket }).bucket).toBe(bucket);
  });

  it("a prefix is empty, or a valid key followed by '/', at most 256 bytes: the store's objects never land outside it", () => {
    for (const prefix of ["", "p/", "a/b/", "ü/"]) expect(validateOptions({ bucket: "bkt", prefix }).prefix).toBe(prefix);
    for (const prefix of ["p", "/p/", "a//", "../", "a/../", "./", `${"x".repeat(256)}/`, "a\n/", 7])
      refusedAs("prefix", () => validateOptions({ bucket: "bkt", prefix }));
  });

  it("each number in its range, each flag a boolean", () => {
    const bad: [string, unknown][] = [
      ["inlineLimit", -1],
      ["inlineLimit", 4 * 1024 * 1024 + 1],
      ["inlineLimit", 1.5],
      ["maxAttempts", 0],
      ["maxAttempts", 10_001],
      ["partSize", 5 * 1024 * 1024 - 1],
      ["partSize", "8MiB"],
      ["checkResourceFence", "yes"],
    ];
    for (const [name, value] of bad) refusedAs(name, () => validateOptions({ bucket: "bkt", [name]: value }));
    refusedAs("options", () => validateOptions(null));
    expect(validateOptions({ bucket: "bkt", inlineLimit: 0, checkResourceFence: false })).toMatchObject({
      inlineLimit: 0,
      checkResourceFence: false,
    });
  });
});

describe("a write's options", () => {
  it("the fence is copied: a caller changing it mid-write changes nothing", () => {
    const live = { ...fence };
    const checked = writeOptions({ fence: live });
    live.token = 1n;
    expect(checked.fence).toEqual({ resource: "R", token: 5n, holder: "h1" });
    refusedAs("options.fence", () => writeOptions({ fence: undefined }));
    refusedAs("options.fence.token", () => writeOptions({ fence: { resource: "R", token: 5 } }));
  });

  it("ifVersion must be a version this store issues (32 lowercase hex digits)", () => {
    const version = newId();
    expect(writeOptions({ fence, ifVersion: version }).ifVersion).toBe(version);
    for (const ifVersion of ["", "1", version.toUpperCase(), `${version}0`, 5, null])
      refusedAs("options.ifVersion", () => writeOptions({ fence, ifVersion }));
  });

  it("an aborted signal is refused before any request with its own reason; maxAttempts in 1..10,000", () => {
    const controller = new AbortController();
    const reason = new Error("caller gave up");
    controller.abort(reason);
    expect(() => writeOptions({ fence, signal: controller.signal })).toThrow(reason);
    refusedAs("options.signal", () => writeOptions({ fence, signal: { aborted: false } }));
    refusedAs("options.maxAttempts", () => writeOptions({ fence, maxAttempts: 0 }));
    expect(writeOptions({ fence, maxAttempts: 3 }).maxAttempts).toBe(3);
  });

  it("a transfer names two fences; sweep options have their ranges and defaults", () => {
    const to = { resource: "S", token: 1n, holder: "h2" };
    expect(transferOptions({ from: fence, to })).toMatchObject({ from: fence, to, ifVersion: undefined });
    expect(() => transferOptions({ from: fence })).toThrow(InvalidArgumentError);
    expect(sweepOptions(undefined)).toMatchObject({ minAgeMs: 86_400_000, dryRun: false, concurrency: 8, pageSize: 1000 });
    refusedAs("options.dryRun", () => sweepOptions({ dryRun: 1 }));
    refusedAs("options.concurrency", () => sweepOptions({ concurrency: 65 }));
    refusedAs("options.pageSize", () => sweepOptions({ pageSize: 1001 }));
    refusedAs("options.onProgress", () => sweepOptions({ onProgress: "log" }));
  });
});

describe("a body", () => {
  it("a string, bytes or an unconsumed stream; a consumed or destroyed stream, or anything else, is refused", () => {
    for (const body of ["", "text", new Uint8Array(3), Buffer.from("x"), Readable.from([Buffer.from("x")])])
      expect(() => assertBody(body)).not.toThrow();
    const destroyed = Readable.from(["x"]);
    destroyed.destroy();
    for (const body of [null, undefined, 42, {}, [1, 2], destroyed]) refusedAs("body", () => assertBody(body));
    refusedAs("update's result", () => assertBody(7, "update's result"));
  });

  it("a content type of 1-256 characters without control characters; a content length only for a stream, a safe integer", () => {
    for (const bad of ["", "x".repeat(257), "text/plain\r\nX-Injected: 1", 5]) refusedAs("contentType", () => assertContentType(bad));
    expect(() => assertContentType("application/json; charset=utf-8")).not.toThrow();
    const stream = Readable.from([Buffer.from("abc")]);
    expect(() => assertContentLength(3, stream)).not.toThrow();
    refusedAs("contentLength", () => assertContentLength(3, "abc"));
    for (const bad of [-1, 1.5, Number.MAX_SAFE_INTEGER + 1, "3"]) refusedAs("contentLength", () => assertContentLength(bad, stream));
  });

  it("bytes in memory become a Buffer over the same memory (no copy); a string its UTF-8", () => {
    const bytes = new Uint8Array([1, 2, 3, 4]).subarray(1, 3);
    const payload = toPayload(bytes) as Buffer;
    bytes[0] = 9;
    expect([...payload]).toEqual([9, 3]);
    expect((toPayload("é") as Buffer).length).toBe(2);
  });
});

describe("the manifest's version check (refusal)", () => {
  const snap = (body: ManifestHeader["body"], owner = "R"): Snapshot => ({
    etag: "e",
    header: nextHeader(undefined, "k", { resource: owner, token: 5n, holder: "h1" }, newId(), body, undefined),
  });
  const intent = (ifVersion: string | null | undefined | { exists: true }) => ({ key: "k", owner: "R", fences: [{ ...fence }], ifVersion });

  it("no version asked: any state passes; null: only an absent key; 'exists': only a key written once, tombstone included", () => {
    const live = snap({ kind: "inline", size: 0 });
    const tomb = snap({ kind: "tombstone" });
    expect(refusal(intent(undefined), null)).toBeUndefined();
    expect(refusal(intent(undefined), live)).toBeUndefined();
    expect(refusal(intent(null), null)).toBeUndefined();
    expect(refusal(intent(null), live)).toBeInstanceOf(VersionMismatchError);
    expect(refusal(intent({ exists: true }), null)).toBeInstanceOf(NeverWrittenError);
    expect(refusal(intent({ exists: true }), tomb)).toBeUndefined();
  });

  it("a version: passes only at that version; a mismatch names the current one, except a tombstone's, which no caller was ever given", () => {
    const live = snap({ kind: "inline", size: 0 });
    const tomb = snap({ kind: "tombstone" });
    expect(refusal(intent(live.header.writeId), live)).toBeUndefined();
    expect(refusal(intent(newId()), live)).toMatchObject({ actual: live.header.writeId });
    expect(refusal(intent(newId()), tomb)).toMatchObject({ actual: undefined });
    expect(refusal(intent(newId()), null)).toMatchObject({ actual: undefined });
    expect(refusal(intent(tomb.header.writeId), tomb)).toBeUndefined();
  });

  it("the owner and the ratchet are checked before the version: a stale or foreign write learns that, not a version mismatch", () => {
    const foreign = snap({ kind: "inline", size: 0 }, "S");
    expect(refusal(intent(newId()), foreign)).toBeInstanceOf(ResourceMismatchError);
    const ahead = {
      etag: "e",
      header: nextHeader(undefined, "k", { resource: "R", token: 9n, holder: "h9" }, newId(), { kind: "tombstone" }, undefined),
    };
    expect(refusal(intent(newId()), ahead)).toBeInstanceOf(StaleTokenError);
  });
});
