import { describe, expect, it } from "vitest";
import { check } from "./checker.js";
import { logEntry, type HistoryEvent, type PairOf } from "./history.js";

/**
 * Hand-made histories of pairs (`--pairs`): each pair is two operations, its halves "<op>a" and
 * "<op>b", one per resource; what the checker must find is a pair written in one transaction that
 * landed by halves, and never a lost update dressed up as one.
 */

let wall = 0;
const at = (mono: number): { mono: number; wall: number } => ({ mono, wall: ++wall });

interface Half {
  resource: string;
  token: number;
  /** The document read: its count and last increment. */
  read: number;
  head?: string;
  /** When the half's read call started (its read event comes 1 ms later). */
  readAt: number;
}

interface Pair {
  op: string;
  halves: [Half, Half];
  invoke: number;
  writeStart: number;
  /** When the outcome was reported. */
  end: number;
  outcome: "ok" | "info";
  atomic?: boolean;
}

function pairOp({ op, halves, invoke, writeStart, end, outcome, atomic = true }: Pair): HistoryEvent[] {
  const worker = Number(op.split(".")[0]);
  const ids = [`${op}a`, `${op}b`];
  const pair: PairOf = { op, halves: ids, atomic };
  const holder = `holder-${op}`;
  return halves.flatMap((h, i): HistoryEvent[] => {
    const base = { op: ids[i] as string, worker, resource: h.resource };
    const held = { token: String(h.token), holder };
    const calls = [{ step: "read" as const, start: h.readAt, end: h.readAt + 1 }];
    return [
      { type: "invoke", ...base, pair, ...at(invoke) },
      { type: "acquired", ...base, ...held, ...at(invoke + 1) },
      { type: "read", ...base, token: held.token, count: h.read, head: h.head ?? null, ...at(h.readAt + 1) },
      outcome === "ok"
        ? { type: "ok", ...base, ...held, read: h.read, wrote: h.read + 1, writeStart, calls, ...at(end) }
        : { type: "info", ...base, ...held, message: "outcome unknown", writeStart, calls, ...at(end) },
    ];
  });
}

function final(resource: string, entries: [op: string, token: number][], mono = 10_000): HistoryEvent {
  return { type: "final", resource, count: entries.length, log: entries.map(([op, t]) => logEntry(op, String(t))), ...at(mono) };
}

describe("checker, pairs", () => {
  it("pairs in both orders, each half judged on its own resource: no violation", () => {
    const history = [
      ...pairOp({
        op: "0.0",
        halves: [
          { resource: "x", token: 1, read: 0, readAt: 2 },
          { resource: "y", token: 1, read: 0, readAt: 4 },
        ],
        invoke: 0,
        writeStart: 10,
        end: 12,
        outcome: "ok",
      }),
      ...pairOp({
        op: "1.0",
        halves: [
          { resource: "y", token: 2, read: 1, head: "0.0b", readAt: 22 },
          { resource: "x", token: 2, read: 1, head: "0.0a", readAt: 24 },
        ],
        invoke: 20,
        writeStart: 30,
        end: 32,
        outcome: "ok",
      }),
      final("x", [
        ["0.0a", 1],
        ["1.0b", 2],
      ]),
      final("y", [
        ["0.0b", 1],
        ["1.0a", 2],
      ]),
    ];
    const result = check(history);
    expect(result.violations).toEqual({ "lost-update": 0, "token-decrease": 0, "duplicate-token": 0, "torn-pair": 0 });
    expect(result.pairs).toEqual({ ops: 2, atomic: 2, judged: 2 });
    expect(result.ops.total).toBe(4);
  });

  it("finds a pair that landed by halves: a read after its commit finds the other counter as the pair had read it", () => {
    const history = [
      ...pairOp({
        op: "0.0",
        halves: [
          { resource: "x", token: 1, read: 0, readAt: 2 },
          { resource: "y", token: 1, read: 0, readAt: 4 },
        ],
        invoke: 0,
        writeStart: 10,
        end: 12,
        outcome: "ok",
      }),
      // 1.0 reads y after 0.0 was acknowledged: empty, as 0.0b had read it. 0.0b never landed.
      ...pairOp({
        op: "1.0",
        halves: [
          { resource: "x", token: 2, read: 1, head: "0.0a", readAt: 22 },
          { resource: "y", token: 2, read: 0, readAt: 24 },
        ],
        invoke: 20,
        writeStart: 30,
        end: 32,
        outcome: "ok",
      }),
      final("x", [
        ["0.0a", 1],
        ["1.0a", 2],
      ]),
      final("y", [["1.0b", 2]]),
    ];
    const result = check(history);
    expect(result.violations["torn-pair"]).toBe(1);
    expect(result.first["torn-pair"]?.ops).toEqual(["0.0b", "0.0a"]);
    expect(result.first["torn-pair"]?.message).toMatch(
      /pair 0\.0 is torn: 0\.0a \(x\) landed, but 1\.0b's read .* found y as 0\.0b had read it/,
    );
    // 0.0b was acknowledged and is not in y's final counter: a lost update as well.
    expect(result.violations["lost-update"]).toBe(1);
  });

  it("finds a pair of unknown outcome that landed by halves, from the final counter", () => {
    const history = [
      ...pairOp({
        op: "0.0",
        halves: [
          { resource: "x", token: 1, read: 0, readAt: 2 },
          { resource: "y", token: 1, read: 0, readAt: 4 },
        ],
        invoke: 0,
        writeStart: 10,
        end: 2_000,
        outcome: "info",
      }),
      final("x", [["0.0a", 1]]),
      final("y", []),
    ];
    const result = check(history);
    expect(result.violations).toEqual({ "lost-update": 0, "token-decrease": 0, "duplicate-token": 0, "torn-pair": 1 });
    expect(result.first["torn-pair"]?.message).toMatch(/the final counter found y as 0\.0b had read it/);
  });

  it("an overwrite is a lost update, never a torn pair", () => {
    // 2.0 read y before the pair committed and wrote after it: 0.0b landed and was overwritten.
    const history = [
      ...pairOp({
        op: "0.0",
        halves: [
          { resource: "x", token: 1, read: 0, readAt: 2 },
          { resource: "y", token: 1, read: 0, readAt: 4 },
        ],
        invoke: 0,
        writeStart: 10,
        end: 12,
        outcome: "ok",
      }),
      ...pairOp({
        op: "2.0",
        halves: [
          { resource: "z", token: 1, read: 0, readAt: 3 },
          { resource: "y", token: 1, read: 0, readAt: 5 },
        ],
        invoke: 1,
        writeStart: 40,
        end: 42,
        outcome: "ok",
      }),
      final("x", [["0.0a", 1]]),
      final("y", [["2.0b", 1]]),
      final("z", [["2.0a", 1]]),
    ];
    const result = check(history);
    expect(result.violations["torn-pair"]).toBe(0);
    expect(result.violations["lost-update"]).toBe(1);
    expect(result.first["lost-update"]?.ops[0]).toBe("0.0b");
    expect(result.violations["duplicate-token"]).toBe(1);
  });

  it("a read that started before the pair was seen committed proves nothing; one that started after does", () => {
    const history = (laterReadAt: number): HistoryEvent[] => [
      ...pairOp({
        op: "0.0",
        halves: [
          { resource: "x", token: 1, read: 0, readAt: 2 },
          { resource: "y", token: 1, read: 0, readAt: 4 },
        ],
        invoke: 0,
        writeStart: 10,
        end: 2_000,
        outcome: "info",
      }),
      // 3.0 sees 0.0a in x at 101 (its read call ended then): the pair had committed by then.
      ...pairOp({
        op: "3.0",
        halves: [
          { resource: "x", token: 2, read: 1, head: "0.0a", readAt: 100 },
          { resource: "y", token: 2, read: 0, readAt: laterReadAt },
        ],
        invoke: 90,
        writeStart: 200,
        end: 2_100,
        outcome: "info",
      }),
      final("x", [["0.0a", 1]]),
      final("y", [["9.9", 5]]),
    ];
    // Its read of y started at 95, before 101: y may have been read before the pair committed.
    expect(check(history(95)).violations["torn-pair"]).toBe(0);
    expect(check(history(150)).violations["torn-pair"]).toBe(1);
  });

  it("pairs written key by key (S3) are not judged as one", () => {
    const history = [
      ...pairOp({
        op: "0.0",
        halves: [
          { resource: "x", token: 1, read: 0, readAt: 2 },
          { resource: "y", token: 1, read: 0, readAt: 4 },
        ],
        invoke: 0,
        writeStart: 10,
        end: 2_000,
        outcome: "info",
        atomic: false,
      }),
      final("x", [["0.0a", 1]]),
      final("y", []),
    ];
    const result = check(history);
    expect(result.valid).toBe(true);
    expect(result.pairs).toEqual({ ops: 1, atomic: 0, judged: 0 });
  });
});
