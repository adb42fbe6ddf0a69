// The plan runner shared by the TypeScript drivers (ts_client.mjs, ts_client2.mjs): argv,
// the plan, the scripted human and the one-JSON-line-per-step output (tests/http/README.md).

import { createInterface } from "node:readline";

export const emit = (obj) => process.stdout.write(JSON.stringify(obj) + "\n");

const stdinLines = (() => {
  let rl;
  return () => (rl ??= createInterface({ input: process.stdin })[Symbol.asyncIterator]());
})();

const readAll = async () => {
  const chunks = [];
  for await (const c of process.stdin) chunks.push(c);
  return Buffer.concat(chunks).toString("utf8");
};

// argv: URL [--mode M] [--bearer TOKEN] [--header 'K: V']... [PLAN]
export async function parseArgs(argv) {
  const out = { url: undefined, mode: undefined, headers: {}, plan: undefined };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === "--mode") out.mode = argv[++i];
    else if (a === "--bearer") out.headers.Authorization = `Bearer ${argv[++i]}`;
    else if (a === "--header") {
      const h = argv[++i];
      const at = h.indexOf(":");
      out.headers[h.slice(0, at).trim()] = h.slice(at + 1).trim();
    } else if (out.url === undefined) out.url = a;
    else if (out.plan === undefined) out.plan = a;
    else throw new Error(`unexpected argument ${a}`);
  }
  if (!out.url) throw new Error("usage: URL [--mode M] [--bearer TOKEN] [--header 'K: V'] [PLAN]");
  const plan = JSON.parse(out.plan ?? (await readAll()));
  out.steps = Array.isArray(plan) ? plan : plan.steps;
  return out;
}

// The elicitation handler's human: answers each prompt from the running step's plan
// ("answer", or "answers" in order), declining once they run out.
export class Human {
  start(step) {
    this.prompts = [];
    this.answers = [...(step.answers ?? (step.answer ? [step.answer] : []))];
  }
  answer(params) {
    this.prompts.push(params);
    return this.answers.shift() ?? { action: "decline" };
  }
}

// Runs the steps in order. A JSON-RPC error is a step result; any other error (HTTP status,
// connection, SDK) ends the run: {"fatal", ...} and exit 2.
export async function runPlan(steps, { list, call, raw, human, isRpcError }) {
  for (const [i, step] of steps.entries()) {
    const out = { step: i, op: step.op };
    human.start(step);
    try {
      if (step.op === "list") {
        const r = await list(step.cursor);
        Object.assign(out, { ok: true, tools: r.tools.map((t) => t.name) });
        if (r.nextCursor !== undefined) out.nextCursor = r.nextCursor;
      } else if (step.op === "call") {
        Object.assign(out, { ok: true, result: await call(step.name, step.args ?? {}) });
      } else if (step.op === "raw" && raw) {
        Object.assign(out, { ok: true, result: await raw(step) });
      } else if (step.op === "pause") {
        emit({ ...out, ok: true });
        await stdinLines().next();
        continue;
      } else {
        Object.assign(out, { ok: false, error: { code: null, message: `unknown op ${step.op}` } });
      }
    } catch (e) {
      if (!isRpcError(e)) fatal(e);
      Object.assign(out, { ok: false, error: { code: e.code, message: e.message, ...(e.data !== undefined ? { data: e.data } : {}) } });
    }
    if (human.prompts.length) out.prompts = human.prompts;
    emit(out);
  }
}

export function fatal(e) {
  const status = e?.data?.status ?? (e?.constructor?.name === "StreamableHTTPError" ? e.code : undefined);
  emit({ fatal: `${e?.name ?? "Error"}: ${e?.message ?? e}`, code: e?.code ?? null, ...(status !== undefined ? { status } : {}) });
  process.exit(2);
}
