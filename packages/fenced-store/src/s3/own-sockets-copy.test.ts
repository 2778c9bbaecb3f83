import { Agent as HttpsAgent } from "node:https";
import { S3Client } from "@aws-sdk/client-s3";
import { describe, expect, it } from "vitest";
import { memoryS3Client, radosgwProfile } from "./memory-s3-test-support.js";
import { ownHandler } from "../aws/own-sockets.js";

// What own-sockets.ts copies of a client's handler, and when it does not (PROTOCOL.md, "S3", "The
// write", step 7). The copy's requests are what own-sockets.test.ts sends to radosgw; here, over
// HTTPS (AWS's endpoints), where nothing listens: an aborted request resolves a handler's
// configuration without a connection.

interface Configured {
  handle(request: object, options: { abortSignal: AbortSignal }): Promise<unknown>;
  httpHandlerConfigs(): { httpsAgent?: HttpsAgent & { options: Record<string, unknown> } };
}

/** Makes the handler resolve its configuration (it does at its first request), sending nothing. */
async function configure(handler: unknown): Promise<Configured> {
  const h = handler as Configured;
  const request = { protocol: "https:", hostname: "127.0.0.1", port: 9, method: "PUT", path: "/", headers: {} };
  await h.handle(request, { abortSignal: AbortSignal.abort() }).catch(() => undefined);
  return h;
}

const client = (httpsAgent?: HttpsAgent): S3Client =>
  new S3Client({
    region: "us-east-1",
    endpoint: "https://127.0.0.1:9",
    credentials: { accessKeyId: "a", secretAccessKey: "b" },
    ...(httpsAgent === undefined ? {} : { requestHandler: { httpsAgent } }),
  });

describe("own-sockets: a copy of the client's handler for conditional PUTs", () => {
  it("over HTTPS: the client's agent's options (TLS included) without its socket limit, once the client's handler is configured", async () => {
    const c = client(new HttpsAgent({ keepAlive: true, maxSockets: 3, ca: "a CA of the caller's", servername: "s3.internal" }));
    expect(ownHandler(c, "https:")).toBeUndefined(); // nothing resolved yet: the client's handler is used
    await configure(c.config.requestHandler);
    const own = ownHandler(c, "https:");
    expect(own).toBeDefined();
    expect(own).not.toBe(c.config.requestHandler);
    expect(ownHandler(c, "https:")).toBe(own); // one copy per client handler
    const agent = (await configure(own)).httpHandlerConfigs().httpsAgent;
    expect(agent).toBeInstanceOf(HttpsAgent);
    expect(agent).not.toBe((c.config.requestHandler as unknown as Configured).httpHandlerConfigs().httpsAgent);
    expect(agent?.maxSockets).toBe(Infinity);
    expect(agent?.options).toMatchObject({ ca: "a CA of the caller's", servername: "s3.internal", keepAlive: true });
    // Its http agent comes from the client's own http agent, made at the first http request only.
    expect(ownHandler(c, "http:")).toBeUndefined();
  });

  it("the SDK's default handler and agent are copied too", async () => {
    const c = client();
    await configure(c.config.requestHandler);
    const agent = (await configure(ownHandler(c, "https:"))).httpHandlerConfigs().httpsAgent;
    expect(agent?.maxSockets).toBe(Infinity);
  });

  it("an agent of another class (a proxy's, say) is not copied: the client's handler is used", async () => {
    class ProxyAgent extends HttpsAgent {}
    const c = client(new ProxyAgent({ keepAlive: true }));
    await configure(c.config.requestHandler);
    expect(ownHandler(c, "https:")).toBeUndefined();
    expect(ownHandler(c, "https:")).toBeUndefined();
  });

  it("a handler that is not the SDK's Node handler as it comes is not copied: the in-memory S3's, a wrapper, a subclass, a replaced handle", async () => {
    expect(ownHandler(memoryS3Client({ profile: radosgwProfile }), "http:")).toBeUndefined();
    const sdk = client();
    const handler = await configure(sdk.config.requestHandler);
    // A wrapper reporting the SDK handler's metadata and configuration, adding to each request.
    const wrapper = {
      metadata: { handlerProtocol: "http/1.1" },
      httpHandlerConfigs: () => handler.httpHandlerConfigs(),
      handle: (request: object, options: { abortSignal: AbortSignal }) => handler.handle(request, options),
    };
    expect(ownHandler(new S3Client({ region: "us-east-1", requestHandler: wrapper as never }), "https:")).toBeUndefined();
    const bare = Object.assign(Object.create(null) as object, wrapper); // no prototype at all
    expect(ownHandler({ config: { requestHandler: bare } }, "https:")).toBeUndefined();
    // A subclass of the SDK's handler.
    const Sdk = handler.constructor as new (options: object) => Configured;
    class Instrumented extends Sdk {}
    const sub = new S3Client({ region: "us-east-1", requestHandler: (await configure(new Instrumented({}))) as never });
    expect(ownHandler(sub, "https:")).toBeUndefined();
    // The SDK's handler with its handle replaced on the instance.
    const replaced = client();
    const own = await configure(replaced.config.requestHandler);
    const original = own.handle.bind(own);
    own.handle = (request, options) => original(request, options);
    expect(ownHandler(replaced, "https:")).toBeUndefined();
  });
});
