import { Readable } from "node:stream";
import type { S3Client } from "@aws-sdk/client-s3";
import { InvalidArgumentError } from "@fenced/fence";
import { startS3, type StartedS3 } from "@fenced/servers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Fence } from "../fence.js";
import { FencedS3 } from "./store.js";
import { contents, intercept } from "./wire-test-support.js";

let server: StartedS3;
let client: S3Client;

beforeAll(async () => {
  server = await startS3();
  client = server.client();
});
afterAll(async () => {
  await server?.stop();
});

/** A lone surrogate has no UTF-8 encoding: no S3 object name can carry it, and U+FFFD is another key. */
const LONE_SURROGATES = ["a\uD800", "a\uDC00"];
const REPLACEMENT = "a\uFFFD";
const fence: Fence = { resource: "reports", token: 5n, holder: "h1" };

async function outcome(p: Promise<unknown>): Promise<unknown> {
  return p.then(
    (v) => v,
    (e: unknown) => e,
  );
}

/** Every entry point that takes a key, called with `key`: inline bodies, data objects, streams of known and unknown length. */
function everyCall(store: FencedS3, key: string, version: string): [string, () => Promise<unknown>][] {
  return [
    ["put", () => store.put(key, "intruder", { fence })],
    ["put ifVersion", () => store.put(key, "intruder", { fence, ifVersion: version })],
    ["put stream, known length", () => store.put(key, Readable.from([Buffer.from("intruder")]), { fence, contentLength: 8 })],
    ["put stream, unknown length", () => store.put(key, Readable.from([Buffer.from("intruder")]), { fence })],
    ["get", () => store.get(key)],
    ["getBytes", () => store.getBytes(key)],
    ["delete", () => store.delete(key, { fence })],
    ["update", () => store.update(key, () => "intruder", { fence })],
    ["transfer", () => store.transfer(key, { from: fence, to: { resource: "elsewhere", token: 1n } })],
  ];
}

describe("FencedS3: no two keys share an object", () => {
  for (const inlineLimit of [64 * 1024, 0]) {
    it(`a key with a lone surrogate is refused with InvalidArgumentError before any request; 'a\\uFFFD' keeps its own object (inlineLimit ${inlineLimit})`, async () => {
      const bucket = await server.createBucket();
      const store = new FencedS3(client, { bucket, inlineLimit });
      const written = await store.put(REPLACEMENT, "own", { fence });
      // Its neighbours are objects of their own too: valid keys that differ in any code point never share one.
      const neighbours = ["a", "a\uFFFD\uFFFD", "a😀", "a\u00E9", "ae\u0301", "a/\uFFFD"];
      for (const key of neighbours) await store.put(key, key, { fence });
      const before = await contents(client, bucket);

      let requests = 0;
      const stop = intercept(client, (_info, send) => ((requests += 1), send()));
      try {
        for (const key of LONE_SURROGATES) {
          for (const [what, call] of everyCall(store, key, written.version)) {
            const err = await outcome(call());
            expect(err, `${what} ${JSON.stringify(key)}: ${String(err)}`).toBeInstanceOf(InvalidArgumentError);
            expect(err, what).toMatchObject({ argument: "key", message: "key: must be well-formed Unicode (no lone surrogates)" });
          }
        }
      } finally {
        stop();
      }
      expect(requests).toBe(0);
      expect(await contents(client, bucket)).toEqual(before);
      expect(await store.getBytes(REPLACEMENT)).toMatchObject({ version: written.version, token: 5n, holder: "h1", resource: "reports" });
      expect((await store.getBytes(REPLACEMENT))?.body.toString("utf8")).toBe("own");
      for (const key of neighbours) expect((await store.getBytes(key))?.body.toString("utf8"), key).toBe(key);
    });
  }

  it("a prefix with a lone surrogate is refused when the store is made", async () => {
    const bucket = await server.createBucket();
    for (const prefix of ["p\uD800/", "p/\uDC00/"]) {
      expect(() => new FencedS3(client, { bucket, prefix }), prefix).toThrow(
        expect.objectContaining({ name: "InvalidArgumentError", argument: "prefix" }),
      );
    }
  });
});
