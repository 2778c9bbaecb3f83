// Pins the history checker (checker.ts) against a model whose truth is known: generated runs of a
// counter incremented read-modify-write by workers under leases, over a simulated store that fences
// fully (ratchet and version), by the ratchet only, by the version only, or not at all. The checker
// must call every fully fenced history valid, and flag exactly the runs in which the model lost an
// acknowledged increment or accepted a token below one already accepted.
import { describe, expect, it } from "vitest";
import { check } from "./checker.js";
import { EMPTY_DOC, headOf, increment, type CounterDoc, type HistoryEvent } from "./history.js";
import { Random } from "./random.js";

type Fencing = "full" | "ratchet" | "version" | "none";
const R = "r";

interface Run {
  readonly history: HistoryEvent[];
  /** Acknowledged increments absent from the final document. */
  readonly lost: number;
  /** Writes accepted with a token below one accepted before them. */
  readonly decreases: number;
  readonly acked: number;
  readonly refused: { stale: number; version: number };
  readonly unknown: { landed: number; notSeen: number };
}

/**
 * Plays `ops` operations (each: acquire a token, read the document, write it plus one) in the order
 * `schedule` picks them, one phase per step; what an op has left once the schedule runs out is played
 * in op order. `lostAnswers[i]`: op i's write answer is lost (outcome unknown), applied or not.
 */
function simulate(
  fencing: Fencing,
  ops: number,
  schedule: readonly number[],
  lostAnswers: readonly ("applied" | "dropped" | undefined)[],
): Run {
  const history: HistoryEvent[] = [];
  let doc: CounterDoc = EMPTY_DOC;
  let highest = -1;
  let nextToken = 1;
  let step = 0;
  const phase = new Array<number>(ops).fill(0);
  const token = new Array<number>(ops).fill(0);
  const read = new Array<CounterDoc>(ops).fill(EMPTY_DOC);
  const accepted: number[] = [];
  let acked = 0;
  let decreases = 0;
  const refused = { stale: 0, version: 0 };
  const unknown = { landed: 0, notSeen: 0 };
  const ackedOps: string[] = [];

  const play = (i: number): void => {
    const mono = ++step * 10;
    const base = { op: `${i}.0`, worker: i, resource: R };
    const held = { token: String(token[i]), holder: `h${i}` };
    if (phase[i] === 0) {
      token[i] = nextToken++;
      history.push({ type: "invoke", ...base, mono, wall: mono });
      history.push({ type: "acquired", ...base, token: String(token[i]), holder: `h${i}`, mono: mono + 1, wall: mono + 1 });
    } else if (phase[i] === 1) {
      read[i] = doc;
      history.push({ type: "read", ...base, token: held.token, count: doc.count, head: headOf(doc), mono, wall: mono });
    } else {
      const mine = token[i] as number;
      const stale = (fencing === "full" || fencing === "ratchet") && mine < highest;
      const changed = (fencing === "full" || fencing === "version") && doc !== read[i];
      const answer = fencing === "full" ? lostAnswers[i] : undefined;
      const applies = !stale && !changed && answer !== "dropped";
      if (applies) {
        if (accepted.some((t) => t > mine)) decreases++;
        accepted.push(mine);
        highest = Math.max(highest, mine);
        doc = increment(read[i] as CounterDoc, base.op, held.token);
      }
      const count = (read[i] as CounterDoc).count;
      if (answer !== undefined) {
        history.push({ type: "info", ...base, ...held, message: "answer lost", writeStart: mono, mono: mono + 1, wall: mono + 1 });
        unknown[applies ? "landed" : "notSeen"]++;
      } else if (applies) {
        acked++;
        ackedOps.push(base.op);
        history.push({ type: "ok", ...base, ...held, read: count, wrote: count + 1, writeStart: mono, mono: mono + 1, wall: mono + 1 });
      } else {
        const reason = stale ? "stale" : "version";
        refused[reason]++;
        history.push({ type: "fail", ...base, ...held, reason, message: `refused: ${reason}`, mono: mono + 1, wall: mono + 1 });
      }
    }
    phase[i] = (phase[i] as number) + 1;
  };

  for (const pick of schedule) if ((phase[pick % ops] as number) < 3) play(pick % ops);
  for (let i = 0; i < ops; i++) while ((phase[i] as number) < 3) play(i);
  const mono = ++step * 10;
  history.push({ type: "final", resource: R, count: doc.count, log: doc.log, mono, wall: mono });
  const surviving = new Set(doc.log.map((e) => e.slice(0, e.lastIndexOf("@"))));
  const lost = ackedOps.filter((op) => !surviving.has(op)).length;
  return { history, lost, decreases, acked, refused, unknown };
}

const RUNS = 300;
/** A write's answer: lost after it applied, lost before, or (twice as often) received. */
const ANSWERS = ["applied", "dropped", undefined, undefined] as const;

/** RUNS seeded runs of the model (replayable: the seed is in every failure's message). */
function* runs(fencing: Fencing, withLostAnswers = false): Generator<[seed: string, run: Run]> {
  for (let seed = 1; seed <= RUNS; seed++) {
    const random = new Random(seed);
    const ops = random.int(1, 7);
    const schedule = Array.from({ length: random.int(0, ops * 3) }, () => random.int(0, ops - 1));
    const lostAnswers = Array.from({ length: ops }, () => (withLostAnswers ? ANSWERS[random.int(0, ANSWERS.length - 1)] : undefined));
    yield [`${fencing} seed ${seed}`, simulate(fencing, ops, schedule, lostAnswers)];
  }
}

describe("the checker against a model of fenced and unfenced counters", () => {
  it("a fully fenced store (ratchet and version): every history is valid, its refusals and unknown outcomes counted as they happened", () => {
    const seen = { stale: 0, version: 0, landed: 0, notSeen: 0 };
    for (const [seed, run] of runs("full", true)) {
      seen.stale += run.refused.stale;
      seen.version += run.refused.version;
      seen.landed += run.unknown.landed;
      seen.notSeen += run.unknown.notSeen;
      const result = check(run.history);
      expect(result.valid, seed).toBe(true);
      expect(run.lost + run.decreases, seed).toBe(0);
      expect(result.ops.ok, seed).toBe(run.acked);
      expect(result.ops.failByReason, seed).toMatchObject(run.refused);
      expect(result.ops.outcomeUnknown, seed).toEqual(run.unknown);
    }
    // The runs reach every kind of refusal and both fates of a lost answer.
    for (const count of Object.values(seen)) expect(count).toBeGreaterThan(10);
  });

  it("the ratchet alone: never a token decrease, but each acknowledged increment overwritten is one lost update", () => {
    let losing = 0;
    for (const [seed, run] of runs("ratchet")) {
      if (run.lost > 0) losing++;
      const result = check(run.history);
      expect(result.violations["token-decrease"], seed).toBe(0);
      expect(result.violations["lost-update"], seed).toBe(run.lost);
      expect(result.valid, seed).toBe(run.lost === 0);
    }
    expect(losing).toBeGreaterThan(10);
  });

  it("the version check alone: never a lost update, but a token accepted below an earlier one is a token decrease", () => {
    let decreasing = 0;
    for (const [seed, run] of runs("version")) {
      if (run.decreases > 0) decreasing++;
      const result = check(run.history);
      expect(result.violations["lost-update"], seed).toBe(0);
      expect(result.violations["token-decrease"], seed).toBe(run.decreases);
      expect(result.valid, seed).toBe(run.decreases === 0);
    }
    expect(decreasing).toBeGreaterThan(10);
  });

  it("no fencing: the history is flagged exactly when the model lost an increment or let a token go down", () => {
    let flagged = 0;
    for (const [seed, run] of runs("none")) {
      const result = check(run.history);
      expect(result.violations["lost-update"], seed).toBe(run.lost);
      // Found in real time: a write that overwrote the higher token's leaves no trace in the final counter.
      expect(result.violations["token-decrease"], seed).toBe(run.decreases);
      expect(result.valid, seed).toBe(run.lost === 0 && run.decreases === 0);
      if (!result.valid) flagged++;
    }
    // The generator reaches the interesting runs: interleavings that do lose updates.
    expect(flagged).toBeGreaterThan(10);
  });
});
