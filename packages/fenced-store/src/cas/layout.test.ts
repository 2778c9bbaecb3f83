// Pins the S3 store's object names (layout.ts): each an injective function of its parts, so two valid
// keys never share an object, and a data object's name gives back its key and the manifest its
// attempt was sent against — what the sweeper and the writer judge an orphan by.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { keyProblem } from "@fenced/fence/internal";
import { dataKey, dataPrefix, fenceKey, isProbe, keyOfData, manifestKey, newId, probeKeyPrefix, targetOf } from "./layout.js";

const segment = fc.string({ unit: "binary", minLength: 1, maxLength: 6 }).filter((s) => !s.includes("/"));
const key = fc
  .array(segment, { minLength: 1, maxLength: 4 })
  .map((parts) => parts.join("/"))
  .filter((k) => keyProblem(k) === undefined);
const prefix = fc.constantFrom("", "p/", "tenant/a/", "ü/");

describe("the S3 store's object names", () => {
  it("a data object's name gives back its key and its attempt's target, for any valid key and prefix", () => {
    fc.assert(
      fc.property(prefix, key, fc.option(fc.constant(null), { nil: undefined }), (p, k, create) => {
        const target = create === null ? null : newId();
        const name = dataKey(p, k, target, newId());
        expect(name.startsWith(dataPrefix(p))).toBe(true);
        expect(keyOfData(p, name)).toBe(k);
        expect(targetOf(name)).toBe(target);
      }),
    );
  });

  it("two distinct keys never share a manifest or a data object name", () => {
    fc.assert(
      fc.property(prefix, key, key, (p, a, b) => {
        fc.pre(a !== b);
        expect(manifestKey(p, a)).not.toBe(manifestKey(p, b));
        const id = newId();
        expect(dataKey(p, a, null, id)).not.toBe(dataKey(p, b, null, id));
      }),
    );
    // "a" with its attempt against writeId w and the key "a/<w>.<id>"'s own folder: the last '/' decides.
    const w = newId();
    const id = newId();
    expect(keyOfData("p/", dataKey("p/", "a", w, id))).toBe("a");
    expect(keyOfData("p/", dataKey("p/", `a/${w}.${id}`, null, id))).toBe(`a/${w}.${id}`);
  });

  it("a name the store cannot have written under data/ gives no key: outside the folder, no '/', or an invalid key", () => {
    expect(keyOfData("p/", "q/data/k/absent.0")).toBeUndefined();
    expect(keyOfData("p/", "p/data/no-slash")).toBeUndefined();
    expect(keyOfData("p/", "p/data//absent.0")).toBeUndefined();
    expect(keyOfData("p/", "p/data/a/../absent.0")).toBeUndefined();
    expect(keyOfData("p/", "p/manifests/k")).toBeUndefined();
  });

  it("a data name without a well-formed target (a /1 writer's, or anything else) has none: undefined, never a guess", () => {
    const id = newId();
    expect(targetOf(`p/data/k/${id}`)).toBeUndefined();
    expect(targetOf(`p/data/k/absent.${id.slice(1)}`)).toBeUndefined();
    expect(targetOf(`p/data/k/${id.toUpperCase()}.${id}`)).toBeUndefined();
    expect(targetOf(`p/data/k/absent.${id}.${id}`)).toBeUndefined();
    expect(targetOf(`p/data/k/absent.${id}`)).toBeNull();
  });

  it("a resource's fence object is one fixed-length name per resource, whatever its length or characters", () => {
    const names = new Set<string>();
    for (const resource of ["r", "R", "r ", "x".repeat(512), "😀", "a/b", "../fences/r"]) {
      const name = fenceKey("p/", resource);
      expect(name).toMatch(/^p\/fences\/[0-9a-f]{64}$/);
      names.add(name);
    }
    expect(names.size).toBe(7);
    expect(fenceKey("p/", "r")).toBe(fenceKey("p/", "r"));
  });

  it("verify()'s leftovers are recognised by name only under the probe folder", () => {
    const id = newId();
    expect(isProbe("p/", `${probeKeyPrefix("p/")}${id}`)).toBe(true);
    expect(isProbe("p/", `${probeKeyPrefix("p/")}${id}-missing`)).toBe(true);
    expect(isProbe("p/", `${probeKeyPrefix("p/")}${id}-other`)).toBe(false);
    expect(isProbe("p/", `p/manifests/${id}`)).toBe(false);
    expect(isProbe("p/", `${probeKeyPrefix("q/")}${id}`)).toBe(false);
  });
});
