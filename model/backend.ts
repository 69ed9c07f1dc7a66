/**
 * TF.js backend selection. The order is: `RTJOB_TF_BACKEND` when set (`wasm`, `cpu`,
 * `tensorflow`), else `@tensorflow/tfjs-node-gpu`, else `@tensorflow/tfjs-node` (both register the
 * native `tensorflow` backend when installed), else the wasm backend. The pure-JS `cpu` backend is
 * the test oracle. The chosen backend is announced once on stderr.
 *
 * @module
 */
import * as tf from '@tensorflow/tfjs';
import '@tensorflow/tfjs-backend-wasm';
import { readEnv } from '../runtime/env.ts';
import './wasm-kernels.ts';
// The `torch` backend (libtorch addon): registered here, built and loaded only when selected.
import { startTorchBackend } from './backends/torch/index.ts';

export type BackendName = 'wasm' | 'cpu' | 'tensorflow' | 'torch';

let current: Promise<BackendName> | undefined;

async function tryNative(): Promise<boolean> {
  for (const name of ['@tensorflow/tfjs-node-gpu', '@tensorflow/tfjs-node']) {
    try {
      // A variable specifier keeps the type checker and bundlers from requiring the package.
      const spec: string = name;
      await import(spec);
      if (await tf.setBackend('tensorflow')) return true;
    } catch {
      // not installed (the normal case here): fall through to the next option
    }
  }
  return false;
}

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

/**
 * Initialises TF.js once per process and returns the backend in use.
 *
 * @param preferred a backend to use instead of the automatic choice (also `RTJOB_TF_BACKEND`)
 * @example
 * const backend = await initBackend();        // 'wasm' on a machine without tfjs-node
 */
export function initBackend(preferred?: BackendName): Promise<BackendName> {
  const want = preferred ?? readEnv('RTJOB_TF_BACKEND');
  if (current && (!want || tf.getBackend() === want)) return current;
  const before = processListeners();
  current = (async (): Promise<BackendName> => {
    let chosen: BackendName;
    let detail = '';
    if (want === 'torch') {
      const t = await startTorchBackend();
      chosen = 'torch';
      detail = ` (libtorch ${t.version}, ${t.device})`;
    } else if (want === 'cpu' || want === 'wasm') {
      if (!(await tf.setBackend(want))) throw new Error(`TF.js backend '${want}' failed to start`);
      chosen = want;
    } else if (want === 'tensorflow' || want === undefined) {
      if (await tryNative()) chosen = 'tensorflow';
      else if (want === 'tensorflow')
        throw new Error('RTJOB_TF_BACKEND=tensorflow but tfjs-node is not installed');
      else {
        if (!(await tf.setBackend('wasm'))) throw new Error("TF.js backend 'wasm' failed to start");
        chosen = 'wasm';
      }
    } else {
      throw new Error(
        `unknown RTJOB_TF_BACKEND '${String(want)}' (wasm, cpu, torch or tensorflow)`,
      );
    }
    await tf.ready();
    dropRethrowingListeners(before);
    if (readEnv('RTJOB_QUIET_BACKEND') !== true) {
      process.stderr.write(`rtjob model: TF.js backend '${chosen}'${detail}\n`);
    }
    return chosen;
  })();
  return current;
}

/** The wasm backend's heap limit: 32-bit addresses (Emscripten's `getHeapMax`). */
export const wasmHeapMaxBytes = 4294901760;

/**
 * Throws a one-line error when `bytes` more of tensors cannot fit the backend, before they are
 * allocated: past its 4 GiB heap the wasm backend does not throw but aborts the process with a
 * wasm trap (`memory access out of bounds`, `Aborted()`). Other backends are not checked.
 *
 * @param what what needs the memory, for the message (e.g. "a model of 596M parameters")
 */
export function assertBackendRoom(bytes: number, what: string): void {
  if (tf.getBackend() !== 'wasm') return;
  const used = tf.memory().numBytes;
  if (used + bytes <= wasmHeapMaxBytes) return;
  const gib = (b: number): string => (b / 2 ** 30).toFixed(2);
  throw new Error(
    `${what} needs ${gib(bytes)} GiB of float32 tensors, but the wasm backend holds at most 4 GiB ` +
      `(${gib(used)} GiB in use): use RTJOB_TF_BACKEND=cpu or a smaller model`,
  );
}

export { tf };
