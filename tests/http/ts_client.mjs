// Test driver: the TypeScript SDK 1.32.2 (`@modelcontextprotocol/sdk`) `Client` over its
// `StreamableHTTPClientTransport`, legacy era (2025-11-25), with a bare `elicitation: {}`
// capability. Contract: tests/http/README.md.
// Usage: node ts_client.mjs URL [--bearer TOKEN] [--header 'K: V']... [PLAN]

import { emit, fatal, Human, parseArgs, runPlan } from "./plan.mjs";
import { peer } from "./peers.mjs";

const sdk = (p) => peer("@modelcontextprotocol/sdk", `dist/esm/${p}`);
const { Client } = await import(sdk("client/index.js"));
const { StreamableHTTPClientTransport } = await import(sdk("client/streamableHttp.js"));
const { ElicitRequestSchema, McpError } = await import(sdk("types.js"));

const args = await parseArgs(process.argv.slice(2));
const human = new Human();
const transport = new StreamableHTTPClientTransport(new URL(args.url), {
  requestInit: { headers: args.headers },
});
const client = new Client(
  { name: "tc-test-ts-http-client", version: "0.0.0" },
  { capabilities: { elicitation: {} } },
);
client.setRequestHandler(ElicitRequestSchema, async (request) => human.answer(request.params));
try {
  await client.connect(transport);
} catch (e) {
  fatal(e);
}
emit({
  connected: true,
  protocolVersion: transport.protocolVersion ?? null,
  era: "legacy",
  sessionId: transport.sessionId ?? null,
  server: client.getServerVersion() ?? null,
});
await runPlan(args.steps, {
  list: (cursor) => client.listTools(cursor ? { cursor } : undefined),
  call: (name, args) => client.callTool({ name, arguments: args }),
  human,
  isRpcError: (e) => e instanceof McpError,
});
try {
  await transport.terminateSession();
} catch (e) {
  fatal(e);
}
await client.close();
