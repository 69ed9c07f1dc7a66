/**
 * A judge model behind OpenAI's chat completions route, faithful to the wire (`POST
 * /v1/chat/completions` with `Authorization: Bearer`, OpenAI's response and error bodies), whose
 * grades a test decides: `grade(request)` returns the reply text, or a status to fail with. It
 * records every request, the most in flight at once, and can hold requests until enough arrive
 * (to show a concurrency bound without timing).
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/** One chat request as the judge saw it. */
export interface JudgeRequest {
  model: string;
  system: string;
  user: string;
  /** `x-stainless-retry-count`: 0 on a first try. */
  retry: number;
}

/** What the fake answers: reply text, a status with an error, or nothing at all (a hang). */
export type JudgeAnswer = string | { status: number } | 'hang';

export interface FakeJudge {
  baseURL: string;
  apiKey: string;
  requests: JudgeRequest[];
  /** The most requests in flight at once. */
  maxInFlight: number;
  /** Holds requests until `n` are in flight (or `total` have arrived), then answers them all. */
  holdUntil(n: number, total: number): void;
  close(): Promise<void>;
}

export async function startFakeJudge(
  grade: (r: JudgeRequest) => JudgeAnswer,
  o: { apiKey?: string; model?: string } = {},
): Promise<FakeJudge> {
  const apiKey = o.apiKey ?? 'judge-key-123';
  const model = o.model ?? 'judge';
  let inFlight = 0;
  let hold: { n: number; total: number } | undefined;
  let held: (() => void)[] = [];
  const fake: FakeJudge = {
    baseURL: '',
    apiKey,
    requests: [],
    maxInFlight: 0,
    holdUntil: (n, total) => void (hold = { n, total }),
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
  const send = (res: ServerResponse, status: number, body: unknown): void => {
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(JSON.stringify(body));
  };
  const error = (res: ServerResponse, status: number, message: string): void =>
    send(res, status, { error: { message, type: 'server_error', param: null, code: null } });

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    if (req.url !== '/v1/chat/completions' || req.method !== 'POST')
      return error(res, 404, `no route ${req.method} ${req.url}`);
    if (req.headers.authorization !== `Bearer ${apiKey}`)
      return error(res, 401, 'Incorrect API key provided');
    let text = '';
    for await (const c of req) text += String(c);
    const body = JSON.parse(text) as {
      model: string;
      messages: { role: string; content: string }[];
    };
    if (body.model !== model) return error(res, 404, `The model '${body.model}' does not exist`);
    const r: JudgeRequest = {
      model: body.model,
      system: body.messages.find((m) => m.role === 'system')?.content ?? '',
      user: body.messages.find((m) => m.role === 'user')?.content ?? '',
      retry: Number(req.headers['x-stainless-retry-count'] ?? 0),
    };
    fake.requests.push(r);
    inFlight++;
    fake.maxInFlight = Math.max(fake.maxInFlight, inFlight);
    if (hold) {
      const gate = new Promise<void>((resolve) => held.push(resolve));
      if (inFlight >= hold.n || fake.requests.length >= hold.total) {
        held.forEach((f) => f());
        held = [];
      }
      await gate;
    }
    const answer = grade(r);
    if (answer === 'hang') return; // the client's timeout ends it
    inFlight--;
    if (typeof answer !== 'string') return error(res, answer.status, 'judge overloaded');
    send(res, 200, {
      id: `chatcmpl-${fake.requests.length}`,
      object: 'chat.completion',
      created: Math.floor(Date.now() / 1000),
      model,
      choices: [
        {
          index: 0,
          message: { role: 'assistant', content: answer, refusal: null },
          finish_reason: 'stop',
          logprobs: null,
        },
      ],
      usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
    });
  };
  const server = createServer((req, res) => void handle(req, res));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  fake.baseURL = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
  return fake;
}
