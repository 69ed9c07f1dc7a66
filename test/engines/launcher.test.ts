import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';

import {
  launchServer,
  launchServerCommand,
  type LaunchedServer,
  type ServerLaunchError,
} from '../../engines/launcher.ts';
import { SglangEngine } from '../../engines/sglang/index.ts';
import type { RtjobError } from '../../runtime/errors.ts';
import { pidAlive } from '../../runtime/pid.ts';

const fakeSglang = fileURLToPath(new URL('../fakes/sglang-server.ts', import.meta.url));
const fixture = fileURLToPath(new URL('./fixtures/launch-then-wait.ts', import.meta.url));

function groupAlive(pgid: number): boolean {
  try {
    process.kill(-pgid, 0);
    return true;
  } catch {
    return false;
  }
}

async function until(pred: () => boolean, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!pred()) {
    if (Date.now() > deadline) throw new Error('condition not reached');
    await new Promise((r) => setTimeout(r, 50));
  }
}

test('launches a server with CUDA_VISIBLE_DEVICES, waits healthy, streams logs, stops it and its children', async () => {
  const lines: string[] = [];
  let server: LaunchedServer | undefined;
  try {
    server = await launchServer({
      command: 'sh',
      args: [
        '-c',
        `sleep 600 & echo grandchild=$!; exec "${process.execPath}" --import tsx "${fakeSglang}" --port 0`,
      ],
      cudaVisibleDevices: [2, 3],
      pollIntervalMs: 100,
      readyTimeoutMs: 60_000,
      stopGraceMs: 3000,
      logSink: (l) => lines.push(l),
    });
    assert.ok(lines.includes('CUDA_VISIBLE_DEVICES=2,3'), lines.join('\n'));
    assert.ok(lines.some((l) => l.startsWith('listening on ')));
    const grandchild = Number(/grandchild=(\d+)/.exec(lines.join('\n'))?.[1]);
    assert.ok(pidAlive(grandchild));
    const engine = new SglangEngine({ urls: [server.url] });
    const r = await engine.generate({ inputIds: [1, 2, 3], gconfig: { maxNewTokens: 4 } });
    await engine.close();
    assert.ok(r.outputTokens.length > 0);
    const exit = await server.stop();
    assert.ok(exit.code === 0 || exit.signal !== null || exit.code === 143, JSON.stringify(exit));
    await until(() => !pidAlive(grandchild) && !groupAlive(server!.pid), 5000);
    const after = await fetch(`${server.url}/health`).then(
      () => 'answered',
      () => 'refused',
    );
    assert.is(after, 'refused');
  } finally {
    await server?.stop();
  }
});

test('a server that exits before it is healthy fails the launch with its last output', async () => {
  const err = await launchServer({
    command: process.execPath,
    args: ['-e', "console.error('RuntimeError: CUDA out of memory'); process.exit(3)"],
    url: 'http://127.0.0.1:9',
    pollIntervalMs: 50,
  }).then(
    (): never => assert.unreachable('launch should fail') as never,
    (e: unknown) => e as ServerLaunchError,
  );
  assert.is(err.code, 'SERVER_EXITED');
  assert.ok(err.logTail.includes('RuntimeError: CUDA out of memory'));
});

test('a server not healthy in time is stopped and the launch fails', async () => {
  const err = await launchServer({
    command: 'sleep',
    args: ['600'],
    url: 'http://127.0.0.1:9',
    readyTimeoutMs: 400,
    pollIntervalMs: 50,
    stopGraceMs: 1000,
  }).then(
    (): never => assert.unreachable('launch should fail') as never,
    (e: unknown) => e as ServerLaunchError,
  );
  assert.is(err.code, 'SERVER_NOT_READY');
});

test('a command line gets a free {port} and the quoted {model}; one without {port} is refused', async () => {
  const model = "/tmp/my model's dir";
  const server = await launchServerCommand(
    `exec '${process.execPath}' --import tsx '${fakeSglang}' --port {port} --model-path {model}`,
    { model, pollIntervalMs: 100, readyTimeoutMs: 60_000 },
  );
  try {
    assert.match(server.url, /^http:\/\/127\.0\.0\.1:\d+$/);
    const info = (await (await fetch(`${server.url}/get_model_info`)).json()) as {
      model_path: string;
    };
    assert.is(info.model_path, model);
  } finally {
    await server.stop();
  }
  const refused = await launchServerCommand('serve --port 8000', { model }).then(
    () => 'launched',
    (e: RtjobError) => `${e.code}: ${e.message}`,
  );
  assert.is(
    refused,
    'INVALID_ARGUMENT: the server command must say where it listens with {port}: serve --port 8000',
  );
});

test('when the launching process is killed, the guard takes the server down (no orphans)', async () => {
  const parent = spawn(process.execPath, ['--import', 'tsx', fixture], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  try {
    const pgid = await new Promise<number>((resolve, reject) => {
      let out = '';
      parent.stdout.on('data', (d: Buffer) => {
        out += d.toString();
        const m = /pgid=(\d+)/.exec(out);
        if (m) resolve(Number(m[1]));
      });
      parent.once('exit', () => reject(new Error(`launcher exited early: ${out}`)));
    });
    assert.ok(groupAlive(pgid));
    parent.kill('SIGKILL');
    await until(() => !groupAlive(pgid), 10_000);
  } finally {
    if (parent.exitCode === null && parent.signalCode === null) parent.kill('SIGKILL');
  }
});

test.run();
