/**
 * The Reference role: the frozen initial policy, which gives the logprobs of the KL term. Created
 * only when `--init-kl-coef` > 0.
 *
 * @module
 */
import { loadModel } from '../model/checkpoint.ts';
import type { CausalLM } from '../model/llama.ts';
import { nextTokenLogprobs } from '../model/sequence-logprobs.ts';
import { backendDescription } from '../model/backend.ts';
import type { Trajectory } from '../algorithms/trajectory.ts';
import { fetchSequences } from './experience.ts';
import { handOff, type Handoff } from './handoff.ts';

/** How the Reference is built. */
export interface ReferenceInit {
  /** HF model directory (the initial policy). */
  pretrain: string;
  /** Sampling temperature, so logprobs are of the same tempered distribution. @default 1 */
  temperature?: number;
}

/** Frozen-policy logprobs. Call {@link Reference.ready} once first. */
export class Reference {
  private model!: CausalLM;
  private loaded: Promise<void> | undefined;
  constructor(private readonly init: ReferenceInit) {}

  async ready(): Promise<{ numParameters: number; backend: string }> {
    this.loaded ??= loadModel(this.init.pretrain).then(({ model }) => void (this.model = model));
    await this.loaded;
    return { numParameters: this.model.numParameters, backend: backendDescription() };
  }

  /** Next-token logprob rows (length L−1), aligned like `algorithms/experience.ts`. */
  logprobs(seqs: number[][], microBatchSize = 16): Promise<number[][]> {
    return nextTokenLogprobs(this.model, seqs, {
      temperature: this.init.temperature ?? 1,
      microBatchSize,
    });
  }

  /** {@link logprobs} of the sequences of `batches` (fetched from the rollouts), handed off. */
  async logprobsOf(batches: Handoff<Trajectory[]>[]): Promise<Handoff<number[][]>> {
    return handOff(await this.logprobs(await fetchSequences(batches)));
  }

  dispose(): void {
    this.model?.dispose();
  }
}
