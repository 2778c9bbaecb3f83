import { InvalidArgumentError } from "@fenced/fence";
import { describe, expect, it } from "vitest";
import type { FencedStore, StoredVersion } from "../contract.js";
import { ResourceMismatchError, StaleTokenError, StoreUnavailableError, VersionMismatchError } from "../errors.js";
import { f, refusal, refusedAlike, type Current } from "./subject-test-support.js";

type Call<V, R extends StoredVersion> = readonly [string, (store: FencedStore<V, R>) => Promise<unknown>];

/** One of each call of the contract, with valid arguments, `signal` passed to each. */
function everyCall<V, R extends StoredVersion>(value: V, signal?: AbortSignal): Call<V, R>[] {
  return [
    ["put", (st) => st.put("k", value, { fence: f("R", 1n, "h"), signal })],
    ["delete", (st) => st.delete("k", { fence: f("R", 1n, "h"), signal })],
    ["get", (st) => st.get("k", { signal })],
    ["fence", (st) => st.fence("R", { signal })],
    ["register", (st) => st.register(f("R", 1n, "h"), { signal })],
    ["register of a set", (st) => st.register([f("R", 1n, "h"), f("S", 1n, "h")], { signal })],
    ["transfer", (st) => st.transfer("k", { from: f("R", 1n, "h"), to: f("S", 1n, "h"), signal })],
  ];
}

/** PROTOCOL.md: what ifVersion, transfer() and register() add to the rules; bad input, aborts and an unreachable backend. */
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

    it("refused and nothing changes: from not the owner, from or to stale; a key never written is undefined", async () => {
      const s = current();
      const opened = await s.open();
      const { store } = opened;
      await store.put("k", s.value("R's"), { fence: f("R", 3n) });
      await store.register(f("S", 5n));
      await refusedAlike(opened, [["from T", (st) => st.transfer("k", { from: f("T", 1n), to: f("S", 6n) })]], (err, what) => {
        expect(err, what).toBeInstanceOf(ResourceMismatchError);
        expect(err, what).toMatchObject({ key: "k", owner: "R" });
      });
      await refusedAlike(
        opened,
        [
          ["from stale", (st) => st.transfer("k", { from: f("R", 2n), to: f("S", 6n) })],
          ["to stale", (st) => st.transfer("k", { from: f("R", 3n), to: f("S", 4n) })],
        ],
        (err, what) => expect(err, what).toBeInstanceOf(StaleTokenError),
      );
      expect(await store.transfer("never", { from: f("R", 3n), to: f("S", 6n) })).toBeUndefined();
      expect(await opened.again.get("never")).toBeUndefined();
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

  describe("bad input: an InvalidArgumentError before any I/O", () => {
    it("on a store whose backend refuses every connection, so no call could have reached it", async () => {
      const s = current();
      const store = await s.unreachable();
      const bad: Call<V, R>[] = [
        ["empty key", (st) => st.put("", s.value("x"), { fence: f("R", 1n) })],
        ["negative token", (st) => st.put("k", s.value("x"), { fence: f("R", -1n) })],
        ["a number for a token", (st) => st.put("k", s.value("x"), { fence: { resource: "R", token: 1 as unknown as bigint } })],
        ["empty resource", (st) => st.delete("k", { fence: f("", 1n) })],
        ["no options", (st) => st.put("k", s.value("x"), undefined as never)],
        ["a number for ifVersion", (st) => st.put("k", s.value("x"), { fence: f("R", 1n), ifVersion: 1 as unknown as string })],
        ["a signal that is not one", (st) => st.get("k", { signal: {} as AbortSignal })],
        ["fence() of an empty resource", (st) => st.fence("")],
        ["register of one resource twice", (st) => st.register([f("R", 1n), f("R", 2n)])],
        ["transfer within one resource", (st) => st.transfer("k", { from: f("R", 1n), to: f("R", 2n) })],
      ];
      for (const [what, call] of bad) {
        const err = await refusal(call(store));
        expect(err, what).toBeInstanceOf(InvalidArgumentError);
        expect(err, what).toMatchObject({ code: "INVALID_ARGUMENT", applied: "no" });
      }
    });
  });

  describe("aborts (PROTOCOL.md, Aborts): an aborted signal ends the call with its reason", () => {
    it("every call, its signal aborted before it starts, throws the reason before any I/O and writes nothing", async () => {
      const s = current();
      const opened = await s.open();
      const reason = new Error("the caller gave up");
      const before = await opened.state();
      // On an unreachable backend too: any I/O would have failed as unavailable, not with the reason.
      for (const store of [opened.store, await s.unreachable()]) {
        for (const [what, call] of everyCall<V, R>(s.value("x"), AbortSignal.abort(reason))) {
          expect(await refusal(call(store)), what).toBe(reason);
        }
      }
      expect(await opened.state()).toEqual(before);
    });
  });

  describe("an unreachable backend (PROTOCOL.md, Faults): a typed error, nothing applied", () => {
    it("every call is a StoreUnavailableError saying applied: no", async () => {
      const s = current();
      const store = await s.unreachable();
      for (const [what, call] of [...everyCall<V, R>(s.value("x")), ["verify", (st) => st.verify()] as Call<V, R>]) {
        const err = await refusal(call(store));
        expect(err, what).toBeInstanceOf(StoreUnavailableError);
        expect(err, what).toMatchObject({ code: "STORE_UNAVAILABLE", applied: "no" });
      }
    });
  });
}
