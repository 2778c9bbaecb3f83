// Pins the two objects the S3 ratchet lives in, as bytes (manifest.ts): a manifest or fence object the
// store wrote reads back as written; anything it cannot have written is CorruptStateError, never a
// guess; /1 objects read as /2; a write's header replaces exactly its own resources' entries.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { MAX_TOKEN } from "@fenced/fence";
import { resourceProblem } from "@fenced/fence/internal";
import { CorruptStateError, StaleTokenError } from "../errors.js";
import type { CheckedFence } from "../fence.js";
import { newId } from "./layout.js";
import {
  decodeFence,
  decodeManifest,
  encodeFence,
  encodeManifest,
  entryFor,
  fenceRefusal,
  needsRaise,
  nextHeader,
  transferHeader,
  type ManifestHeader,
} from "./manifest.js";

const fence = (resource: string, token: bigint, holder: string | null = "h1"): CheckedFence => ({ resource, token, holder });
const first = (key = "k", body: ManifestHeader["body"] = { kind: "tombstone" }): ManifestHeader =>
  nextHeader(undefined, key, fence("R", 5n), newId(), body, undefined);

/** A header line as JSON, edited: what a store never writes. */
function edited(header: ManifestHeader, edit: (json: Record<string, unknown>) => void, tail = ""): Buffer {
  const json = JSON.parse(JSON.stringify(header)) as Record<string, unknown>;
  edit(json);
  return Buffer.from(`${JSON.stringify(json)}\n${tail}`);
}

const corrupt = (key: string, bytes: Buffer): unknown => {
  try {
    decodeManifest(key, bytes);
  } catch (err) {
    return err;
  }
  return undefined;
};

const resource = fc.string({ unit: "binary", minLength: 1, maxLength: 12 }).filter((r) => resourceProblem(r) === undefined);
const holder = fc.option(fc.stringMatching(/^[A-Za-z0-9._:-]{1,16}$/), { nil: null });
const token = fc.bigInt({ min: 0n, max: MAX_TOKEN });

describe("the manifest's bytes", () => {
  it("round-trips: any header with its inline body decodes to what was encoded", () => {
    fc.assert(
      fc.property(
        resource,
        token,
        holder,
        fc.uint8Array({ maxLength: 64 }),
        fc.option(fc.string({ maxLength: 20 }), { nil: undefined }),
        (r, t, h, bytes, type) => {
          const header = nextHeader(undefined, "a/key", fence(r, t, h), newId(), { kind: "inline", size: bytes.length }, type);
          const decoded = decodeManifest("a/key", encodeManifest(header, bytes));
          expect(decoded.header).toEqual(header);
          expect(decoded.inline).toEqual(Buffer.from(bytes));
          expect(entryFor(decoded.header, r)).toEqual({ token: t, holder: h });
        },
      ),
    );
  });

  it("a body whose bytes contain newlines is kept whole: only the first newline ends the header", () => {
    const body = Buffer.from("line 1\nline 2\n\n");
    const header = first("k", { kind: "inline", size: body.length });
    expect(decodeManifest("k", encodeManifest(header, body)).inline?.toString()).toBe("line 1\nline 2\n\n");
  });

  it("no header line, or a header that is not JSON, is corrupt", () => {
    for (const bytes of ["", "{}", "not json\n", '{"format":\n']) {
      const err = corrupt("k", Buffer.from(bytes));
      expect(err, bytes).toBeInstanceOf(CorruptStateError);
      expect(err).toMatchObject({ backend: "s3", what: "manifest", subject: "k" });
    }
  });

  it("a manifest stored under one key that names another is corrupt (a copied object never passes as the key's own)", () => {
    expect(corrupt("other", encodeManifest(first("k")))).toBeInstanceOf(CorruptStateError);
    expect(decodeManifest("k", encodeManifest(first("k"))).header.key).toBe("k");
  });

  it("each field the store writes is checked: a wrong format, token, holder, writeId, seq, owner or an unknown field is corrupt", () => {
    const header = first();
    const edits: [string, (j: Record<string, unknown>) => void][] = [
      ["format", (j) => (j.format = "fenced-s3-manifest/3")],
      ["token above 2^63-1", (j) => ((j.token = (MAX_TOKEN + 1n).toString()), ((j.ratchet as unknown[][])[0]![1] = j.token))],
      ["token with a leading zero", (j) => ((j.token = "05"), ((j.ratchet as unknown[][])[0]![1] = "05"))],
      ["token as a number", (j) => (j.token = 5)],
      ["holder with a space", (j) => ((j.holder = "h 1"), ((j.ratchet as unknown[][])[0]![2] = "h 1"))],
      ["writeId uppercase", (j) => (j.writeId = (j.writeId as string).toUpperCase())],
      ["seq 0", (j) => (j.seq = 0)],
      ["seq fractional", (j) => (j.seq = 1.5)],
      ["owner empty", (j) => ((j.owner = ""), ((j.ratchet as unknown[][])[0]![0] = ""))],
      ["an unknown field", (j) => (j.extra = true)],
      ["an unknown body kind", (j) => (j.body = { kind: "elsewhere" })],
      ["an inline size below 0", (j) => (j.body = { kind: "inline", size: -1 })],
    ];
    for (const [name, edit] of edits) expect(corrupt("k", edited(header, edit)), name).toBeInstanceOf(CorruptStateError);
  });

  it("the owner's ratchet entry must be the write that produced the manifest: missing, another token or another holder is corrupt", () => {
    const header = first();
    expect(
      corrupt(
        "k",
        edited(header, (j) => (j.ratchet = [])),
      ),
    ).toBeInstanceOf(CorruptStateError);
    expect(
      corrupt(
        "k",
        edited(header, (j) => (j.ratchet = [["R", "4", "h1"]])),
      ),
    ).toBeInstanceOf(CorruptStateError);
    expect(
      corrupt(
        "k",
        edited(header, (j) => (j.ratchet = [["R", "5", "h2"]])),
      ),
    ).toBeInstanceOf(CorruptStateError);
    expect(
      corrupt(
        "k",
        edited(header, (j) => (j.ratchet = [["R", "5", null]])),
      ),
    ).toBeInstanceOf(CorruptStateError);
    expect(
      corrupt(
        "k",
        edited(header, (j) => (j.ratchet = [["R", "5", "h1"]])),
      ),
    ).toBeUndefined();
  });

  it("two ratchet entries for one resource are corrupt: which would the ratchet be?", () => {
    const twice = edited(
      first(),
      (j) =>
        (j.ratchet = [
          ["R", "5", "h1"],
          ["S", "1", null],
          ["R", "9", "h1"],
        ]),
    );
    expect(corrupt("k", twice)).toBeInstanceOf(CorruptStateError);
  });

  it("an inline body shorter or longer than its declared size, or bytes after a header that declares none, is corrupt", () => {
    const inline = first("k", { kind: "inline", size: 3 });
    expect(corrupt("k", encodeManifest(inline, Buffer.from("abc")))).toBeUndefined();
    expect(corrupt("k", encodeManifest(inline, Buffer.from("ab")))).toBeInstanceOf(CorruptStateError);
    expect(corrupt("k", encodeManifest(inline, Buffer.from("abcd")))).toBeInstanceOf(CorruptStateError);
    expect(corrupt("k", encodeManifest(first("k"), Buffer.from("x")))).toBeInstanceOf(CorruptStateError);
    const object = first("k", { kind: "object", dataKey: "p/data/k/absent.0" });
    expect(corrupt("k", encodeManifest(object))).toBeUndefined();
    expect(corrupt("k", encodeManifest(object, Buffer.from("x")))).toBeInstanceOf(CorruptStateError);
  });

  it("a /1 manifest reads as /2: every holder null, the owner the resource of the write that produced it", () => {
    const writeId = newId();
    const v1 = {
      format: "fenced-s3-manifest/1",
      key: "k",
      writeId,
      seq: 3,
      resource: "R",
      token: "7",
      tokens: [
        ["S", "2"],
        ["R", "7"],
      ],
      body: { kind: "tombstone" },
      writtenAt: "2025-01-01T00:00:00.000Z",
    };
    const { header } = decodeManifest("k", Buffer.from(`${JSON.stringify(v1)}\n`));
    expect(header).toMatchObject({ format: "fenced-s3-manifest/2", owner: "R", token: "7", holder: null, seq: 3, writeId });
    expect(header.ratchet).toEqual([
      ["S", "2", null],
      ["R", "7", null],
    ]);
    // A /1 manifest whose writing resource has no entry is as corrupt as a /2 one.
    expect(corrupt("k", Buffer.from(`${JSON.stringify({ ...v1, tokens: [["S", "2"]] })}\n`))).toBeInstanceOf(CorruptStateError);
  });
});

describe("the header a write builds", () => {
  it("a write replaces its own resource's entry, keeps every other resource's, and counts seq up by one", () => {
    const prev: ManifestHeader = {
      ...first(),
      ratchet: [
        ["Old", "40", "o"],
        ["R", "5", "h1"],
      ],
    };
    const next = nextHeader(prev, "k", fence("R", 9n, "h2"), newId(), { kind: "tombstone" }, "text/plain");
    expect(next.seq).toBe(prev.seq + 1);
    expect(next).toMatchObject({ owner: "R", token: "9", holder: "h2", contentType: "text/plain" });
    expect(next.ratchet).toEqual([
      ["Old", "40", "o"],
      ["R", "9", "h2"],
    ]);
    expect(decodeManifest("k", encodeManifest(next)).header).toEqual(next);
  });

  it("a transfer names the new owner, raises both resources' entries and carries the body and content type over", () => {
    const body = { kind: "object" as const, dataKey: "p/data/k/absent.1" };
    const prev: ManifestHeader = {
      ...nextHeader(undefined, "k", fence("A", 3n), newId(), body, "image/png"),
      ratchet: [
        ["A", "3", "h1"],
        ["B", "1", null],
      ],
    };
    const moved = transferHeader(prev, fence("A", 4n, "ha"), fence("B", 8n, "hb"), newId());
    expect(moved).toMatchObject({ owner: "B", token: "8", holder: "hb", body, contentType: "image/png", seq: prev.seq + 1 });
    expect(entryFor(moved, "A")).toEqual({ token: 4n, holder: "ha" });
    expect(entryFor(moved, "B")).toEqual({ token: 8n, holder: "hb" });
    expect(moved.ratchet).toHaveLength(2);
    expect(decodeManifest("k", encodeManifest(moved)).header).toEqual(moved);
  });

  it("a ratchet entry for a resource named like an object's prototype is a resource like any other", () => {
    const header = nextHeader(undefined, "k", fence("__proto__", 2n), newId(), { kind: "tombstone" }, undefined);
    expect(entryFor(decodeManifest("k", encodeManifest(header)).header, "__proto__")).toEqual({ token: 2n, holder: "h1" });
    expect(entryFor(header, "constructor")).toBeUndefined();
  });
});

describe("the fence object's bytes and what it refuses", () => {
  it("round-trips any fence, each body distinct (a fresh writeId: no ETag comes back)", () => {
    fc.assert(
      fc.property(resource, token, holder, (r, t, h) => {
        const a = encodeFence(fence(r, t, h));
        expect(decodeFence(r, a)).toEqual({ token: t, holder: h });
        expect(a.equals(encodeFence(fence(r, t, h)))).toBe(false);
      }),
    );
  });

  it("a fence object naming another resource, not JSON, of another format or with an unknown field is corrupt", () => {
    const good = JSON.parse(encodeFence(fence("R", 5n)).toString()) as Record<string, unknown>;
    const bad = [
      Buffer.from("nope"),
      encodeFence(fence("S", 5n)),
      Buffer.from(JSON.stringify({ ...good, format: "fenced-s3-fence/9" })),
      Buffer.from(JSON.stringify({ ...good, extra: 1 })),
      Buffer.from(JSON.stringify({ ...good, token: "-1" })),
    ];
    for (const bytes of bad) expect(() => decodeFence("R", bytes), bytes.toString()).toThrow(CorruptStateError);
    expect(() => decodeFence("R", encodeFence(fence("S", 5n)))).toThrow(expect.objectContaining({ what: "fence", subject: "R" }));
  });

  it("a /1 fence object reads with a null holder", () => {
    const v1 = { format: "fenced-s3-fence/1", resource: "R", token: "12", writeId: newId() };
    expect(decodeFence("R", Buffer.from(JSON.stringify(v1)))).toEqual({ token: 12n, holder: null });
  });

  it("refuses exactly what admits() refuses, as StaleTokenError with the highest token and holder; raises exactly on a higher token", () => {
    fc.assert(
      fc.property(token, holder, fc.bigInt({ min: -3n, max: 3n }), holder, (highest, by, delta, h) => {
        const t = highest + delta;
        fc.pre(t >= 0n && t <= MAX_TOKEN);
        const stored = { highest: { token: highest, holder: by } };
        const refused = fenceRefusal(fence("R", t, h), stored);
        const admitted = t > highest || (t === highest && h === by);
        expect(refused === undefined).toBe(admitted);
        if (refused !== undefined) {
          expect(refused).toBeInstanceOf(StaleTokenError);
          expect(refused).toMatchObject({ resource: "R", token: t, highest, highestHolder: by });
        }
        expect(needsRaise(fence("R", t, h), stored)).toBe(t > highest);
      }),
    );
    expect(fenceRefusal(fence("R", 0n), null)).toBeUndefined();
    expect(needsRaise(fence("R", 0n), null)).toBe(true);
  });
});
