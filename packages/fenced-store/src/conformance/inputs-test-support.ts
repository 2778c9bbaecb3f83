import { InvalidArgumentError } from "@fenced/fence";
import { describe, expect, it } from "vitest";
import type { FencedStore, StoredVersion } from "../contract.js";
import { StoreUnavailableError } from "../errors.js";
import type { Fence } from "../fence.js";
import { f, refusal, type Current } from "./subject-test-support.js";

/** `n` turns of the event loop, each after the I/O callbacks of the one before. */
async function turns(n: number): Promise<void> {
  for (let i = 0; i < n; i++) await new Promise((resolve) => setImmediate(resolve));
}

type Call<V, R extends StoredVersion> = readonly [string, (store: FencedStore<V, R>) => Promise<unknown>];

/** One of each call of the contract, with valid arguments (`fence` for every fence), `signal` passed to each. */
function everyCall<V, R extends StoredVersion>(
  value: V,
  signal?: AbortSignal,
  fence: (resource: string) => Fence = (r) => f(r, 1n, "h"),
): Call<V, R>[] {
  return [
    ["put", (st) => st.put("k", value, { fence: fence("R"), signal })],
    ["delete", (st) => st.delete("k", { fence: fence("R"), signal })],
    ["get", (st) => st.get("k", { signal })],
    ["fence", (st) => st.fence("R", { signal })],
    ["register", (st) => st.register(fence("R"), { signal })],
    ["register of a set", (st) => st.register([fence("R"), fence("S")], { signal })],
    ["transfer", (st) => st.transfer("k", { from: fence("R"), to: fence("S"), signal })],
    ["verify", (st) => st.verify({ signal })],
  ];
}

/**
 * What a call decides before any I/O, on a store whose backend refuses every connection: its tries
 * stay at 0. PROTOCOL.md: bad input, "Aborts", a lease known to have ended; then "Faults": a backend
 * that cannot be reached is a typed error, nothing applied.
 */
export function inputCases<V, R extends StoredVersion>(current: Current<V, R>): void {
  describe("before any I/O: bad input, an aborted signal, an ended lease", () => {
    it("bad input is an InvalidArgumentError", async () => {
      const s = current();
      const { store, tries } = await s.unreachable();
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
      expect(tries()).toBe(0);
    });

    it("a signal aborted before the call: every call throws its reason and writes nothing", async () => {
      const s = current();
      const opened = await s.open();
      const { store, tries } = await s.unreachable();
      const reason = new Error("the caller gave up");
      const before = await opened.state();
      for (const target of [opened.store, store])
        for (const [what, call] of everyCall<V, R>(s.value("x"), AbortSignal.abort(reason)))
          expect(await refusal(call(target)), what).toBe(reason);
      // Work a call abandoned would still be on its way to the wire (the SDK's middleware awaits): let it get there.
      await turns(20);
      expect(tries()).toBe(0);
      expect(await opened.state()).toEqual(before);
    });

    it("a fence whose lease is known to have ended (its lostReason): every call that takes one throws that reason and writes nothing", async () => {
      const s = current();
      const opened = await s.open();
      const { store, tries } = await s.unreachable();
      const lost = new Error("the lease expired");
      const ended = (resource: string): Fence => Object.assign(f(resource, 1n, "h"), { lostReason: lost });
      const before = await opened.state();
      const calls = everyCall<V, R>(s.value("x"), undefined, ended).filter(([what]) => !["get", "fence", "verify"].includes(what));
      for (const target of [opened.store, store]) for (const [what, call] of calls) expect(await refusal(call(target)), what).toBe(lost);
      expect(tries()).toBe(0);
      expect(await opened.state()).toEqual(before);
    });
  });

  describe("the backend (PROTOCOL.md, Faults)", () => {
    it("set up: verify() resolves", async () => {
      const { store } = await current().open();
      await expect(store.verify()).resolves.not.toThrow();
    });

    it("unreachable: every call is a StoreUnavailableError saying applied: no", async () => {
      const s = current();
      const { store, tries } = await s.unreachable();
      for (const [what, call] of everyCall<V, R>(s.value("x"))) {
        const err = await refusal(call(store));
        expect(err, what).toBeInstanceOf(StoreUnavailableError);
        expect(err, what).toMatchObject({ code: "STORE_UNAVAILABLE", applied: "no" });
      }
      expect(tries()).toBeGreaterThan(0);
    });
  });
}
