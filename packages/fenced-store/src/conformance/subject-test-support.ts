import { expect } from "vitest";
import type { FencedStore, StoredVersion } from "../contract.js";
import type { Fence } from "../fence.js";

/** What a store under test provides to the conformance suite, and the helpers its cases share. */

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
  /**
   * A store of the same kind whose backend refuses every connection, and how many times it tried to
   * reach it (a connection, a statement, a request): 0 means the store did no I/O.
   */
  unreachable(): Promise<Unreachable<V, R>>;
  /** A value of the store's kind carrying `text`. */
  value(text: string): V;
  /** The text a read carries. */
  text(read: R): Promise<string>;
  stop(): Promise<void>;
}

interface Unreachable<V, R extends StoredVersion> {
  readonly store: FencedStore<V, R>;
  readonly tries: () => number;
}

export type StartSubject<V, R extends StoredVersion> = () => Promise<Subject<V, R>>;

/** What each case file is handed: the subject, once beforeAll has started it. */
export type Current<V, R extends StoredVersion> = () => Subject<V, R>;

/** A fence with `holder` when one is given, a holderless fence otherwise. */
export function f(resource: string, token: bigint, holder?: string): Fence {
  return holder === undefined ? { resource, token } : { resource, token, holder };
}

/** What a call failed with (undefined: it did not fail), to assert on as a value. */
export function refusal(call: Promise<unknown>): Promise<unknown> {
  return call.then(
    () => undefined,
    (err: unknown) => err,
  );
}

type Attempt<V, R extends StoredVersion> = readonly [string, (store: FencedStore<V, R>) => Promise<unknown>];

/**
 * Each attempt, on the store that wrote and on a store that remembers nothing, fails as `expected`
 * says and leaves the stored state as it was.
 */
export async function refusedAlike<V, R extends StoredVersion>(
  opened: { store: FencedStore<V, R>; again: FencedStore<V, R>; state(): Promise<unknown> },
  attempts: readonly Attempt<V, R>[],
  expected: (err: unknown, what: string) => void,
): Promise<void> {
  const before = await opened.state();
  for (const store of [opened.store, opened.again]) {
    for (const [what, attempt] of attempts) {
      expected(await refusal(attempt(store)), what);
      expect(await opened.state(), what).toEqual(before);
    }
  }
}
