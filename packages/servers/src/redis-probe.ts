import { connect } from "node:net";

/**
 * A minimal Redis client for start-up probes. A raw socket keeps probes cheap and predictable:
 * one connection per probe, no reconnect logic, no ready check of its own, no offline queue.
 */
export type RespValue = string | number | null | Error | RespValue[];

/** Parses one reply at `at`; undefined when the buffer does not hold all of it yet. */
function parseReply(buf: string, at: number): [RespValue, number] | undefined {
  const eol = buf.indexOf("\r\n", at);
  if (eol < 0) return undefined;
  const line = buf.slice(at + 1, eol);
  const next = eol + 2;
  switch (buf[at]) {
    case "+":
      return [line, next];
    case "-":
      return [new Error(line), next];
    case ":":
      return [Number(line), next];
    case "$": {
      const len = Number(line);
      if (len < 0) return [null, next];
      // Byte length; the probes only read ASCII replies, so characters are bytes here.
      if (buf.length < next + len + 2) return undefined;
      return [buf.slice(next, next + len), next + len + 2];
    }
    case "*": {
      const count = Number(line);
      if (count < 0) return [null, next];
      const items: RespValue[] = [];
      let pos = next;
      for (let i = 0; i < count; i++) {
        const item = parseReply(buf, pos);
        if (item === undefined) return undefined;
        items.push(item[0]);
        pos = item[1];
      }
      return [items, pos];
    }
    default:
      throw new Error(`unexpected reply from Redis: ${JSON.stringify(buf.slice(at, at + 80))}`);
  }
}

/**
 * Sends inline commands (words separated by spaces, no quoting needed for probe commands)
 * on a fresh connection and resolves with one reply per command. Rejects on connection errors
 * and after timeoutMs, which is what makes a stopped (SIGSTOP) server observable.
 */
export function redisCommands(host: string, port: number, commands: readonly string[], timeoutMs = 1_000): Promise<RespValue[]> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host, port });
    let buf = "";
    const finish = (err: Error | undefined, replies?: RespValue[]): void => {
      clearTimeout(timer);
      socket.destroy();
      if (err !== undefined) reject(err);
      else resolve(replies ?? []);
    };
    const timer = setTimeout(() => finish(new Error(`no reply from ${host}:${port} within ${timeoutMs} ms`)), timeoutMs);
    socket.setEncoding("latin1");
    socket.on("error", (err) => finish(err));
    socket.on("connect", () => socket.write(commands.map((c) => `${c}\r\n`).join("")));
    socket.on("data", (chunk: string) => {
      buf += chunk;
      try {
        const replies: RespValue[] = [];
        let pos = 0;
        while (replies.length < commands.length) {
          const parsed = parseReply(buf, pos);
          if (parsed === undefined) return;
          replies.push(parsed[0]);
          pos = parsed[1];
        }
        finish(undefined, replies);
      } catch (err) {
        finish(err instanceof Error ? err : new Error(String(err)));
      }
    });
  });
}

/** Whether the server answers PING with PONG (not -LOADING); if a pid is given, also that it is that process. */
export async function redisReady(host: string, port: number, pid?: number): Promise<boolean> {
  const [pong, info] = await redisCommands(host, port, ["PING", "INFO server"]);
  if (pong !== "PONG") return false;
  // Another test process may have been handed the same free port a moment earlier; make sure
  // the server that answers is the one this harness started, not a neighbour on that port.
  if (pid === undefined) return true;
  return typeof info === "string" && new RegExp(`^process_id:${pid}\\r?$`, "m").test(info);
}
