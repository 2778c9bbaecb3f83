import { describe, expect, it } from "vitest";
import type { StoredVersion } from "../contract.js";
import { ResourceMismatchError, StaleTokenError } from "../errors.js";
import { f, refusedAlike, type Current } from "./subject-test-support.js";

/** PROTOCOL.md, "What the storage guarantees": rules 1 (ratchet), 2 (one lease per token), 3 (one resource per key). */
export function ruleCases<V, R extends StoredVersion>(current: Current<V, R>): void {
  describe("rule 1, the ratchet: a token below the highest accepted for its resource is refused", () => {
    it("on put, delete, transfer and register, on the key written and a key never written; nothing changes; a higher token writes", async () => {
      const s = current();
      const opened = await s.open();
      const { store } = opened;
      const written = await store.put("k", s.value("at 5"), { fence: f("R", 5n, "h5") });
      await refusedAlike(
        opened,
        [
          ["put", (st) => st.put("k", s.value("at 4"), { fence: f("R", 4n, "h4") })],
          ["put ifVersion", (st) => st.put("k", s.value("at 4"), { fence: f("R", 4n, "h4"), ifVersion: written.version })],
          ["put of a key never written", (st) => st.put("other", s.value("at 4"), { fence: f("R", 4n, "h4") })],
          ["delete", (st) => st.delete("k", { fence: f("R", 4n, "h4") })],
          ["transfer", (st) => st.transfer("k", { from: f("R", 4n, "h4"), to: f("S", 1n, "s1") })],
          ["register", (st) => st.register(f("R", 4n, "h4"))],
        ],
        (err, what) => {
          expect(err, what).toBeInstanceOf(StaleTokenError);
          expect(err, what).toMatchObject({ code: "STALE_TOKEN", applied: "no", resource: "R", token: 4n, highest: 5n });
        },
      );
      const next = await store.put("k", s.value("at 6"), { fence: f("R", 6n, "h6") });
      expect(next.token).toBe(6n);
      const read = await opened.again.get("k");
      expect(read).toMatchObject({ version: next.version, token: 6n, holder: "h6", resource: "R" });
      expect(await s.text(read as R)).toBe("at 6");
      expect(await opened.again.fence("R")).toEqual({ resource: "R", token: 6n, holder: "h6" });
    });

    it("register() raises it without writing a key: a lower token is refused on a key nobody wrote; fence() reads it", async () => {
      const s = current();
      const opened = await s.open();
      const { store } = opened;
      expect(await store.fence("R")).toBeUndefined();
      await store.register(f("R", 7n, "h7"));
      expect(await store.get("k")).toBeUndefined();
      expect(await opened.again.fence("R")).toEqual({ resource: "R", token: 7n, holder: "h7" });
      await refusedAlike(opened, [["put", (st) => st.put("k", s.value("at 6"), { fence: f("R", 6n, "h6") })]], (err, what) => {
        expect(err, what).toMatchObject({ name: "StaleTokenError", resource: "R", token: 6n, highest: 7n, highestHolder: "h7" });
      });
      await store.register(f("R", 7n, "h7")); // the same lease registering again changes nothing
      await store.put("k", s.value("at 7"), { fence: f("R", 7n, "h7") });
      expect(await opened.again.get("k")).toMatchObject({ token: 7n, holder: "h7", resource: "R" });
    });
  });

  describe("rule 2, one lease per token: an equal token is accepted only from the holder that presented it", () => {
    it("another holder at the same token is refused on every call, a fence without a holder included; the holder writes on", async () => {
      const s = current();
      const opened = await s.open();
      const { store } = opened;
      const first = await store.put("k", s.value("h1"), { fence: f("R", 4n, "h1") });
      await refusedAlike(
        opened,
        [
          ["put", (st) => st.put("k", s.value("h2"), { fence: f("R", 4n, "h2") })],
          ["put ifVersion", (st) => st.put("k", s.value("h2"), { fence: f("R", 4n, "h2"), ifVersion: first.version })],
          ["put of a key h1 never wrote", (st) => st.put("other", s.value("h2"), { fence: f("R", 4n, "h2") })],
          ["delete", (st) => st.delete("k", { fence: f("R", 4n, "h2") })],
          ["register", (st) => st.register(f("R", 4n, "h2"))],
          ["transfer", (st) => st.transfer("k", { from: f("R", 4n, "h2"), to: f("S", 1n, "s1") })],
          ["put without a holder", (st) => st.put("k", s.value("nobody"), { fence: f("R", 4n) })],
        ],
        (err, what) => {
          expect(err, what).toBeInstanceOf(StaleTokenError);
          expect(err, what).toMatchObject({ applied: "no", resource: "R", token: 4n, highest: 4n, highestHolder: "h1" });
        },
      );
      const again = await store.put("k", s.value("h1 again"), { fence: f("R", 4n, "h1") });
      const read = await opened.again.get("k");
      expect(read).toMatchObject({ version: again.version, token: 4n, holder: "h1", resource: "R" });
      expect(await s.text(read as R)).toBe("h1 again");
    });

    it("fences without a holder are one lease per token: the same token writes again, a holder at it is refused", async () => {
      const s = current();
      const opened = await s.open();
      await opened.store.put("k", s.value("one"), { fence: f("R", 3n) });
      await opened.again.put("k", s.value("two"), { fence: f("R", 3n) });
      expect(await opened.store.get("k")).toMatchObject({ token: 3n, holder: null });
      await refusedAlike(opened, [["put with a holder", (st) => st.put("k", s.value("h"), { fence: f("R", 3n, "h") })]], (err, what) => {
        expect(err, what).toMatchObject({ name: "StaleTokenError", token: 3n, highest: 3n, highestHolder: null });
      });
      await opened.store.put("k", s.value("h"), { fence: f("R", 4n, "h") });
      await refusedAlike(opened, [["put without a holder at 3", (st) => st.put("k", s.value("x"), { fence: f("R", 3n) })]], (err, what) => {
        expect(err, what).toMatchObject({ name: "StaleTokenError", token: 3n, highest: 4n, highestHolder: "h" });
      });
    });
  });

  describe("rule 3, one resource per key: a key belongs to the resource that created it", () => {
    it("put, delete and ifVersion put under another resource are refused whatever its token; neither the key nor that resource's ratchet changes", async () => {
      const s = current();
      const opened = await s.open();
      const { store } = opened;
      const written = await store.put("k", s.value("R's"), { fence: f("R", 34n, "h34") });
      await store.register(f("S", 0n));
      await refusedAlike(
        opened,
        [
          ["put S@0", (st) => st.put("k", s.value("S's"), { fence: f("S", 0n) })],
          ["put S@1, which would raise S", (st) => st.put("k", s.value("S's"), { fence: f("S", 1n) })],
          ["put T@0, a resource never seen", (st) => st.put("k", s.value("T's"), { fence: f("T", 0n) })],
          ["put S@0 ifVersion", (st) => st.put("k", s.value("S's"), { fence: f("S", 0n), ifVersion: written.version })],
          ["put T@0 ifVersion", (st) => st.put("k", s.value("T's"), { fence: f("T", 0n), ifVersion: written.version })],
          ["put S@1 ifVersion", (st) => st.put("k", s.value("S's"), { fence: f("S", 1n), ifVersion: written.version })],
          ["delete S@0", (st) => st.delete("k", { fence: f("S", 0n) })],
          ["delete S@0 ifVersion", (st) => st.delete("k", { fence: f("S", 0n), ifVersion: written.version })],
          ["delete T@1 ifVersion, which would create T's fence", (st) => st.delete("k", { fence: f("T", 1n), ifVersion: written.version })],
        ],
        (err, what) => {
          expect(err, what).toBeInstanceOf(ResourceMismatchError);
          expect(err, what).toMatchObject({ code: "RESOURCE_MISMATCH", applied: "no", key: "k", owner: "R" });
          // The resource the attempt named: "put S@0" → "S".
          expect((err as ResourceMismatchError).resource, what).toBe(what.split(" ")[1]?.[0]);
        },
      );
      expect(await store.fence("S")).toEqual({ resource: "S", token: 0n, holder: null });
      expect(await store.fence("T")).toBeUndefined();
      await store.put("k", s.value("R's again"), { fence: f("R", 34n, "h34") });
      expect(await opened.again.get("k")).toMatchObject({ resource: "R", token: 34n });
    });

    it("a delete leaves a tombstone that keeps the owner: get() says undefined, another resource is refused, the owner writes again", async () => {
      const s = current();
      const opened = await s.open();
      const { store } = opened;
      const v1 = await store.put("k", s.value("one"), { fence: f("R", 2n) });
      const first = await store.delete("k", { fence: f("R", 2n) });
      // Deleting a tombstone writes another: a new version, the same owner.
      const tomb = await store.delete("k", { fence: f("R", 2n) });
      expect(tomb.token).toBe(2n);
      expect(new Set([v1.version, first.version, tomb.version]).size).toBe(3);
      expect(await opened.again.get("k")).toBeUndefined();
      await refusedAlike(
        opened,
        [
          ["put S@0", (st) => st.put("k", s.value("stolen"), { fence: f("S", 0n) })],
          ["delete S@0", (st) => st.delete("k", { fence: f("S", 0n) })],
        ],
        (err, what) => expect(err, what).toMatchObject({ name: "ResourceMismatchError", key: "k", resource: "S", owner: "R" }),
      );
      const v2 = await store.put("k", s.value("two"), { fence: f("R", 3n) });
      expect([v1.version, first.version, tomb.version]).not.toContain(v2.version);
      const read = await opened.again.get("k");
      expect(read).toMatchObject({ version: v2.version, resource: "R", token: 3n });
      expect(await s.text(read as R)).toBe("two");
      // The key was re-created: the first version, never reused, does not match it.
      await refusedAlike(
        opened,
        [["put ifVersion v1", (st) => st.put("k", s.value("x"), { fence: f("R", 3n), ifVersion: v1.version })]],
        (err, what) => expect(err, what).toMatchObject({ name: "VersionMismatchError", expected: v1.version, actual: v2.version }),
      );
    });

    it("deleting a key never written leaves a tombstone: the key then belongs to the deleting resource", async () => {
      const s = current();
      const opened = await s.open();
      const deleted = await opened.store.delete("ghost", { fence: f("R", 1n) });
      expect(deleted.token).toBe(1n);
      expect(await opened.again.get("ghost")).toBeUndefined();
      await refusedAlike(opened, [["put S@1", (st) => st.put("ghost", s.value("S's"), { fence: f("S", 1n) })]], (err, what) =>
        expect(err, what).toMatchObject({ name: "ResourceMismatchError", key: "ghost", resource: "S", owner: "R" }),
      );
      await opened.store.put("ghost", s.value("R's"), { fence: f("R", 1n) });
    });
  });
}
