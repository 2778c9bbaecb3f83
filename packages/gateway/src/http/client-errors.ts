import type { Socket } from "node:net";
import type { Express } from "express";
import { requestIdOf, REQUEST_ID_HEADER } from "./request-scope.js";

/**
 * HTTP the server could not parse into a request (node:http's `clientError`): answered as Node
 * answers it by itself — a bare status line and `Connection: close`, then the connection is closed —
 * with the request id added, and told to the app's hook (counted and logged, app.ts). A connection
 * the client reset or already closed is not a malformed request: it is closed, not counted.
 */

/** Why a request could not be parsed, as the metric's `reason` label and the log line name it. */
export type MalformedReason = "bad_request" | "headers_too_large" | "chunk_extensions_too_large" | "timeout";

/** The answer Node itself sends for each reason. */
const ANSWERS: Readonly<Record<MalformedReason, string>> = {
  bad_request: "400 Bad Request",
  headers_too_large: "431 Request Header Fields Too Large",
  chunk_extensions_too_large: "413 Payload Too Large",
  timeout: "408 Request Timeout",
};

/** The reason of a parser error, by its code (llhttp's HPE_* and Node's ERR_HTTP_REQUEST_TIMEOUT), as Node's own answer chooses it. */
function reasonOf(code: unknown): MalformedReason {
  switch (code) {
    case "HPE_HEADER_OVERFLOW":
      return "headers_too_large";
    case "HPE_CHUNK_EXTENSIONS_OVERFLOW":
      return "chunk_extensions_too_large";
    case "ERR_HTTP_REQUEST_TIMEOUT":
      return "timeout";
    default:
      return "bad_request";
  }
}

/** What the app does with a malformed request: count it and log it, with the id its answer carried. */
export type MalformedHook = (malformed: { readonly reason: MalformedReason; readonly code: string; readonly requestId: string }) => void;

const hooks = new WeakMap<Express, MalformedHook>();

/** Sets the hook serve() calls for malformed requests reaching this app's server (createGateway). */
export function onMalformed(app: Express, hook: MalformedHook): void {
  hooks.set(app, hook);
}

/** The `clientError` listener of a server serving `app`. */
export function clientErrorListener(app: Express): (err: Error & { code?: unknown }, socket: Socket) => void {
  return (err, socket) => {
    // Reset or closed by the client mid-request: nobody to answer, nothing malformed. Node 24 and 26 say
    // ECONNRESET (or the socket is no longer writable); Node 22 says HPE_INVALID_EOF_STATE, the parser's
    // "input ended inside a message", with the socket still writable.
    if (err.code === "ECONNRESET" || err.code === "HPE_INVALID_EOF_STATE" || !socket.writable) {
      socket.destroy();
      return;
    }
    const reason = reasonOf(err.code);
    const requestId = requestIdOf({});
    // As Node: answered unless a response on this connection has started (node:http's own test, on its `_httpMessage`).
    const current = (socket as { _httpMessage?: { headersSent?: boolean } | null })._httpMessage;
    if (current == null || current.headersSent !== true)
      socket.write(`HTTP/1.1 ${ANSWERS[reason]}\r\n${REQUEST_ID_HEADER}: ${requestId}\r\nConnection: close\r\n\r\n`);
    socket.destroy(err);
    hooks.get(app)?.({ reason, code: typeof err.code === "string" ? err.code : "unknown", requestId });
  };
}
