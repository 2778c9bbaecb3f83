import { describe, expect, it } from "vitest";
import { check } from "./checker.js";
import { logEntry, type HistoryEvent } from "./history.js";

/**
 * Hand-made histories on one resource "r". Each helper emits the events a worker would report for
 * one increment; times are explicit so that the real-time order is exactly what the test says.
 */
const R = "r";
let wall = 0;
const at = (mono: number): { mono: number; wall: number } => ({ mono, wall: ++wall });

interface Inc {
  op: string;
  token: number;
  read: number;
  invoke: number;
  writeStart: number;
  ack: number;
  /** The lease's holder id; by default one of its own per operation. */
  holder?: string;
  /** The op whose increment was last in the document read. */
  head?: string;
}

function increment({ op, token, read, invoke, writeStart, ack, holder, head }: Inc): HistoryEvent[] {
  const worker = Number(op.split(".")[0]);
  const base = { op, worker, resource: R };
  const held = { token: String(token), holder: holder ?? `holder-${op}` };
  return [
    { type: "invoke", ...base, ...at(invoke) },
    { type: "acquired", ...base, ...held, ...at(invoke + 1) },
    { type: "read", ...base, token: held.token, count: read, head: head ?? null, ...at(invoke + 2) },
    { type: "ok", ...base, ...held, read, wrote: read + 1, writeStart, ...at(ack) },
  ];
}

function stale(op: string, token: number, invoke: number, end: number): HistoryEvent[] {
  const base = { op, worker: Number(op.split(".")[0]), resource: R };
  return [
    { type: "invoke", ...base, ...at(invoke) },
    { type: "acquired", ...base, token: String(token), holder: `holder-${op}`, ...at(invoke + 1) },
    { type: "fail", ...base, token: String(token), holder: `holder-${op}`, reason: "stale", message: "stale fencing token", ...at(end) },
  ];
}

function final(entries: [op: string, token: number][], mono = 10_000): HistoryEvent {
  return { type: "final", resource: R, count: entries.length, log: entries.map(([op, t]) => logEntry(op, String(t))), ...at(mono) };
}

const pause = (worker: number, start: number, end: number): HistoryEvent[] => [
  { type: "nemesis", fault: 0, kind: "pause-in-rmw", target: `worker ${worker}`, phase: "start", worker, ...at(start) },
  { type: "nemesis", fault: 0, kind: "pause-in-rmw", target: `worker ${worker}`, phase: "end", worker, ...at(end) },
];

describe("checker", () => {
  it("a clean history (one stale writer refused) has no violation", () => {
    const history = [
      ...increment({ op: "0.0", token: 1, read: 0, invoke: 0, writeStart: 5, ack: 6 }),
      ...increment({ op: "1.0", token: 2, read: 1, invoke: 10, writeStart: 15, ack: 16, head: "0.0" }),
      ...stale("0.1", 3, 20, 40),
      ...increment({ op: "1.1", token: 4, read: 2, invoke: 30, writeStart: 35, ack: 36, head: "1.0" }),
      final([
        ["0.0", 1],
        ["1.0", 2],
        ["1.1", 4],
      ]),
    ];
    const result = check(history);
    expect(result.valid).toBe(true);
    expect(result.violations).toEqual({ "lost-update": 0, "token-decrease": 0, "duplicate-token": 0, "torn-pair": 0 });
    expect(result.ops).toMatchObject({ total: 4, ok: 3, fail: 1, info: 0, incomplete: 0 });
    expect(result.ops.failByReason.stale).toBe(1);
    expect(result.firstViolation).toBeUndefined();
    expect(result.final).toEqual({ r: { count: 3, increments: 3 } });
  });

  it("finds a lost update and names the write that overwrote it", () => {
    // Two holders with increasing tokens both read 0, and both writes are acknowledged: the
    // ratchet accepts both (2 > 1), and 0.0's increment is gone.
    const history = [
      ...increment({ op: "0.0", token: 1, read: 0, invoke: 0, writeStart: 50, ack: 51 }),
      ...pause(1, 10, 60),
      ...increment({ op: "1.0", token: 2, read: 0, invoke: 5, writeStart: 60, ack: 61 }),
      final([["1.0", 2]]),
    ];
    const result = check(history);
    expect(result.valid).toBe(false);
    expect(result.violations).toEqual({ "lost-update": 1, "token-decrease": 0, "duplicate-token": 0, "torn-pair": 0 });
    const v = result.first["lost-update"];
    expect(v?.ops).toEqual(["0.0", "1.0"]);
    expect(v?.message).toMatch(/0\.0 \(token 1\).*not in the final counter.*overwritten by 1\.0/);
    // The sub-history holds both operations and the pause that happened meanwhile, in time order.
    const ops = new Set(v?.subHistory.flatMap((e) => ("op" in e ? [e.op] : [])));
    expect(ops).toEqual(new Set(["0.0", "1.0"]));
    expect(v?.subHistory.some((e) => e.type === "nemesis")).toBe(true);
    const times = v?.subHistory.map((e) => e.mono) ?? [];
    expect(times).toEqual([...times].sort((a, b) => a - b));
  });

  it("names the write that dropped a lost increment even when it read a higher count", () => {
    // 0.1 is acknowledged on top of 0.0; 2.0 had read the document before 0.0 at count 1, so its
    // write (acknowledged later) drops 0.0 and 0.1 although it read a higher count than 0.0 wrote.
    const history = [
      ...increment({ op: "1.0", token: 1, read: 0, invoke: 0, writeStart: 2, ack: 3 }),
      ...increment({ op: "2.0", token: 2, read: 1, invoke: 4, writeStart: 60, ack: 61, head: "1.0" }),
      ...increment({ op: "0.0", token: 3, read: 1, invoke: 20, writeStart: 22, ack: 23, head: "1.0" }),
      ...increment({ op: "0.1", token: 4, read: 2, invoke: 30, writeStart: 32, ack: 33, head: "0.0" }),
      ...increment({ op: "1.1", token: 5, read: 2, invoke: 70, writeStart: 72, ack: 73, head: "2.0" }),
      final([
        ["1.0", 1],
        ["2.0", 2],
        ["1.1", 5],
      ]),
    ];
    const result = check(history);
    expect(result.violations["lost-update"]).toBe(2);
    expect(result.first["lost-update"]?.message).toMatch(/^0\.0 .*overwritten by 2\.0/);
  });

  it("finds a decreasing token: a stale holder's write accepted after a newer holder's", () => {
    // 0.0 holds token 1, is paused past its lease; 1.0 (token 2) writes and is acknowledged; then
    // 0.0 wakes up and its write (sent after 1.0's ack) is accepted: the unfenced failure.
    const history = [
      ...pause(0, 3, 100),
      ...increment({ op: "1.0", token: 2, read: 0, invoke: 10, writeStart: 20, ack: 21 }),
      ...increment({ op: "0.0", token: 1, read: 0, invoke: 0, writeStart: 100, ack: 101 }),
      final([["0.0", 1]]),
    ];
    const result = check(history);
    expect(result.violations["token-decrease"]).toBe(1);
    expect(result.first["token-decrease"]?.ops).toEqual(["0.0", "1.0"]);
    expect(result.first["token-decrease"]?.message).toMatch(/0\.0 wrote with token 1 after 1\.0 had been acknowledged with token 2/);
    // 1.0's increment is also lost, and that is reported first (it was acknowledged earlier).
    expect(result.violations["lost-update"]).toBe(1);
    expect(result.firstViolation?.kind).toBe("lost-update");
  });

  it("finds a decreasing token in the final counter's chain even when the timestamps overlap", () => {
    const history = [
      ...increment({ op: "0.0", token: 5, read: 0, invoke: 0, writeStart: 10, ack: 30 }),
      ...increment({ op: "1.0", token: 4, read: 1, invoke: 0, writeStart: 20, ack: 40 }),
      final([
        ["0.0", 5],
        ["1.0", 4],
      ]),
    ];
    const result = check(history);
    expect(result.violations).toEqual({ "lost-update": 0, "token-decrease": 1, "duplicate-token": 0, "torn-pair": 0 });
    expect(result.first["token-decrease"]?.message).toMatch(/1\.0 \(token 4\) directly follows 0\.0 \(token 5\)/);
  });

  it("finds a duplicate token: writes of two holders accepted at one token", () => {
    const history = [
      ...increment({ op: "0.0", token: 7, read: 0, invoke: 0, writeStart: 5, ack: 6, holder: "aaa" }),
      ...increment({ op: "1.0", token: 7, read: 1, invoke: 10, writeStart: 15, ack: 16, holder: "bbb", head: "0.0" }),
      final([
        ["0.0", 7],
        ["1.0", 7],
      ]),
    ];
    const result = check(history);
    expect(result.violations).toEqual({ "lost-update": 0, "token-decrease": 0, "duplicate-token": 1, "torn-pair": 0 });
    expect(result.first["duplicate-token"]?.ops).toEqual(["0.0", "1.0"]);
    expect(result.first["duplicate-token"]?.message).toMatch(/same token 7 from 2 different holders \(aaa…, bbb…\)/);
    expect(result.victims).toEqual(["0.0", "1.0"]);
    expect(result.repeatedTokens).toBe(1);
  });

  it("one holder writing twice with its token is not a duplicate, whichever operations carry the writes", () => {
    // Two operations (even of two workers: a lease handed over) under one holder: the store accepts
    // an equal token from the holder of the highest, and so does the checker.
    const history = [
      ...increment({ op: "0.0", token: 7, read: 0, invoke: 0, writeStart: 5, ack: 6, holder: "aaa" }),
      ...increment({ op: "1.0", token: 7, read: 1, invoke: 10, writeStart: 15, ack: 16, holder: "aaa", head: "0.0" }),
      final([
        ["0.0", 7],
        ["1.0", 7],
      ]),
    ];
    const result = check(history);
    expect(result.violations).toEqual({ "lost-update": 0, "token-decrease": 0, "duplicate-token": 0, "torn-pair": 0 });
    expect(result.repeatedTokens).toBe(0);
  });

  it("a repeated token overwriting the first holder's write: a lost update and a duplicate, not a decrease", () => {
    // The case only the holder check refuses: lease aaa writes with token 4; the lock loses its
    // counters and hands 4 to bbb, which read before aaa's write and overwrites it.
    const history = [
      ...increment({ op: "0.0", token: 4, read: 0, invoke: 0, writeStart: 20, ack: 21, holder: "aaa" }),
      ...increment({ op: "1.0", token: 4, read: 0, invoke: 5, writeStart: 30, ack: 31, holder: "bbb" }),
      final([["1.0", 4]]),
    ];
    const result = check(history);
    expect(result.violations).toEqual({ "lost-update": 1, "token-decrease": 0, "duplicate-token": 1, "torn-pair": 0 });
    expect(result.first["lost-update"]?.message).toMatch(/^0\.0 \(token 4\).*overwritten by 1\.0/);
    expect(result.first["duplicate-token"]?.ops).toEqual(["0.0", "1.0"]);
    expect(result.repeatedTokens).toBe(1);
  });

  it("finds a duplicate that only the final counter shows: an indeterminate write of another holder that landed", () => {
    const base = { worker: 1, resource: R };
    const history: HistoryEvent[] = [
      ...increment({ op: "0.0", token: 7, read: 0, invoke: 0, writeStart: 5, ack: 6, holder: "aaa" }),
      { type: "invoke", op: "1.0", ...base, ...at(10) },
      { type: "acquired", op: "1.0", ...base, token: "7", holder: "bbb", ...at(11) },
      { type: "info", op: "1.0", ...base, token: "7", holder: "bbb", message: "connection reset", writeStart: 15, ...at(19) },
      final([
        ["0.0", 7],
        ["1.0", 7],
      ]),
    ];
    const result = check(history);
    expect(result.violations).toEqual({ "lost-update": 0, "token-decrease": 0, "duplicate-token": 1, "torn-pair": 0 });
    expect(result.first["duplicate-token"]?.ops).toEqual(["0.0", "1.0"]);
  });

  it("counts repeated tokens per resource and holder, whether or not the store accepted them", () => {
    // Token 5 acquired by three holders (two of them refused as stale), token 6 by two (one
    // refused), token 8 once, and token 5 of another resource: 3 repeats on r, none elsewhere.
    const other = { type: "acquired" as const, op: "4.0", worker: 4, resource: "other", token: "5", holder: "zzz", ...at(1) };
    const history: HistoryEvent[] = [
      ...increment({ op: "0.0", token: 5, read: 0, invoke: 0, writeStart: 5, ack: 6, holder: "aaa" }),
      ...stale("1.0", 5, 10, 12),
      ...stale("2.0", 5, 20, 22),
      ...increment({ op: "0.1", token: 6, read: 1, invoke: 30, writeStart: 35, ack: 36, holder: "bbb", head: "0.0" }),
      ...stale("3.0", 6, 40, 42),
      ...increment({ op: "0.2", token: 8, read: 2, invoke: 50, writeStart: 55, ack: 56, head: "0.1" }),
      other,
      { type: "invoke", op: "4.0", worker: 4, resource: "other", ...at(0) },
      { type: "fail", op: "4.0", worker: 4, resource: "other", token: "5", holder: "zzz", reason: "stale", message: "stale", ...at(2) },
      final([
        ["0.0", 5],
        ["0.1", 6],
        ["0.2", 8],
      ]),
      { type: "final", resource: "other", count: 0, log: [], ...at(10_000) },
    ];
    const result = check(history);
    expect(result.repeatedTokens).toBe(3);
    expect(result.valid).toBe(true);
  });

  it("counts each lease whose registration was refused (holder undisclosed) as a holder of its own", () => {
    // Through the gateway, `register: true`: two later leases got token 5 again, a store refused to
    // register them, and the gateway released them without disclosing their holder ids.
    const refused = (op: string, mono: number): HistoryEvent[] => {
      const base = { op, worker: Number(op.split(".")[0]), resource: R };
      return [
        { type: "invoke", ...base, ...at(mono) },
        { type: "acquired", ...base, token: "5", holder: null, ...at(mono + 1) },
        {
          type: "fail",
          ...base,
          token: "5",
          reason: "stale",
          message: "fencing token 5 was already accepted from another holder",
          ...at(mono + 1),
        },
      ];
    };
    const history: HistoryEvent[] = [
      ...increment({ op: "0.0", token: 5, read: 0, invoke: 0, writeStart: 5, ack: 6, holder: "aaa" }),
      ...refused("1.0", 10),
      ...refused("2.0", 20),
      final([["0.0", 5]]),
    ];
    const result = check(history);
    expect(result.repeatedTokens).toBe(2);
    expect(result.valid).toBe(true);
    expect(result.ops).toMatchObject({ ok: 1, fail: 2 });
  });

  it("refuses to judge duplicates when an accepted write names no holder", () => {
    const history = increment({ op: "0.0", token: 1, read: 0, invoke: 0, writeStart: 5, ack: 6 }).map((e) => {
      if (e.type !== "acquired" && e.type !== "ok") return e;
      const { holder: _holder, ...rest } = e;
      return rest as HistoryEvent;
    });
    expect(() => check([...history, final([["0.0", 1]])])).toThrow(/names no holder/);
  });

  it("an indeterminate write is never a lost update, and a failed write that landed is counted apart", () => {
    const base = { worker: 0, resource: R };
    const history: HistoryEvent[] = [
      { type: "invoke", op: "0.0", ...base, ...at(0) },
      { type: "info", op: "0.0", ...base, token: "1", holder: "h0", message: "connection reset", writeStart: 5, ...at(9) },
      { type: "invoke", op: "0.1", ...base, ...at(10) },
      {
        type: "fail",
        op: "0.1",
        ...base,
        token: "2",
        holder: "h1",
        reason: "stale",
        message: "reported stale after an ambiguous attempt",
        ...at(19),
      },
      final([["0.1", 2]]),
    ];
    const result = check(history);
    expect(result.valid).toBe(true);
    expect(result.ops).toMatchObject({ ok: 0, info: 1, fail: 1 });
    expect(result.failedButApplied).toBe(1);
  });

  it("refuses to check a history without the final read", () => {
    expect(() => check(increment({ op: "0.0", token: 1, read: 0, invoke: 0, writeStart: 5, ack: 6 }))).toThrow(/no final read/);
  });

  it("resolves a write of unknown outcome from the documents: seen landed (judged as applied) or not seen (not lost)", () => {
    const base = (op: string): { op: string; worker: number; resource: string } => ({ op, worker: Number(op.split(".")[0]), resource: R });
    const unknown = (op: string, token: number, read: number, head: string | null, t: number): HistoryEvent[] => [
      { type: "invoke", ...base(op), ...at(t) },
      { type: "acquired", ...base(op), token: String(token), holder: `holder-${op}`, ...at(t + 1) },
      { type: "read", ...base(op), token: String(token), count: read, head, ...at(t + 2) },
      {
        type: "info",
        ...base(op),
        token: String(token),
        holder: `holder-${op}`,
        message: "the answer was lost",
        error: "OutcomeUnknownError",
        writeStart: t + 3,
        ...at(t + 5),
      },
    ];
    // 1.0 landed (2.0 read it), 1.1 did not (2.1 read 2.0's document, which does not hold it).
    const history: HistoryEvent[] = [
      ...increment({ op: "0.0", token: 1, read: 0, invoke: 0, writeStart: 5, ack: 6 }),
      ...unknown("1.0", 2, 1, "0.0", 10),
      ...increment({ op: "2.0", token: 3, read: 2, invoke: 20, writeStart: 25, ack: 26, head: "1.0" }),
      ...unknown("1.1", 4, 3, "2.0", 30),
      ...increment({ op: "2.1", token: 5, read: 3, invoke: 40, writeStart: 45, ack: 46, head: "2.0" }),
      final([
        ["0.0", 1],
        ["1.0", 2],
        ["2.0", 3],
        ["2.1", 5],
      ]),
    ];
    const result = check(history);
    expect(result.valid).toBe(true);
    expect(result.ops.byOutcome).toMatchObject({ ok: 3, "outcome-unknown": 2 });
    expect(result.ops.outcomeUnknown).toEqual({ landed: 1, notSeen: 1 });
    expect(result.ops.errors).toEqual({ OutcomeUnknownError: 2 });

    // The same, but a later write of a stale line overwrote 1.0 after 2.0 had read it: 1.0 landed and was lost.
    const overwritten: HistoryEvent[] = [
      ...increment({ op: "0.0", token: 1, read: 0, invoke: 0, writeStart: 5, ack: 6 }),
      ...unknown("1.0", 2, 1, "0.0", 10),
      { type: "invoke", ...base("2.0"), ...at(20) },
      { type: "acquired", ...base("2.0"), token: "3", holder: "holder-2.0", ...at(21) },
      { type: "read", ...base("2.0"), token: "3", count: 2, head: "1.0", ...at(22) },
      { type: "fail", ...base("2.0"), token: "3", holder: "holder-2.0", reason: "unavailable", message: "x", ...at(23) },
      ...increment({ op: "3.0", token: 4, read: 1, invoke: 30, writeStart: 35, ack: 36, head: "0.0" }),
      final([
        ["0.0", 1],
        ["3.0", 4],
      ]),
    ];
    const lost = check(overwritten);
    expect(lost.violations["lost-update"]).toBe(1);
    expect(lost.first["lost-update"]?.message).toMatch(/^1\.0 \(token 2\) had an unknown outcome but was seen landed.*overwritten by 3\.0/);
  });

  it("liveness: a call answered past the deadline plus the margin is late, unless the nemesis stalled it outside the deadline", () => {
    const live = { deadlineMs: 100, marginMs: 50 };
    const withCalls = (events: HistoryEvent[], calls: { step: "read" | "write"; start: number; end: number }[]): HistoryEvent[] =>
      events.map((e) => (e.type === "ok" ? { ...e, calls } : e));
    const quick = withCalls(increment({ op: "0.0", token: 1, read: 0, invoke: 0, writeStart: 5, ack: 6 }), [
      { step: "write", start: 5, end: 6 },
    ]);
    const slow = withCalls(increment({ op: "1.0", token: 2, read: 1, invoke: 10, writeStart: 300, ack: 500, head: "0.0" }), [
      { step: "read", start: 12, end: 90 },
      { step: "write", start: 300, end: 500 },
    ]);
    const history = [
      ...quick,
      ...slow,
      final([
        ["0.0", 1],
        ["1.0", 2],
      ]),
    ];
    const late = check(history, live).liveness;
    expect(late).toMatchObject({ calls: 3, late: 1, unanswered: 0 });
    expect(late.slowest).toMatchObject({ op: "1.0", step: "write", ms: 200, stalledMs: 0 });
    expect(late.slowestByStep.read).toMatchObject({ op: "1.0", ms: 78 });

    // Worker 1 was stopped for 120 ms of its write: 80 ms net, in time.
    const stop = (kind: "pause-worker", worker: number, from: number, to: number): HistoryEvent[] => [
      { type: "nemesis", fault: 9, kind, target: `worker ${worker}`, phase: "start", worker, stalls: "worker", ...at(from) },
      { type: "nemesis", fault: 9, kind, target: `worker ${worker}`, phase: "end", worker, stalls: "worker", ...at(to) },
    ];
    const stalled = check(
      [...history, ...stop("pause-worker", 1, 320, 440)].sort((a, b) => a.mono - b.mono),
      live,
    ).liveness;
    expect(stalled).toMatchObject({ late: 0 });
    expect(stalled.slowest).toMatchObject({ op: "1.0", ms: 200, stalledMs: 120 });
    // Another worker's pause is no excuse.
    expect(check([...history, ...stop("pause-worker", 0, 320, 440)], live).liveness.late).toBe(1);
    // An operation invoked and never answered.
    const open: HistoryEvent = { type: "invoke", op: "2.0", worker: 2, resource: R, ...at(600) };
    expect(check([...history, open], live).liveness.unanswered).toBe(1);
  });
});
