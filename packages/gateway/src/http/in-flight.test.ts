import { Agent, request } from "node:http";
import { collect, oldSpaceMb } from "@fenced/servers/heap";
import express from "express";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { InFlight } from "./in-flight.js";
import { serve, type Serving } from "./server.js";

describe("InFlight", () => {
  it("keeps what is added until its slot is removed, reuses slots, and removes a slot once", () => {
    const inFlight = new InFlight<{ n: number }>();
    const [a, b, c] = [{ n: 1 }, { n: 2 }, { n: 3 }];
    const slotA = inFlight.add(a);
    const slotB = inFlight.add(b);
    expect(inFlight.size).toBe(2);
    expect([...inFlight]).toEqual([a, b]);
    inFlight.remove(slotA, a);
    inFlight.remove(slotA, a);
    expect(inFlight.size).toBe(1);
    expect(inFlight.holds(slotA, a)).toBe(false);
    // The freed slot is taken again before the array grows.
    const slotC = inFlight.add(c);
    expect(slotC).toBe(slotA);
    expect(inFlight.holds(slotC, a)).toBe(false);
    expect(inFlight.holds(slotC, c)).toBe(true);
    expect([...inFlight.entries()]).toEqual([
      [slotC, c],
      [slotB, b],
    ]);
    // A late removal of what the slot held before takes nothing from its new item.
    inFlight.remove(slotC, a);
    expect(inFlight.holds(slotC, c)).toBe(true);
    expect(inFlight.size).toBe(2);
  });

  it("starts over once nothing is in flight", () => {
    const inFlight = new InFlight<{ n: number }>();
    const items = Array.from({ length: 100 }, (_, n) => ({ n }));
    const slots = items.map((item) => inFlight.add(item));
    items.forEach((item, i) => inFlight.remove(slots[i] as number, item));
    expect(inFlight.size).toBe(0);
    // The burst's 100 slots are gone: the next item takes the first.
    const next = { n: 100 };
    expect(inFlight.add(next)).toBe(0);
    // A late removal of a slot past the new end does nothing.
    inFlight.remove(99, items[99] as { n: number });
    expect([...inFlight]).toEqual([next]);
  });
});

/**
 * A response serve() tracked is garbage once it closes, whatever the collector did meanwhile. With a
 * Set it was not: after a mark-compact promoted the Set's hash table, every later table V8 made for it
 * was linked from that one, and the responses they held (each with its request) outlived the
 * scavenges into old space, until the next mark-compact (in-flight.ts).
 */
describe("serve()'s responses in flight", () => {
  let serving: Serving;
  let agent: Agent;

  beforeAll(async () => {
    const app = express();
    // Answered a turn later, so that several are in flight at any moment, as under load.
    app.get("/x", (_req, res) => void setImmediate(() => res.end("ok")));
    serving = await serve(app, { port: 0 });
    agent = new Agent({ keepAlive: true, maxSockets: 32 });
  });
  afterAll(async () => {
    agent?.destroy();
    await serving?.drain(1_000);
  });

  const get = (): Promise<void> =>
    new Promise((resolve, reject) => {
      const req = request({ host: "127.0.0.1", port: serving.port, path: "/x", agent }, (res) => {
        res.resume();
        res.on("end", resolve);
      });
      req.on("error", reject);
      req.end();
    });
  /** `n` requests, 32 at a time; `midway` runs once half of them are answered, with 32 in flight. */
  const load = async (n: number, midway?: () => void): Promise<void> => {
    let next = 0;
    const worker = async (): Promise<void> => {
      while (next < n) {
        if (++next === n / 2) midway?.();
        await get();
      }
    };
    await Promise.all(Array.from({ length: 32 }, worker));
  };

  it("is not kept past its end by a collection that ran while it was in flight", async () => {
    await load(1_000);
    // A mark-compact with responses in flight: what is live then, serve()'s own bookkeeping included,
    // moves to old space.
    await load(200, () => collect("major"));
    const before = oldSpaceMb();
    await load(8_000);
    // Two scavenges: a young object that nothing live refers to is gone after them.
    collect("minor");
    collect("minor");
    const grown = oldSpaceMb() - before;
    // With the Set, the 8,000 responses, their requests and what they refer to were promoted: 6.8-22 MB
    // here, in four runs. Without, what grows is what the requests left in flight at a scavenge.
    expect(grown).toBeLessThan(2);
  });
});
