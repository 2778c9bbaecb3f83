// What the stores' input checks cost a write, against work the write does anyway: the JSON value
// check (assertJsonValue, which every record write runs before its statement) against JSON.stringify
// of the same value (which the write runs after it), and the key rule (keyProblem, run twice a
// gateway write: on the path and in the store) against Buffer.byteLength of the same key. In this
// process, on the built packages, in interleaved rounds; each line the median over rounds of the
// check's nanoseconds, its anchor's, and their ratio in the same round.
import { keyProblem } from "@fenced/fence/internal";
import { assertJsonValue } from "@fenced/store/internal";
import { emit, median, nsPerCall, round3 } from "./measure.js";

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 7);
/** Calls a round makes of each, per case: long enough for a stable figure, short enough for pnpm bench. */
const CALLS = 200_000;

// Each case's inputs are parsed from JSON, as a request's are: distinct objects, no shared shape tricks.
const fromJson = <T>(value: T): T => JSON.parse(JSON.stringify(value)) as T;
const CASES = [
  {
    name: "write value",
    what: "the gateway bench's credential write body, three fields",
    inputs: Array.from({ length: 64 }, (_, w) => fromJson({ writer: w, seq: w * 7, note: "invoice total updated" })),
    check: (v: unknown) => assertJsonValue(v),
    anchor: (v: unknown) => JSON.stringify(v).length,
    anchorIs: "JSON.stringify of the value",
    calls: CALLS,
  },
  {
    name: "order value",
    what: "an order of 50 lines, each 4 fields and a 2-tag array, and a nested customer",
    inputs: Array.from({ length: 8 }, (_, k) =>
      fromJson({
        id: k,
        lines: Array.from({ length: 50 }, (_, i) => ({ id: i, name: `item ${i}`, tags: ["a", "b"], price: i * 1.5 })),
        customer: { name: "x", address: { city: "y" } },
      }),
    ),
    check: (v: unknown) => assertJsonValue(v),
    anchor: (v: unknown) => JSON.stringify(v).length,
    anchorIs: "JSON.stringify of the value",
    calls: CALLS / 50,
  },
  {
    name: "key",
    what: "the gateway bench's keys, cred/<w>",
    inputs: Array.from({ length: 64 }, (_, w) => `cred/${w}`),
    check: (k: string) => keyProblem(k),
    anchor: (k: string) => Buffer.byteLength(k, "utf8"),
    anchorIs: "Buffer.byteLength of the key",
    calls: CALLS * 5,
  },
] as const;

for (const c of CASES) {
  const check = c.check as (input: unknown) => unknown;
  const anchor = c.anchor as (input: unknown) => unknown;
  nsPerCall(c.inputs, check, c.calls); // warm: JIT
  nsPerCall(c.inputs, anchor, c.calls);
  const rounds: { check: number; anchor: number }[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    // Which runs first turns each round.
    const first = round % 2 === 0 ? check : anchor;
    const a = nsPerCall(c.inputs, first, c.calls);
    const b = nsPerCall(c.inputs, first === check ? anchor : check, c.calls);
    rounds.push(first === check ? { check: a, anchor: b } : { check: b, anchor: a });
  }
  emit({
    bench: "value-check",
    case: c.name,
    what: c.what,
    checkNs: Math.round(median(rounds.map((r) => r.check))),
    anchorNs: Math.round(median(rounds.map((r) => r.anchor))),
    anchorIs: c.anchorIs,
    ratio: round3(median(rounds.map((r) => r.check / r.anchor))),
    ratioOf: "the median over rounds of the check's time ÷ its anchor's in the same round",
    rounds: ROUNDS,
  });
}
