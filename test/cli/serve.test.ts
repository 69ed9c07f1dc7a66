import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { writeTinyModel } from '../fixtures/agents/tiny-model.ts';
import { FakeSglangServer } from '../fakes/sglang-server.ts';
import { FakeVllmServer } from '../fakes/vllm-server.ts';
import { binPath, Sandbox, until } from './helpers.ts';

// `rtjob serve --pretrain DIR` as a user runs it: a real process, a printed URL and key, the
// `openai` client talking to it, SIGTERM to stop.
process.env.RTJOB_QUIET_BACKEND = '1';
const root = mkdtempSync(join(tmpdir(), 'rtjob-serve-'));
let model = '';
test.before(async () => {
  model = await writeTinyModel(root);
});
test.after(() => rmSync(root, { recursive: true, force: true }));

function serve(args: string[]): {
  child: ChildProcess;
  ready: Promise<{ baseURL: string; apiKey: string }>;
} {
  const child = spawn(process.execPath, [binPath, 'serve', ...args], {
    env: { ...process.env, RTJOB_HOME: join(root, '.rtjob'), RTJOB_QUIET_BACKEND: '1' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  const ready = new Promise<{ baseURL: string; apiKey: string }>((resolve, reject) => {
    child.stdout!.on('data', (d) => {
      out += d;
      const url = /at (http:\/\/\S+\/v1)\n/.exec(out);
      const key = /api key: (\S+)\n/.exec(out);
      if (url && key) resolve({ baseURL: url[1]!, apiKey: key[1]! });
    });
    child.stderr!.on('data', (d) => (out += d));
    child.once('exit', (code) => reject(new Error(`serve exited ${code}: ${out}`)));
  });
  return { child, ready };
}

test('rtjob serve answers the openai client with its own key on loopback, and stops on SIGTERM', async () => {
  const { child, ready } = serve(['--pretrain', model, '--port', '0', '--max-tokens', '8']);
  try {
    const { baseURL, apiKey } = await ready;
    assert.match(baseURL, /^http:\/\/127\.0\.0\.1:\d+\/v1$/);
    const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
    assert.equal(
      (await client.models.list()).data.map((m) => m.id),
      ['model'],
    );
    const r = await client.chat.completions.create({
      model: 'model',
      messages: [{ role: 'user', content: 'What is 2+3?' }],
      seed: 1,
    });
    assert.ok(r.usage!.completion_tokens >= 1 && r.usage!.completion_tokens <= 8);
    assert.ok(['stop', 'length'].includes(r.choices[0]!.finish_reason));
    const stranger = new OpenAI({ baseURL, apiKey: 'rtj-not-the-key', maxRetries: 0 });
    const err = await stranger.models.list().then(
      () => null,
      (e: unknown) => e,
    );
    assert.ok(err instanceof OpenAI.AuthenticationError);
    // In serve's own words: there are no episodes here.
    assert.match(
      err.message,
      /Incorrect API key provided: use the key the server printed when it started/,
    );
    assert.not.match(err.message, /episode/);
    const other = await client.chat.completions
      .create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'hi' }] })
      .then(
        () => null,
        (e: unknown) => e,
      );
    assert.ok(other instanceof OpenAI.NotFoundError);
    assert.match(
      other.message,
      /The model 'gpt-4o' does not exist; this gateway serves one model, 'model' \(see GET \/v1\/models\)\./,
    );
  } finally {
    const exited = new Promise<number | null>((resolve) =>
      child.once('exit', (code) => resolve(code)),
    );
    child.kill('SIGTERM');
    assert.is(await exited, 0);
  }
});

test("rtjob serve --engine llamacpp answers the openai client with the builtin engine's greedy text", async () => {
  const missing = await import('node-llama-cpp').then(
    () => undefined,
    (e: unknown) => String(e),
  );
  if (missing) assert.unreachable(`node-llama-cpp does not load (${missing})`);
  const ask = async (engine: string): Promise<string> => {
    const { child, ready } = serve(['--pretrain', model, '--port', '0', '--engine', engine]);
    try {
      const { baseURL, apiKey } = await ready;
      const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
      const r = await client.chat.completions.create({
        model: 'model',
        messages: [{ role: 'user', content: 'What is 2+3?' }],
        temperature: 0,
        max_tokens: 16,
      });
      return r.choices[0]!.message.content ?? '';
    } finally {
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGTERM');
      await exited;
    }
  };
  const [builtin, llamacpp] = [await ask('builtin'), await ask('llamacpp')];
  assert.ok(llamacpp.length > 0);
  assert.is(llamacpp, builtin);
});

/** Whether `pid` runs (a zombie, exited but not yet reaped, does not). */
function running(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
}

test('rtjob serve started by npx stops when npx goes (its shell never forwards the SIGTERM), and only then', async () => {
  // npm exec runs `sh -c "rtjob serve …"`; SIGKILL of that shell leaves rtjob without its parent.
  const start = (env: Record<string, string>) => {
    const sh = spawn(
      'sh',
      ['-c', `"${process.execPath}" "${binPath}" serve --pretrain "${model}" --port 0; true`],
      {
        env: { ...process.env, RTJOB_HOME: join(root, '.rtjob'), RTJOB_QUIET_BACKEND: '1', ...env },
        stdio: ['ignore', 'pipe', 'inherit'],
      },
    );
    let out = '';
    sh.stdout!.on('data', (d) => (out += d));
    return until(
      'serve to print its URL',
      () => (/api key: \S+\n/.test(out) ? sh : undefined),
      60_000,
    );
  };
  const serverOf = (sh: ChildProcess): number =>
    Number(readFileSync(`/proc/${sh.pid}/task/${sh.pid}/children`, 'utf8').trim().split(' ')[0]);

  const servers: number[] = [];
  try {
    const npx = await start({ npm_command: 'exec' });
    const server = serverOf(npx);
    servers.push(server);
    npx.kill('SIGKILL');
    await until('the orphaned server to exit', () => (running(server) ? undefined : true), 20_000);

    // Started otherwise (`nohup rtjob serve &` from a shell that exits), it keeps serving.
    const shell = await start({ npm_command: '' });
    const kept = serverOf(shell);
    servers.push(kept);
    shell.kill('SIGKILL');
    await new Promise((r) => setTimeout(r, 1500)); // three of the watch's 500 ms checks
    assert.ok(running(kept), 'a server not started by npx outlives its shell');
    process.kill(kept, 'SIGTERM');
    await until('the server to stop on SIGTERM', () => (running(kept) ? undefined : true), 20_000);
  } finally {
    // An orphan left by a failure would hold this process's pipes open.
    for (const pid of servers.filter(running)) process.kill(pid, 'SIGKILL');
  }
});

for (const [kind, Fake] of [
  ['sglang', FakeSglangServer],
  ['vllm', FakeVllmServer],
] as const) {
  test(`rtjob serve --engine ${kind}: the gateway generates on the ${kind} server, whole and streamed`, async () => {
    const fake = await Fake.start();
    const { child, ready } = serve([
      '--pretrain',
      model,
      '--port',
      '0',
      '--max-tokens',
      '8',
      '--engine',
      kind,
      '--engine-url',
      fake.url,
    ]);
    try {
      const { baseURL, apiKey } = await ready;
      const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
      const messages = [{ role: 'user' as const, content: 'What is 2+3?' }];
      const r = await client.chat.completions.create({ model: 'model', messages, seed: 1 });
      assert.ok(r.usage!.completion_tokens >= 1 && r.usage!.completion_tokens <= 8);
      assert.is(fake.stats.generateRequests, 1, 'the server generated the answer');
      const stream = await client.chat.completions.create({
        model: 'model',
        messages,
        seed: 1,
        stream: true,
      });
      let content = '';
      for await (const ch of stream) content += ch.choices[0]?.delta.content ?? '';
      assert.is(content, r.choices[0]!.message.content ?? '');
      assert.is(fake.stats.generateRequests, 2);
    } finally {
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGTERM');
      await exited;
      await fake.close();
    }
  });
}

test('rtjob serve: --engine sglang without servers, or servers for the builtin engine, fail with one line', async () => {
  const sb = new Sandbox();
  try {
    for (const [args, line] of [
      [['--engine', 'sglang'], /^rtjob: --engine sglang needs --engine-url$/],
      [
        ['--engine-url', 'http://127.0.0.1:9'],
        /^rtjob: --engine-url needs --engine sglang or --engine vllm$/,
      ],
      [
        ['--engine', 'vllm', '--engine-url', 'ftp://x'],
        /^rtjob: --engine-url: 'ftp:\/\/x' is not an http\(s\) URL$/,
      ],
      [
        ['--engine', 'tgi'],
        /^rtjob: --engine: expected builtin, llamacpp, sglang or vllm, got 'tgi'$/,
      ],
      [['--llamacpp-gpu', 'cuda'], /^rtjob: --llamacpp-gpu applies to --engine llamacpp only$/],
      [
        ['--engine', 'llamacpp', '--llamacpp-gpu', 'tpu'],
        /^rtjob: --llamacpp-gpu: expected off, auto, cuda or vulkan, got 'tpu'$/,
      ],
      // Asked for a GPU where none is visible (hidden from CUDA and Vulkan, so on any machine):
      // one line naming what a GPU build needs, never a silent fall back to the CPU.
      [
        ['--engine', 'llamacpp', '--llamacpp-gpu', 'auto'],
        /^rtjob: gpu 'auto': .* here; node-llama-cpp's CUDA build .* needs libcudart\.so\.13 .* Vulkan GPU driver/,
      ],
    ] as const) {
      const r = await sb.run(['serve', '--pretrain', model, '--port', '0', ...args], {
        env: { CUDA_VISIBLE_DEVICES: '', VK_ICD_FILENAMES: join(sb.home, 'no-vulkan-driver.json') },
      });
      assert.is(r.code, 2);
      assert.match(r.stderr.trim(), line);
    }
  } finally {
    await sb.cleanup();
  }
});

test('rtjob serve with a missing model directory fails with one line and exit code 2', async () => {
  const sb = new Sandbox();
  try {
    const r = await sb.run(['serve', '--pretrain', join(root, 'nope'), '--port', '0']);
    assert.is(r.code, 2);
    assert.match(
      r.stderr.trim(),
      /^rtjob: --pretrain: no model directory \(config\.json\) at .*nope$/,
    );
  } finally {
    await sb.cleanup();
  }
});

test.run();
