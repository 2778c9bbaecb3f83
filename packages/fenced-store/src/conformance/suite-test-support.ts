import { afterAll, beforeAll, describe } from "vitest";
import type { StoredVersion } from "../contract.js";
import { callCases } from "./calls-test-support.js";
import { inputCases } from "./inputs-test-support.js";
import { ruleCases } from "./rules-test-support.js";
import type { Current, StartSubject, Subject } from "./subject-test-support.js";

/*
 * The conformance suite: every promise of the store contract (../contract.ts), written once, each
 * case a function of the store under test and naming the PROTOCOL.md rule it pins.
 *   suite-test-support.ts   the suite
 *   subject-test-support.ts what a store under test provides (Subject), and the helpers the cases share
 *   rules-test-support.ts   the three rules: ratchet, one lease per token (holder), one resource per key (owner)
 *   calls-test-support.ts   what the calls add: ifVersion, versions, transfer, register of a set
 *   inputs-test-support.ts  what is decided before any I/O (bad input, aborts, an ended lease), and the backend:
 *                           set up (verify), unreachable
 * Its runners, one line per store: memory.test.ts (the in-memory S3 under each profile, and the
 * reference store: the fast tier), servers.test.ts (PostgreSQL and radosgw).
 */

export function conformanceSuite<V, R extends StoredVersion>(name: string, start: StartSubject<V, R>): void {
  describe(`the store contract: ${name}`, () => {
    let subject: Subject<V, R> | undefined;
    beforeAll(async () => {
      subject = await start();
    });
    afterAll(async () => {
      await subject?.stop();
    });
    const current: Current<V, R> = () => {
      if (subject === undefined) throw new Error("the store under test did not start");
      return subject;
    };
    ruleCases(current);
    callCases(current);
    inputCases(current);
  });
}
