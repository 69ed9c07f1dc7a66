/**
 * `npm run bench -- gateway`: what the agent gateway costs.
 *
 * 1. Overhead per completion: the `openai` client → HTTP → body checks → chat template with
 *    tools → tokenize → engine → tool-call parse → JSON, against an engine that answers at once
 *    (so all the time measured is the gateway's and the client's), for a 3-turn tool conversation;
 *    sequential and 16 clients at once; p50 / p99 ms.
 * 2. Episodes/s of the same task (one math answer, math reward) written as a step function and as
 *    a gateway agent with the `openai` client, on the same builtin engine with the shipped model,
 *    interleaved rounds; the ratio is the one to quote.
 *
 * Prints a table and writes bench/results/gateway.json. `BENCH_QUICK=1` runs fewer rounds.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import { EpisodeRunner } from '../agents/episode-runner.ts';
import { SimulatedEngine } from '../engines/simulated/simulated-engine.ts';
import type { Agent, Sample } from '../agents/types.ts';
import { BuiltinEngine } from '../engines/builtin/engine.ts';
import { Gateway } from '../gateway/server.ts';
import { tinyMathModelDir } from '../model/index.ts';
import { builtinTokenizerFiles } from '../model/builtin.ts';
import { ChatTokenizer, loadTokenizer } from '../model/tokenizer.ts';
import { mathReward, mathStep } from '../roles/reward.ts';
import { agentTokenizer } from '../roles/rollout.ts';
import { loadPromptData } from '../train/ppo/data.ts';

process.env.RTJOB_QUIET_BACKEND = '1';
const quick = process.env.BENCH_QUICK === '1';
const resultsDir = fileURLToPath(new URL('./results/', import.meta.url));

function percentile(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
}

const toolTemplate =
  '{%- if tools %}<|system|>Tools:{% for t in tools %} {{ t.function | tojson }}{% endfor %}{% endif %}' +
  "{%- for m in messages %}{%- if m.role == 'user' %}<|user|>{{ m.content }}" +
  "{%- elif m.role == 'assistant' %}<|assistant|>{{ m.content }}{% for tc in m.tool_calls or [] %}" +
  '<tool_call>{"name": "{{ tc.function.name }}", "arguments": {{ tc.function.arguments | tojson }}}</tool_call>{% endfor %}<|end|>' +
  "{%- elif m.role == 'tool' %}<|user|><tool_response>{{ m.content }}</tool_response>{%- endif %}{%- endfor %}" +
  '{%- if add_generation_prompt %}<|assistant|>{% endif %}';

async function overhead(): Promise<Record<string, number>> {
  const { tokenizerJson, tokenizerConfig } = builtinTokenizerFiles();
  const chat = new ChatTokenizer(tokenizerJson, {
    ...tokenizerConfig,
    chat_template: toolTemplate,
  });
  const reply = chat.encode(
    '<tool_call>{"name": "add", "arguments": {"a": 17, "b": 25}}</tool_call>',
  );
  const engine = new SimulatedEngine({ respond: () => [...reply, chat.eosTokenId!] });
  const gw = await Gateway.start({
    engine,
    tokenizer: chat,
    model: 'm',
    contextLength: 4096,
    maxNewTokens: 256,
  });
  const s = gw.openSession();
  const client = new OpenAI({ baseURL: gw.baseURL, apiKey: s.apiKey, maxRetries: 0 });
  const tools: OpenAI.ChatCompletionTool[] = [
    {
      type: 'function',
      function: {
        name: 'add',
        description: 'adds two integers',
        parameters: {
          type: 'object',
          properties: { a: { type: 'integer' }, b: { type: 'integer' } },
          required: ['a', 'b'],
        },
      },
    },
  ];
  const messages: OpenAI.ChatCompletionMessageParam[] = [
    { role: 'user', content: 'What is 17 + 25, then times 3?' },
  ];
  for (let i = 0; i < 2; i++) {
    messages.push({
      role: 'assistant',
      content: null,
      tool_calls: [
        {
          id: `c${i}`,
          type: 'function',
          function: { name: 'add', arguments: '{"a": 17, "b": 25}' },
        },
      ],
    });
    messages.push({ role: 'tool', tool_call_id: `c${i}`, content: '42' });
  }
  const one = async (): Promise<number> => {
    const t0 = performance.now();
    await client.chat.completions.create({ model: 'm', messages, tools });
    return performance.now() - t0;
  };
  const n = quick ? 100 : 400;
  for (let i = 0; i < 30; i++) await one();
  const seq: number[] = [];
  for (let i = 0; i < n; i++) seq.push(await one());
  const serverSeq = gw.overheadMs.slice(-n);
  const conc: number[] = [];
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: 16 }, async () => {
      for (let i = 0; i < n / 16; i++) conc.push(await one());
    }),
  );
  const concS = (performance.now() - t0) / 1000;
  const serverConc = gw.overheadMs.slice(-conc.length);
  s.close();
  await gw.close();
  return {
    seq_p50_ms: percentile(seq, 50),
    seq_p99_ms: percentile(seq, 99),
    conc16_p50_ms: percentile(conc, 50),
    conc16_p99_ms: percentile(conc, 99),
    conc16_completions_per_s: conc.length / concS,
    server_seq_p50_ms: percentile(serverSeq, 50),
    server_seq_p99_ms: percentile(serverSeq, 99),
    server_conc16_p50_ms: percentile(serverConc, 50),
    server_conc16_p99_ms: percentile(serverConc, 99),
  };
}

async function episodesPerSecond(): Promise<Record<string, number>> {
  const chat = loadTokenizer(tinyMathModelDir);
  const tokenizer = agentTokenizer(chat);
  const engine = await BuiltinEngine.create({ modelPath: tinyMathModelDir, seed: 1 });
  const gconfig = { maxNewTokens: 48, temperature: 1, topP: 1 };
  const gateway = await Gateway.start({
    engine,
    tokenizer: chat,
    model: 'm',
    contextLength: 256,
    maxNewTokens: 48,
    fixedSampling: { temperature: 1, topP: 1 },
  });
  const records = (await loadPromptData('arith', '--prompt-data')).slice(0, quick ? 32 : 64);
  const samples: Sample[] = records.map((r, index) => {
    const prompt = String(r['prompt']);
    return {
      index,
      prompt,
      label: String(r['solution']),
      promptIds: tokenizer.applyChatTemplate([{ role: 'user', content: prompt }]),
      nSamples: 1,
      groupId: `g${index}`,
      record: r,
    };
  });
  const stepAgent: Agent = { kind: 'step', file: '<bench step>', step: mathStep, maxTurns: 1 };
  const gatewayAgent: Agent = {
    kind: 'agent',
    file: '<bench agent>',
    agent: async (sample, env) => {
      const client = new OpenAI({ baseURL: env.baseURL, apiKey: env.apiKey, maxRetries: 0 });
      const r = await client.chat.completions.create(
        { model: env.model, messages: [{ role: 'user', content: sample.prompt }] },
        { signal: env.signal },
      );
      return mathReward(r.choices[0]!.message.content ?? '', sample.label);
    },
  };
  const run = async (
    agent: Agent,
  ): Promise<{ eps: number; tokens: number; prefills: number; steps: number }> => {
    const runner = new EpisodeRunner({
      agent,
      tokenizer,
      gconfig,
      maxLength: 256,
      maxConcurrent: 32,
      gateway,
    });
    const before = { ...engine.stats };
    const t0 = performance.now();
    const groups = await Promise.all(samples.map((s) => runner.runGroup(engine, s)));
    const s = (performance.now() - t0) / 1000;
    const tokens = groups
      .flatMap((g) => g.trajectories)
      .reduce((n, t) => n + t.lossMask.reduce((a, b) => a + b, 0), 0);
    return {
      eps: samples.length / s,
      tokens: tokens / samples.length,
      prefills: engine.stats.prefills - before.prefills,
      steps: engine.stats.decodeSteps - before.decodeSteps,
    };
  };
  await run(stepAgent);
  await run(gatewayAgent);
  const step: number[] = [];
  const agent: number[] = [];
  const tok: { step: number[]; agent: number[] } = { step: [], agent: [] };
  const calls: { step: number[][]; agent: number[][] } = { step: [], agent: [] };
  for (let round = 0; round < (quick ? 2 : 5); round++) {
    const a = await run(stepAgent);
    const b = await run(gatewayAgent);
    step.push(a.eps);
    agent.push(b.eps);
    tok.step.push(a.tokens);
    tok.agent.push(b.tokens);
    calls.step.push([a.prefills, a.steps]);
    calls.agent.push([b.prefills, b.steps]);
  }
  const server = [...gateway.overheadMs];
  await gateway.close();
  await engine.close();
  const med = (xs: number[]) => percentile(xs, 50);
  return {
    step_episodes_per_s: med(step),
    gateway_episodes_per_s: med(agent),
    ratio: med(agent.map((x, i) => x / step[i]!)),
    step_tokens_per_episode: med(tok.step),
    gateway_tokens_per_episode: med(tok.agent),
    step_prefills: med(calls.step.map((x) => x[0]!)),
    gateway_prefills: med(calls.agent.map((x) => x[0]!)),
    step_decode_steps: med(calls.step.map((x) => x[1]!)),
    gateway_decode_steps: med(calls.agent.map((x) => x[1]!)),
    server_p50_ms: percentile(server, 50),
    server_p99_ms: percentile(server, 99),
  };
}

const load = loadavg()[0]!;
const o = await overhead();
const e = await episodesPerSecond();
const loadAfter = loadavg()[0]!;
const ms = (a: number | undefined, b: number | undefined) =>
  `${a!.toFixed(2)} / ${b!.toFixed(2)} ms`;
const rows: [string, string][] = [
  [
    'gateway time per completion (server side, less the engine), sequential, p50 / p99',
    ms(o.server_seq_p50_ms, o.server_seq_p99_ms),
  ],
  [
    'gateway time per completion, 16 clients, p50 / p99',
    ms(o.server_conc16_p50_ms, o.server_conc16_p99_ms),
  ],
  [
    'round trip through the openai client (instant engine), sequential, p50 / p99',
    ms(o.seq_p50_ms, o.seq_p99_ms),
  ],
  ['round trip, 16 clients, p50 / p99', ms(o.conc16_p50_ms, o.conc16_p99_ms)],
  ['completions/s through the gateway, 16 clients', o.conc16_completions_per_s!.toFixed(0)],
  ['episodes/s, step function (builtin engine, 32 at once)', e.step_episodes_per_s!.toFixed(1)],
  ['episodes/s, gateway agent (openai client), same engine', e.gateway_episodes_per_s!.toFixed(1)],
  ['gateway / step function (median of interleaved rounds)', `${(e.ratio! * 100).toFixed(0)}%`],
  [
    'gateway time per completion in those episodes (server side, less the engine), p50 / p99',
    ms(e.server_p50_ms, e.server_p99_ms),
  ],
  [
    `engine prefill calls / decode steps per ${quick ? 32 : 64} episodes, step vs gateway`,
    `${e.step_prefills} / ${e.step_decode_steps} vs ${e.gateway_prefills} / ${e.gateway_decode_steps}`,
  ],
  [
    'generated tokens per episode, step / gateway',
    `${e.step_tokens_per_episode!.toFixed(1)} / ${e.gateway_tokens_per_episode!.toFixed(1)}`,
  ],
];
console.log(
  `load average ${load.toFixed(1)} → ${loadAfter.toFixed(1)} on ${cpus().length} cores\n`,
);
console.log('| metric | value |\n|---|---|');
for (const [k, v] of rows) console.log(`| ${k} | ${v} |`);
mkdirSync(resultsDir, { recursive: true });
writeFileSync(
  `${resultsDir}/gateway.json`,
  JSON.stringify(
    { date: new Date().toISOString(), load: [load, loadAfter], overhead: o, episodes: e },
    null,
    2,
  ),
);
