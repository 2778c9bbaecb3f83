import { createHmac, randomBytes } from "node:crypto";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { CREDENTIAL_VERSION, CredentialError, ExpiredCredentialError, mintFenceCredential, verifyFenceCredential } from "./credential.js";
import { credentialKeys, seal, type CredentialKey } from "./sealed.js";
import { InvalidArgumentError } from "./errors.js";
import { CONTROL_CHARACTER, MAX_TOKEN } from "./rules.js";

const current: CredentialKey = { id: "k2", secret: randomBytes(32) };
const previous: CredentialKey = { id: "k1", secret: randomBytes(48) };
const keys = credentialKeys([current, previous]);

const resource = fc.string({ unit: "grapheme", minLength: 1, maxLength: 40 }).filter((s) => !CONTROL_CHARACTER.test(s));
const holder = fc.stringMatching(/^[A-Za-z0-9._:-]{1,128}$/);
const fence = fc.record({ resource, token: fc.bigInt({ min: 0n, max: MAX_TOKEN }), holder });
/** Far enough ahead that no run reaches it; the tests of the end set their own. */
const LATER = Date.now() + 3_600_000;
const mint = (f: Parameters<typeof mintFenceCredential>[0], key: CredentialKey, expiresAt = LATER): string =>
  mintFenceCredential(f, key, { expiresAt });

function code(f: () => unknown): string {
  try {
    f();
  } catch (err) {
    if (err instanceof CredentialError) return err.problem;
    throw err;
  }
  return "accepted";
}

describe("fence credentials", () => {
  it("carry HMAC-SHA256(secret, domain + key id + payload) as sealed.ts documents it, computed here from the raw bytes", () => {
    const credential = mint({ resource: "orders/1", token: 7n, holder: "h-1" }, current);
    const [version, keyId, payload, mac] = credential.split(".") as [string, string, string, string];
    expect([version, keyId]).toEqual([CREDENTIAL_VERSION, current.id]);
    const expected = createHmac("sha256", Buffer.from(current.secret))
      .update(`fenced-fence-credential/2\n${current.id}\n`)
      .update(Buffer.from(payload, "base64url"))
      .digest("base64url");
    expect(mac).toBe(expected);
  });

  it("verify to exactly the fence they were minted for, under the key that signed them", () => {
    fc.assert(
      fc.property(fence, fc.constantFrom(current, previous), (f, key) => {
        const verified = verifyFenceCredential(mint(f, key), keys);
        expect(verified).toEqual({ fence: f, expiresAt: LATER, keyId: key.id });
      }),
    );
  });

  it("any altered, truncated, extended or re-ordered credential is refused", () => {
    fc.assert(
      fc.property(fence, fc.nat(), fc.integer({ min: 0, max: 63 }), (f, at, bit) => {
        const good = mint(f, current);
        const i = at % good.length;
        const flipped = String.fromCharCode(good.charCodeAt(i) ^ (1 << (bit % 7)));
        const altered = good.slice(0, i) + flipped + good.slice(i + 1);
        if (altered !== good) expect(code(() => verifyFenceCredential(altered, keys))).not.toBe("accepted");
        expect(code(() => verifyFenceCredential(good.slice(0, i), keys))).not.toBe("accepted");
        expect(code(() => verifyFenceCredential(`${good}A`, keys))).not.toBe("accepted");
        const [v, id, payload, mac] = good.split(".") as [string, string, string, string];
        expect(code(() => verifyFenceCredential([v, id, mac, payload].join("."), keys))).not.toBe("accepted");
      }),
      { numRuns: 300 },
    );
  });

  it("a fence grafted from another credential, or another resource's payload, does not verify", () => {
    const a = mint({ resource: "orders/42", token: 34n, holder: "h1" }, current).split(".");
    const b = mint({ resource: "orders/42-x", token: 9223372036854775807n, holder: "h1" }, current).split(".");
    expect(code(() => verifyFenceCredential([a[0], a[1], b[2], a[3]].join("."), keys))).toBe("bad-signature");
    // The same payload re-signed under a key id that is configured but is not the one that signed it.
    expect(code(() => verifyFenceCredential([a[0], "k1", a[2], a[3]].join("."), keys))).toBe("bad-signature");
  });

  it("a key that is not configured (unknown, or retired after rotation) is refused; a configured previous key still verifies", () => {
    const old = mint({ resource: "r", token: 1n, holder: "h" }, previous);
    expect(verifyFenceCredential(old, keys).keyId).toBe("k1");
    const retired = credentialKeys([current]);
    expect(code(() => verifyFenceCredential(old, retired))).toBe("unknown-key");
    const stranger = mint({ resource: "r", token: 1n, holder: "h" }, { id: "k9", secret: randomBytes(32) });
    expect(code(() => verifyFenceCredential(stranger, keys))).toBe("unknown-key");
    // Same id, another secret (a forger who guessed the id).
    const forged = mint({ resource: "r", token: 1n, holder: "h" }, { id: "k2", secret: randomBytes(32) });
    expect(code(() => verifyFenceCredential(forged, keys))).toBe("bad-signature");
  });

  it("non-canonical base64url and other shapes are malformed", () => {
    const good = mint({ resource: "r", token: 1n, holder: "h" }, current);
    for (const bad of [
      "",
      "fc1",
      "fc1.k2..",
      "fc1" + good.slice(3),
      "fc3" + good.slice(3),
      good.replace(/\.([^.]*)$/, ".$1="),
      good + ".x",
      42,
      null,
      "x".repeat(5000),
    ]) {
      expect(
        code(() => verifyFenceCredential(bad, keys)),
        String(bad).slice(0, 40),
      ).toBe("malformed");
    }
  });

  it("minting needs a holder, a lease's end and a strong secret; configuring needs distinct ids", () => {
    expect(() => mint({ resource: "r", token: 1n }, current)).toThrow(InvalidArgumentError);
    expect(() => mintFenceCredential({ resource: "r", token: 1n, holder: "h" }, current)).toThrow(/lease's end/);
    for (const bad of [-1, 1.5, Number.MAX_SAFE_INTEGER + 1, NaN])
      expect(() => mint({ resource: "r", token: 1n, holder: "h" }, current, bad), String(bad)).toThrow(InvalidArgumentError);
    expect(() => mintFenceCredential({ resource: "r", token: 1n, holder: "h" }, { id: "k", secret: randomBytes(31) })).toThrow(
      InvalidArgumentError,
    );
    expect(() => credentialKeys([current, { id: "k2", secret: randomBytes(32) }])).toThrow(/duplicate/);
    expect(() => credentialKeys([{ id: "bad id", secret: randomBytes(32) }])).toThrow(InvalidArgumentError);
    // The configured copies cannot be edited into another id or secret under their cached HMAC key.
    for (const copy of keys.values()) expect(Object.isFrozen(copy)).toBe(true);
  });

  it("a credential carries its lease's end: accepted up to it, refused as expired after it, the end cannot be edited", () => {
    const lease = { resource: "orders/42", token: 34n, holder: "h1", validUntil: 1_800_000_000_000 };
    const credential = mintFenceCredential(lease, current);
    expect(verifyFenceCredential(credential, keys, lease.validUntil).expiresAt).toBe(lease.validUntil);
    let refused: unknown;
    try {
      verifyFenceCredential(credential, keys, lease.validUntil + 1);
    } catch (err) {
      refused = err;
    }
    expect(refused).toBeInstanceOf(ExpiredCredentialError);
    expect(refused).toMatchObject({ problem: "expired", code: "CREDENTIAL_EXPIRED", applied: "no" });
    expect((refused as ExpiredCredentialError).credential.fence).toEqual({ resource: "orders/42", token: 34n, holder: "h1" });
    // Given both, the earlier end: a credential never outlives the lease it is minted from.
    expect(verifyFenceCredential(mintFenceCredential(lease, current, { expiresAt: 5 }), keys, 5).expiresAt).toBe(5);
    expect(verifyFenceCredential(mintFenceCredential(lease, current, { expiresAt: lease.validUntil + 1 }), keys, 0).expiresAt).toBe(
      lease.validUntil,
    );
    // Moving the end (or anything else in the payload) breaks the signature.
    const [v, id, payload, sig] = credential.split(".") as [string, string, string, string];
    const later = Buffer.from(
      Buffer.from(payload, "base64url")
        .toString("utf8")
        .replace(String(lease.validUntil), String(lease.validUntil * 2)),
      "utf8",
    ).toString("base64url");
    expect(code(() => verifyFenceCredential([v, id, later, sig].join("."), keys, 0))).toBe("bad-signature");
    // An expired forgery is a forgery: the end is judged only once the signature verified.
    expect(code(() => verifyFenceCredential(mint(lease, { id: "k2", secret: randomBytes(32) }, 1), keys))).toBe("bad-signature");
  });

  it("a string sealed for another purpose under the same key (another domain) never verifies as a credential; nothing unreadable is sealed", () => {
    expect(() => seal({ version: "x1", domain: "d", fields: 2 }, ["a\nb", "c"], current)).toThrow(InvalidArgumentError);
    expect(() => seal({ version: "x1", domain: "d", fields: 2 }, ["a"], current)).toThrow(InvalidArgumentError);
    const other = seal(
      { version: CREDENTIAL_VERSION, domain: "fenced-lease-id/1", fields: 4 },
      ["34", "h1", String(LATER), "orders/42"],
      current,
    );
    expect(code(() => verifyFenceCredential(other, keys))).toBe("bad-signature");
  });
});
