import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { ResourceMismatchError, StaleTokenError, VersionMismatchError } from "../errors.js";
import { admits, type CheckedFence } from "../fence.js";
import { decide, type FenceView, type ManifestView } from "./decision.js";
import type { FenceSnapshot, Snapshot } from "./io.js";
import type { ManifestHeader } from "./manifest.js";

/**
 * The S3 write's decision (decision.ts) on every combination of what a write can know, against the
 * rules PROTOCOL.md states for it ("S3", "The write"), each written here independently of decide().
 */

const RESOURCES = ["a", "b", "c"] as const;
const HOLDERS = ["h1", "h2", null] as const;

const fence = (resource: string) =>
  fc.record({ resource: fc.constant(resource), token: fc.bigInt({ min: 1n, max: 4n }), holder: fc.constantFrom(...HOLDERS) });

const highest = fc.record({ token: fc.bigInt({ min: 1n, max: 4n }), holder: fc.constantFrom(...HOLDERS) });
const fenceSnap: fc.Arbitrary<FenceSnapshot | null> = fc.option(
  highest.map((h) => ({ etag: "e", highest: h })),
  { nil: null },
);

function header(owner: string, writeId: string, ratchet: readonly (readonly [string, bigint, string | null])[]): ManifestHeader {
  return {
    format: "fenced-s3-manifest/2",
    key: "k",
    writeId,
    seq: 1,
    owner,
    token: "1",
    holder: null,
    ratchet: ratchet.map(([r, t, h]) => [r, t.toString(), h]),
    body: { kind: "tombstone" },
    writtenAt: "2026-01-01T00:00:00.000Z",
  };
}

const manifestSnap: fc.Arbitrary<Snapshot | null> = fc.option(
  fc
    .record({
      owner: fc.constantFrom(...RESOURCES),
      writeId: fc.constantFrom("w1", "w2"),
      ratchet: fc.uniqueArray(fc.tuple(fc.constantFrom(...RESOURCES), fc.bigInt({ min: 1n, max: 4n }), fc.constantFrom(...HOLDERS)), {
        selector: ([r]) => r,
        maxLength: 3,
      }),
    })
    .map(({ owner, writeId, ratchet }) => ({ etag: "m", header: header(owner, writeId, ratchet) })),
  { nil: null },
);

const situation = fc
  .record({
    resources: fc.uniqueArray(fc.constantFrom(...RESOURCES), { minLength: 1, maxLength: 2 }),
    owner: fc.constantFrom(...RESOURCES),
    ifVersion: fc.constantFrom(undefined, null, "w1", "w2"),
    checked: fc.boolean(),
    known: fc.boolean(),
    current: fc.boolean(),
    manifest: manifestSnap,
    read: fc.boolean(),
  })
  .chain((s) =>
    fc.record({
      s: fc.constant(s),
      fences: fc.tuple(...s.resources.map(fence)),
      snaps: fc.tuple(...s.resources.map(() => fenceSnap)),
    }),
  )
  .map(({ s, fences, snaps }) => {
    const intent = { key: "k", owner: s.owner, fences: fences as CheckedFence[], ifVersion: s.ifVersion };
    const view: FenceView = s.checked ? { checked: true, snaps: s.known ? snaps : undefined, current: s.current } : { checked: false };
    const manifest: ManifestView = { snap: s.manifest, read: s.read };
    return { intent, view, manifest };
  });

/** What the manifest refuses, by the rules: owner, each fence's entry, the caller's version. */
function manifestRefuses(
  intent: { owner: string; fences: CheckedFence[]; ifVersion: string | null | undefined },
  snap: Snapshot | null,
): boolean {
  const h = snap?.header;
  if (h !== undefined && h.owner !== intent.owner) return true;
  for (const f of intent.fences) {
    const entry = h?.ratchet.find(([r]) => r === f.resource);
    if (entry !== undefined && !admits({ token: BigInt(entry[1]), holder: entry[2] }, f)) return true;
  }
  if (intent.ifVersion === undefined) return false;
  return intent.ifVersion === null ? snap !== null : h?.writeId !== intent.ifVersion;
}

function fenceObjectRefuses(f: CheckedFence, s: FenceSnapshot | null): boolean {
  return s !== null && !admits(s.highest, f);
}

describe("decide(): the S3 write's next step", () => {
  it("puts only when nothing refuses and, with fence objects checked, they were read since the last wait and none is below a token", () => {
    fc.assert(
      fc.property(situation, ({ intent, view, manifest }) => {
        const d = decide(intent, view, manifest);
        if (d.kind !== "put") return;
        expect(manifestRefuses(intent, manifest.snap)).toBe(false);
        expect(d.target).toBe(manifest.snap);
        if (!view.checked) return;
        expect(view.current).toBe(true);
        expect(view.snaps).toBeDefined();
        intent.fences.forEach((f, i) => {
          const s = view.snaps?.[i] ?? null;
          expect(s !== null && !fenceObjectRefuses(f, s) && f.token <= s.highest.token).toBe(true);
        });
      }),
      { numRuns: 2000 },
    );
  });

  it("refuses only on a fence object's refusal, or on the manifest's once it was read in this write; a stale token first", () => {
    fc.assert(
      fc.property(situation, ({ intent, view, manifest }) => {
        const d = decide(intent, view, manifest);
        const snaps = view.checked ? view.snaps : undefined;
        const staleObject = snaps !== undefined && intent.fences.some((f, i) => fenceObjectRefuses(f, snaps[i] ?? null));
        if (staleObject) {
          expect(d.kind).toBe("refuse");
          expect(d.kind === "refuse" && d.error).toBeInstanceOf(StaleTokenError);
          return;
        }
        const refuses = manifestRefuses(intent, manifest.snap);
        if (refuses) expect(d).toMatchObject(manifest.read ? { kind: "refuse" } : { kind: "read" });
        else expect(d.kind).not.toBe("refuse");
      }),
      { numRuns: 2000 },
    );
  });

  it("raises only on fence objects known below a token, after the manifest read in this write admitted the write", () => {
    fc.assert(
      fc.property(situation, ({ intent, view, manifest }) => {
        const d = decide(intent, view, manifest);
        if (d.kind !== "raise") return;
        expect(view.checked && view.snaps !== undefined).toBe(true);
        expect(manifest.read).toBe(true);
        expect(manifestRefuses(intent, manifest.snap)).toBe(false);
        const snaps = view.checked ? (view.snaps ?? []) : [];
        expect(intent.fences.some((f, i) => (snaps[i] ?? null) === null || f.token > (snaps[i]?.highest.token ?? 0n))).toBe(true);
      }),
      { numRuns: 2000 },
    );
  });

  it("always moves on: with the manifest read and the fence objects read since the last wait, the answer is refuse, raise or put", () => {
    fc.assert(
      fc.property(situation, ({ intent, view, manifest }) => {
        if (!manifest.read || (view.checked && (view.snaps === undefined || !view.current))) return;
        expect(["refuse", "raise", "put"]).toContain(decide(intent, view, manifest).kind);
      }),
      { numRuns: 2000 },
    );
  });

  it("names the refusal as a caller sees it: owner, then entries, then version", () => {
    const f: CheckedFence = { resource: "a", token: 2n, holder: "h1" };
    const read = (snap: Snapshot) => ({ snap, read: true });
    const fences: FenceView = { checked: true, snaps: [null], current: true };
    const owned = { etag: "m", header: header("b", "w1", [["a", 3n, null]]) };
    expect(decide({ key: "k", owner: "a", fences: [f], ifVersion: "w2" }, fences, read(owned))).toMatchObject({
      error: expect.any(ResourceMismatchError) as unknown,
    });
    const entry = { etag: "m", header: header("a", "w1", [["a", 3n, null]]) };
    expect(decide({ key: "k", owner: "a", fences: [f], ifVersion: "w2" }, fences, read(entry))).toMatchObject({
      error: expect.any(StaleTokenError) as unknown,
    });
    const version = { etag: "m", header: header("a", "w1", [["a", 1n, null]]) };
    expect(decide({ key: "k", owner: "a", fences: [f], ifVersion: "w2" }, fences, read(version))).toMatchObject({
      error: expect.any(VersionMismatchError) as unknown,
    });
  });
});
