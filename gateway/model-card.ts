/**
 * What the gateway says about the model it serves: the name clients request (the checkpoint
 * directory's name) and its context length (from `config.json`, else `tokenizer_config.json`).
 *
 * @module
 */
import { existsSync, readFileSync } from 'node:fs';
import { basename, join, resolve } from 'node:path';

/** Name and context length of the HF model directory `dir`. */
export function modelCard(dir: string): { name: string; contextLength: number | undefined } {
  const read = (f: string): Record<string, unknown> =>
    existsSync(join(dir, f))
      ? (JSON.parse(readFileSync(join(dir, f), 'utf8')) as Record<string, unknown>)
      : {};
  const ctx =
    read('config.json')['max_position_embeddings'] ??
    read('tokenizer_config.json')['model_max_length'];
  return {
    name: basename(resolve(dir)),
    contextLength:
      typeof ctx === 'number' && Number.isInteger(ctx) && ctx > 0 && ctx < 1e9 ? ctx : undefined,
  };
}
