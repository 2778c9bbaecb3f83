import { context, propagation, trace } from "@opentelemetry/api";
import type { Sampler, SpanProcessor, TracerProvider } from "@opentelemetry/sdk-trace";
import type { Logger } from "pino";
import { InvalidArgumentError } from "@fenced/fence";
import { GATEWAY_VERSION } from "../version.js";

/**
 * OTLP/HTTP trace export for the `fenced-gateway` process, configured as every OpenTelemetry SDK is,
 * by the standard variables: OTEL_EXPORTER_OTLP_ENDPOINT (or _TRACES_ENDPOINT), _HEADERS, _TIMEOUT,
 * OTEL_EXPORTER_OTLP_PROTOCOL (or _TRACES_PROTOCOL: http/protobuf, the default, or http/json),
 * OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER (and _ARG). On with --otlp or
 * OTEL_TRACES_EXPORTER=otlp; OTEL_SDK_DISABLED=true turns it off whatever else says. The SDK is loaded
 * only then: a gateway that does not export loads none of it, and the spans of the gateway, the lock
 * and the stores stay no-ops (`@opentelemetry/api` without a registered SDK).
 */

/** The variables read here (the exporters read their own OTEL_EXPORTER_OTLP_* too). */
type Environment = Readonly<Record<string, string | undefined>>;

const listed = (value: string | undefined): string[] =>
  (value ?? "")
    .split(",")
    .map((v) => v.trim().toLowerCase())
    .filter((v) => v !== "");

/** Whether traces are exported: --otlp, or OTEL_TRACES_EXPORTER naming otlp; never with OTEL_SDK_DISABLED=true. */
function tracingWanted(flag: boolean, env: Environment): boolean {
  if (env.OTEL_SDK_DISABLED?.trim().toLowerCase() === "true") return false;
  return flag || listed(env.OTEL_TRACES_EXPORTER).includes("otlp");
}

const PROTOCOLS = ["http/protobuf", "http/json"] as const;
type Protocol = (typeof PROTOCOLS)[number];

function protocolOf(env: Environment): Protocol {
  const given = (env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL ?? env.OTEL_EXPORTER_OTLP_PROTOCOL ?? "http/protobuf").trim();
  if ((PROTOCOLS as readonly string[]).includes(given)) return given as Protocol;
  throw new InvalidArgumentError(
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    `${JSON.stringify(given)} is not a protocol the gateway exports with: use http/protobuf or http/json (OTLP over HTTP; gRPC is not included)`,
  );
}

/** The sampler OTEL_TRACES_SAMPLER names (default parentbased_always_on: a client's sampled flag decides, else every request). */
async function samplerOf(env: Environment): Promise<Sampler> {
  const { AlwaysOffSampler, AlwaysOnSampler, ParentBasedSampler, TraceIdRatioBasedSampler } = await import("@opentelemetry/sdk-trace");
  const name = env.OTEL_TRACES_SAMPLER?.trim().toLowerCase() || "parentbased_always_on";
  const ratio = Number(env.OTEL_TRACES_SAMPLER_ARG ?? "1");
  const root = (which: string): Sampler => {
    if (which === "always_on") return new AlwaysOnSampler();
    if (which === "always_off") return new AlwaysOffSampler();
    if (which === "traceidratio" && ratio >= 0 && ratio <= 1) return new TraceIdRatioBasedSampler(ratio);
    throw new InvalidArgumentError(
      "OTEL_TRACES_SAMPLER",
      `${JSON.stringify(name)} (with OTEL_TRACES_SAMPLER_ARG ${JSON.stringify(env.OTEL_TRACES_SAMPLER_ARG ?? "")}) is not a sampler the gateway knows: use always_on, always_off, traceidratio (ARG between 0 and 1) or parentbased_ before one of them`,
    );
  };
  return name.startsWith("parentbased_") ? new ParentBasedSampler({ root: root(name.slice("parentbased_".length)) }) : root(name);
}

/** A running export: flush() sends what is buffered, shutdown() flushes and stops. */
interface Tracing {
  readonly protocol: Protocol;
  flush(): Promise<void>;
  shutdown(): Promise<void>;
}

/**
 * Registers the SDK globally with these span processors: the tracer provider (the gateway's
 * resource, unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES say otherwise), the
 * AsyncLocalStorage context manager (a span stays the parent across awaits) and the W3C
 * trace-context and baggage propagators (a client's `traceparent` is honoured).
 */
export async function registerTracing(spanProcessors: SpanProcessor[], env: Environment): Promise<TracerProvider> {
  const [sdk, { AsyncLocalStorageContextManager }, core, resources] = await Promise.all([
    import("@opentelemetry/sdk-trace"),
    import("@opentelemetry/context-async-hooks"),
    import("@opentelemetry/core"),
    import("@opentelemetry/resources"),
  ]);
  const resource = resources
    .defaultResource()
    .merge(resources.resourceFromAttributes({ "service.name": "fenced-gateway", "service.version": GATEWAY_VERSION }))
    .merge(resources.detectResources({ detectors: [resources.envDetector] }));
  const provider = new sdk.TracerProvider({ resource, sampler: await samplerOf(env), spanProcessors });
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  propagation.setGlobalPropagator(
    new core.CompositePropagator({ propagators: [new core.W3CTraceContextPropagator(), new core.W3CBaggagePropagator()] }),
  );
  trace.setGlobalTracerProvider(provider);
  return provider;
}

/**
 * The SDK registered with a batching OTLP/HTTP exporter, if wanted; undefined otherwise.
 * InvalidArgumentError for a protocol or sampler it cannot use (the CLI: one line, exit 2).
 */
async function startTracing(flag: boolean, env: Environment): Promise<Tracing | undefined> {
  if (!tracingWanted(flag, env)) return undefined;
  const protocol = protocolOf(env);
  const [{ BatchSpanProcessor }, exporters] = await Promise.all([
    import("@opentelemetry/sdk-trace"),
    protocol === "http/json" ? import("@opentelemetry/exporter-trace-otlp-http") : import("@opentelemetry/exporter-trace-otlp-proto"),
  ]);
  const provider = await registerTracing([new BatchSpanProcessor({ exporter: new exporters.OTLPTraceExporter() })], env);
  return { protocol, flush: () => provider.forceFlush(), shutdown: () => provider.shutdown() };
}

/**
 * The CLI's: tracing started when wanted, said in the log, and flushed once the process has no work
 * left (after the drain and the backends' close), so that the last requests' spans are sent.
 */
export async function startProcessTracing(flag: boolean, env: Environment, logger: Logger): Promise<void> {
  const tracing = await startTracing(flag, env);
  if (tracing === undefined) return;
  logger.info({ protocol: tracing.protocol }, "exporting traces over OTLP/HTTP");
  process.once("beforeExit", () => void flushAtStop(tracing, logger));
}

/** The longest the last spans may hold up a stop: the drain's timeout plus this must stay under a service manager's stop timeout. */
const STOP_FLUSH_MS = 3_000;

/**
 * The last spans sent, at most STOP_FLUSH_MS: a collector that refuses them is a warning, not a crash
 * (the export's rejection would otherwise be unhandled, and the stop's exit code 1); one that does not
 * answer leaves them unsent and the process exits with the code the stop set.
 */
async function flushAtStop(tracing: Tracing, logger: Logger): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<"late">((resolve) => (timer = setTimeout(() => resolve("late"), STOP_FLUSH_MS)));
  const outcome = await Promise.race([
    tracing.shutdown().then(
      () => "sent" as const,
      (err: unknown) => err,
    ),
    late,
  ]);
  clearTimeout(timer);
  if (outcome === "sent") return;
  logger.warn(
    outcome === "late" ? { ms: STOP_FLUSH_MS } : { err: outcome },
    "the last spans were not exported: the collector did not take them",
  );
  // Nothing else is left to do: an export still waiting for its answer must not hold the process.
  if (outcome === "late") process.exit();
}
