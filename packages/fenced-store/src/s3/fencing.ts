import type { SendGate } from "./conditional.js";
import type { FenceSnapshot } from "./io.js";
import { readFencesThenPut } from "./pipeline.js";
import { dataObject, next, prepare, readManifest, sending, waited, type Prepared, type Run } from "./run.js";

/**
 * The resource fence objects' side of a write: reading them (with the manifest, or pipelined
 * before a PUT), raising them, and sending an attempt under the decision made on them (decision.ts).
 * With checkResourceFence: false (`run.checked` false) nothing here reads or raises a fence object.
 */

/** Reads the fence objects, one request each, at once; with a gate, each goes on the wire only once it opens. */
function readFences(run: Run, gate?: SendGate): Promise<(FenceSnapshot | null)[]> {
  const { io, intent } = run;
  return Promise.all(intent.fences.map((f) => io.readFence(f.resource, intent.signal, gate)));
}

/**
 * Reads the fence objects and the manifest, each if asked, in parallel: one wait, which delivers
 * the fences (they are current until the write awaits anything else).
 */
export async function readBatch(run: Run, what: { readonly fences: boolean; readonly manifest: boolean }): Promise<void> {
  const fences = what.fences && run.checked;
  const [snaps] = await waited(run, Promise.all([fences ? readFences(run) : undefined, what.manifest ? readManifest(run) : undefined]));
  if (snaps !== undefined) run.fences = { snaps, readIn: run.waits };
}

/** Whether this store expects a fence object to need raising (a guess: it only decides what step 2 reads). */
export function expectsRaise(run: Run): boolean {
  return run.checked && run.intent.fences.some((f) => run.io.expectsRaise(f));
}

/** Step 4, on a decision to raise: the fences are known, one is below this write's token, and the manifest read in this write admits it. */
export async function raise(run: Run): Promise<void> {
  const { io, intent } = run;
  const known = run.fences.snaps;
  if (known === undefined) throw new Error("a raise decided before the fence objects were read"); // decide() never does
  const snaps = await waited(run, Promise.all(intent.fences.map((f, i) => io.raiseFence(f, known[i] ?? null, intent.signal))));
  // A raise's answer is as current as a read of that fence, but not of another fence raised beside it.
  run.fences = { snaps, readIn: intent.fences.length === 1 ? run.waits : undefined };
}

/**
 * Steps 5 to 7, on a decision to put or to read the fences first: the attempt's data object, then
 * its manifest PUT — at once if the decision, made after the data object, is to put; otherwise
 * after a new fence read, pipelined (pipeline.ts). An upload still running is not waited for here:
 * the fence read is held until it has answered. Undefined: that read did not admit a PUT (a raise
 * is needed first), and nothing was sent.
 */
export async function send(run: Run): Promise<Prepared | undefined> {
  const running = run.checked ? run.bodies?.running(run.manifest.snap?.header.writeId ?? null) : undefined;
  if (running !== undefined) {
    const uploaded = waited(run, running.ready);
    uploaded.catch(() => undefined); // awaited by the pipeline; not an unhandled rejection if it gives up first
    return putAfterFenceRead(run, running.key, uploaded);
  }
  const dataKey = await dataObject(run);
  if (next(run).kind === "put") return sending(run, prepare(run, dataKey));
  return putAfterFenceRead(run, dataKey, undefined);
}

/** The fence read, then the PUT if the decision on its answer is to put; `after` answers before the read is sent. */
function putAfterFenceRead(run: Run, dataKey: string | undefined, after: Promise<unknown> | undefined): Promise<Prepared | undefined> {
  return readFencesThenPut(
    {
      read: async (gate) => {
        const snaps = await waited(run, readFences(run, gate));
        run.fences = { snaps, readIn: run.waits };
      },
      admits: () => {
        const decision = next(run);
        if (decision.kind === "refuse") throw decision.error;
        return decision.kind === "put";
      },
      prepare: (gate) => prepare(run, dataKey, gate),
      sending: (p) => sending(run, p),
    },
    after,
  );
}
