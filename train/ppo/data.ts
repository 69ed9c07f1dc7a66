/**
 * Prompt data for `train_ppo`: a built-in dataset name (`arith`, `arith:test`), a dataset file or
 * directory (`train/data/`: parquet, JSONL, JSON, CSV, the Hub's layout of splits), or several
 * blended, and a resumable position over shuffled epochs, so a checkpoint records exactly which
 * prompts were consumed.
 *
 * @module
 */
import { loadDatasets, parseProbs } from '../data/blend.ts';
import { DatasetError } from '../data/errors.ts';
import { chatMessages, promptText } from '../data/messages.ts';
import type { PromptItem } from '../../roles/rollout.ts';
import { shuffle } from '../../algorithms/shuffle.ts';
import { FlagError } from './flags.ts';
import type { TrainPpoOptions } from './options.ts';

/** A dataset record: any JSON object with the input and label fields. */
export type PromptRecord = Record<string, unknown>;

/** Options of {@link loadPromptData}: OpenRLHF's `--prompt_split`, `--max_samples`, blend probabilities. */
export interface PromptDataOptions {
  /** Records of a built-in dataset. */
  size?: number;
  /** @default 'train' */
  split?: string;
  maxSamples?: number;
  /** `--prompt_data_probs` as given, e.g. `0.7,0.3`. */
  probs?: string;
  seed?: number;
}

/** The options of `--prompt-data`'s load from the run's flags. */
export function promptDataOptions(
  o: Pick<TrainPpoOptions, 'promptSplit' | 'seed' | 'maxSamples' | 'promptDataProbs'>,
): PromptDataOptions {
  return {
    split: o.promptSplit,
    seed: o.seed,
    ...(o.maxSamples !== undefined ? { maxSamples: o.maxSamples } : {}),
    ...(o.promptDataProbs !== undefined ? { probs: o.promptDataProbs } : {}),
  };
}

/**
 * Loads `--prompt-data` / `--eval-dataset`: comma-separated datasets (built-in names, files or
 * directories), blended as OpenRLHF blends them; a dataset problem is a {@link FlagError} of `flag`.
 */
export async function loadPromptData(
  spec: string,
  flag: string,
  opts: PromptDataOptions = {},
): Promise<PromptRecord[]> {
  try {
    const count = spec.split(',').filter((s) => s.trim()).length;
    return await loadDatasets(spec, {
      ...(opts.split !== undefined ? { split: opts.split } : {}),
      ...(opts.maxSamples !== undefined ? { maxSamples: opts.maxSamples } : {}),
      ...(opts.probs ? { probs: parseProbs(opts.probs, count) } : {}),
      ...(opts.seed !== undefined ? { seed: opts.seed } : {}),
      ...(opts.size !== undefined ? { builtinSize: opts.size } : {}),
    });
  } catch (err) {
    if (err instanceof DatasetError) throw new FlagError(flag, `${flag}: ${err.message}`);
    throw err;
  }
}

/**
 * Checks the input/label keys on the first record: the input a string, or a list of chat messages
 * when the chat template renders it (`applyChatTemplate`, default on).
 */
export function checkKeys(
  records: PromptRecord[],
  inputKey: string,
  labelKey: string,
  flag: string,
  applyChatTemplate = true,
): void {
  const r = records[0]!;
  const fields = Object.keys(r).join(', ');
  const messages = chatMessages(r[inputKey]);
  if (messages && !applyChatTemplate)
    throw new FlagError(
      '--input-key',
      `--input-key '${inputKey}' of ${flag} holds chat messages: they need --apply-chat-template`,
    );
  if (typeof r[inputKey] !== 'string' && !messages) {
    throw new FlagError(
      '--input-key',
      `--input-key '${inputKey}' is neither a string field nor chat messages of ${flag} records (fields: ${fields})`,
    );
  }
  if (labelKey && r[labelKey] === undefined) {
    throw new FlagError(
      '--label-key',
      `--label-key '${labelKey}' is not a field of ${flag} records (fields: ${fields})`,
    );
  }
}

/** Where the sampler stands: epoch and offset into that epoch's permutation. */
export interface DataPosition {
  epoch: number;
  offset: number;
}

/** Shuffled epochs over the records; `next(n)` takes the next n prompts, crossing epochs. */
export class PromptSampler {
  private order: number[] = [];
  position: DataPosition;

  constructor(
    private readonly records: PromptRecord[],
    private readonly keys: { input: string; label: string },
    private readonly seed: number,
    position: DataPosition = { epoch: 0, offset: 0 },
  ) {
    this.position = { ...position };
    this.reorder();
  }

  private reorder(): void {
    this.order = shuffle(
      this.records.map((_, i) => i),
      this.seed * 1000003 + this.position.epoch,
    );
  }

  /** Moves to a saved position (resume). */
  seek(position: DataPosition): void {
    this.position = { ...position };
    this.reorder();
  }

  /** The next `n` prompts; group ids are unique per epoch and index. */
  next(n: number): PromptItem[] {
    const out: PromptItem[] = [];
    while (out.length < n) {
      if (this.position.offset >= this.order.length) {
        this.position = { epoch: this.position.epoch + 1, offset: 0 };
        this.reorder();
      }
      const index = this.order[this.position.offset++]!;
      out.push(this.item(index, `e${this.position.epoch}-p${index}`));
    }
    return out;
  }

  /** The prompt at `index` as an item. */
  item(index: number, groupId: string): PromptItem {
    const r = this.records[index]!;
    const label = r[this.keys.label];
    const messages = chatMessages(r[this.keys.input]);
    return {
      index,
      prompt: messages ? promptText(messages) : String(r[this.keys.input]),
      ...(messages ? { messages } : {}),
      ...(label !== undefined ? { label: String(label) } : {}),
      groupId,
      record: r,
    };
  }

  get size(): number {
    return this.records.length;
  }
}
