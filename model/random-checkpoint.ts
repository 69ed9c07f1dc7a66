/**
 * Writes a randomly initialised HF checkpoint of any supported config (e.g. Qwen3-0.6B's), for
 * measuring what a model of that size costs on this machine without downloading one. Weights are
 * normal(0, 0.02), norms 1, biases 0, drawn from a seeded stream; nothing here uses TF.js.
 *
 * ```sh
 * node --import tsx model/random-checkpoint.ts --config test/fixtures/model/configs/qwen3-0.6b.json \
 *   --out /tmp/qwen3-0.6b-random [--tokenizer DIR] [--dtype bfloat16] [--seed 1] \
 *   [--max-shard-size 5e9] [--layers N]
 * ```
 *
 * `--max-shard-size` (bytes) shards as transformers' `save_pretrained(max_shard_size=...)` does
 * (`model-0000i-of-0000n.safetensors` + `model.safetensors.index.json`); `--layers` keeps the
 * config's shapes but only its first N decoder layers, to measure a step whose full-depth state
 * would not fit in memory.
 *
 * @module
 */
import { copyFileSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { gunzipSync } from 'node:zlib';
import { saveTensors } from './checkpoint.ts';
import { configJson, parameterShapes, resolveConfig, type SaveDtype } from './config.ts';
import { seededRandom } from './prng.ts';
import type { NamedTensors } from './tensors.ts';
import { ModelError } from './errors.ts';

/** Options of {@link writeRandomCheckpoint}. */
export interface RandomCheckpointOptions {
  /** @default 1 */
  seed?: number;
  /** @default 'bfloat16' (what released checkpoints use) */
  dtype?: SaveDtype;
  /** Copy tokenizer files (`tokenizer.json` or `tokenizer.json.gz`) from this directory. */
  tokenizerFrom?: string;
  /** Shard above this many bytes (see `saveTensors`). @default 5 GB, transformers' default */
  maxShardBytes?: number;
}

/**
 * Writes config.json (the given one, dtype set) and random weights of its shapes to `dir`.
 *
 * @returns the number of parameters written
 */
export function writeRandomCheckpoint(
  dir: string,
  rawConfig: Record<string, unknown>,
  opts: RandomCheckpointOptions = {},
): number {
  const config = resolveConfig(rawConfig);
  const dtype = opts.dtype ?? 'bfloat16';
  const rand = seededRandom(opts.seed ?? 1);
  const tensors: NamedTensors = {};
  let n = 0;
  for (const [name, shape] of parameterShapes(config)) {
    const data = new Float32Array(shape.reduce((a, b) => a * b, 1));
    if (name.endsWith('norm.weight')) data.fill(1);
    else if (!name.endsWith('.bias')) {
      // Box-Muller, two normals per pair of uniforms.
      for (let i = 0; i < data.length; i += 2) {
        const r = 0.02 * Math.sqrt(-2 * Math.log(1 - rand()));
        const a = 2 * Math.PI * rand();
        data[i] = r * Math.cos(a);
        if (i + 1 < data.length) data[i + 1] = r * Math.sin(a);
      }
    }
    tensors[name] = { shape, data };
    n += data.length;
  }
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'config.json'), configJson(config, dtype));
  saveTensors(dir, tensors, { dtype, maxShardBytes: opts.maxShardBytes });
  for (const f of ['tokenizer.json', 'tokenizer_config.json']) {
    const from = opts.tokenizerFrom;
    if (from && existsSync(join(from, f))) copyFileSync(join(from, f), join(dir, f));
    // The test fixture (test/fixtures/model/qwen3-tokenizer) keeps tokenizer.json gzipped.
    else if (from && existsSync(join(from, `${f}.gz`)))
      writeFileSync(join(dir, f), gunzipSync(readFileSync(join(from, `${f}.gz`))));
  }
  return n;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const { values } = parseArgs({
    options: {
      config: { type: 'string' },
      out: { type: 'string' },
      tokenizer: { type: 'string' },
      dtype: { type: 'string', default: 'bfloat16' },
      seed: { type: 'string', default: '1' },
      'max-shard-size': { type: 'string' },
      layers: { type: 'string' },
    },
  });
  if (!values.config || !values.out) {
    process.stderr.write(
      'usage: random-checkpoint.ts --config config.json --out DIR [--tokenizer DIR] [--dtype bfloat16|float32] [--seed N] [--max-shard-size BYTES] [--layers N]\n',
    );
    process.exit(2);
  }
  if (values.dtype !== 'bfloat16' && values.dtype !== 'float32')
    throw new ModelError('MODEL_INPUT', `--dtype: '${values.dtype}' is not bfloat16 or float32`);
  const positive = (flag: string, v: string | undefined): number | undefined => {
    if (v === undefined) return undefined;
    const n = Number(v);
    if (!(Number.isInteger(n) && n > 0))
      throw new ModelError('MODEL_INPUT', `--${flag}: '${v}' is not a positive integer`);
    return n;
  };
  const maxShardBytes = positive('max-shard-size', values['max-shard-size']);
  const layers = positive('layers', values.layers);
  const t0 = performance.now();
  const raw = JSON.parse(readFileSync(resolve(values.config), 'utf8')) as Record<string, unknown>;
  if (layers !== undefined) {
    raw['num_hidden_layers'] = layers;
    if (typeof raw['max_window_layers'] === 'number')
      raw['max_window_layers'] = Math.min(raw['max_window_layers'], layers);
  }
  const n = writeRandomCheckpoint(resolve(values.out), raw, {
    dtype: values.dtype,
    seed: Number(values.seed),
    tokenizerFrom: values.tokenizer,
    maxShardBytes,
  });
  process.stdout.write(
    `wrote ${(n / 1e6).toFixed(1)}M parameters to ${values.out} in ${((performance.now() - t0) / 1000).toFixed(1)} s\n`,
  );
}
