/**
 * TF.js backend selection. `RTJOB_TF_BACKEND` (or {@link initBackend}'s argument) names one of
 * `webgpu`, `wasm`, `cpu`; without it the first backend of {@link automaticOrder} whose `auto()`
 * holds starts, else wasm. A software adapter (SwiftShader) is never chosen automatically. The
 * pure-JS `cpu` backend is the test oracle. The chosen backend is announced once per process on
 * stderr.
 *
 * Each backend is one {@link BackendDriver}: how it starts, whether the automatic choice takes it,
 * how much memory it holds, and whether the project's JS-loop kernels run on it.
 *
 * @module
 */
import * as tf from '@tensorflow/tfjs';
import '@tensorflow/tfjs-backend-wasm';
import { RtjobError } from '../runtime/errors.ts';
import { readEnv, tfBackendNames } from '../runtime/env.ts';
import { readMemory } from '../runtime/node/memory-monitor.ts';
import { compileAhead } from './backends/webgpu/compile-ahead.ts';
import { probeWebGpu, registerWebGpu, webGpuUnavailable } from './backends/webgpu/dawn.ts';
import './wasm-kernels.ts';
// The `torch` backend (libtorch addon): registered here, built and loaded only when selected.
import { startTorchBackend, torchCudaLikely } from './backends/torch/index.ts';

/** A backend `RTJOB_TF_BACKEND` may name. */
export type BackendName = (typeof tfBackendNames)[number];

/** Why a backend could not start, or why tensors would not fit it. */
export class BackendError extends RtjobError<'BACKEND_UNAVAILABLE' | 'BACKEND_MEMORY'> {
  override get name(): string {
    return 'BackendError';
  }
}

/** How much a backend holds; undefined where it is bounded only by the host or not reported. */
export interface BackendMemory {
  /** All tensors together, in bytes. */
  readonly totalBytes?: number;
  /** One tensor, in bytes (a GPU buffer binding). */
  readonly tensorBytes?: number;
  /** What holds them, for messages: "the wasm heap", "the GPU's buffers". */
  readonly where: string;
  /**
   * The tensors live in host memory: a check also compares a request against what this
   * process's cgroup, or else the machine, has free at that moment (`readMemory`).
   */
  readonly host?: boolean;
}

/** One backend: how it starts and what the rest of the model needs to know about it. */
export interface BackendDriver {
  /**
   * Makes it TF.js's current backend. Resolves to a short description of the device for the
   * announcement ('' when there is nothing to add); rejects with a one-line {@link BackendError}.
   */
  start(): Promise<string>;
  /** Whether the automatic choice takes it here (only where it is fast: a GPU). */
  auto(): Promise<boolean>;
  /** The memory limits once started. */
  memory(): BackendMemory;
  /**
   * Whether the model's host path runs here: tensors read synchronously, and the fused ops
   * (`attention.ts`) run as JS loops over host memory or as the backend's own implementation
   * (`backend-ops.ts`). Where false (webgpu), the model composes those ops from TF.js kernels
   * and reads asynchronously.
   */
  readonly onHost: boolean;
  /**
   * Compiles the kernels of a pass without running them, off the event loop, where the backend
   * would otherwise compile them inside the op calls (webgpu; see {@link compileKernelsAhead}).
   */
  compileAhead?(site: string, pass: () => void): Promise<void> | undefined;
}

/** The wasm backend's heap limit: 32-bit addresses (Emscripten's `getHeapMax`). */
export const wasmHeapMaxBytes = 4294901760;

async function setBackend(name: string): Promise<void> {
  let ok = false;
  let cause: unknown;
  try {
    ok = await tf.setBackend(name);
  } catch (e) {
    cause = e;
  }
  if (!ok)
    throw new BackendError('BACKEND_UNAVAILABLE', `TF.js backend '${name}' failed to start`, {
      cause,
    });
}

let webgpuTensorBytes: number | undefined;
/** Where the torch backend's tensors live once started (`cpu`, `cuda`, `cuda:1`). */
let torchDevice: string | undefined;

/** The backends, in the order the automatic choice tries those whose `auto()` may be true. */
export const backendDrivers: Record<BackendName, BackendDriver> = {
  torch: {
    async start() {
      const t = await startTorchBackend();
      torchDevice = t.device;
      // RTJOB_TORCH_PRECISION sets the matmul precision on CUDA; on the CPU libtorch is fp32.
      const precision = t.device.startsWith('cuda')
        ? (readEnv('RTJOB_TORCH_PRECISION') ?? 'tf32')
        : 'fp32';
      return `libtorch ${t.version}, ${t.device}, ${precision}`;
    },
    // Only with CUDA: on CPU, libtorch is faster than wasm but needs a compiler and libtorch
    // (never assumed); name it with RTJOB_TF_BACKEND=torch.
    auto: async () => torchCudaLikely(),
    // On a GPU the device's memory is not read (the addon has no CUDA memory query): unchecked.
    memory: () =>
      torchDevice === 'cpu'
        ? { where: 'host memory', host: true }
        : { where: "libtorch's device memory" },
    // Reads synchronously (the addon copies out on `dataSync`), and the model's fused ops have
    // torch implementations (`backend-ops.ts`): the host path of the model, on the device.
    onHost: true,
  },
  webgpu: {
    async start() {
      const why = (await registerWebGpu()) ? undefined : await webGpuUnavailable();
      if (why) throw new BackendError('BACKEND_UNAVAILABLE', `TF.js backend 'webgpu': ${why}`);
      await setBackend('webgpu');
      const a = await probeWebGpu();
      webgpuTensorBytes = a?.maxTensorBytes;
      return a ? `${a.description}${a.hardware ? '' : ', software'}` : '';
    },
    async auto() {
      return (await probeWebGpu({ quiet: true }))?.hardware === true;
    },
    memory: () => ({
      ...(webgpuTensorBytes ? { tensorBytes: webgpuTensorBytes } : {}),
      where: "the GPU's buffers",
    }),
    onHost: false,
    compileAhead,
  },
  wasm: {
    async start() {
      await setBackend('wasm');
      return '';
    },
    auto: async () => true,
    memory: () => ({ totalBytes: wasmHeapMaxBytes, where: 'the wasm heap', host: true }),
    onHost: true,
  },
  cpu: {
    async start() {
      await setBackend('cpu');
      return '';
    },
    auto: async () => false,
    memory: () => ({ where: 'host memory', host: true }),
    onHost: true,
  },
};

/**
 * The automatic choice, fastest first; the last one always starts: torch where libtorch has CUDA
 * and a GPU is visible, else webgpu on a hardware adapter (a Mac's Metal GPU, or any GPU without
 * CUDA; never a software one such as SwiftShader), else wasm. Every model path a program runs
 * reads tensors asynchronously, which webgpu needs in Node.
 */
const automaticOrder: BackendName[] = ['torch', 'webgpu', 'wasm'];

let current: Promise<BackendName> | undefined;
/** The backend asked for while {@link initBackend} is starting it. */
let starting: string | undefined;
const announced = new Set<BackendName>();

type ProcessEvent = 'uncaughtException' | 'unhandledRejection';
const processEvents: ProcessEvent[] = ['uncaughtException', 'unhandledRejection'];
type Listener = (...args: unknown[]) => void;
// `process.listeners` is overloaded per event name; both of these take a plain listener.
const listenersOf = (e: ProcessEvent): Listener[] =>
  (process.listeners as (e: string) => Listener[])(e);

function processListeners(): Map<ProcessEvent, Set<Listener>> {
  return new Map(processEvents.map((e) => [e, new Set(listenersOf(e))]));
}

/**
 * Removes the `uncaughtException` / `unhandledRejection` listeners the wasm backend's Emscripten
 * module adds when it starts. They only re-throw, and a throw from inside such a listener makes
 * Node print the source line it came from: the module's one 38 KB minified line, before the real
 * error, in every process (driver, trainer, rollout and the user's agent code in it) that then
 * fails on an unexpected error. Without them Node reports the error itself, as it would anyway.
 */
function dropRethrowingListeners(before: Map<ProcessEvent, Set<Listener>>): void {
  for (const e of processEvents) {
    for (const l of listenersOf(e)) {
      // Emscripten's own: added while the backend started, and all they do is throw.
      if (!before.get(e)!.has(l) && /\bthrow\b/.test(String(l))) process.removeListener(e, l);
    }
  }
}

function checkName(want: string): BackendName {
  if ((tfBackendNames as readonly string[]).includes(want)) return want as BackendName;
  throw new BackendError(
    'BACKEND_UNAVAILABLE',
    `unknown TF.js backend '${want}': expected one of ${tfBackendNames.join(', ')}`,
  );
}

async function chooseAndStart(want: BackendName | undefined): Promise<[BackendName, string]> {
  if (want) return [want, await backendDrivers[want].start()];
  for (const name of automaticOrder) {
    const last = name === automaticOrder[automaticOrder.length - 1];
    if (!last && !(await backendDrivers[name].auto())) continue;
    try {
      return [name, await backendDrivers[name].start()];
    } catch (e) {
      // An adapter that was found but does not start leaves the choice to the next backend.
      if (last) throw e;
    }
  }
  throw new BackendError('BACKEND_UNAVAILABLE', 'no TF.js backend started');
}

/**
 * Initialises TF.js once per process and returns the backend in use.
 *
 * @param preferred a backend to use instead of the automatic choice (also `RTJOB_TF_BACKEND`)
 * @example
 * const backend = await initBackend();        // 'wasm' on a machine without a GPU
 */
export function initBackend(preferred?: BackendName): Promise<BackendName> {
  const raw = preferred ?? readEnv('RTJOB_TF_BACKEND');
  // The roles of an in-process run load their models at once: one start of a backend serves
  // them all (a second would ask the GPU adapter for a second device).
  if (current && (!raw || tf.getBackend() === raw || raw === starting)) return current;
  const before = processListeners();
  starting = raw;
  current = (async (): Promise<BackendName> => {
    const want = raw === undefined ? undefined : checkName(raw);
    const [chosen, detail] = await chooseAndStart(want);
    await tf.ready();
    description = detail ? `${chosen} (${detail})` : chosen;
    dropRethrowingListeners(before);
    if (readEnv('RTJOB_QUIET_BACKEND') !== true && !announced.has(chosen)) {
      process.stderr.write(
        `rtjob model: TF.js backend '${chosen}'${detail ? ` (${detail})` : ''}${want ? '' : ' (automatic)'}\n`,
      );
    }
    announced.add(chosen);
    return chosen;
  })().finally(() => (starting = undefined));
  return current;
}

let description = '';

/**
 * What this process's models compute on, as its announcement says it: `torch (libtorch 1.13.1,
 * cpu, fp32)`, `wasm`; '' before {@link initBackend}. Roles return it from `ready()`, and the
 * driver prints each role's in the run's first lines.
 */
export function backendDescription(): string {
  return description;
}

/** The driver of the backend TF.js runs on now (undefined before {@link initBackend}). */
export function currentDriver(): BackendDriver | undefined {
  const name = tf.getBackend();
  return (tfBackendNames as readonly string[]).includes(name)
    ? backendDrivers[name as BackendName]
    : undefined;
}

/** Whether the current backend keeps tensors in host memory (see {@link BackendDriver.onHost}). */
export function backendOnHost(): boolean {
  return currentDriver()?.onHost ?? true;
}

/**
 * Reads `tensors` into host memory asynchronously, all in one round trip, so that the
 * synchronous reads that follow (`dataSync` in weight exports and checkpoints) succeed on every
 * backend: a backend that keeps tensors on a device (webgpu) keeps a host copy of what it read
 * for as long as the tensor lives (a trained variable becomes a new tensor at each step). Where
 * tensors are read synchronously anyway ({@link backendOnHost}) it does nothing.
 *
 * @example
 * await readToHost(model.params.values());
 * const weights = model.exportWeights(); // now also on webgpu
 */
export async function readToHost(tensors: Iterable<tf.Tensor>): Promise<void> {
  if (backendOnHost()) return;
  await Promise.all(Array.from(tensors, (t) => t.data()));
}

/**
 * Compiles the kernels that `pass` calls without running them, where the current backend would
 * compile them synchronously inside its op calls (webgpu: hundreds of pipelines at a training
 * step's first pass, tens of seconds on a software adapter, during which a worker's event loop
 * answers no heartbeat). `site` names the call site: once one of its passes finds every kernel
 * compiled, its later passes are not compiled ahead. Returns a promise to await before running the pass for real, or
 * undefined when there is nothing to wait for (every other backend, and webgpu once the pass's
 * kernels are compiled): then the pass may run at once, in the same turn.
 *
 * `pass` must change nothing but the tensors it creates, which are freed, and read nothing back.
 *
 * @example
 * const ahead = compileKernelsAhead('forward', () => void forward());
 * if (ahead) await ahead;
 * const out = forward();
 */
export function compileKernelsAhead(site: string, pass: () => void): Promise<void> | undefined {
  return currentDriver()?.compileAhead?.(site, pass);
}

const gib = (b: number): string => (b / 2 ** 30).toFixed(2);

/** Options of {@link assertBackendRoom}. */
export interface BackendRoomOptions {
  /** The largest single tensor among them, checked against a per-tensor limit. */
  largestBytes?: number;
  /** What to do instead past a backend's own limit (default: another backend or a smaller model). */
  remedy?: string;
  /** What to do instead past the free host memory (default: a smaller model or more memory). */
  hostRemedy?: string;
  /**
   * The bytes new to the host, where less than `bytes`: a loader that frees each source array as
   * its tensor uploads holds one tensor twice at a time, not the whole model.
   */
  hostBytes?: number;
}

/**
 * Throws a one-line error when `bytes` more of tensors cannot fit the current backend, before
 * they are allocated: past its 4 GiB heap the wasm backend does not throw but aborts the process
 * with a wasm trap (`memory access out of bounds`, `Aborted()`); a GPU backend fails a buffer
 * larger than its binding limit; past the free host memory (cpu, wasm, torch on the CPU) the
 * kernel's OOM killer ends the process without a word. Device memory on CUDA is not checked.
 *
 * @param what what needs the memory, for the message (e.g. "a model of 596M parameters")
 */
export function assertBackendRoom(
  bytes: number,
  what: string,
  opts: BackendRoomOptions = {},
): void {
  const name = tf.getBackend();
  const mem = currentDriver()?.memory();
  if (!mem) return;
  const used = tf.memory().numBytes;
  if (mem.totalBytes !== undefined && used + bytes > mem.totalBytes) {
    throw new BackendError(
      'BACKEND_MEMORY',
      `${what} needs ${gib(bytes)} GiB of float32 tensors, but the ${name} backend holds at most ` +
        `${name === 'wasm' ? '4' : gib(mem.totalBytes)} GiB (${gib(used)} GiB in use): ${opts.remedy ?? 'use RTJOB_TF_BACKEND=cpu or a smaller model'}`,
    );
  }
  const largest = opts.largestBytes ?? 0;
  if (mem.tensorBytes !== undefined && largest > mem.tensorBytes) {
    throw new BackendError(
      'BACKEND_MEMORY',
      `${what} has a tensor of ${gib(largest)} GiB, but one tensor on the ${name} backend ` +
        `holds at most ${gib(mem.tensorBytes)} GiB (${mem.where}): use another backend`,
    );
  }
  if (mem.host) {
    const r = readMemory();
    const free = r.totalBytes - r.usedBytes;
    const need = opts.hostBytes ?? bytes;
    if (need > free)
      throw new BackendError(
        'BACKEND_MEMORY',
        `${what} needs ${gib(need)} GiB of float32 tensors, but ${r.source === 'cgroup' ? "this process's cgroup" : 'the machine'} has ${gib(free)} GiB free: ${opts.hostRemedy ?? 'use a smaller model or a machine with more memory'}`,
      );
  }
}

export { tf };
