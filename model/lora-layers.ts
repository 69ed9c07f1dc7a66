/**
 * A LoRA adapter live in a model: per adapted linear module of the decoder layers, the A and B
 * matrices as TF.js variables, and the update `(alpha / r) · B·A·dropout(x)` that
 * {@link CausalLM}'s `linear` adds to the frozen base product. The base weights are never
 * touched; the adapter moves in and out as a {@link LoraAdapter} (PEFT's layout, `lora-adapter.ts`).
 *
 * A is kept as `[in, r]` and B as `[r, out]` (transposed from PEFT's `[r, in]` / `[out, r]`), as
 * the model keeps every linear weight, so the forward products need no transpose.
 *
 * Initialised as PEFT does: A kaiming-uniform with a = √5, which for a `[r, in]` weight is
 * U(−1/√in, 1/√in), and B zero, so the adapted model starts equal to the base.
 *
 * @module
 */
import { tf } from './backend.ts';
import { parameterShapes, type LlamaConfig } from './config.ts';
import { ModelError } from './errors.ts';
import {
  parsePeftTensorName,
  peftTensorName,
  type LoraAdapter,
  type LoraConfig,
} from './lora-adapter.ts';
import type { NamedTensors } from './tensors.ts';

/** A matrix product (the model's, which keeps the fast paths and its gradients). */
type MatMul = (a: tf.Tensor, b: tf.Tensor, transposeA?: boolean, transposeB?: boolean) => tf.Tensor;

let serial = 0;

/** The adapted modules of `config` for `lora`: HF module name → base weight shape `[out, in]`. */
export function loraModules(config: LlamaConfig, lora: LoraConfig): Map<string, [number, number]> {
  const out = new Map<string, [number, number]>();
  for (const [name, shape] of parameterShapes(config)) {
    const m = /^(model\.layers\.\d+\.(?:self_attn|mlp)\.([a-z_]+))\.weight$/.exec(name);
    if (m && (lora.targetModules as string[]).includes(m[2]!))
      out.set(m[1]!, shape as [number, number]);
  }
  return out;
}

/** A row-major `[rows, cols]` array as `[cols, rows]`. */
function transposed(a: Float32Array, rows: number, cols: number): Float32Array {
  const out = new Float32Array(a.length);
  for (let i = 0; i < rows; i++)
    for (let j = 0; j < cols; j++) out[j * rows + i] = a[i * cols + j]!;
  return out;
}

/** The LoRA matrices of one model, and the update they add to its linear products. */
export class LoraLayers {
  readonly config: LoraConfig;
  /** Trainable variables by PEFT tensor name (A stored `[in, r]`, B `[r, out]`). */
  readonly vars = new Map<string, tf.Variable>();
  private readonly modules: Map<string, [number, number]>;
  private readonly id = ++serial;

  /**
   * New adapter matrices for `model`'s config, initialised as PEFT does (seeded).
   *
   * @throws ModelError `MODEL_INPUT` for a rank below 1 or a config with no module to adapt
   */
  constructor(modelConfig: LlamaConfig, config: LoraConfig, opts: { seed?: number } = {}) {
    if (!Number.isInteger(config.r) || config.r < 1)
      throw new ModelError('MODEL_INPUT', `LoRA rank must be a positive integer, got ${config.r}`);
    if (!(config.dropout >= 0 && config.dropout < 1))
      throw new ModelError('MODEL_INPUT', `LoRA dropout must be in [0, 1), got ${config.dropout}`);
    this.config = { ...config, targetModules: [...config.targetModules] };
    this.modules = loraModules(modelConfig, config);
    if (this.modules.size === 0)
      throw new ModelError('MODEL_INPUT', 'LoRA: no module of this model is a target');
    let i = 0;
    const seed = opts.seed ?? 0;
    for (const [module, [outDim, inDim]] of this.modules) {
      const bound = 1 / Math.sqrt(inDim);
      const a = tf.tidy(() =>
        tf.randomUniform([inDim, config.r], -bound, bound, 'float32', seed * 7919 + i++),
      );
      this.vars.set(peftTensorName(module, 'A'), this.variable(module, 'A', a));
      const b = tf.zeros([config.r, outDim]);
      this.vars.set(peftTensorName(module, 'B'), this.variable(module, 'B', b));
    }
  }

  private variable(module: string, which: 'A' | 'B', init: tf.Tensor): tf.Variable {
    const v = tf.variable(init, true, `lora${this.id}:${module}.${which}`);
    init.dispose();
    return v;
  }

  /** Trainable scalars in the adapter. */
  get numParameters(): number {
    let n = 0;
    this.vars.forEach((v) => (n += v.size));
    return n;
  }

  /**
   * The adapted product `x·W + (alpha / r)·(x·A)·B` of `x` (`[N, in]`) with the frozen base
   * weight `w` of `weightName` (an HF weight name), `[N, out]`, or undefined when the module is
   * not adapted. In a training pass (`trainingPass` > 0, the model's count of its passes) the
   * adapter's dropout applies to the adapter's input, its masks seeded by the pass and module so a
   * recomputed layer draws the same ones; without dropout
   * the product is one differentiable op that keeps `x` and the rank-sized `(alpha / r)·x·A` for
   * its gradient, where the composed products keep `x·W` and the update besides (the sum's
   * inputs: two tensors of the output's width per adapted linear). Its gradients in `x`, A and B
   * are the composed form's, term by term with the same products; none flows to `w`.
   */
  linear(
    x: tf.Tensor,
    w: tf.Tensor,
    weightName: string,
    mm: MatMul,
    trainingPass: number,
  ): tf.Tensor | undefined {
    const module = weightName.endsWith('.weight') ? weightName.slice(0, -'.weight'.length) : '';
    if (!this.modules.has(module)) return undefined;
    const a = this.vars.get(peftTensorName(module, 'A'))!;
    const b = this.vars.get(peftTensorName(module, 'B'))!;
    const p = this.config.dropout;
    const scale = this.config.alpha / this.config.r;
    if (trainingPass > 0 && p > 0) {
      const dropped = tf.dropout(x, p, undefined, `${trainingPass}/${module}`);
      return tf.add(mm(x, w), mm(tf.mul(mm(dropped, a), scale), b));
    }
    const fn = tf.customGrad(((
      xT: tf.Tensor,
      aT: tf.Tensor,
      bT: tf.Tensor,
      save: tf.GradSaveFunc,
    ) => {
      const xas = tf.mul(mm(xT, aT), scale);
      save([xT, xas, aT, bT]);
      return {
        value: tf.add(mm(xT, w), mm(xas, bT)),
        gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
          const [x0, xas0, a0, b0] = saved as [tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor];
          const dxa = tf.mul(mm(dy, b0, false, true), scale);
          return [
            tf.add(mm(dy, w, false, true), mm(dxa, a0, false, true)),
            mm(x0, dxa, true, false),
            mm(xas0, dy, true, false),
          ];
        },
      };
    }) as unknown as Parameters<typeof tf.customGrad>[0]) as unknown as (
      ...xs: tf.Tensor[]
    ) => tf.Tensor;
    return fn(x, a, b);
  }

  /** The adapter as data, in PEFT's layout (A `[r, in]`, B `[out, r]`). */
  exportAdapter(): LoraAdapter {
    const tensors: NamedTensors = {};
    for (const [name, v] of this.vars) {
      const [rows = 0, cols = 0] = v.shape;
      tensors[name] = {
        shape: [cols, rows],
        data: transposed(v.dataSync() as Float32Array, rows, cols),
      };
    }
    return { config: { ...this.config }, tensors };
  }

  /**
   * Loads `a`'s matrices in place. Its rank and targets must be this adapter's; a module the
   * adapter targets but `a` lacks is an error (a partial adapter would leave stale matrices).
   *
   * @throws ModelError `MODEL_CHECKPOINT` naming the first mismatch
   */
  importAdapter(a: LoraAdapter): void {
    const bad = (why: string) => new ModelError('MODEL_CHECKPOINT', `LoRA adapter: ${why}`);
    if (a.config.r !== this.config.r)
      throw bad(`rank ${a.config.r} does not match the model's adapter (rank ${this.config.r})`);
    for (const name of Object.keys(a.tensors)) {
      const p = parsePeftTensorName(name);
      if (!p || !this.vars.has(peftTensorName(p.module, p.which)))
        throw bad(`${name} is not a module this model adapts`);
    }
    for (const [name, v] of this.vars) {
      const t = a.tensors[name];
      if (!t) throw bad(`${name} is missing`);
      const [rows = 0, cols = 0] = v.shape;
      if (t.shape.length !== 2 || t.shape[0] !== cols || t.shape[1] !== rows)
        throw bad(`${name} is [${t.shape}], expected [${cols},${rows}]`);
      tf.tidy(() => v.assign(tf.tensor2d(transposed(t.data, cols, rows), [rows, cols])));
    }
    this.config.alpha = a.config.alpha;
  }

  dispose(): void {
    this.vars.forEach((v) => v.dispose());
    this.vars.clear();
  }
}
