import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { COMMIT_AT } from "./commit-at.js";
import { quoteSchema, statements } from "./sql.js";
import { firstPut, nextPut, putValues, WriteOrder, type PutAnswer, type PutStatement } from "./write-order.js";
import {
  STEADY,
  ALL_LAND,
  ARTICLE,
  OWNERSHIP,
  SQL_TEXT,
  OWN_STEADY,
  OWN_LOST,
  OWN_TEXT,
  missingPins,
  type Pin,
} from "./server-pins-test-support.js";

// Which statement an unconditional put sends next (write-order.ts, nextPut), without a server. Each
// case of the table names the real-server test that shows it on the wire (server-pins-test-support.ts).

const STATEMENTS: readonly PutStatement[] = ["putOwn", "putOrderedShared", "putOrdered", "putShared"];
const ANSWERS: readonly PutAnswer[] = ["row", "no-row", "out-of-order", "error"];

describe("nextPut: the statement an unconditional put sends next", () => {
  // Every (statement sent, its answer): the next statement, or how the put ends.
  const TABLE: readonly [PutStatement, PutAnswer, ReturnType<typeof nextPut>, Pin][] = [
    ["putOwn", "row", "written", OWN_STEADY], // the key its own resource's, the steady state: one statement
    ["putOwn", "no-row", "putOrderedShared", OWN_STEADY], // a new lease, a missing copy: decided as if not sent
    ["putOwn", "out-of-order", "throw", OWN_TEXT], // never raised by it: the error would pass through
    ["putOwn", "error", "throw", OWN_LOST],
    ["putOrderedShared", "row", "written", STEADY], // the steady state: one statement
    ["putOrderedShared", "no-row", "putOrdered", STEADY], // a new lease's first write: the raise
    ["putOrderedShared", "out-of-order", "putShared", STEADY], // written at this fence by another store
    ["putOrderedShared", "error", "throw", STEADY], // a key of another resource (FN001): one statement
    ["putOrdered", "row", "written", STEADY],
    ["putOrdered", "no-row", "stale", ARTICLE],
    ["putOrdered", "out-of-order", "putShared", STEADY], // the worst case's second refusal
    ["putOrdered", "error", "throw", OWNERSHIP],
    ["putShared", "row", "written", ALL_LAND],
    ["putShared", "no-row", "stale", STEADY], // the worst case's third statement: a raise since
    ["putShared", "out-of-order", "throw", SQL_TEXT], // never sent twice: the error would pass through
    ["putShared", "error", "throw", OWNERSHIP],
  ];

  it("every statement and answer, as a table", () => {
    expect(TABLE.map(([s, a]) => `${s} ${a}`).sort()).toEqual(STATEMENTS.flatMap((s) => ANSWERS.map((a) => `${s} ${a}`)).sort());
    for (const [sent, answer, next, pinnedBy] of TABLE) expect(nextPut(sent, answer), `${sent} ${answer} (${pinnedBy[0]})`).toBe(next);
  });

  /** The statements a put sends when each answers as `answers` says, and how it ends: the driver of store.ts, with the server's answers given. */
  function run(answers: (s: PutStatement, i: number) => PutAnswer, own = false): { sent: PutStatement[]; end: string } {
    const sent: PutStatement[] = [];
    for (let statement = firstPut(own ? "r" : "k", "r"); ;) {
      sent.push(statement);
      const answer = answers(statement, sent.length - 1);
      const next = nextPut(statement, answer);
      if (next === "written" || next === "stale" || next === "throw") return { sent, end: next };
      if (sent.length > 10) return { sent, end: "loop" };
      statement = next;
    }
  }

  it("whatever the server answers: the one-row statement first on its own key, else the shared one; four at most, none twice, putShared only after an out-of-order refusal, written only on a row", () => {
    fc.assert(
      fc.property(fc.boolean(), fc.array(fc.constantFrom(...ANSWERS), { minLength: 4, maxLength: 4 }), (own, answers) => {
        const { sent, end } = run((_, i) => answers[i] as PutAnswer, own);
        expect(sent[0]).toBe(own ? "putOwn" : "putOrderedShared");
        if (own && sent.length > 1) expect(sent[1]).toBe("putOrderedShared");
        expect(sent.length).toBeLessThanOrEqual(own ? 4 : 3);
        expect(new Set(sent).size).toBe(sent.length);
        sent.forEach((s, i) => {
          if (s === "putShared") expect(answers[i - 1]).toBe("out-of-order");
        });
        const last = answers[sent.length - 1];
        expect(end).toBe(last === "row" ? "written" : last === "no-row" && sent.length > 1 ? "stale" : "throw");
      }),
    );
    // The worst case: three statements, as write-order.test.ts builds it on the wire; four on an own key.
    expect(run((_, i) => (["no-row", "out-of-order", "no-row"] as const)[i] as PutAnswer)).toEqual({
      sent: ["putOrderedShared", "putOrdered", "putShared"],
      end: "stale",
    });
    expect(run((_, i) => (["no-row", "no-row", "out-of-order", "no-row"] as const)[i] as PutAnswer, true).sent).toEqual([
      "putOwn",
      "putOrderedShared",
      "putOrdered",
      "putShared",
    ]);
  });

  // On the wire: LATE_DELIVERED (a late put refused by the version it came after).
  it("a statement whose commit leaves with it carries the version the put comes after; the one committed after its answer does not need it", () => {
    fc.assert(
      fc.property(fc.constantFrom(...STATEMENTS), fc.array(fc.string(), { maxLength: 5 }), fc.string(), (statement, values, after) => {
        const params = putValues(statement, values, after);
        // The one-row statement leaves out the key ($4), its fence's resource (ownParams).
        const own = statement === "putOwn" ? [...values.slice(0, 3), ...values.slice(4)] : values;
        if (COMMIT_AT[statement] === "with-statement") expect(params).toEqual([...own, after]);
        else expect(params).toEqual(values);
      }),
    );
  });

  // On the wire: LATE_DELIVERED.
  it("WriteOrder: a put comes after the newest version the database gave the store, in whatever order the answers came; 0 before any", () => {
    fc.assert(
      fc.property(fc.array(fc.bigInt({ min: 1n, max: 2n ** 63n - 1n })), (versions) => {
        const order = new WriteOrder();
        for (const v of versions) order.saw(v.toString());
        expect(order.after()).toBe(versions.reduce((a, b) => (b > a ? b : a), 0n).toString());
      }),
    );
  });
});

describe("the statements' text", () => {
  it("the statements' text: the ordered ones check the version they come after ($6), putShared has no such check", () => {
    const sql = statements(quoteSchema("fenced"));
    const highest = (text: string) => Math.max(...[...text.matchAll(/\$(\d+)/g)].map((m) => Number(m[1])));
    for (const statement of STATEMENTS) {
      // As many parameters as putValues gives it (the fence's three, key, value, and `after` for the ordered ones).
      expect(highest(sql[statement]), statement).toBe(putValues(statement, [1, 2, 3, 4, 5], 6).length);
      // Without $6 the record upsert's `after` is NULL: `r.version > NULL` is never true, so no out-of-order refusal.
      const afterAt = statement === "putOwn" ? "$5" : "$6";
      expect(sql[statement].includes(afterAt), statement).toBe(statement !== "putShared");
    }
  });
});

describe("the one-row statements' text (own-sql.ts)", () => {
  it("the one-row statements: one UPDATE of the record that locks no fence row, never raises, and takes the parameters of the write it stands in front of", () => {
    const sql = statements(quoteSchema("fenced"));
    const highest = (text: string) => Math.max(...[...text.matchAll(/\$(\d+)/g)].map((m) => Number(m[1])));
    const PAIRS = [
      ["putOwn", "putOrdered"],
      ["putOwnIfVersion", "putIfVersion"],
      ["deleteOwnIfVersion", "deleteIfVersion"],
    ] as const;
    for (const [own, before] of PAIRS) {
      const text = sql[own];
      expect(text.startsWith('UPDATE "fenced".records'), own).toBe(true);
      // No fence row, no advisory lock, no refusal function: zero rows is its only way to say no.
      for (const absent of [/"fenced"\.fence\b/, /advisory/, /refuse_/]) expect(text, own).not.toMatch(absent);
      expect(text, own).toContain("r.key = $1 AND r.fence_token = $2::bigint AND r.fence_holder IS NOT DISTINCT FROM $3::text");
      expect(COMMIT_AT[own], own).toBe("with-statement");
      // The parameters of the write it stands in front of, the key ($4) left out (ownParams).
      expect(highest(text), own).toBe(highest(sql[before]) - 1);
    }
    // deleteOwn: the fence and the version it comes after ($4), like putOrdered's $6.
    expect(highest(sql.deleteOwn)).toBe(4);
    expect(COMMIT_AT.deleteOwn).toBe("with-statement");
  });
});

describe("the contract", () => {
  it("every real-server test a pin names, here and in failure-verdicts.test.ts, exists (server-pins-test-support.ts)", () => {
    expect(missingPins()).toEqual([]);
  });
});
