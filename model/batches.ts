/**
 * How sequences become one batch tensor: right-padded rows (`padBatch`), or packed end to end
 * into one row (`packBatch`, `--packing-samples`) with the positions and attention bias that make
 * the row compute what each sequence alone would; `tokenStats(…, { packed })` and
 * `maskedNllLoss(…, packed)` take that layout.
 *
 * @module
 */
import { tf } from './backend.ts';

/** Right-padded batch of token sequences. */
export interface PaddedBatch {
  ids: tf.Tensor2D;
  /** Real length of each row. */
  lengths: number[];
  /** Padded length T. */
  T: number;
}

/** Right-pads sequences into an int32 `[B, T]` tensor (T = longest, or `padTo`). */
export function padBatch(seqs: number[][], padId = 0, padTo?: number): PaddedBatch {
  const T = Math.max(padTo ?? 0, ...seqs.map((s) => s.length));
  const data = new Int32Array(seqs.length * T).fill(padId);
  seqs.forEach((s, b) => data.set(s, b * T));
  return {
    ids: tf.tensor2d(data, [seqs.length, T], 'int32'),
    lengths: seqs.map((s) => s.length),
    T,
  };
}

/**
 * Sequences packed end to end into one row (`--packing-samples`), with what makes the row compute
 * what each sequence alone would: positions that restart at every sequence, and an attention bias
 * that lets a token attend only to earlier tokens of its own sequence (block-diagonal causal).
 * No padding. The next-token prediction at a sequence's last token reads the next sequence's
 * first token: a loss must give it weight 0 (`packedRows` in `algorithms/packing.ts` lays out
 * per-token rows that way).
 */
export interface PackedBatch {
  /** `[1, N]` int32, N = the sequences' total length. */
  ids: tf.Tensor2D;
  /** `[1, N]` int32: 0, 1, … within each sequence. */
  positions: tf.Tensor2D;
  /** `[1, N, N]`: 0 where a token may attend, -1e9 elsewhere. */
  attnBias: tf.Tensor3D;
  /** Where each sequence starts in the row. */
  starts: number[];
  lengths: number[];
}

/** Packs sequences into one row; see {@link PackedBatch}. */
export function packBatch(seqs: number[][]): PackedBatch {
  const N = seqs.reduce((n, s) => n + s.length, 0);
  const ids = new Int32Array(N);
  const positions = new Int32Array(N);
  const bias = new Float32Array(N * N).fill(-1e9);
  const starts: number[] = [];
  let at = 0;
  for (const s of seqs) {
    starts.push(at);
    ids.set(s, at);
    for (let i = 0; i < s.length; i++) {
      positions[at + i] = i;
      bias.fill(0, (at + i) * N + at, (at + i) * N + at + i + 1);
    }
    at += s.length;
  }
  return {
    ids: tf.tensor2d(ids, [1, N], 'int32'),
    positions: tf.tensor2d(positions, [1, N], 'int32'),
    attnBias: tf.tensor3d(bias, [1, N, N]),
    starts,
    lengths: seqs.map((s) => s.length),
  };
}
