import { LocalClient, type ClientSetup } from "./clients.js";
import type { FileDoc } from "./backends.js";
import type { Reply, Request } from "./paused-client.js";

/**
 * The paused client's process: a LocalClient behind IPC. It runs one request at a time, in order,
 * like a program going through its steps; the parent stops and resumes the whole process.
 */
let client: LocalClient | undefined;
let queue: Promise<void> = Promise.resolve();

function send(reply: Reply): void {
  process.send?.(reply);
}

async function handle(request: Request): Promise<unknown> {
  const [a, b, c] = request.args;
  if (request.op === "init") {
    client = new LocalClient(a as ClientSetup);
    return undefined;
  }
  if (client === undefined) throw new Error("the client was not initialised");
  switch (request.op) {
    case "acquire":
      return client.acquire(a as string, b as number);
    case "read":
      return client.read(a as string);
    case "write":
      return client.write(a as string, b as FileDoc, c as string | undefined);
    case "register":
      return client.register();
    case "leaseRemainingMs":
      return client.leaseRemainingMs();
    case "release":
      return client.release();
    case "close":
      await client.close();
      setImmediate(() => process.exit(0));
      return undefined;
  }
}

process.on("message", (request: Request) => {
  queue = queue.then(async () => {
    try {
      send({ id: request.id, ok: true, value: await handle(request) });
    } catch (err) {
      const e = err instanceof Error ? err : new Error(String(err));
      send({
        id: request.id,
        ok: false,
        error: { name: e.name, message: e.message, ...(e.stack === undefined ? {} : { stack: e.stack }) },
      });
    }
  });
});

// The parent is gone (crashed or killed): nobody will ever tell this client what to do.
process.on("disconnect", () => process.exit(0));
