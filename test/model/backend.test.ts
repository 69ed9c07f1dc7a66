import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';

const root = fileURLToPath(new URL('../../', import.meta.url));
const script =
  "import('./model/backend.ts').then(async (b) => { console.log('using', await b.initBackend()); }).catch((e) => { console.error('ERR ' + e.message); process.exit(3); })";

function run(env: Record<string, string | undefined>): {
  out: string;
  err: string;
  status: number | null;
} {
  const r = spawnSync(process.execPath, ['--import', 'tsx', '-e', script], {
    cwd: root,
    env: { ...process.env, RTJOB_QUIET_BACKEND: undefined, RTJOB_TF_BACKEND: undefined, ...env },
    encoding: 'utf8',
    timeout: 60_000,
  });
  return { out: r.stdout, err: r.stderr, status: r.status };
}

test('without a GPU adapter the automatic choice is wasm, announced once on stderr', () => {
  const r = run({});
  assert.is(r.status, 0, r.err);
  assert.match(r.out, /using wasm/);
  assert.match(r.err, /rtjob model: TF\.js backend 'wasm' \(automatic\)/);
  assert.is(r.err.match(/rtjob model:/g)?.length, 1);
});

test('RTJOB_TF_BACKEND selects cpu; an unknown value is a one-line error naming the choices', () => {
  const cpu = run({ RTJOB_TF_BACKEND: 'cpu' });
  assert.match(cpu.out, /using cpu/);
  assert.match(cpu.err, /rtjob model: TF\.js backend 'cpu'\n/);
  const bad = run({ RTJOB_TF_BACKEND: 'tensorflow' });
  assert.is(bad.status, 3);
  assert.match(
    bad.err,
    /^ERR RTJOB_TF_BACKEND: expected one of torch, webgpu, wasm, cpu, got 'tensorflow'$/m,
  );
});

test('tensors that would not fit the 4 GiB wasm heap, or the free host memory, are refused with a clear error before allocation', async () => {
  const { assertBackendRoom, backendDrivers, initBackend, tf, wasmHeapMaxBytes } = await import(
    '../../model/backend.ts'
  );
  // One memory report per backend: wasm's heap, and for both the host's free memory.
  assert.is(backendDrivers.wasm.memory().totalBytes, wasmHeapMaxBytes);
  assert.is(backendDrivers.cpu.memory().totalBytes, undefined);
  assert.ok(backendDrivers.cpu.memory().host && backendDrivers.wasm.memory().host);
  await initBackend('wasm');
  assertBackendRoom(2 ** 30, 'a model of 268M parameters');
  assert.throws(
    () => assertBackendRoom(2.4e9 * 2, 'a model of 1192M parameters'),
    (e: Error & { code?: string }) =>
      e.code === 'BACKEND_MEMORY' &&
      /^a model of 1192M parameters needs 4\.47 GiB of float32 tensors, but the wasm backend holds at most 4 GiB \(0\.00 GiB in use\): use RTJOB_TF_BACKEND=cpu or a smaller model$/.test(
        e.message,
      ),
  );
  await initBackend('cpu');
  // cpu: no limit of its own, only what the host has free now.
  const { readMemory } = await import('../../runtime/node/memory-monitor.ts');
  const r = readMemory();
  const free = r.totalBytes - r.usedBytes;
  assertBackendRoom(2 ** 20, 'a small model on the cpu backend');
  assert.throws(
    () => assertBackendRoom(free + 2 ** 31, 'a model past the free memory'),
    (e: Error & { code?: string }) =>
      e.code === 'BACKEND_MEMORY' &&
      /^a model past the free memory needs [\d.]+ GiB of float32 tensors, but (the machine|this process's cgroup) has [\d.]+ GiB free: use a smaller model or a machine with more memory$/.test(
        e.message,
      ),
  );
  assert.is(tf.getBackend(), 'cpu');
});

test('an unhandled error after the wasm backend started is reported by Node, without the module source', () => {
  const r = spawnSync(
    process.execPath,
    [
      '--import',
      'tsx',
      '-e',
      "import('./model/backend.ts').then(async (b) => { await b.initBackend('wasm'); void Promise.reject(new Error('boom from user code')); })",
    ],
    {
      cwd: root,
      env: { ...process.env, RTJOB_QUIET_BACKEND: '1' },
      encoding: 'utf8',
      timeout: 60_000,
    },
  );
  assert.is.not(r.status, 0);
  assert.match(r.stderr, /Error: boom from user code/);
  // Emscripten's re-throwing listeners made Node print the module's 38 KB minified line first.
  assert.ok(r.stderr.length < 4000, `stderr is ${r.stderr.length} characters`);
  assert.not.match(r.stderr, /WasmBackendModule/);
});

test.run();
