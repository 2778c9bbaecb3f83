// Admission control's decisions, without a server: the queue's order and eviction, the limit's
// response to calls that slow down, and the gate's admit / wait / refuse. The gateway's own test
// (../admission.test.ts) runs them over HTTP against real backends.
import { setTimeout as sleep } from "node:timers/promises";
import { connectedPair, stallUntilUnread } from "@fenced/servers/sockets";
import { describe, expect, it } from "vitest";
import { Admission, type Release } from "./admission.js";
import { FairQueue } from "./fair-queue.js";
import { FairShare } from "./fair-share.js";
import { familyLimit, roomFor } from "./gate.js";
import { GradientLimit } from "./limit.js";

describe("the fair queue", () => {
  it("serves the higher priority first, then the keys in turn, each key's entries in arrival order", () => {
    const q = new FairQueue<string>(2);
    for (const item of ["a1", "a2", "a3"]) q.push(1, "a", item);
    q.push(0, "c", "c1");
    q.push(1, "b", "b1");
    q.push(1, "b", "b2");
    expect(Array.from({ length: 6 }, () => q.shift())).toEqual(["a1", "b1", "a2", "b2", "a3", "c1"]);
    expect(q.shift()).toBeUndefined();
    expect(q.size).toBe(0);
  });

  it("when full, takes the newest entry of the longest key at the lowest priority, never from a key that waits less", () => {
    const q = new FairQueue<string>(2);
    for (const item of ["a1", "a2", "a3"]) q.push(1, "a", item);
    q.push(1, "b", "b1");
    // The key with the most entries asks for more: it is the one refused.
    expect(q.evictFor(1, "a")).toBeUndefined();
    // b (1 entry) against a (3): a's newest makes room.
    expect(q.evictFor(1, "b")).toBe("a3");
    q.push(1, "b", "b2");
    // Now a has 2 and b 2: neither gives up a place to the other.
    expect(q.evictFor(1, "b")).toBeUndefined();
    expect(q.evictFor(1, "a")).toBeUndefined();
    // A newcomer of a higher priority takes the place of a lower one, whoever it is.
    q.push(0, "c", "c1");
    expect(q.evictFor(1, "a")).toBe("c1");
    // And a lower priority never displaces a higher one.
    expect(q.evictFor(0, "c")).toBeUndefined();
    expect(q.size).toBe(4);
  });

  it("takes out an entry that stopped waiting, and only once", () => {
    const q = new FairQueue<string>(1);
    q.push(0, "a", "a1");
    q.push(0, "a", "a2");
    expect(q.remove(0, "a", "a1")).toBe(true);
    expect(q.remove(0, "a", "a1")).toBe(false);
    expect(q.shift()).toBe("a2");
    expect(q.size).toBe(0);
  });
});

/** Windows of calls that each take `ms`, with `inflight` in flight; returns the limit after them. */
function run(limit: GradientLimit, from: number, windows: number, ms: number, inflight: (limit: number) => number): number {
  for (let w = 0; w < windows; w++) for (let i = 0; i < 10; i++) limit.sample(from + w * 100 + i * 10, ms, inflight(limit.limit));
  return limit.limit;
}

describe("the gradient limit", () => {
  it("grows while calls take as long as they used to and the limit is used, up to its maximum", () => {
    const limit = new GradientLimit({ initial: 16, min: 4, max: 64 });
    expect(run(limit, 0, 20, 5, (l) => l)).toBeGreaterThan(16);
    expect(run(limit, 2_000, 200, 5, (l) => l)).toBe(64);
  });

  it("shrinks when calls take more than 1.5 times their long-term average, down to its minimum", () => {
    const limit = new GradientLimit({ initial: 64, min: 4, max: 64 });
    run(limit, 0, 20, 5, (l) => l);
    const before = limit.limit;
    expect(run(limit, 2_000, 5, 20, (l) => l)).toBeLessThan(before);
    expect(run(limit, 3_000, 200, 40, (l) => l)).toBe(4);
  });

  it("never falls below the records store's pool: calls that slow down leave every connection in use", () => {
    const config = { minConcurrency: 8, maxConcurrency: 512 };
    // Calls 8 times slower than they used to (a put answered on the turns of a busy loop) take an
    // unbounded family to its minimum; the records family stops at its pool's 16 connections.
    const slowed = (limit: GradientLimit): number => {
      run(limit, 0, 20, 2, (l) => l);
      return run(limit, 2_000, 300, 16, (l) => l);
    };
    expect(slowed(new GradientLimit(familyLimit(config)))).toBe(8);
    expect(slowed(new GradientLimit(familyLimit(config, 16)))).toBe(16);
    // A pool smaller than minConcurrency changes nothing; one larger than maxConcurrency stops at it.
    expect(familyLimit(config, 4)).toEqual({ initial: 512, min: 8, max: 512 });
    expect(familyLimit(config, 1_000)).toEqual({ initial: 512, min: 512, max: 512 });
  });

  it("learns nothing from windows that used less than half of it", () => {
    const limit = new GradientLimit({ initial: 32, min: 4, max: 64 });
    expect(run(limit, 0, 50, 5, () => 8)).toBe(32);
    expect(run(limit, 5_000, 50, 500, () => 8)).toBe(32);
  });
});

const settings = { limit: { initial: 2, min: 2, max: 2 }, adaptive: false, queueLength: 2, queueTimeoutMs: 5_000 };

describe("a route family's gate", () => {
  it("lets in up to its limit at once, queues the next ones, and lets each in as a slot frees", async () => {
    const gate = new Admission(settings);
    const [r1, r2] = [gate.admit("work", "a"), gate.admit("work", "a")];
    expect(typeof r1).toBe("function");
    expect(typeof r2).toBe("function");
    const waiting = gate.admit("work", "b") as Promise<Release>;
    expect(waiting).toBeInstanceOf(Promise);
    expect([gate.inflight, gate.queued]).toEqual([2, 1]);
    (r1 as Release)();
    (r1 as Release)(); // a second release frees nothing more
    const r3 = await waiting;
    expect([gate.inflight, gate.queued]).toEqual([2, 0]);
    (r2 as Release)();
    r3();
    expect(gate.inflight).toBe(0);
  });

  it("refuses when the queue is full (queue-full), makes room for a key waiting less (evicted), and after queueTimeoutMs (queue-timeout)", async () => {
    const gate = new Admission({ ...settings, queueTimeoutMs: 50 });
    void gate.admit("work", "a");
    void gate.admit("work", "a");
    const a1 = gate.admit("work", "a") as Promise<Release>;
    const a2 = gate.admit("work", "a") as Promise<Release>;
    expect(gate.admit("work", "a")).toBe("queue-full");
    const b1 = gate.admit("work", "b") as Promise<Release>;
    await expect(a2).rejects.toMatchObject({ reason: "evicted" });
    // An acquisition is of a lower priority than anything queued: it takes nobody's place.
    expect(gate.admit("acquire", "c")).toBe("queue-full");
    await expect(a1).rejects.toMatchObject({ reason: "queue-timeout" });
    await expect(b1).rejects.toMatchObject({ reason: "queue-timeout" });
    expect(gate.queued).toBe(0);
  });

  it("after a stall longer than the wait, lets a queued request have the slot an answer that arrived meanwhile frees, rather than refuse it", async () => {
    // The slot's call ends when its answer is read: a byte on a real socket, as a backend's answer.
    const { client, peer, close } = await connectedPair();
    try {
      const gate = new Admission({ ...settings, limit: { initial: 1, min: 1, max: 1 }, queueTimeoutMs: 20 });
      client.once("data", gate.admit("work", "a") as Release);
      const waiting = gate.admit("work", "b") as Promise<Release>;
      peer.write("answer");
      // The loop stalls past the wait while the answer arrives: the timer and the answer are due on one turn.
      stallUntilUnread([client], 40);
      expect(typeof (await waiting)).toBe("function");
    } finally {
      close();
    }
  });

  it("takes a waiting request out of the queue when its client leaves, and lets the next one in", async () => {
    const gate = new Admission(settings);
    const held = [gate.admit("work", "a") as Release, gate.admit("work", "a") as Release];
    let leave: ((reason: Error) => void) | undefined;
    const gone = gate.admit("work", "a", (cancel) => (leave = cancel)) as Promise<Release>;
    const next = gate.admit("work", "b") as Promise<Release>;
    leave?.(new Error("client gone"));
    await expect(gone).rejects.toThrow("client gone");
    expect(gate.queued).toBe(1);
    held[0]?.();
    await next;
    // Leaving after being let in changes nothing: the request's release frees its slot.
    leave?.(new Error("late"));
    expect(gate.inflight).toBe(2);
  });

  it("never refuses with room: a burst within limit + queue is served whole", async () => {
    const gate = new Admission({ ...settings, queueLength: 8 });
    const answers = Array.from({ length: 10 }, () =>
      Promise.resolve(gate.admit("work", "a") as Release | Promise<Release>).then(async (release) => (await sleep(1), release())),
    );
    await expect(Promise.all(answers)).resolves.toHaveLength(10);
    expect([gate.inflight, gate.queued]).toEqual([0, 0]);
  });
});

/**
 * Requests of each stream at its rate (per second) for `ms`, through `fair`, on a loop whose delay
 * follows what was let in: late (100 ms) while more than `capacity` per second was let in over the
 * last 100 ms, keeping up (5 ms) otherwise. A stream is an API key, or `key:acquire` for that key's
 * lease acquisitions (weighted half). How many of each stream's were sent and let in.
 */
function offer(
  fair: FairShare,
  rates: Record<string, number>,
  from: number,
  ms: number,
  capacity: number,
): Record<string, { sent: number; admitted: number }> {
  const seen: Record<string, { sent: number; admitted: number }> = {};
  const arrivals = Object.entries(rates)
    .flatMap(([key, rate]) => Array.from({ length: Math.floor((rate * ms) / 1000) }, (_, i) => ({ key, at: from + (i * 1000) / rate })))
    .sort((a, b) => a.at - b.at);
  const admittedAt: number[] = [];
  let draw = 0;
  for (const { key, at } of arrivals) {
    while (admittedAt.length > 0 && (admittedAt[0] as number) < at - 100) admittedAt.shift();
    fair.adjust(at, admittedAt.length * 10 > capacity ? "behind" : "keeping-up");
    const s = (seen[key] ??= { sent: 0, admitted: 0 });
    s.sent++;
    // Evenly spread draws: the admitted fraction is the probability, without a random generator.
    draw = (draw + 0.618_033_988_7) % 1;
    const [apiKey, kind] = key.split(":") as [string, string | undefined];
    if (fair.admit(apiKey, kind === "acquire" ? 0.5 : 1, at, draw)) {
      s.admitted++;
      admittedAt.push(at);
    }
  }
  return seen;
}

describe("the fair share (the event loop running late)", () => {
  it("lets everything in while the loop keeps up", () => {
    const fair = new FairShare();
    const seen = offer(fair, { big: 4_000, small: 250 }, 0, 1_000, Infinity);
    expect(seen.big).toEqual({ sent: 4_000, admitted: 4_000 });
    expect(fair.share).toBe(Infinity);
  });

  it("past the loop's capacity, cuts the key that floods to about what is left, and leaves the one that sends little whole", () => {
    const fair = new FairShare();
    offer(fair, { big: 4_000, small: 250 }, 0, 1_000, 2_000);
    const steady = offer(fair, { big: 4_000, small: 250 }, 1_000, 2_000, 2_000);
    expect(steady.small?.admitted).toBeGreaterThan(0.95 * steady.small!.sent);
    // About the capacity is let in, in all: neither everything nor nothing.
    const admitted = (steady.big!.admitted + steady.small!.admitted) / 2;
    expect(admitted).toBeGreaterThan(0.7 * 2_000);
    expect(admitted).toBeLessThan(1.2 * 2_000);
  });

  it("of one key's requests, lets in about half as many lease acquisitions (weighted half) as reads and writes", () => {
    const fair = new FairShare();
    offer(fair, { k: 2_000, "k:acquire": 2_000 }, 0, 1_000, 1_000);
    const seen = offer(fair, { k: 2_000, "k:acquire": 2_000 }, 1_000, 2_000, 1_000);
    expect(seen["k:acquire"]!.admitted).toBeGreaterThan(0.35 * seen.k!.admitted);
    expect(seen["k:acquire"]!.admitted).toBeLessThan(0.65 * seen.k!.admitted);
  });

  it("binds nobody again once the load is gone", () => {
    const fair = new FairShare();
    offer(fair, { big: 4_000 }, 0, 500, 1_000);
    expect(fair.share).toBeLessThan(4_000);
    const after = offer(fair, { big: 500 }, 500, 3_000, 1_000);
    expect(fair.share).toBe(Infinity);
    expect(after.big!.admitted).toBeGreaterThan(after.big!.sent * 0.8);
  });
});

describe("the room a parked connection is read into (roomFor)", () => {
  const gate = (limit: number, inflight: number, queued: Record<string, number>) => ({
    limit,
    inflight,
    queued: Object.values(queued).reduce((a, b) => a + b, 0),
    queuedOf: (key: string) => queued[key] ?? 0,
  });

  it("is each free slot; with none free, one place in the queue for a key with nothing waiting there", () => {
    expect(roomFor(gate(4, 1, {}), 8, "a")).toBe(3);
    expect(roomFor(gate(4, 4, {}), 8, "a")).toBe(1);
    expect(roomFor(gate(4, 4, { b: 5 }), 8, "a")).toBe(1);
  });

  it("is none for a key with a request waiting (its own queue is not lengthened), and none when the queue is full", () => {
    expect(roomFor(gate(4, 4, { a: 1 }), 8, "a")).toBe(0);
    expect(roomFor(gate(4, 4, { b: 8 }), 8, "a")).toBe(0);
    // A limit that shrank below those in flight.
    expect(roomFor(gate(2, 4, { a: 1 }), 8, "a")).toBe(0);
  });
});
