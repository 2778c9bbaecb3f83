import { SendGate } from "./conditional.js";

/**
 * Steps 6 and 7 of the write, pipelined on the client and never on the wire (PROTOCOL.md, "S3",
 * "The write"). The SDK prepares (serialises, signs) the fence read while `after` (the attempt's
 * upload or copy) runs, and the manifest PUT while that read is in flight; each is held by a
 * SendGate right before the HTTP handler until what it is ordered after has answered.
 *
 * INVARIANT (what this module must never break): no byte of the manifest PUT leaves the process
 * before the answer of the fence read it is checked against, and that read is sent only after
 * `after` answered. So the window a newer holder can slip through is exactly what it would be with
 * each request prepared only after the previous one answered: from the fence read to the PUT landing.
 */

/** What the pipeline is given: the fence read, the check of its answer, and the manifest PUT. */
export interface FenceReadThenPut<Put> {
  /** Reads the fence objects; with a gate, the read goes on the wire only once it opens. */
  read(gate?: SendGate): Promise<void>;
  /** Checks what `read` found: true = send the PUT; false = do not (a raise is needed first); throws a refusal. */
  admits(): boolean;
  /** Prepares the manifest PUT; with a gate, it goes on the wire only once the gate opens. */
  prepare(gate?: SendGate): Put;
  /** Records the PUT as sent: called right before its gate opens, from when on it may land. */
  sending(put: Put): Put;
}

/** How long a request prepared (signed) ahead may wait to be sent: far below the 15 minutes S3 allows for its date. */
const PREPARED_FOR_MS = 60_000;

/** Resolves after the current turn of the event loop: what was handed to the socket meanwhile has been written. */
function nextTurn(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/**
 * Reads the fences after `after` (undefined: nothing to wait for), then sends the manifest PUT if
 * the read admits it; resolves undefined when it does not (nothing was sent).
 */
export async function readFencesThenPut<Put>(steps: FenceReadThenPut<Put>, after: Promise<unknown> | undefined): Promise<Put | undefined> {
  const readGate = after === undefined ? undefined : new SendGate();
  const putGate = new SendGate();
  try {
    // What is on its way to the wire goes first (the upload, or the fence GET); the rest is prepared meanwhile.
    if (after !== undefined) await nextTurn();
    const reading = steps.read(readGate);
    reading.catch(() => undefined); // awaited below: not an unhandled rejection meanwhile
    if (after === undefined) await nextTurn();
    const preparedAt = performance.now();
    const gated = steps.prepare(putGate);
    if (after !== undefined) {
      await after;
      // A request signed long ago would be refused for its date (S3 allows 15 minutes): read anew.
      if (performance.now() - preparedAt > PREPARED_FOR_MS) return await readFencesThenPut(steps, undefined);
      readGate?.open(); // the read is sent only now, after `after` answered
    }
    await reading;
    if (!steps.admits()) return undefined;
    // The PUT is sent only now, after the read's answer admitted it.
    if (performance.now() - preparedAt > PREPARED_FOR_MS) {
      putGate.close();
      return steps.sending(steps.prepare()); // the fences were just read: a PUT signed now goes out at once
    }
    const sent = steps.sending(gated);
    putGate.open();
    return sent;
  } finally {
    // Either gate not opened by now closes: its request is never sent.
    readGate?.close();
    putGate.close();
  }
}
