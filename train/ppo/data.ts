/**
 * Prompt data for `train_ppo`: a built-in dataset name (`arith`, `arith:test`) or a JSONL file,
 * and a resumable position over shuffled epochs, so a checkpoint records exactly which prompts
 * were consumed.
 *
 * @module
 */
import { readFileSync } from 'node:fs';
import { builtinDataset } from '../data/arith.ts';
import type { PromptItem } from '../../roles/rollout.ts';
import { shuffle } from '../../algorithms/shuffle.ts';
import { FlagError } from './flags.ts';
import { datasetProblem } from './paths.ts';

/** A dataset record: any JSON object with the input and label fields. */
export type PromptRecord = Record<string, unknown>;

/** Loads `--prompt-data` / `--eval-dataset`: a built-in name or a JSONL path. */
export function loadPromptData(
  spec: string,
  flag: string,
  opts: { size?: number } = {},
): PromptRecord[] {
  const builtin = builtinDataset(spec, opts.size !== undefined ? { size: opts.size } : {});
  if (builtin) return builtin as unknown as PromptRecord[];
  let text: string;
  try {
    text = readFileSync(spec, 'utf8');
  } catch {
    throw new FlagError(
      flag,
      datasetProblem(spec, flag) ?? `${flag}: ${spec} cannot be read as a JSONL file`,
    );
  }
  const out: PromptRecord[] = [];
  text.split('\n').forEach((line, i) => {
    if (!line.trim()) return;
    try {
      out.push(JSON.parse(line) as PromptRecord);
    } catch {
      throw new FlagError(flag, `${flag}: ${spec} line ${i + 1} is not JSON`);
    }
  });
  if (out.length === 0) throw new FlagError(flag, `${flag}: ${spec} has no records`);
  return out;
}

/** Checks the input/label keys on the first record. */
export function checkKeys(
  records: PromptRecord[],
  inputKey: string,
  labelKey: string,
  flag: string,
): void {
  const r = records[0]!;
  if (typeof r[inputKey] !== 'string') {
    throw new FlagError(
      '--input-key',
      `--input-key '${inputKey}' is not a string field of ${flag} records (fields: ${Object.keys(r).join(', ')})`,
    );
  }
  if (labelKey && r[labelKey] === undefined) {
    throw new FlagError(
      '--label-key',
      `--label-key '${labelKey}' is not a field of ${flag} records (fields: ${Object.keys(r).join(', ')})`,
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
    return {
      index,
      prompt: String(r[this.keys.input]),
      ...(label !== undefined ? { label: String(label) } : {}),
      groupId,
      record: r,
    };
  }

  get size(): number {
    return this.records.length;
  }
}
