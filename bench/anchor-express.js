// The anchor a gateway is compared with: the unfenced express 5 + pg server a user would write
// themselves — express.json(), a bearer check, one upsert per PUT, res.json() — with express's defaults.
import { createServer } from "node:http";
import { bearer, listen, require, upsert } from "./anchor-pg.js";

const express = require("express");
const app = express();
app.use(express.json());
app.use((req, res, next) => {
  if (req.headers.authorization === bearer) next();
  else res.status(401).json({ error: "unauthorized" });
});
app.put("/v1/records/*key", async (req, res) => {
  res.json({ version: await upsert(req.params.key.join("/"), req.body) });
});
listen(createServer(app));
