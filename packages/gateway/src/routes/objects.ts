import { pipeline } from "node:stream/promises";
import { Router, type Request, type Response } from "express";
import type { ObjectStore } from "@fenced/store";
import { assertContentType, OBJECT_VERSION } from "@fenced/store/internal";
import { answerWrite, authorizeKey, writeOptions } from "./access.js";
import { clientGone } from "../http/client-gone.js";
import { markWrite, keyMethods, type RouteContext } from "./context.js";
import { HttpProblem } from "../problems/problem.js";
import { readSmall, streamUpload } from "../http/request-body.js";
import { encodeHeaderText, etag } from "../schemas/validation.js";

const DEFAULT_CONTENT_TYPE = "application/octet-stream";

/**
 * /v1/objects/{key}: bodies in ObjectStore, streamed both ways. The checks run in the same order as for
 * records, all before the store is called; the store then reads the fence and the manifest before it
 * reads the body, so a stale writer's body is never read (nor, with Expect: 100-continue, sent).
 */
export function objectsRouter(ctx: RouteContext, store: ObjectStore): Router {
  const router = Router({ caseSensitive: true, strict: true });

  const get = async (req: Request, res: Response): Promise<void> => {
    const { key } = authorizeKey(ctx, req, res);
    const object = await ctx.metrics.time("objects", "get", () => store.get(key, { signal: clientGone(res) }));
    if (object === undefined) throw new HttpProblem("notFound", `no object under ${JSON.stringify(key)}`);
    res.setHeader("ETag", etag(object.version));
    res.setHeader("Fencing-Token", object.token.toString());
    res.setHeader("Fencing-Resource", encodeHeaderText(object.resource));
    // The holder of the lease that wrote this version (public): absent for a fence without one.
    if (object.holder !== null) res.setHeader("Fencing-Holder", object.holder);
    res.setHeader("Content-Type", object.contentType ?? DEFAULT_CONTENT_TYPE);
    if (object.size !== undefined) res.setHeader("Content-Length", String(object.size));
    if (req.method === "HEAD") {
      // The body holds an S3 connection: give it back rather than read bytes nobody will see.
      object.body.destroy();
      res.end();
      return;
    }
    res.status(200);
    // Backpressure end to end: S3 is read only as fast as the client reads the response.
    await pipeline(object.body, res);
  };

  const put = async (req: Request, res: Response): Promise<void> => {
    markWrite(res, "objects", "put");
    const { principal, key } = authorizeKey(ctx, req, res);
    const options = writeOptions(ctx, req, res, principal, key, OBJECT_VERSION);
    const contentType = req.headers["content-type"] ?? DEFAULT_CONTENT_TYPE;
    assertContentType(contentType);
    const encoding = req.headers["content-encoding"];
    // Stored bytes are served back as they are: an encoded body would come back without its encoding.
    if (encoding !== undefined && encoding.toLowerCase() !== "identity")
      throw new HttpProblem("mediaType", "Content-Encoding is not supported; send the bytes to store");
    const announced = req.headers["content-length"];
    // Node's parser has already refused a malformed Content-Length (and one sent with chunked encoding).
    const length = announced === undefined ? (req.headers["transfer-encoding"] === undefined ? 0 : undefined) : Number(announced);
    if (length !== undefined && length > ctx.limits.objectBytes)
      throw new HttpProblem("tooLarge", `body: ${length} bytes, at most ${ctx.limits.objectBytes}`);

    let result;
    if (length !== undefined && length <= ctx.limits.inlineBytes) {
      const bytes = await readSmall(req, res, length);
      result = await ctx.metrics.time("objects", "put", () => store.put(key, bytes, { ...options, contentType }));
    } else {
      const upload = streamUpload(req, res, ctx.limits.objectBytes);
      try {
        result = await ctx.metrics.time("objects", "put", () =>
          store.put(key, upload.body, { ...options, contentType, ...(length === undefined ? {} : { contentLength: length }) }),
        );
      } catch (err) {
        upload.abandon();
        // Whatever the store made of the destroyed stream, the cause was the size.
        if (upload.tooLarge()) throw new HttpProblem("tooLarge", `body: more than ${ctx.limits.objectBytes} bytes`);
        throw err;
      }
    }
    answerWrite(res, result, 200);
  };

  const remove = async (req: Request, res: Response): Promise<void> => {
    markWrite(res, "objects", "delete");
    const { principal, key } = authorizeKey(ctx, req, res);
    const options = writeOptions(ctx, req, res, principal, key, OBJECT_VERSION);
    // A tombstone: the key's ratchet survives the delete (PROTOCOL.md, "Tombstones").
    const result = await ctx.metrics.time("objects", "delete", () => store.delete(key, options));
    answerWrite(res, result, 204);
  };

  router.use(keyMethods({ get, put, remove }));
  return router;
}
