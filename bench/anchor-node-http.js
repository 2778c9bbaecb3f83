// The floor under any Node HTTP server of these writes: the same bearer check and upsert as the express
// anchor behind bare node:http, no framework — the body read whole and JSON.parse'd, a JSON answer.
import { createServer } from "node:http";
import { handleWrite, listen } from "./anchor-pg.js";

listen(createServer((req, res) => void handleWrite(req, res)));
