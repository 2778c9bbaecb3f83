import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { COMMIT_AT } from "./commit-at.js";
import { quoteSchema, statements } from "./sql.js";
import { FIRST_PUT, nextPut, putValues, WriteOrder, type PutAnswer, type PutStatement } from "./write-order.js";
import { STEADY, ALL_LAND, ARTICLE, OWNERSHIP, SQL_TEXT, missingPins, type Pin } from "./server-pins-test-support.js";

// Which statement an unconditional put sends next (write-order.ts, nextPut), without a server. Each
// case of the table names the real-server test that shows it on the wire (server-pins-test-support.ts).

const STATEMENTS: readonly PutStatement[] = ["putOrderedShared", "putOrdered", "putShared"];
const ANSWERS: readonly PutAnswer[] = ["row", "no-row", "out-of-order", "error"];

describe("nextPut: the statement an unconditional put sends next", () => {
  // Every (statement sent, its answer): the next statement, or how the put ends.
  const TABLE: readonly [PutStatement, PutAnswer, ReturnType<typeof nextPut>, Pin][] = [
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
  function run(answers: (s: PutStatement, i: number) => PutAnswer): { sent: PutStatement[]; end: string } {
    const sent: PutStatement[] = [];
    for (let statement = FIRST_PUT; ;) {
      sent.push(statement);
      const answer = answers(statement, sent.length - 1);
      const next = nextPut(statement, answer);
      if (next === "written" || next === "stale" || next === "throw") return { sent, end: next };
      if (sent.length > 10) return { sent, end: "loop" };
      statement = next;
    }
  }

  it("whatever the server answers: the shared statement first, three at most, none twice, putShared only after an out-of-order refusal, written only on a row", () => {
    fc.assert(
      fc.property(fc.array(fc.constantFrom(...ANSWERS), { minLength: 3, maxLength: 3 }), (answers) => {
        const { sent, end } = run((_, i) => answers[i] as PutAnswer);
        expect(sent[0]).toBe("putOrderedShared");
        expect(sent.length).toBeLessThanOrEqual(3);
        expect(new Set(sent).size).toBe(sent.length);
        sent.forEach((s, i) => {
          if (s === "putShared") expect(answers[i - 1]).toBe("out-of-order");
        });
        const last = answers[sent.length - 1];
        expect(end).toBe(last === "row" ? "written" : last === "no-row" ? "stale" : "throw");
      }),
    );
    // The worst case: three statements, as write-order.test.ts builds it on the wire.
    expect(run((_, i) => (["no-row", "out-of-order", "no-row"] as const)[i] as PutAnswer)).toEqual({
      sent: ["putOrderedShared", "putOrdered", "putShared"],
      end: "stale",
    });
  });

  // On the wire: LATE_DELIVERED (a late put refused by the version it came after).
  it("a statement whose commit leaves with it carries the version the put comes after; the one committed after its answer does not need it", () => {
    fc.assert(
      fc.property(fc.constantFrom(...STATEMENTS), fc.array(fc.string(), { maxLength: 5 }), fc.string(), (statement, values, after) => {
        const params = putValues(statement, values, after);
        if (COMMIT_AT[statement] === "with-statement") expect(params).toEqual([...values, after]);
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
      expect(sql[statement].includes("$6"), statement).toBe(statement !== "putShared");
    }
  });
});

describe("the contract", () => {
  it("every real-server test a pin names, here and in failure-verdicts.test.ts, exists (server-pins-test-support.ts)", () => {
    expect(missingPins()).toEqual([]);
  });
});
