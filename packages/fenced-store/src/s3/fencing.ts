import { fenceRefusal, needsRaise } from "./io.js";
import { refusal } from "./intent.js";
import { readFencesThenPut } from "./pipeline.js";
import { dataObject, prepare, readBatch, sending, type Fencing, type Prepared, type Run } from "./run.js";

/**
 * The two ways a write treats the resource fence objects, as strategies of the one write loop
 * (write.ts): `resourceFences` reads, checks and raises them; `noResourceFences`
 * (checkResourceFence: false) leaves them alone, and the manifest's own entries are the only check.
 */

/** Whether some fence object, as last read, is below this write's token (or absent). */
function raiseNeeded(run: Run): boolean {
  const snaps = run.fences.snaps;
  return snaps === undefined || run.intent.fences.some((f, i) => needsRaise(f, snaps[i] ?? null));
}

export const resourceFences: Fencing = {
  expectsRaise: (run) => run.intent.fences.some((f) => run.io.expectsRaise(f)),

  async read(run, gate) {
    const { io, intent } = run;
    const snaps = await Promise.all(intent.fences.map((f) => io.readFence(f.resource, intent.signal, gate)));
    run.fences = { snaps, fresh: true };
  },

  problem(run) {
    const snaps = run.fences.snaps;
    if (snaps === undefined) return undefined;
    return run.intent.fences.map((f, i) => fenceRefusal(f, snaps[i] ?? null)).find((e) => e !== undefined);
  },

  /** Step 4: only after the manifest was read in this write and admitted it (a write refused for its key's owner raises nothing). */
  async raise(run) {
    const { io, intent } = run;
    const known = run.fences.snaps;
    if (known === undefined || !raiseNeeded(run)) return;
    if (!run.manifest.fresh) {
      await readBatch(run, { fences: false, manifest: true });
      const refused = refusal(intent, run.manifest.snap);
      if (refused !== undefined) throw refused;
    }
    const snaps = await Promise.all(intent.fences.map((f, i) => io.raiseFence(f, known[i] ?? null, intent.signal)));
    // A raise's answer is as fresh as a read of that fence, but not of another fence read before it was awaited.
    run.fences = { snaps, fresh: intent.fences.length === 1 };
  },

  /**
   * Steps 5 to 7. An upload still running is not waited for here: the fence read is held until it
   * has answered (pipeline.ts).
   */
  async send(run) {
    const running = run.bodies?.running(run.manifest.snap?.header.writeId ?? null);
    if (running !== undefined) return putAfterFenceRead(run, running.key, running.ready);
    return putAfterFenceRead(run, await dataObject(run), undefined);
  },
};

/**
 * THE RULE the fenced write rests on, enforced here and nowhere else: a manifest PUT leaves only
 * after a fence read that was sent after everything the attempt awaited (an upload, a copy, a
 * manifest read, a raise of another fence, a pause), and whose answer admits it. Sent at once when
 * the fences were read after the last thing awaited and nothing is still running; otherwise after a
 * new read (steps 6 and 7, pipelined on the client, never on the wire). Undefined: a raise is needed
 * first, and nothing was sent.
 */
function putAfterFenceRead(run: Run, dataKey: string | undefined, after: Promise<unknown> | undefined): Promise<Prepared | undefined> {
  if (run.fences.fresh && after === undefined) return Promise.resolve(sending(run, prepare(run, dataKey)));
  return readFencesThenPut(
    {
      read: (gate) => resourceFences.read(run, gate),
      admits: () => {
        const refused = resourceFences.problem(run);
        if (refused !== undefined) throw refused;
        return !raiseNeeded(run);
      },
      prepare: (gate) => prepare(run, dataKey, gate),
      sending: (p) => sending(run, p),
    },
    after,
  );
}

export const noResourceFences: Fencing = {
  expectsRaise: () => false,
  read: () => Promise.resolve(),
  problem: () => undefined,
  raise: () => Promise.resolve(),
  /** Steps 5 and 7: the data object (waited for), then the manifest PUT. */
  send: async (run) => sending(run, prepare(run, await dataObject(run))),
};
