import { connect, createServer, type AddressInfo } from "node:net";
import pg from "pg";
import { freePort, startPostgres, startRedisNodes, startS3 } from "@fenced/servers";
import { describe, expect, it } from "vitest";
import { startCli, type Child } from "./cli-test-support.js";
import { httpClient, KEYS } from "./test-support.js";
import { GATEWAY_VERSION } from "./version.js";

/**
 * The CLI refuses to start half-configured: exit 2 and one line on stderr naming what is wrong and
 * what to do; --no-start-checks starts anyway when backends are down.
 */
const API_KEYS = JSON.stringify([{ id: "admin", key: KEYS.admin, resources: [""], keys: [""], trustedLockClient: true }]);
const FENCE_KEYS = JSON.stringify([{ id: "k", secret: Buffer.alloc(32, 3).toString("base64") }]);
// Node's own warnings (a dependency's notice about the Node version) are not the gateway's line.
const ENV = { FENCED_GATEWAY_API_KEYS: API_KEYS, FENCED_GATEWAY_LOG_LEVEL: "warn", NODE_NO_WARNINGS: "1" };

/** The child's exit code and its stderr, which must be exactly one line. */
async function refusal(child: Child): Promise<string> {
  try {
    expect(await child.exited, child.stderr()).toBe(2);
  } finally {
    child.process.kill("SIGKILL");
  }
  const lines = child.stderr().trimEnd().split("\n");
  expect(lines, child.stderr()).toHaveLength(1);
  return lines[0] ?? "";
}

const deadPorts = (n: number): Promise<number[]> => Promise.all(Array.from({ length: n }, () => freePort()));

describe("fenced-gateway refuses to start half-configured (exit 2, one line)", () => {
  it("leases without fence keys", async () => {
    const line = await refusal(startCli(["--port", "0", "--redis", "redis://127.0.0.1:1"], ENV));
    expect(line).toMatch(/^fenced-gateway: invalid configuration: fenceKeys: leases \(redis\) need fence keys.*FENCED_GATEWAY_FENCE_KEYS/);
  });

  it("two API keys with one id, or with one secret: names the entries", async () => {
    const key = (id: string, secret: string) => ({ id, key: secret, resources: [""], keys: [""] });
    const sameId = JSON.stringify([key("billing", "a".repeat(24)), key("billing", "b".repeat(24))]);
    const line = await refusal(
      startCli(["--port", "0", "--postgres", "postgres://nobody@127.0.0.1:1/none", "--no-start-checks"], {
        ...ENV,
        FENCED_GATEWAY_API_KEYS: sameId,
      }),
    );
    expect(line).toMatch(/^fenced-gateway: invalid configuration: apiKeys\[1\]\.id: .*"billing".*apiKeys\[0\]/);
    const sameSecret = JSON.stringify([key("billing", "a".repeat(24)), key("billing-2", "a".repeat(24))]);
    const again = await refusal(
      startCli(["--port", "0", "--postgres", "postgres://nobody@127.0.0.1:1/none", "--no-start-checks"], {
        ...ENV,
        FENCED_GATEWAY_API_KEYS: sameSecret,
      }),
    );
    expect(again).toMatch(/^fenced-gateway: invalid configuration: apiKeys\[1\]: .*same secret as apiKeys\[0\]/);
  });

  it("S3 options in the environment without a bucket: names the variable", async () => {
    const child = startCli(["--port", "0"], {
      ...ENV,
      FENCED_GATEWAY_S3_ENDPOINT: "http://127.0.0.1:1",
      FENCED_GATEWAY_S3_ACCESS_KEY_ID: "id",
      FENCED_GATEWAY_S3_SECRET_ACCESS_KEY: "secret",
    });
    expect(await refusal(child)).toMatch(/s3\.bucket is missing: .*FENCED_GATEWAY_S3_ENDPOINT.*need FENCED_GATEWAY_S3_BUCKET/);
  });

  it("no quorum of lock nodes answers PING: each node by address, refused as the lock names it, at once", async () => {
    const ports = await deadPorts(3);
    const child = startCli(["--port", "0", "--redis", ports.map((p) => `redis://127.0.0.1:${p}`).join(",")], {
      ...ENV,
      FENCED_GATEWAY_FENCE_KEYS: FENCE_KEYS,
    });
    const line = await refusal(child);
    expect(line).toMatch(
      /the lock has no quorum: 0 of 3 Redis nodes answered PING, 2 are needed \(node 0 at 127\.0\.0\.1:\d+: refused .*--no-start-checks/,
    );
    for (const port of ports) expect(line).toContain(`127.0.0.1:${port}: refused`);
    expect(line).not.toMatch(/within \d+ ms/);
  });

  it("a node slower than the others' refusals: its answer is waited for, and only the nodes that did not answer are named", async () => {
    const redis = await startRedisNodes(1);
    const node = redis.nodes[0] as { host: string; port: number };
    // Node 0 answers, each of its answers 300 ms late; nodes 1 and 2 refuse at once, which makes the quorum's outcome known first.
    const slow = createServer((client) => {
      const server = connect(node.port, node.host);
      client.pipe(server);
      server.on("data", (chunk: Buffer) => setTimeout(() => client.write(chunk), 300));
      for (const s of [client, server]) s.on("error", () => undefined).on("close", () => (s === client ? server : client).destroy());
    });
    await new Promise<void>((resolve) => slow.listen(0, "127.0.0.1", resolve));
    try {
      const [dead1, dead2] = await deadPorts(2);
      const urls = [
        `redis://127.0.0.1:${(slow.address() as AddressInfo).port}`,
        `redis://127.0.0.1:${dead1}`,
        `redis://127.0.0.1:${dead2}`,
      ];
      const line = await refusal(startCli(["--port", "0", "--redis", urls.join(",")], { ...ENV, FENCED_GATEWAY_FENCE_KEYS: FENCE_KEYS }));
      expect(line).toMatch(
        /the lock has no quorum: 1 of 3 Redis nodes answered PING, 2 are needed \(node 1 at 127\.0\.0\.1:\d+: refused .*; node 2 at 127\.0\.0\.1:\d+: refused [^;]*\); start them/,
      );
      expect(line).not.toContain("pending");
      expect(line).not.toContain(`node 0 at`);
    } finally {
      slow.close();
      await redis.stop();
    }
  });

  it("PostgreSQL refuses the connection: said as such, not as a deadline", async () => {
    const child = startCli(["--port", "0", "--postgres", `postgres://nobody@127.0.0.1:${await freePort()}/none`], ENV);
    const line = await refusal(child);
    expect(line).toMatch(/PostgreSQL refused the connection \(ECONNREFUSED.*host and port.*--no-start-checks/);
    expect(line).not.toMatch(/within \d+ ms/);
  });

  it("PostgreSQL has no such database, or refuses the login: each said as such, with the fix", async () => {
    const postgres = await startPostgres();
    try {
      const url = new URL(postgres.url);
      url.pathname = "/no_such_database";
      const line = await refusal(startCli(["--port", "0", "--postgres", url.toString()], ENV));
      expect(line).toMatch(/PostgreSQL answered that the database does not exist \(3D000: .*create it.*--no-start-checks/);
      expect(line).not.toMatch(/within \d+ ms/);
      // A role that may not log in: the login is refused (28000), which names the credentials, not the network.
      const admin = new pg.Client({ connectionString: postgres.url });
      await admin.connect();
      try {
        await admin.query("CREATE ROLE gw_no_login NOLOGIN");
      } finally {
        await admin.end();
      }
      const role = new URL(postgres.url);
      role.username = "gw_no_login";
      const refusedLogin = await refusal(startCli(["--port", "0", "--postgres", role.toString()], ENV));
      expect(refusedLogin).toMatch(/PostgreSQL refused the login \(28000: .*check the user and password.*pg_hba\.conf/);
    } finally {
      await postgres.stop();
    }
  });

  it("PostgreSQL not migrated, with --no-migrate", async () => {
    const postgres = await startPostgres();
    try {
      const child = startCli(["--port", "0", "--no-migrate", "--postgres", postgres.url, "--postgres-schema", "never_migrated"], ENV);
      expect(await refusal(child)).toMatch(
        /postgres is not set up for the store \(not-migrated\): run the gateway without --no-migrate once/,
      );
    } finally {
      await postgres.stop();
    }
  });

  it("PostgreSQL refuses the migrate (a role without CREATE); --no-start-checks starts anyway", async () => {
    const postgres = await startPostgres();
    try {
      const admin = new pg.Client({ connectionString: postgres.url });
      await admin.connect();
      try {
        await admin.query("CREATE ROLE gw_no_create LOGIN PASSWORD 'gw-no-create'");
        await admin.query("REVOKE CREATE ON SCHEMA public FROM PUBLIC");
      } finally {
        await admin.end();
      }
      const url = new URL(postgres.url);
      url.username = "gw_no_create";
      url.password = "gw-no-create";
      const args = ["--port", "0", "--postgres", url.toString(), "--postgres-schema", "not_allowed"];
      expect(await refusal(startCli(args, ENV))).toMatch(
        /^fenced-gateway: PostgreSQL refused the migrate \(42501\): grant the gateway's role CREATE .*--no-migrate.*--no-start-checks/,
      );
      const anyway = startCli([...args, "--no-start-checks"], { ...ENV, FENCED_GATEWAY_LOG_LEVEL: "info" });
      try {
        await anyway.waitFor("listening");
        const warned = anyway.lines.find((l) => l.level === 40 && String(l.msg).startsWith("starting anyway"));
        expect(String(warned?.msg)).toMatch(/PostgreSQL refused the migrate \(42501\)/);
      } finally {
        anyway.process.kill("SIGKILL");
      }
    } finally {
      await postgres.stop();
    }
  });

  it("S3 refuses the verify (a wrong secret): with --no-start-checks, starts anyway with a warning", async () => {
    const s3 = await startS3();
    try {
      const bucket = await s3.createBucket();
      const env = {
        ...ENV,
        FENCED_GATEWAY_S3_ACCESS_KEY_ID: s3.accessKeyId,
        FENCED_GATEWAY_S3_SECRET_ACCESS_KEY: "not-the-secret",
        FENCED_GATEWAY_S3_REGION: s3.region,
      };
      const args = ["--port", "0", "--s3-bucket", bucket, "--s3-endpoint", s3.endpoint];
      // Checked, HeadBucket already refuses the credentials: 403, which names them.
      expect(await refusal(startCli(args, env))).toMatch(/S3 refused the credentials \(403.*check the access key id and secret/);
      // The right credentials and a bucket that is not there: 404, which names the bucket.
      const noBucket = await refusal(
        startCli(["--port", "0", "--s3-bucket", `${bucket}-missing`, "--s3-endpoint", s3.endpoint], {
          ...env,
          FENCED_GATEWAY_S3_SECRET_ACCESS_KEY: s3.secretAccessKey,
        }),
      );
      expect(noBucket).toMatch(/S3 answered that the bucket does not exist \(404\): create it/);
      const anyway = startCli([...args, "--no-start-checks"], { ...env, FENCED_GATEWAY_LOG_LEVEL: "info" });
      try {
        await anyway.waitFor("listening");
        const warned = anyway.lines.find((l) => l.level === 40 && String(l.msg).startsWith("starting anyway"));
        expect(String(warned?.msg)).toMatch(/S3 refused the verify \(SignatureDoesNotMatch\): check the endpoint, the credentials/);
      } finally {
        anyway.process.kill("SIGKILL");
      }
    } finally {
      await s3.stop();
    }
  });

  it("the admin listener on the public port of another address (0.0.0.0 and 127.0.0.1)", async () => {
    const port = String(await freePort());
    const child = startCli(["--port", port, "--admin-host", "0.0.0.0", "--admin-port", port], ENV);
    expect(await refusal(child)).toMatch(/^fenced-gateway: could not listen on 0\.0\.0\.0:[0-9]+ \(the admin listener\): EADDRINUSE/);
  });

  it("an acquire deadline shorter than one attempt of the lock", async () => {
    const args = ["--port", "0", "--redis", "redis://127.0.0.1:1", "--redis-node-timeout-ms", "500", "--acquire-timeout-ms", "1000"];
    expect(await refusal(startCli(args, { ...ENV, FENCED_GATEWAY_FENCE_KEYS: FENCE_KEYS }))).toMatch(
      /^fenced-gateway: invalid configuration: acquireTimeoutMs: .*at least 1500/,
    );
  });

  it("an option a store refuses (a bucket name S3 does not allow)", async () => {
    const child = startCli(["--port", "0", "--s3-bucket", "b"], ENV);
    expect(await refusal(child)).toMatch(/^fenced-gateway: invalid configuration: bucket: "b" is not a valid S3 bucket name/);
  });

  it("S3 does not confirm the bucket", async () => {
    const child = startCli(["--port", "0", "--s3-bucket", "start-check", "--s3-endpoint", `http://127.0.0.1:${await freePort()}`], {
      ...ENV,
      FENCED_GATEWAY_S3_ACCESS_KEY_ID: "id",
      FENCED_GATEWAY_S3_SECRET_ACCESS_KEY: "secret",
    });
    expect(await refusal(child)).toMatch(/S3 refused the connection \(ECONNREFUSED.*check the endpoint URL/);
  });

  it("--no-start-checks starts with every backend down; the admin listener's /healthz says so", async () => {
    const [pgPort, s3Port, ...redisPorts] = await deadPorts(5);
    const child = startCli(
      [
        "--port",
        "0",
        "--no-start-checks",
        "--admin-port",
        "0",
        "--postgres",
        `postgres://nobody@127.0.0.1:${pgPort}/none`,
        "--s3-bucket",
        "start-check",
        "--s3-endpoint",
        `http://127.0.0.1:${s3Port}`,
        "--redis",
        redisPorts.map((p) => `redis://127.0.0.1:${p}`).join(","),
      ],
      { ...ENV, FENCED_GATEWAY_FENCE_KEYS: FENCE_KEYS, FENCED_GATEWAY_LOG_LEVEL: "info" },
    );
    try {
      const listening = await child.waitFor("listening");
      expect(listening.version).toBe(GATEWAY_VERSION); // which build is running, in the line every start writes
      expect(child.lines.some((l) => l.level === 40 && String(l.msg).startsWith("starting anyway"))).toBe(true);
      const admin = listening.admin as { port: number };
      const client = httpClient(Number(listening.port));
      const adminClient = httpClient(admin.port);
      try {
        // /healthz and /metrics on the admin listener only.
        expect((await adminClient.send({ method: "GET", path: "/healthz" })).status).toBe(503);
        expect((await adminClient.send({ method: "GET", path: "/metrics" })).status).toBe(200);
        expect((await client.send({ method: "GET", path: "/healthz" })).status).toBe(404);
        expect((await client.send({ method: "GET", path: "/metrics" })).status).toBe(404);
        // Records answer 503 while PostgreSQL is down, never a 500.
        const read = await client.send({ method: "GET", path: "/v1/records/k", headers: { authorization: `Bearer ${KEYS.admin}` } });
        expect(read.status).toBe(503);
      } finally {
        client.close();
        adminClient.close();
      }
    } finally {
      child.process.kill("SIGKILL");
    }
  });
});
