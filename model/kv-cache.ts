/**
 * Batched incremental decoding with a KV cache whose rows can join and leave between steps
 * (continuous batching). Rows are right-aligned: row b's valid keys are the last `lens[b]`
 * columns; columns to their left are padding masked out of attention. Each row keeps its own
 * position ids, so rows of different lengths share one batch.
 *
 * @module
 */
import { compileKernelsAhead, tf } from './backend.ts';
import { checkSequenceLength, type CausalLM, type LayerKV } from './llama.ts';
import { ModelError } from './errors.ts';

const maskValue = -1e9;

/** A batch of cached sequences. Owns its tensors; call {@link BatchKVCache.dispose}. */
export class BatchKVCache {
  layers: LayerKV[];
  /** Valid length of each row (its next position id). */
  lens: number[];

  constructor(layers: LayerKV[], lens: number[]) {
    this.layers = layers;
    this.lens = lens;
  }

  get batchSize(): number {
    return this.lens.length;
  }

  /** Columns, valid or padding. */
  get width(): number {
    return this.layers[0]?.k.shape[2] ?? 0;
  }

  private replace(next: LayerKV[]): void {
    for (const l of this.layers) {
      l.k.dispose();
      l.v.dispose();
    }
    this.layers = next;
  }

  /** Keeps only rows `rows` (in that order). */
  select(rows: number[]): void {
    if (rows.length === this.batchSize && rows.every((r, i) => r === i)) return;
    const idx = tf.tensor1d(rows, 'int32');
    const next = this.layers.map((l) => ({
      k: tf.keep(tf.gather(l.k, idx)),
      v: tf.keep(tf.gather(l.v, idx)),
    }));
    idx.dispose();
    this.replace(next);
    this.lens = rows.map((r) => this.lens[r]!);
    this.trim();
  }

  /** Appends the rows of `other` (which is disposed) after this cache's rows. */
  append(other: BatchKVCache): void {
    if (this.batchSize === 0) {
      this.replace(other.layers);
      this.lens = other.lens;
      return;
    }
    const W = Math.max(this.width, other.width);
    const pad = (t: tf.Tensor4D): tf.Tensor4D =>
      t.shape[2] === W
        ? t
        : tf.pad(t, [
            [0, 0],
            [0, 0],
            [W - t.shape[2], 0],
            [0, 0],
          ]);
    const next = tf.tidy(() =>
      this.layers.map((l, i) => {
        const o = other.layers[i]!;
        return { k: tf.concat([pad(l.k), pad(o.k)], 0), v: tf.concat([pad(l.v), pad(o.v)], 0) };
      }),
    );
    next.forEach((l) => (tf.keep(l.k), tf.keep(l.v)));
    this.replace(next);
    this.lens = [...this.lens, ...other.lens];
    other.dispose();
  }

  /** Drops leading columns that no row uses. */
  trim(): void {
    const W = this.width;
    const need = Math.max(0, ...this.lens);
    if (need >= W || this.batchSize === 0) return;
    const next = this.layers.map((l) => ({
      k: tf.keep(tf.slice(l.k, [0, 0, W - need, 0], [-1, -1, need, -1])),
      v: tf.keep(tf.slice(l.v, [0, 0, W - need, 0], [-1, -1, need, -1])),
    }));
    this.replace(next);
  }

  dispose(): void {
    this.replace([]);
    this.lens = [];
  }
}

/**
 * Runs the prompts (left-padded into one batch) and returns their cache and the logits of each
 * prompt's last token (`[B * vocab]`, row-major).
 */
export function prefill(
  model: CausalLM,
  prompts: number[][],
): { cache: BatchKVCache; logits: Float32Array } {
  const { cache, logits } = prefillPass(model, prompts);
  try {
    return { cache, logits: readSync(logits) };
  } catch (e) {
    cache.dispose();
    throw e;
  }
}

/**
 * {@link prefill} that reads the logits asynchronously: the only way on a backend that cannot
 * read a GPU tensor synchronously (webgpu in Node; see `backendOnHost`).
 */
export async function prefillAsync(
  model: CausalLM,
  prompts: number[][],
): Promise<{ cache: BatchKVCache; logits: Float32Array }> {
  // On webgpu, the first prefill would compile its kernels inside this synchronous pass.
  const ahead = compileKernelsAhead('prefill', () => {
    const p = prefillPass(model, prompts);
    p.cache.dispose();
    p.logits.dispose();
  });
  if (ahead) await ahead;
  const { cache, logits } = prefillPass(model, prompts);
  try {
    return { cache, logits: await read(logits) };
  } catch (e) {
    cache.dispose();
    throw e;
  }
}

function prefillPass(
  model: CausalLM,
  prompts: number[][],
): { cache: BatchKVCache; logits: tf.Tensor } {
  const B = prompts.length;
  const T = Math.max(...prompts.map((p) => p.length));
  if (prompts.some((p) => p.length === 0))
    throw new ModelError('MODEL_INPUT', 'prefill: empty prompt');
  checkSequenceLength(model.config, T);
  const ids = new Int32Array(B * T);
  const pos = new Int32Array(B * T);
  const bias = new Float32Array(B * T * T);
  prompts.forEach((p, b) => {
    const padN = T - p.length;
    ids.set(p, b * T + padN);
    for (let t = 0; t < T; t++) {
      pos[b * T + t] = Math.max(0, t - padN);
      for (let j = 0; j < T; j++) if (j < padN || j > t) bias[(b * T + t) * T + j] = maskValue;
    }
  });
  let logits: tf.Tensor | undefined;
  const layers = tidyLayers(() => {
    const out = model.forward(tf.tensor2d(ids, [B, T], 'int32'), {
      positions: tf.tensor2d(pos, [B, T], 'int32'),
      attnBias: tf.tensor3d(bias, [B, T, T]),
      returnPresent: true,
      logits: false,
      grad: false,
    });
    const last = tf.slice(out.hidden, [0, T - 1, 0], [B, 1, -1]);
    logits = tf.keep(lmHead(model, last));
    return out.present!;
  });
  return {
    cache: new BatchKVCache(
      layers,
      prompts.map((p) => p.length),
    ),
    logits: logits!,
  };
}

/** A tensor's values, read synchronously; the tensor is freed. */
function readSync(t: tf.Tensor): Float32Array {
  try {
    return t.dataSync() as Float32Array;
  } finally {
    t.dispose();
  }
}

/** A tensor's values, read asynchronously; the tensor is freed. */
async function read(t: tf.Tensor): Promise<Float32Array> {
  try {
    return (await t.data()) as Float32Array;
  } finally {
    t.dispose();
  }
}

/** `tf.tidy` for a function returning per-layer caches (kept; everything else is freed). */
function tidyLayers(fn: () => LayerKV[]): LayerKV[] {
  return tf.tidy(() => fn() as unknown as tf.TensorContainer) as unknown as LayerKV[];
}

function lmHead(model: CausalLM, hidden: tf.Tensor): tf.Tensor {
  return tf.reshape(model.logitsFromHidden(hidden), [-1, model.config.vocab_size]);
}

/**
 * Feeds one new token per row and returns the next-token logits (`[B * vocab]`); the cache grows
 * by one column.
 */
export function decodeStep(model: CausalLM, cache: BatchKVCache, tokens: number[]): Float32Array {
  return readSync(decodePass(model, cache, tokens));
}

/** {@link decodeStep} that reads the logits asynchronously (see {@link prefillAsync}). */
export async function decodeStepAsync(
  model: CausalLM,
  cache: BatchKVCache,
  tokens: number[],
): Promise<Float32Array> {
  const ahead = compileKernelsAhead('decode', () => {
    const p = decodeForward(model, cache, tokens);
    p.layers.forEach((l) => (l.k.dispose(), l.v.dispose()));
    p.logits.dispose();
  });
  if (ahead) await ahead;
  return read(decodePass(model, cache, tokens));
}

function decodePass(model: CausalLM, cache: BatchKVCache, tokens: number[]): tf.Tensor {
  const { layers, logits } = decodeForward(model, cache, tokens);
  for (const l of cache.layers) {
    l.k.dispose();
    l.v.dispose();
  }
  cache.layers = layers;
  cache.lens = cache.lens.map((l) => l + 1);
  return logits;
}

/** One decode step's present keys/values and logits; the cache is left as it was. */
function decodeForward(
  model: CausalLM,
  cache: BatchKVCache,
  tokens: number[],
): { layers: LayerKV[]; logits: tf.Tensor } {
  const B = cache.batchSize;
  if (tokens.length !== B)
    throw new ModelError('MODEL_INPUT', `decodeStep: ${tokens.length} tokens for ${B} rows`);
  checkSequenceLength(model.config, Math.max(...cache.lens) + 1);
  const W = cache.width + 1;
  const bias = new Float32Array(B * W);
  cache.lens.forEach((len, b) => {
    for (let j = 0; j < W - (len + 1); j++) bias[b * W + j] = maskValue;
  });
  let logits: tf.Tensor | undefined;
  const layers = tidyLayers(() => {
    const out = model.forward(tf.tensor2d(tokens, [B, 1], 'int32'), {
      positions: tf.tensor2d(cache.lens, [B, 1], 'int32'),
      attnBias: tf.tensor3d(bias, [B, 1, W]),
      past: cache.layers,
      returnPresent: true,
      logits: false,
      grad: false,
    });
    logits = tf.keep(lmHead(model, out.hidden));
    return out.present!;
  });
  return { layers, logits: logits! };
}

/** Logits of the last position of each sequence by recomputing the whole prefix (no cache). */
export function recomputeLastLogits(model: CausalLM, seqs: number[][]): Float32Array {
  const { cache, logits } = prefill(model, seqs);
  cache.dispose();
  return logits;
}
