/**
 * Logprobs, entropy and values of whole sequences as plain arrays, without gradients: what the
 * trainer, reference and critic roles answer. Every micro-batch is computed at once, then read
 * back in one asynchronous round trip (the webgpu backend cannot read synchronously).
 *
 * @module
 */
import { compileKernelsAhead, tf } from './backend.ts';
import { padBatch } from './batches.ts';
import type { CausalLM } from './llama.ts';
import { tokenStats } from './training.ts';

/** Plain-array result of {@link forwardLogprobs}; index i describes token i (0 at i = 0). */
export interface SequenceLogprobs {
  logprobs: number[][];
  entropy?: number[][];
  values?: number[][];
}

/** Options of {@link forwardLogprobs}. */
export interface ForwardLogprobsOptions {
  temperature?: number;
  entropy?: boolean;
  values?: boolean;
  microBatchSize?: number;
  padId?: number;
}

/**
 * Logprobs (and optionally entropy / values) of given sequences, without gradients, aligned with
 * `Trajectory`: entry i is log p(token i | tokens < i); entry 0 is 0. Sequences are processed in
 * micro-batches of `microBatchSize` rows.
 *
 * Every micro-batch is computed in one synchronous run, with the adapter in or out of the
 * forward pass as it is when this is called (a `withoutLora` around the call covers all of them,
 * even where the run waits for the backend to compile its kernels first: `compileKernelsAhead`);
 * the results are then read back in one asynchronous round trip, which is what a backend that
 * keeps tensors on a device (webgpu) needs: it cannot read them synchronously.
 */
export function forwardLogprobs(
  model: CausalLM,
  seqs: number[][],
  opts: ForwardLogprobsOptions = {},
): Promise<SequenceLogprobs> {
  const site = `logprobs${opts.entropy ? ' entropy' : ''}${opts.values ? ' values' : ''}`;
  const ahead = compileKernelsAhead(site, () =>
    computeChunks(model, seqs, opts).forEach((c) => c.out.dispose()),
  );
  if (!ahead) return readSequenceLogprobs(seqs, computeChunks(model, seqs, opts), opts);
  // After the wait the adapter is back in the forward pass unless this call began without it.
  const base = model.lora !== undefined && !model.loraActive;
  return ahead.then(() => {
    const run = (): Chunk[] => computeChunks(model, seqs, opts);
    return readSequenceLogprobs(seqs, base ? model.withoutLora(run) : run(), opts);
  });
}

/** A micro-batch's first row, its width T and one tensor [lp | ent | val] of [B, T-1] each. */
interface Chunk {
  start: number;
  T: number;
  out: tf.Tensor;
}

/** Every micro-batch's outputs, computed now; all freed if one throws. */
function computeChunks(model: CausalLM, seqs: number[][], opts: ForwardLogprobsOptions): Chunk[] {
  const mb = opts.microBatchSize ?? 16;
  const pad = opts.padId ?? 0;
  const chunks: Chunk[] = [];
  try {
    for (let i = 0; i < seqs.length; i += mb) {
      const chunk = seqs.slice(i, i + mb);
      let T = 0;
      const out = tf.tidy(() => {
        const batch = padBatch(
          chunk.map((s) => (s.length < 2 ? [...s, pad] : s)),
          pad,
        );
        T = batch.T;
        const st = tokenStats(model, batch.ids, { ...opts, grad: false });
        const parts = [st.logprobs, st.entropy, st.values].filter((t) => t !== undefined);
        return parts.length === 1 ? parts[0]! : tf.stack(parts);
      });
      chunks.push({ start: i, T, out });
    }
  } catch (e) {
    chunks.forEach((c) => c.out.dispose());
    throw e;
  }
  return chunks;
}

async function readSequenceLogprobs(
  seqs: number[][],
  chunks: Chunk[],
  opts: { entropy?: boolean; values?: boolean },
): Promise<SequenceLogprobs> {
  let data: Float32Array[];
  try {
    data = (await Promise.all(chunks.map((c) => c.out.data()))) as Float32Array[];
  } finally {
    chunks.forEach((c) => c.out.dispose());
  }
  const res: SequenceLogprobs = { logprobs: [] };
  if (opts.entropy) res.entropy = [];
  if (opts.values) res.values = [];
  chunks.forEach(({ start, T, out }, c) => {
    const a = data[c]!;
    const B = out.shape[out.rank - 2]!;
    const part = (k: number): Float32Array => a.subarray(k * B * (T - 1), (k + 1) * B * (T - 1));
    const lp = part(0);
    const ent = opts.entropy ? part(1) : undefined;
    const val = opts.values ? part(opts.entropy ? 2 : 1) : undefined;
    for (let b = 0; b < B; b++) {
      const s = seqs[start + b]!;
      const row = (x: Float32Array, shift: boolean): number[] => {
        const o = new Array<number>(s.length).fill(0);
        for (let t = 0; t < s.length - 1; t++) o[shift ? t + 1 : t] = x[b * (T - 1) + t]!;
        return o;
      };
      res.logprobs.push(row(lp, true));
      if (ent) res.entropy!.push(row(ent, true));
      if (val) res.values!.push(row(val, false));
    }
  });
  return res;
}

/**
 * Next-token logprob rows of each sequence (length L−1: entry i is log p(token i+1 | tokens ≤ i)),
 * without gradients, aligned like `algorithms/experience.ts`: what the trainer and the reference
 * roles answer. Computed at once, read asynchronously (see {@link forwardLogprobs}).
 */
export async function nextTokenLogprobs(
  model: CausalLM,
  seqs: number[][],
  opts: { temperature?: number; microBatchSize?: number } = {},
): Promise<number[][]> {
  return (await forwardLogprobs(model, seqs, opts)).logprobs.map((r) => r.slice(1));
}
