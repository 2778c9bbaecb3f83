import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { ERROR_CODES, FencedError } from "./index.js";
import { ERROR_CODE_LIST } from "./internal.js";
import { InvalidArgumentError } from "./errors.js";

const README = readFileSync(new URL("../README.md", import.meta.url), "utf8");

describe("ERROR_CODES", () => {
  it("is what the README's table of errors lists, row for row: code, class, applied", () => {
    const rows = [...README.matchAll(/^\| `([A-Z_]+)` \| `(\w+)` \| `(no|unknown)`(, or `no`)? \|/gm)].map((m) => [
      m[1],
      m[2],
      m[4] === undefined ? m[3] : "either",
    ]);
    expect(rows).toEqual(ERROR_CODE_LIST.map((code) => [code, ERROR_CODES[code].thrownBy, ERROR_CODES[code].applied]));
  });

  it("codes are upper-case words joined by _", () => {
    for (const code of ERROR_CODE_LIST) expect(code).toMatch(/^[A-Z]+(_[A-Z]+)*$/);
  });

  it("InvalidArgumentError is a TypeError and a FencedError, with the table's applied", () => {
    const err = new InvalidArgumentError("token", "must be a bigint");
    expect(err).toBeInstanceOf(TypeError);
    expect(err).toBeInstanceOf(FencedError);
    expect([err.code, err.applied, err.message]).toEqual(["INVALID_ARGUMENT", "no", "token: must be a bigint"]);
    expect(new RangeError("x")).not.toBeInstanceOf(FencedError);
    expect(null).not.toBeInstanceOf(FencedError);
  });
});
