/**
 * How a micro-batch's sequences reach the model, for the trainer and the critic alike: right-
 * padded rows (the default), or packed end to end into one row (`--packing-samples`, OpenRLHF's
 * name) with positions restarting at each sequence and attention confined to it, so no compute
 * goes to padding and the loss and gradients are the padded batch's.
 *
 * @module
 */
import { tf } from '../model/backend.ts';
import { padBatch } from '../model/training.ts';
import { packBatch, type PackedBatch } from '../model/batches.ts';
import { packedRows, padRows } from '../algorithms/packing.ts';

/** One micro-batch's token layout. */
export interface MicroBatchLayout {
  /** `[rows, T]` int32: one row per sequence, or one row of them all. */
  ids: tf.Tensor2D;
  /** The packed row's positions and attention bias (for `tokenStats`' `packed`). */
  packed?: Pick<PackedBatch, 'positions' | 'attnBias'>;
  /**
   * Per-sample next-token rows (length L−1 each: masks, advantages, weights) as `[rows, T−1]`,
   * aligned with the logprobs `tokenStats` returns in this layout; 0 where nothing is trained.
   */
  rows(perSample: readonly ArrayLike<number>[]): tf.Tensor2D;
  /** Tokens the tensors hold, padding included (for the padding share). */
  slots: number;
}

/** Lays out `seqs` padded or packed. Call inside `tf.tidy` (the tensors belong to the caller). */
export function microBatchLayout(seqs: number[][], packing: boolean): MicroBatchLayout {
  if (packing) {
    const p = packBatch(seqs);
    const { lengths } = p;
    return {
      ids: p.ids,
      packed: p,
      rows: (r) => {
        const { data, shape } = packedRows(r, lengths);
        return tf.tensor2d(data, shape);
      },
      slots: p.ids.size,
    };
  }
  const { ids, T } = padBatch(seqs);
  return {
    ids,
    rows: (r) => tf.tensor2d(padRows(r, T - 1).data, [seqs.length, T - 1]),
    slots: ids.size,
  };
}
