import { afterAll, beforeAll, describe } from "vitest";
import type { FencedStore, StoredVersion } from "../contract.js";
import { callCases } from "./calls-test-support.js";
import { ruleCases } from "./rules-test-support.js";

/*
 * The conformance suite: every promise of the store contract (../contract.ts), written once, each
 * case a function of the store under test and naming the PROTOCOL.md rule it pins.
 *   suite-test-support.ts   what a store under test provides (Subject), and the suite
 *   rules-test-support.ts   the three rules: ratchet, one lease per token (holder), one resource per key (owner)
 *   calls-test-support.ts   what the calls add: ifVersion, versions, transfer, register of a set,
 *                           bad input, aborts, an unreachable backend
 * Its runners, one line per store: memory.test.ts (the in-memory S3 under each profile, and the
 * reference store: the fast tier), servers.test.ts (PostgreSQL and radosgw).
 */

/** One store on state of its own. */
interface Opened<V, R extends StoredVersion> {
  /** A store on fresh, empty state: a schema, a bucket of its own. */
  readonly store: FencedStore<V, R>;
  /** A second store on the same state that remembers nothing of the first's calls: a refusal must come from what is stored. */
  readonly again: FencedStore<V, R>;
  /** Everything the store keeps, as a value: equal before and after a refused call means nothing was written. */
  state(): Promise<unknown>;
}

/** A store under test: how to open it, and how to write and read a value of its kind. */
export interface Subject<V, R extends StoredVersion> {
  open(): Promise<Opened<V, R>>;
  /** A store of the same kind whose backend refuses every connection. */
  unreachable(): Promise<FencedStore<V, R>>;
  /** A value of the store's kind carrying `text`. */
  value(text: string): V;
  /** The text a read carries. */
  text(read: R): Promise<string>;
  stop(): Promise<void>;
}

export type StartSubject<V, R extends StoredVersion> = () => Promise<Subject<V, R>>;

/** What each case file is handed: the subject, once beforeAll has started it. */
export type Current<V, R extends StoredVersion> = () => Subject<V, R>;

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
  });
}
