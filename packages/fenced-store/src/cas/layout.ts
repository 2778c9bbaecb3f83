import { createHash, randomBytes } from "node:crypto";
import { keyProblem } from "@fenced/fence/internal";
import { OBJECT_VERSION } from "../versions.js";

/**
 * Where a store of the algorithm keeps what (S3: objects; DynamoDB: items named so, with no data):
 *
 *   <prefix>manifests/<key>                     one per key: the compare-and-swapped pointer (header + inline body)
 *   <prefix>data/<key>/<target>.<dataId>        a body too large to inline: one per manifest attempt, never overwritten
 *   <prefix>fences/<sha256(resource)>           one per resource: the highest token registered and its holder
 *
 * A data object's name says which manifest its attempt was sent against (`target`: that manifest's
 * writeId, or `absent` for a create), so whether any manifest can still come to name it can be
 * decided from its name and the key's current manifest alone (`mayBeNamed`, manifest.ts).
 *
 * Every name is an injective function of its parts: the folders differ, a key follows its folder
 * verbatim, and a data object's last segment has no '/'. With a valid key (well-formed, so its UTF-8
 * bytes are distinct too: @fenced/fence's keyProblem), two distinct keys never share an object.
 */

/** 128 random bits, hex: names a write (version) or a data object. */
export function newId(): string {
  return randomBytes(16).toString("hex");
}

export function manifestKey(prefix: string, key: string): string {
  return `${prefix}manifests/${key}`;
}

/** The target of a create: the attempt lands only while the key has no manifest. */
const ABSENT = "absent";

/**
 * The data object of one manifest attempt. `target` is the writeId of the manifest the attempt is
 * sent against (null: a create). The last segment never contains '/', so (key, name) pairs never collide.
 */
export function dataKey(prefix: string, key: string, target: string | null, dataId: string): string {
  return `${dataPrefix(prefix)}${key}/${target ?? ABSENT}.${dataId}`;
}

/** The folder every data object of the store lives under. */
export function dataPrefix(prefix: string): string {
  return `${prefix}data/`;
}

/**
 * The key a data object belongs to, read back from its name: everything between `<prefix>data/` and
 * the LAST '/' (the attempt's name, `<target>.<dataId>`, never contains one). Undefined for a name
 * the store cannot have written there (no '/', or what precedes it is not a valid key). Listing
 * `<prefix>data/<key>/` instead also finds the objects of every key `<key>/…`: judged against the
 * manifest of `<key>`, their current bodies would look unnamed.
 */
export function keyOfData(prefix: string, dataObjectKey: string): string | undefined {
  const folder = dataPrefix(prefix);
  if (!dataObjectKey.startsWith(folder)) return undefined;
  const last = dataObjectKey.lastIndexOf("/");
  if (last < folder.length) return undefined;
  const key = dataObjectKey.slice(folder.length, last);
  return keyProblem(key) === undefined ? key : undefined;
}

/** `<target>.<dataId>`: the target a writeId (or `absent`), the data id a fresh id, both as newId() makes them. */
const ID = OBJECT_VERSION.source.slice(1, -1);
const DATA_NAME = new RegExp(`^(${ABSENT}|${ID})\\.${ID}$`);

/**
 * The attempt target a data object's name records: a writeId, null for a create, or undefined for a
 * name without one (written by a format /1 writer, which named one object for all its attempts).
 */
export function targetOf(dataObjectKey: string): string | null | undefined {
  const match = DATA_NAME.exec(dataObjectKey.slice(dataObjectKey.lastIndexOf("/") + 1));
  if (match === null) return undefined;
  return match[1] === ABSENT ? null : match[1];
}

/**
 * Resources are arbitrary strings of up to 512 characters, which may not fit S3's 1024-byte key limit
 * once encoded; a hash always does. The fence body names the resource, so a collision would be detected.
 */
export function fenceKey(prefix: string, resource: string): string {
  return `${prefix}fences/${createHash("sha256").update(resource, "utf8").digest("hex")}`;
}

export function probeKeyPrefix(prefix: string): string {
  return `${prefix}probe/`;
}

/** The two objects verify() may create: `<probe>/<id>`, and `<id>-missing` (created only by a backend that fails it). */
const PROBE_NAME = /^[0-9a-f]{32}(-missing)?$/;

/** Whether this is an object verify() writes (a leftover once the verify() that wrote it is over). */
export function isProbe(prefix: string, objectKey: string): boolean {
  const folder = probeKeyPrefix(prefix);
  return objectKey.startsWith(folder) && PROBE_NAME.test(objectKey.slice(folder.length));
}
