// Test driver: `@modelcontextprotocol/client` 2.4 (the v2 TypeScript SDK) over its
// `StreamableHTTPClientTransport`, pinned to 2026-07-28 by default: `server/discover`,
// stateless requests, `input_required` rounds fulfilled through the elicitation handler.
// Contract: tests/http/README.md.
// Usage: node ts_client2.mjs URL [--mode pin|auto|legacy] [--bearer TOKEN] [--header 'K: V']... [PLAN]

import { emit, fatal, Human, parseArgs, runPlan } from "./plan.mjs";
import { peer } from "./peers.mjs";

const { Client, StreamableHTTPClientTransport, ProtocolError } = await import(
  peer("@modelcontextprotocol/client", "dist/index.mjs")
);

const args = await parseArgs(process.argv.slice(2));
const mode = { pin: { pin: "2026-07-28" }, auto: "auto", legacy: "legacy" }[args.mode ?? "pin"];
if (mode === undefined) fatal(new Error(`unknown mode ${args.mode}`));
const human = new Human();
const transport = new StreamableHTTPClientTransport(new URL(args.url), {
  requestInit: { headers: args.headers },
});
const client = new Client(
  { name: "tc-test-ts-http-client2", version: "0.0.0" },
  { capabilities: { elicitation: { form: {} } }, versionNegotiation: { mode } },
);
client.setRequestHandler("elicitation/create", async (request) => human.answer(request.params));
try {
  await client.connect(transport);
} catch (e) {
  fatal(e);
}
const era = client.getProtocolEra();
emit({
  connected: true,
  protocolVersion: client.getNegotiatedProtocolVersion() ?? null,
  era: typeof era === "string" ? era : (era?.kind ?? null),
  sessionId: transport.sessionId ?? null,
  server: client.getServerVersion() ?? null,
});
await runPlan(args.steps, {
  list: (cursor) => client.listTools(cursor ? { cursor } : undefined, { cacheMode: "bypass" }),
  call: (name, args) => client.callTool({ name, arguments: args }),
  // One round, no automatic driving: the test sees (and may replay) requestState.
  raw: (step) =>
    client.callTool(
      {
        name: step.name,
        arguments: step.args ?? {},
        ...(step.input_responses ? { inputResponses: step.input_responses } : {}),
        ...(step.request_state ? { requestState: step.request_state } : {}),
      },
      { allowInputRequired: true },
    ),
  human,
  isRpcError: (e) => ProtocolError.isInstance(e),
});
try {
  if (transport.sessionId) await transport.terminateSession();
} catch (e) {
  fatal(e);
}
await client.close();
