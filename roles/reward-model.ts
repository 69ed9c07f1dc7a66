/**
 * The RewardModel role (`train_ppo --reward-pretrain DIR`): a reward model trained by `train_rm`
 * (the causal LM with a scalar value head) scores each finished episode's tokens; the score is
 * the value head at the sequence's last token, as `train_rm` trains it.
 *
 * @module
 */
import { tf } from '../model/backend.ts';
import { loadModel } from '../model/checkpoint.ts';
import type { CausalLM } from '../model/llama.ts';
import { padBatch } from '../model/training.ts';
import type { Trajectory } from '../algorithms/trajectory.ts';
import { fetchSequences } from './experience.ts';
import type { Handoff } from './handoff.ts';

/**
 * The reward model's score of each sequence: the value head at its last token, `[N]`
 * (differentiable when `grad`; `train_rm` trains through it).
 */
export function sequenceScores(model: CausalLM, seqs: number[][], grad = true): tf.Tensor1D {
  return tf.tidy(() => {
    const { ids, lengths, T } = padBatch(seqs, model.config.pad_token_id ?? 0);
    const { hidden } = model.forward(ids, { grad });
    const last = tf.oneHot(
      tf.tensor1d(
        lengths.map((l) => l - 1),
        'int32',
      ),
      T,
    );
    return tf.sum(tf.mul(model.values(hidden), last), -1) as tf.Tensor1D;
  });
}

/** How the RewardModel is built. */
export interface RewardModelInit {
  /** HF directory written by `train_rm` (with `value_head.weight`). */
  pretrain: string;
}

/** Scores sequences with a trained reward model. Call {@link RewardModel.ready} once first. */
export class RewardModel {
  private model!: CausalLM;
  private loaded: Promise<void> | undefined;
  constructor(private readonly init: RewardModelInit) {}

  async ready(): Promise<{ numParameters: number }> {
    this.loaded ??= loadModel(this.init.pretrain, { valueHead: true }).then(
      ({ model }) => void (this.model = model),
    );
    await this.loaded;
    return { numParameters: this.model.numParameters };
  }

  /** One score per sequence, `microBatchSize` sequences per forward. */
  async scores(seqs: number[][], microBatchSize = 16): Promise<number[]> {
    const out: number[] = [];
    for (let i = 0; i < seqs.length; i += microBatchSize) {
      const s = sequenceScores(this.model, seqs.slice(i, i + microBatchSize), false);
      try {
        out.push(...(await s.data()));
      } finally {
        s.dispose();
      }
    }
    return out;
  }

  /** {@link scores} of the sequences of `batches` (fetched from the rollouts). */
  async scoresOf(batches: Handoff<Trajectory[]>[]): Promise<number[]> {
    return this.scores(await fetchSequences(batches));
  }

  dispose(): void {
    this.model?.dispose();
  }
}
