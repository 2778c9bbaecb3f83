import { describe, expect, it } from "vitest";
import type { Fence } from "@fenced/fence";
import { mintFenceCredential } from "@fenced/fence/credentials";
import { FenceCredentials } from "./auth/credentials.js";
import { HttpProblem } from "./problems/problem.js";

/** The gateway's check of a fence credential, alone: no server needed. */
describe("fence credentials", () => {
  const key = { id: "current", secret: Buffer.alloc(32, 7) };
  const fence = { resource: "orders/1", token: 7n, holder: "h-1" };
  const refusal = (f: () => unknown): { kind?: string; extensions?: Readonly<Record<string, unknown>> } => {
    try {
      f();
    } catch (err) {
      if (!(err instanceof HttpProblem)) return { kind: String(err) };
      const problem = err as HttpProblem;
      return { kind: problem.kind, extensions: problem.extensions };
    }
    return {};
  };

  it("a credential that verified is refused once its MAC is changed, and once its lease has ended", async () => {
    const credentials = new FenceCredentials([key]);
    const until = Date.now() + 60_000;
    const good = mintFenceCredential(fence, key, { expiresAt: until });
    expect(credentials.verify(good)).toEqual(fence);
    expect(credentials.verify(good)).toEqual(fence);
    const mac = good.slice(good.lastIndexOf(".") + 1);
    const prefix = good.slice(0, good.lastIndexOf(".") + 1);
    // Every other MAC under the same prefix: one character changed, the MAC of another credential, a
    // non-canonical spelling, a truncated or padded one, a non-ASCII lookalike.
    const other = mintFenceCredential({ ...fence, token: 8n }, key, { expiresAt: until });
    for (const forged of [
      `${prefix}${mac[0] === "A" ? "B" : "A"}${mac.slice(1)}`,
      `${prefix}${other.slice(other.lastIndexOf(".") + 1)}`,
      `${prefix}${mac.slice(0, -1)}`,
      `${prefix}${mac}A`,
      `${prefix}${mac}=`,
      `${prefix}${mac.slice(0, -1)}\u0141`,
      prefix.slice(0, -1),
    ]) {
      expect(refusal(() => credentials.verify(forged)).kind, forged).toMatch(/^(invalidCredential|invalid)$/);
    }
    expect(credentials.verify(good)).toEqual(fence);
    // Verified, then past its end: refused as expired.
    const ending = mintFenceCredential(fence, key, { expiresAt: Date.now() + 50 });
    expect(credentials.verify(ending)).toEqual(fence);
    await new Promise((resolve) => setTimeout(resolve, 80));
    expect(refusal(() => credentials.verify(ending)).kind).toBe("credentialExpired");
  });

  it("keeps at most 1,024 verified credentials, the oldest dropped first, and what a hit answers cannot be changed by a caller", () => {
    const credentials = new FenceCredentials([key]);
    const until = Date.now() + 60_000;
    const minted = Array.from({ length: 1_025 }, (_, i) =>
      mintFenceCredential({ ...fence, token: BigInt(i + 1) }, key, { expiresAt: until }),
    );
    const verify = (i: number): Fence => credentials.verify(minted[i] as string);
    // A caller writing to a fence it was given, as a careless route might: allowed or not, it must not stick.
    const scribble = (given: Fence): void => {
      try {
        Object.assign(given, { token: 1_000_000n, holder: "someone else" });
      } catch (err) {
        if (!(err instanceof TypeError)) throw err;
      }
    };
    scribble(verify(0)); // a miss: checked in full, then kept
    const kept = verify(0); // a hit: the one object kept for this text
    scribble(kept);
    expect(verify(0)).toBe(kept);
    expect(kept).toEqual({ ...fence, token: 1n });
    verify(1);
    const second = verify(1);
    for (let i = 2; i < 1_024; i++) verify(i);
    // 1,024 held; one more, and the oldest goes: the first is checked in full again (a new object), the second is still kept.
    expect(verify(0)).toBe(kept);
    verify(1_024);
    expect(verify(1)).toBe(second);
    const again = verify(0);
    expect(again).not.toBe(kept);
    expect(again).toEqual({ ...fence, token: 1n });
  });

  it("a credential's first verification answers the frozen object every later one answers", () => {
    const credentials = new FenceCredentials([key]);
    const credential = mintFenceCredential(fence, key, { expiresAt: Date.now() + 60_000 });
    const first = credentials.verify(credential);
    expect(Object.isFrozen(first)).toBe(true);
    expect(credentials.verify(credential)).toBe(first);
    expect(first).toEqual(fence);
  });

  it("a key it does not hold is refused, whoever else verified the credential", () => {
    const other = { id: "other", secret: Buffer.alloc(32, 9) };
    const credential = mintFenceCredential(fence, other, { expiresAt: Date.now() + 60_000 });
    expect(new FenceCredentials([other, key]).verify(credential)).toEqual(fence);
    expect(refusal(() => new FenceCredentials([key]).verify(credential))).toMatchObject({
      kind: "invalidCredential",
      extensions: { reason: "unknown-key" },
    });
  });
});
