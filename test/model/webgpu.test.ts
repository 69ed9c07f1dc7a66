/**
 * The `webgpu` backend on SwiftShader, the software Vulkan driver of Debian's chromium package
 * (`.ci/run` installs it): it starts when named, is never chosen automatically, fails a
 * synchronous read clearly, runs the tiny checkpoint as the cpu backend does, and the builtin
 * engine generates on it (reading logits asynchronously). Each case runs
 * in a child process, since the Vulkan loader's path must be set when a process starts.
 */
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { swiftShaderEnv } from '../../model/backends/webgpu/dawn.ts';

const root = fileURLToPath(new URL('../../', import.meta.url));
const swiftShader = swiftShaderEnv();

function node(
  args: string[],
  env: Record<string, string | undefined>,
  timeoutMs = 120_000,
): { out: string; err: string; status: number | null } {
  const r = spawnSync(process.execPath, ['--import', 'tsx', ...args], {
    cwd: root,
    env: { ...process.env, RTJOB_QUIET_BACKEND: undefined, RTJOB_TF_BACKEND: undefined, ...env },
    encoding: 'utf8',
    timeout: timeoutMs,
  });
  return { out: r.stdout, err: r.stderr, status: r.status };
}

const onWebGpu = `
import('./model/backend.ts').then(async ({ assertBackendRoom, initBackend, tf }) => {
  console.log('using', await initBackend());
  const x = tf.tensor2d([[1, 2], [3, 4]]);
  const y = tf.matMul(x, x);
  console.log('data', Array.from(await y.data()).join(','));
  try { tf.add(y, 1).dataSync(); } catch (e) { console.log('sync', e.code); }
  console.log('uploaded', Array.from(tf.tensor1d([1, 2, 3, 4]).dataSync()).join(','));
  const many = Array.from({ length: 40 }, (_, i) => tf.scalar(i + 1));
  console.log('addN', (await tf.addN(many).data())[0]);
  assertBackendRoom(2 ** 40, 'no total limit is reported', { largestBytes: 2 ** 20 });
  try { assertBackendRoom(2 ** 34, 'a model of 4295M parameters', { largestBytes: 2 ** 34 }); } catch (e) { console.log('room', e.code, e.message); }
}).catch((e) => { console.error('ERR ' + e.message); process.exit(3); })`;

test('webgpu named where Dawn finds no adapter is a one-line error saying how to get one', () => {
  const r = node(['-e', onWebGpu], {
    RTJOB_TF_BACKEND: 'webgpu',
    VK_ICD_FILENAMES: undefined,
    LD_LIBRARY_PATH: undefined,
  });
  assert.is(r.status, 3, r.err);
  assert.match(r.err, /^ERR TF\.js backend 'webgpu': Dawn found no GPU adapter \(.*SwiftShader/m);
});

test('on SwiftShader: webgpu starts when named, reads asynchronously, refuses sync reads of GPU data', () => {
  assert.ok(swiftShader, 'no SwiftShader: install Debian chromium (apt-get install chromium)');
  const r = node(['-e', onWebGpu], { ...swiftShader, RTJOB_TF_BACKEND: 'webgpu' });
  assert.is(r.status, 0, r.err);
  assert.match(r.out, /using webgpu/);
  assert.match(r.err, /rtjob model: TF\.js backend 'webgpu' \(SwiftShader.*, software\)\n/);
  assert.match(r.out, /data 7,10,15,22/);
  assert.match(r.out, /sync WEBGPU_SYNC_READ/);
  assert.match(r.out, /uploaded 1,2,3,4/);
  // More inputs than storage buffers one shader may bind: summed in groups (kernels.ts).
  assert.match(r.out, /addN 820\n/);
  // WebGPU reports no total memory, but one tensor must fit one storage-buffer binding.
  assert.match(
    r.out,
    /room BACKEND_MEMORY a model of 4295M parameters has a tensor of 16\.00 GiB, but one tensor on the webgpu backend holds at most \d+\.\d\d GiB/,
  );
});

test('on SwiftShader: the software adapter is never chosen automatically', () => {
  assert.ok(swiftShader, 'no SwiftShader: install Debian chromium (apt-get install chromium)');
  const probe =
    "import('./model/backends/webgpu/dawn.ts').then(async (d) => { console.log(JSON.stringify(await d.probeWebGpu())); const b = await import('./model/backend.ts'); console.log('auto', await b.backendDrivers.webgpu.auto(), await b.initBackend()); })";
  const r = node(['-e', probe], swiftShader);
  assert.is(r.status, 0, r.err);
  const adapter = JSON.parse(r.out.split('\n')[0]!) as {
    hardware: boolean;
    maxTensorBytes: number;
  };
  assert.is(adapter.hardware, false);
  assert.ok(adapter.maxTensorBytes >= 2 ** 27, r.out);
  assert.match(r.out, /auto false wasm/);
});

// A pass compiled ahead: nothing runs, its pipelines compile asynchronously and are kept out of
// the cache until done (a real pass meanwhile compiles its own); then the pass runs for real.
const aheadScript = `
import('./model/backend.ts').then(async ({ compileKernelsAhead, initBackend, tf }) => {
  await initBackend();
  const cache = tf.backend().pipelineCache;
  const x = tf.tensor2d([[1, 2], [3, 4]]);
  const pass = () => tf.sum(tf.exp(tf.matMul(x, x)), 1);
  const n0 = Object.keys(cache).length;
  const t0 = tf.memory().numTensors;
  const ahead = compileKernelsAhead('t', () => void pass());
  console.log('waits', ahead instanceof Promise, 'cached meanwhile', Object.keys(cache).length - n0, 'tensors left', tf.memory().numTensors - t0);
  console.log('during', Array.from(await tf.neg(tf.add(x, 1)).data()).join(','));
  await ahead;
  const compiled = Object.keys(cache).length - n0;
  console.log('compiled', compiled, 'unfinished', Object.values(cache).filter((p) => p instanceof Promise).length);
  console.log('runs', Array.from(await pass().data()).map((v) => v.toPrecision(6)).join(','));
  console.log('again', compileKernelsAhead('t', () => void pass()), 'new', Object.keys(cache).length - n0 - compiled);
  console.log('warm', compileKernelsAhead('t', () => { throw new Error('not run'); }));
  try { compileKernelsAhead('u', () => { tf.relu(x); throw new Error('bad input'); }); } catch (e) { console.log('throws', e.message); }
  console.log('after', Array.from(await tf.relu(tf.neg(x)).data()).join(','), 'unfinished', Object.values(cache).filter((p) => p instanceof Promise).length);
}).catch((e) => { console.error('ERR ' + e.message); process.exit(3); })`;

test('on SwiftShader: kernels compile ahead of a pass, off the event loop, and the pass then runs as before', () => {
  assert.ok(swiftShader, 'no SwiftShader: install Debian chromium (apt-get install chromium)');
  const r = node(['-e', aheadScript], { ...swiftShader, RTJOB_TF_BACKEND: 'webgpu' });
  assert.is(r.status, 0, r.err);
  assert.match(r.out, /^waits true cached meanwhile 0 tensors left 0$/m);
  assert.match(r.out, /^during -2,-3,-4,-5$/m);
  const compiled = Number(/^compiled (\d+) unfinished 0$/m.exec(r.out)?.[1]);
  assert.ok(compiled >= 3, r.out);
  // exp([[7, 10], [15, 22]]) summed per row
  assert.match(r.out, /^runs 23123\.1,3\.58818e\+9$/m);
  assert.match(r.out, /^again undefined new 0$/m);
  assert.match(r.out, /^warm undefined$/m);
  assert.match(r.out, /^throws bad input$/m);
  assert.match(r.out, /^after 0,0,0,0 unfinished 0$/m);
});

test('adapters: a Metal, Vulkan or D3D12 GPU is hardware; software drivers and fallback adapters are not', async () => {
  const { describeAdapter } = await import('../../model/backends/webgpu/dawn.ts');
  const limits = { maxStorageBufferBindingSize: 2 ** 30 };
  const hw = (info: Record<string, unknown>, isFallbackAdapter?: boolean): boolean =>
    describeAdapter({ info, limits, ...(isFallbackAdapter ? { isFallbackAdapter } : {}) }).hardware;
  assert.ok(hw({ vendor: 'apple', architecture: 'metal-3', description: 'Apple M2' }));
  assert.ok(hw({ vendor: 'nvidia', architecture: 'ada-lovelace', device: 'NVIDIA RTX 4090' }));
  assert.ok(hw({ vendor: 'intel', architecture: 'gen-12lp', description: 'Intel(R) Iris(R) Xe' }));
  assert.not.ok(hw({ vendor: 'google', architecture: 'swiftshader', description: 'SwiftShader' }));
  assert.not.ok(hw({ vendor: 'mesa', description: 'llvmpipe (LLVM 15.0.6, 256 bits)' }));
  assert.not.ok(hw({ description: 'Microsoft Basic Render Driver' }));
  assert.not.ok(hw({ vendor: 'apple', description: 'Apple M2' }, true));
  assert.is(describeAdapter({ info: { description: 'Apple M2' }, limits }).description, 'Apple M2');
});

test('on SwiftShader: where the adapter is hardware and CUDA is absent, the automatic choice is webgpu', () => {
  assert.ok(swiftShader, 'no SwiftShader: install Debian chromium (apt-get install chromium)');
  // The probes answer as on a Mac: no CUDA, a hardware adapter (SwiftShader stands in for it).
  const auto = `
import('./model/backend.ts').then(async (b) => {
  b.backendDrivers.torch.auto = async () => false;
  b.backendDrivers.webgpu.auto = async () => true;
  console.log('chose', await b.initBackend(), b.backendOnHost());
}).catch((e) => { console.error('ERR ' + e.message); process.exit(3); })`;
  const r = node(['-e', auto], swiftShader);
  assert.is(r.status, 0, r.err);
  assert.match(r.out, /^chose webgpu false$/m);
  assert.match(r.err, /rtjob model: TF\.js backend 'webgpu' \(SwiftShader.*\) \(automatic\)\n/);
});

test('on SwiftShader: the tiny checkpoint computes on webgpu as on cpu (logits, KV-cache decode, loss, gradients, one AdamW step)', () => {
  assert.ok(swiftShader, 'no SwiftShader: install Debian chromium (apt-get install chromium)');
  const r = node(
    ['test/fixtures/model/backend-parity.ts', 'cpu', 'webgpu'],
    { ...swiftShader, RTJOB_QUIET_BACKEND: '1' },
    300_000,
  );
  assert.is(r.status, 0, r.err);
  const p = JSON.parse(r.out.trim().split('\n').pop()!) as {
    logits: { maxAbsDiff: number; scale: number };
    decode: { maxAbsDiff: number; scale: number };
    loss: [number, number];
    grads: { maxAbsDiff: number; scale: number };
    gradNorm: [number, number];
    paramsAfterAdamW: number;
  };
  // float32 on both sides; the cpu side runs the fused JS attention, webgpu the composed one.
  assert.ok(p.logits.scale > 1 && p.logits.maxAbsDiff < 1e-4, JSON.stringify(p));
  assert.ok(p.decode.scale > 1 && p.decode.maxAbsDiff < 1e-4, JSON.stringify(p));
  assert.ok(Math.abs(p.loss[0] - p.loss[1]) < 1e-5 * Math.abs(p.loss[0]), JSON.stringify(p));
  assert.ok(p.grads.scale > 0.1 && p.grads.maxAbsDiff < 1e-4, JSON.stringify(p));
  assert.ok(Math.abs(p.gradNorm[0] - p.gradNorm[1]) < 1e-5 * p.gradNorm[0], JSON.stringify(p));
  // A first AdamW step moves a weight by about lr * g / (|g| + eps): where a gradient is near
  // zero, its float32 difference between backends can move that weight by up to lr (1e-3).
  assert.ok(p.paramsAfterAdamW < 1e-3, JSON.stringify(p));
});

test('on SwiftShader: the builtin engine generates on webgpu the tokens it generates on cpu', () => {
  assert.ok(swiftShader, 'no SwiftShader: install Debian chromium (apt-get install chromium)');
  const r = node(
    ['test/fixtures/model/engine-parity.ts', 'cpu', 'webgpu'],
    { ...swiftShader, RTJOB_QUIET_BACKEND: '1' },
    300_000,
  );
  assert.is(r.status, 0, r.err);
  type Out = { tokens: number[][]; logprobs: number[][] };
  const p = JSON.parse(r.out.trim().split('\n').pop()!) as { cpu: Out; webgpu: Out };
  assert.equal(p.webgpu.tokens, p.cpu.tokens);
  const lp = (o: Out): number[] => o.logprobs.flat();
  lp(p.cpu).forEach((v, i) => assert.ok(Math.abs(v - lp(p.webgpu)[i]!) < 1e-4, `logprob ${i}`));
});

test.run();
