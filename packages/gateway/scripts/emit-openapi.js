// Writes dist/openapi.json — the API document of a gateway with the default limits — once tsc has
// compiled dist/ (the package's build and prepack run it). Published as "@fenced/gateway/openapi.json".
import { writeFileSync } from "node:fs";
import { URL } from "node:url";
import { openApiDocument } from "../dist/openapi/document.js";

writeFileSync(new URL("../dist/openapi.json", import.meta.url), `${JSON.stringify(openApiDocument(), null, 2)}\n`);
