/**
 * A stand-in judge for trying `examples/judged-agent.ts` without a capable model: an HTTP server
 * on OpenAI's chat completions route (`POST /v1/chat/completions`, `Authorization: Bearer KEY`)
 * that applies the example's rubric by rule. It reads the question, the reference answer and the
 * response from the prompt `judge()` sends, and replies with one sentence and `Score: N`: 10 when
 * the response ends with "The answer is N" and N is the reference, 1 when it gives another number,
 * 0 when it gives none. A real judge (a served model) replaces it by changing `JUDGE_BASE_URL`.
 *
 *   node --import tsx examples/rule-judge.ts --port 8001 --api-key judge-key-123
 *   JUDGE_BASE_URL=http://127.0.0.1:8001/v1 JUDGE_API_KEY=judge-key-123 JUDGE_MODEL=judge \
 *     npx rtjob submit -- train_ppo --agent-func ./examples/judged-agent.ts
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { parseArgs } from 'node:util';

/** The rubric applied by rule to `judge()`'s prompt: the reply text, ending with `Score: N`. */
export function gradeByRule(user: string): string {
  // The reference as the dataset writes it: worked steps, then `#### N` (GSM8K's form), or N alone.
  const block = /Reference answer:\n([\s\S]*?)\n\nResponse to grade:/.exec(user)?.[1] ?? '';
  const reference = (/####\s*(\S+)/.exec(block)?.[1] ?? block).trim() || undefined;
  const response = /Response to grade:\n([\s\S]*)$/.exec(user)?.[1] ?? '';
  const answers = [...response.matchAll(/The answer is\s*(-?\d+(?:\.\d+)?)/g)];
  const given = answers.at(-1)?.[1];
  if (given === undefined) return 'The response gives no final answer.\nScore: 0';
  if (reference !== undefined && Number(given) === Number(reference))
    return `The answer ${given} matches the reference.\nScore: 10`;
  return `The answer ${given} differs from the reference ${reference}.\nScore: 1`;
}

function send(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}

async function handle(req: IncomingMessage, res: ServerResponse, key: string): Promise<void> {
  const fail = (status: number, message: string): void =>
    send(res, status, {
      error: { message, type: 'invalid_request_error', param: null, code: null },
    });
  if (req.method !== 'POST' || req.url !== '/v1/chat/completions')
    return fail(404, `no route ${req.method} ${req.url}`);
  if (req.headers.authorization !== `Bearer ${key}`) return fail(401, 'Incorrect API key provided');
  let text = '';
  for await (const c of req) text += String(c);
  let body: { model?: string; messages?: { role: string; content: string }[] };
  try {
    body = JSON.parse(text) as typeof body;
  } catch {
    return fail(400, 'the body is not JSON');
  }
  const user = body.messages?.findLast((m) => m.role === 'user')?.content ?? '';
  send(res, 200, {
    id: `chatcmpl-rule-${Date.now()}`,
    object: 'chat.completion',
    created: Math.floor(Date.now() / 1000),
    model: body.model ?? 'judge',
    choices: [
      {
        index: 0,
        message: { role: 'assistant', content: gradeByRule(user), refusal: null },
        finish_reason: 'stop',
        logprobs: null,
      },
    ],
    usage: { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 },
  });
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { values } = parseArgs({
    options: { port: { type: 'string', default: '8001' }, 'api-key': { type: 'string' } },
  });
  const key = values['api-key'] ?? process.env.JUDGE_API_KEY ?? '';
  if (!key) throw new Error('rule-judge: give --api-key (or JUDGE_API_KEY)');
  const server = createServer((req, res) => void handle(req, res, key));
  server.listen(Number(values.port), '127.0.0.1', () => {
    const { port } = server.address() as AddressInfo;
    console.log(`rule judge on http://127.0.0.1:${port}/v1 (model: any name)`);
  });
  for (const s of ['SIGINT', 'SIGTERM'] as const) process.on(s, () => server.close());
}
