import { once } from "node:events";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { createServer, request as httpRequest, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startPostgres, type StartedPostgres } from "@fenced/servers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runCli, startCli } from "./cli-test-support.js";
import { KEYS } from "./test-support.js";

/**
 * `fenced-gateway --otlp` exports its spans over OTLP/HTTP, configured by the standard OTEL_*
 * variables, to a receiver written here (no collector is needed): a node:http server that decodes the
 * JSON protocol (OTEL_EXPORTER_OTLP_PROTOCOL=http/json) it is sent. The spans of the last requests are
 * flushed when the gateway stops.
 */

/** OTLP/JSON as the receiver decodes it (ids in hex, attributes as typed values). */
interface OtlpValue {
  readonly stringValue?: string;
  readonly intValue?: string | number;
}
interface OtlpSpan {
  readonly traceId: string;
  readonly spanId: string;
  readonly parentSpanId?: string;
  readonly name: string;
  readonly kind: number;
  readonly attributes: readonly { key: string; value: OtlpValue }[];
}
interface OtlpExport {
  readonly resourceSpans: readonly {
    readonly resource: { readonly attributes: readonly { key: string; value: OtlpValue }[] };
    readonly scopeSpans: readonly { readonly scope: { name: string }; readonly spans: readonly OtlpSpan[] }[];
  }[];
}

const received: { path: string; contentType: string | undefined; body: OtlpExport }[] = [];
let receiver: Server;
let receiverUrl: string;
let postgres: StartedPostgres;
let dir: string;
let configFile: string;

beforeAll(async () => {
  receiver = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      received.push({
        path: req.url ?? "",
        contentType: req.headers["content-type"],
        body: JSON.parse(Buffer.concat(chunks).toString("utf8")) as OtlpExport,
      });
      res.writeHead(200, { "content-type": "application/json" }).end("{}");
    });
  });
  receiver.listen(0, "127.0.0.1");
  await once(receiver, "listening");
  receiverUrl = `http://127.0.0.1:${(receiver.address() as { port: number }).port}`;
  postgres = await startPostgres();
  dir = await mkdtemp(join(tmpdir(), "fenced-otlp-"));
  configFile = join(dir, "gateway.json");
  await writeFile(configFile, JSON.stringify({ apiKeys: [{ id: "admin", key: KEYS.admin, resources: [""], keys: [""] }] }));
});
afterAll(async () => {
  receiver?.close();
  await postgres?.stop();
  if (dir !== undefined) await rm(dir, { recursive: true, force: true });
});

const text = (attributes: readonly { key: string; value: OtlpValue }[], key: string): string | undefined =>
  attributes.find((a) => a.key === key)?.value.stringValue;

describe("fenced-gateway --otlp", () => {
  it("exports each request's span tree to the OTLP/HTTP endpoint the OTEL_* variables name, flushed at the stop", async () => {
    const child = startCli(["--port", "0", "--postgres", postgres.url, "--otlp"], {
      FENCED_GATEWAY_CONFIG: configFile,
      OTEL_EXPORTER_OTLP_ENDPOINT: receiverUrl,
      OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
      OTEL_SERVICE_NAME: "gateway-under-test",
    });
    try {
      expect(await child.waitFor("exporting traces over OTLP/HTTP")).toMatchObject({ protocol: "http/json" });
      const port = Number((await child.waitFor("listening")).port);
      const traceId = "4bf92f3577b34da6a3ce929d0e0e4736";
      const parent = "00f067aa0ba902b7";
      const answer = await new Promise<{ status: number; requestId: string }>((resolve, reject) => {
        const req = httpRequest(
          {
            port,
            path: "/v1/records/otlp/none",
            headers: { authorization: `Bearer ${KEYS.admin}`, traceparent: `00-${traceId}-${parent}-01` },
          },
          (res) => {
            res.resume();
            res.on("end", () => resolve({ status: res.statusCode ?? 0, requestId: String(res.headers["x-request-id"]) }));
          },
        );
        req.on("error", reject);
        req.end();
      });
      expect(answer.status).toBe(404);

      child.process.kill("SIGTERM");
      expect(await child.exited).toBe(0);
      expect(received.length, child.stderr()).toBeGreaterThan(0);
      for (const r of received) expect(r).toMatchObject({ path: "/v1/traces", contentType: "application/json" });

      const batches = received.flatMap((r) => r.body.resourceSpans);
      for (const b of batches) expect(text(b.resource.attributes, "service.name")).toBe("gateway-under-test");
      const spans = batches.flatMap((b) => b.scopeSpans.flatMap((s) => s.spans)).filter((s) => s.traceId === traceId);
      const request = spans.find((s) => s.name === "GET records");
      expect(request, JSON.stringify(spans.map((s) => s.name))).toBeDefined();
      // SERVER (2), a child of the client's span, named by the answer's request id.
      expect(request).toMatchObject({ kind: 2, parentSpanId: parent });
      expect(text(request?.attributes ?? [], "fenced.request_id")).toBe(answer.requestId);
      expect(text(request?.attributes ?? [], "fenced.outcome")).toBe("not-found");
      const get = spans.find((s) => s.name === "fenced.store.get");
      expect(get?.parentSpanId).toBe(request?.spanId);
      expect(text(get?.attributes ?? [], "fenced.key")).toBe("otlp/none");
      const statement = spans.find((s) => s.parentSpanId === get?.spanId);
      expect(statement?.name).toBe("postgresql get");
      expect(text(statement?.attributes ?? [], "db.system.name")).toBe("postgresql");
    } finally {
      if (child.process.exitCode === null) child.process.kill("SIGKILL");
    }
  });

  it("a collector that refuses the last spans at the stop is a warning: the drain's exit code stands", async () => {
    // A port nothing listens on: every export is refused.
    const closed = createServer();
    closed.listen(0, "127.0.0.1");
    await once(closed, "listening");
    const endpoint = `http://127.0.0.1:${(closed.address() as { port: number }).port}`;
    closed.close();
    const child = startCli(["--port", "0", "--postgres", postgres.url, "--otlp"], {
      FENCED_GATEWAY_CONFIG: configFile,
      OTEL_EXPORTER_OTLP_ENDPOINT: endpoint,
      OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
    });
    try {
      const port = Number((await child.waitFor("listening")).port);
      // One request, so that there is a span to export at the stop.
      await new Promise<void>((resolve, reject) =>
        httpRequest({ port, path: "/livez" }, (res) => res.resume().on("end", resolve))
          .on("error", reject)
          .end(),
      );
      child.process.kill("SIGTERM");
      expect(await child.exited, child.stderr()).toBe(0);
      expect(child.lines.find((l) => l.msg === "the last spans were not exported: the collector did not take them")).toMatchObject({
        level: 40,
      });
      expect(child.stderr()).not.toMatch(/Uncaught|ECONNREFUSED/);
    } finally {
      if (child.process.exitCode === null) child.process.kill("SIGKILL");
    }
  });

  it("a protocol it cannot export with is refused at the start: one line, exit 2", async () => {
    const run = await runCli(["--otlp", "--postgres", postgres.url], {
      FENCED_GATEWAY_CONFIG: configFile,
      OTEL_EXPORTER_OTLP_PROTOCOL: "grpc",
    });
    expect(run.code, run.stderr).toBe(2);
    expect(run.stderr).toMatch(/^fenced-gateway: invalid configuration: .*OTEL_EXPORTER_OTLP_PROTOCOL.*grpc.*http\/protobuf or http\/json/);
  });
});
