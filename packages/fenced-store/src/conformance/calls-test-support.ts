import { describe, expect, it } from "vitest";
import type { StoredVersion } from "../contract.js";
import { ResourceMismatchError, StaleTokenError, VersionMismatchError } from "../errors.js";
import { f, refusal, refusedAlike, type Current } from "./subject-test-support.js";

/** PROTOCOL.md: what ifVersion, transfer() and register() add to the rules. */
export function callCases<V, R extends StoredVersion>(current: Current<V, R>): void {
  describe("ifVersion (PROTOCOL.md, what ifVersion adds): a write lands only on the version it names", () => {
    it("a write naming a replaced version, or a key never written, is a VersionMismatchError and changes nothing", async () => {
      const s = current();
      const opened = await s.open();
      const { store } = opened;
      const v1 = await store.put("k", s.value("one"), { fence: f("R", 1n) });
      const v2 = await store.put("k", s.value("two"), { fence: f("R", 1n), ifVersion: v1.version });
      await refusedAlike(
        opened,
        [
          ["put", (st) => st.put("k", s.value("late"), { fence: f("R", 2n), ifVersion: v1.version })],
          ["delete", (st) => st.delete("k", { fence: f("R", 2n), ifVersion: v1.version })],
          ["transfer", (st) => st.transfer("k", { from: f("R", 2n), to: f("S", 1n), ifVersion: v1.version })],
        ],
        (err, what) => {
          expect(err, what).toBeInstanceOf(VersionMismatchError);
          expect(err, what).toMatchObject({ code: "VERSION_MISMATCH", applied: "no", key: "k", expected: v1.version, actual: v2.version });
        },
      );
      await refusedAlike(
        opened,
        [["put", (st) => st.put("new", s.value("x"), { fence: f("R", 2n), ifVersion: v1.version })]],
        (err, what) => expect(err, what).toMatchObject({ name: "VersionMismatchError", key: "new", actual: undefined }),
      );
      const v3 = await store.delete("k", { fence: f("R", 2n), ifVersion: v2.version });
      expect(new Set([v1.version, v2.version, v3.version]).size).toBe(3);
    });

    it("a tombstone's version: matched where the store declares ifVersionMatchesTombstone, a VersionMismatchError where not", async () => {
      const s = current();
      const opened = await s.open();
      const { store } = opened;
      await store.put("k", s.value("one"), { fence: f("R", 1n) });
      const tomb = await store.delete("k", { fence: f("R", 1n) });
      const err = await refusal(store.put("k", s.value("two"), { fence: f("R", 1n), ifVersion: tomb.version }));
      if (store.capabilities.ifVersionMatchesTombstone) expect(err).toBeUndefined();
      else expect(err).toMatchObject({ name: "VersionMismatchError", expected: tomb.version, actual: undefined });
    });
  });

  describe("transfer() (PROTOCOL.md, rule 3): moves a key to another resource, fenced on both sides", () => {
    it("the key moves with its value; both ratchets are raised; the old owner is refused after, the new one writes", async () => {
      const s = current();
      const opened = await s.open();
      const { store } = opened;
      const v1 = await store.put("k", s.value("kept"), { fence: f("R", 3n, "a") });
      const moved = await store.transfer("k", { from: f("R", 4n, "a"), to: f("S", 2n, "b") });
      expect(moved?.token).toBe(2n);
      expect(moved?.version).not.toBe(v1.version);
      const read = await opened.again.get("k");
      expect(read).toMatchObject({ version: moved?.version, resource: "S", token: 2n, holder: "b" });
      expect(await s.text(read as R)).toBe("kept");
      expect(await opened.again.fence("R")).toMatchObject({ token: 4n, holder: "a" });
      expect(await opened.again.fence("S")).toMatchObject({ token: 2n, holder: "b" });
      await refusedAlike(opened, [["put R@5", (st) => st.put("k", s.value("R's"), { fence: f("R", 5n, "a") })]], (err, what) =>
        expect(err, what).toMatchObject({ name: "ResourceMismatchError", owner: "S" }),
      );
      await store.put("k", s.value("S's"), { fence: f("S", 2n, "b") });
    });

    it("refused and nothing changes: from not the owner, from or to stale (or another holder at its token), each named; a key never written is undefined", async () => {
      const s = current();
      const opened = await s.open();
      const { store } = opened;
      await store.put("k", s.value("R's"), { fence: f("R", 3n) });
      await store.register(f("S", 5n, "s5"));
      await refusedAlike(opened, [["from T", (st) => st.transfer("k", { from: f("T", 1n), to: f("S", 6n) })]], (err, what) => {
        expect(err, what).toBeInstanceOf(ResourceMismatchError);
        expect(err, what).toMatchObject({ key: "k", resource: "T", owner: "R" });
      });
      const stale = [
        ["from stale", { from: f("R", 2n), to: f("S", 6n) }, { resource: "R", token: 2n, highest: 3n }],
        ["to stale", { from: f("R", 3n), to: f("S", 4n) }, { resource: "S", token: 4n, highest: 5n }],
        [
          "to at S's token, another holder",
          { from: f("R", 3n), to: f("S", 5n, "other") },
          { resource: "S", token: 5n, highestHolder: "s5" },
        ],
      ] as const;
      for (const [what, fences, named] of stale)
        await refusedAlike(opened, [[what, (st) => st.transfer("k", fences)]], (err) => {
          expect(err, what).toBeInstanceOf(StaleTokenError);
          expect(err, what).toMatchObject(named);
        });
      // A key never written: undefined, and nothing is written, not even a fence; with ifVersion (a version of another key), a mismatch.
      await refusedAlike(opened, [["never written", (st) => st.transfer("never", { from: f("R", 3n), to: f("S", 6n) })]], (err, what) =>
        expect(err, what).toBeUndefined(),
      );
      const other = await store.put("other", s.value("R's"), { fence: f("R", 3n) });
      await refusedAlike(
        opened,
        [["never written, ifVersion", (st) => st.transfer("never", { from: f("R", 3n), to: f("S", 6n), ifVersion: other.version })]],
        (err, what) => expect(err, what).toMatchObject({ name: "VersionMismatchError", key: "never", actual: undefined }),
      );
    });
  });

  describe("register() of a set (PROTOCOL.md, Sets): one refused is its StaleTokenError", () => {
    it("the others raised or not as the store declares atomicRegister", async () => {
      const s = current();
      const opened = await s.open();
      const { store } = opened;
      await store.register(f("S", 5n, "s"));
      const err = await refusal(store.register([f("R", 1n, "r"), f("S", 4n, "s"), f("T", 1n, "t")]));
      expect(err).toBeInstanceOf(StaleTokenError);
      expect(err).toMatchObject({ resource: "S", token: 4n, highest: 5n });
      expect(await opened.again.fence("S")).toMatchObject({ token: 5n });
      const others = [await opened.again.fence("R"), await opened.again.fence("T")];
      if (store.capabilities.atomicRegister) expect(others).toEqual([undefined, undefined]);
      else expect(others).toEqual([f("R", 1n, "r"), f("T", 1n, "t")]);
    });
  });
}
