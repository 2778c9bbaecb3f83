import { describe, expect, it } from "vitest";
import { StoreIo } from "./io.js";

/** flush() and background() alone: neither touches the port, the options or the failures. */
const io = (): StoreIo => new StoreIo(undefined as never, undefined as never, undefined as never);

/** A task that ends when `end` is called. */
function pending(): { work: () => Promise<void>; end: () => void; ended: boolean } {
  let end = (): void => undefined;
  const task = {
    ended: false,
    end: () => end(),
    work: () => new Promise<void>((resolve) => (end = resolve)).then(() => void (task.ended = true)),
  };
  return task;
}

describe("StoreIo's background tasks", () => {
  it("flush() waits for every task, one that fails and one started while it waits included", async () => {
    const store = io();
    const [a, b, c] = [pending(), pending(), pending()];
    store.background(a.work);
    store.background(b.work);
    store.background(() => Promise.reject(new Error("best effort")));
    let flushed = false;
    const flushing = store.flush().then(() => (flushed = true));
    a.end();
    store.background(c.work);
    b.end();
    await new Promise((resolve) => setImmediate(resolve));
    expect(flushed).toBe(false);
    c.end();
    await flushing;
    expect([a.ended, b.ended, c.ended]).toEqual([true, true, true]);
    await store.flush();
  });
});
