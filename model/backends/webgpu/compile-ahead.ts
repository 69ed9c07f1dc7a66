/**
 * Shader compilation off the event loop for the `webgpu` backend.
 *
 * `@tensorflow/tfjs-backend-webgpu` compiles a kernel's pipeline the first time it runs, with
 * Dawn's synchronous `createComputePipeline`, inside the op call. A training step's first
 * forward + backward compiles a few hundred pipelines in one synchronous TF.js call: measured
 * 38.6 s without a turn of the event loop on SwiftShader (2 busy cores), long enough for the head
 * and the driver to declare the worker silent (30 s heartbeat) and the trainer role dead.
 *
 * The package has a mode for this (`WEBGPU_ENGINE_COMPILE_ONLY`): ops only create their
 * pipelines, with `createComputePipelineAsync`, and dispatch nothing. {@link compileAhead} runs
 * a pass in that mode, waits for the new pipelines without blocking, and only then may the
 * caller run the pass for real, which finds every pipeline compiled.
 *
 * @module
 */
import * as tf from '@tensorflow/tfjs';

/** The parts of the package's `WebGPUBackend` used here. */
interface CompilingBackend {
  /** Pipelines by shader key: a pipeline, or a promise of one while compiling in parallel. */
  pipelineCache: Record<string, unknown>;
}

const compileOnlyFlag = 'WEBGPU_ENGINE_COMPILE_ONLY';

/**
 * Call sites whose last pass compiled nothing new: their later passes run at once. A pass's
 * kernels are keyed mostly by ranks and dtypes, not sizes, so a site is warm after its first
 * pass; a later one with a new kernel (another matmul tiling) compiles that one in the op call,
 * briefly, and the site costs no second, compile-only pass (its op calls are the whole cost of
 * a step on a fast GPU).
 */
const warmSites = new Set<string>();

/**
 * Runs `pass` (the pass of call site `site`) with the `webgpu` backend only compiling the pipelines of the kernels it calls
 * (nothing is dispatched, so its tensors hold no values and are all freed), then waits for those
 * compilations without blocking the event loop. Returns undefined when every pipeline of the
 * pass was compiled already, or the site's previous pass found so (nothing to wait for: the
 * caller may run the pass at once, in the same turn), else a promise that resolves once the new
 * ones are.
 *
 * `pass` must change nothing but the tensors it creates (no variable assignment: the values it
 * would assign are never computed) and read nothing back. While it waits, the new pipelines are
 * kept out of the backend's cache, so that another pass that runs meanwhile (the roles of an
 * in-process run share the backend) compiles its own instead of meeting an unfinished one.
 *
 * @example
 * await compileAhead('loss', () => void lossAndGrads());   // compiles, without running (or nothing)
 * const { value, grads } = lossAndGrads();           // runs, nothing left to compile
 */
export function compileAhead(site: string, pass: () => void): Promise<void> | undefined {
  if (warmSites.has(site)) return undefined;
  const cache = (tf.backend() as unknown as CompilingBackend).pipelineCache;
  const before = new Set(Object.keys(cache));
  const env = tf.env();
  const pending = new Map<string, unknown>();
  env.set(compileOnlyFlag, true);
  try {
    tf.tidy(pass);
  } finally {
    env.set(compileOnlyFlag, false);
    // Out of the cache until compiled, also when the pass threw (see above).
    for (const key of Object.keys(cache)) {
      if (before.has(key)) continue;
      pending.set(key, cache[key]);
      delete cache[key];
    }
  }
  if (!pending.size) {
    warmSites.add(site);
    return undefined;
  }
  const keys = [...pending.keys()];
  return Promise.allSettled(keys.map((k) => pending.get(k))).then((done) =>
    done.forEach((r, i) => {
      // A pipeline that failed to compile is left out: the real pass compiles it again and
      // reports the error where the kernel runs.
      if (r.status === 'fulfilled' && !(keys[i]! in cache)) cache[keys[i]!] = r.value;
    }),
  );
}
