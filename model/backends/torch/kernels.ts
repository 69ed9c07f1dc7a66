/**
 * The TF.js kernels of the `torch` backend: each maps TF.js' kernel name and attributes to one op
 * of the addon (`addon/rtjob_torch.cc`) and states the output dtype TF.js expects. The set covers
 * what the model, its gradients, AdamW and the RL losses run, plus the common neighbours of those
 * kernels; {@link torchKernelNames} lists them (the tfjs-core suite runs against exactly these).
 *
 * @module
 */
import * as tf from '@tensorflow/tfjs';
import type { TorchBackend } from './backend.ts';
import { TorchBackendError } from './build.ts';

type Info = tf.TensorInfo;
type Attrs = Record<string, unknown>;
type Kernel = (
  b: TorchBackend,
  inputs: Info[],
  attrs: Attrs,
  named: Record<string, Info>,
) => Info | Info[];

const upcast = (a: tf.DataType, b: tf.DataType): tf.DataType =>
  a === 'float32' || b === 'float32'
    ? 'float32'
    : a === 'int32' || b === 'int32'
      ? 'int32'
      : 'bool';

const axes = (axis: unknown, shape: number[]): number[] =>
  tf.util.parseAxisParam(axis as number | number[], shape);

const kernels = new Map<string, { inputs: string[]; fn: Kernel }>();

function def(name: string, inputs: string[], fn: Kernel): void {
  kernels.set(name, { inputs, fn });
}

// Unary kernels: [TF.js name, addon op, output dtype ('same' = the input's)].
const unary: [string, string, tf.DataType | 'same'][] = [
  ['Neg', 'neg', 'same'],
  ['Abs', 'abs', 'same'],
  ['Square', 'square', 'same'],
  ['Sign', 'sign', 'same'],
  ['Relu', 'relu', 'same'],
  ['Relu6', 'relu6', 'same'],
  ['Floor', 'floor', 'same'],
  ['Ceil', 'ceil', 'same'],
  ['Round', 'round', 'same'],
  ['ZerosLike', 'zeros_like', 'same'],
  ['OnesLike', 'ones_like', 'same'],
  ['Exp', 'exp', 'float32'],
  ['Log', 'log', 'float32'],
  ['Sqrt', 'sqrt', 'float32'],
  ['Rsqrt', 'rsqrt', 'float32'],
  ['Sigmoid', 'sigmoid', 'float32'],
  ['Tanh', 'tanh', 'float32'],
  ['Elu', 'elu', 'float32'],
  ['Selu', 'selu', 'float32'],
  ['Sin', 'sin', 'float32'],
  ['Cos', 'cos', 'float32'],
  ['Tan', 'tan', 'float32'],
  ['Asin', 'asin', 'float32'],
  ['Acos', 'acos', 'float32'],
  ['Atan', 'atan', 'float32'],
  ['Sinh', 'sinh', 'float32'],
  ['Cosh', 'cosh', 'float32'],
  ['Asinh', 'asinh', 'float32'],
  ['Acosh', 'acosh', 'float32'],
  ['Atanh', 'atanh', 'float32'],
  ['Log1p', 'log1p', 'float32'],
  ['Expm1', 'expm1', 'float32'],
  ['Reciprocal', 'reciprocal', 'float32'],
  ['Erf', 'erf', 'float32'],
  ['Softplus', 'softplus', 'float32'],
  ['LogicalNot', 'logical_not', 'bool'],
  ['IsNan', 'isnan', 'bool'],
  ['IsInf', 'isinf', 'bool'],
  ['IsFinite', 'isfinite', 'bool'],
];
for (const [name, op, dt] of unary) {
  def(name, ['x'], (b, [x]) => b.run1(op, [x!], [], dt === 'same' ? x!.dtype : dt));
}

// Binary kernels: [TF.js name, addon op, output dtype ('upcast' = of the two inputs)].
const binary: [string, string, tf.DataType | 'upcast'][] = [
  ['Add', 'add', 'upcast'],
  ['Sub', 'sub', 'upcast'],
  ['Multiply', 'mul', 'upcast'],
  ['RealDiv', 'div', 'float32'],
  ['FloorDiv', 'floordiv', 'upcast'],
  ['Mod', 'mod', 'upcast'],
  ['Maximum', 'maximum', 'upcast'],
  ['Minimum', 'minimum', 'upcast'],
  ['Pow', 'pow', 'upcast'],
  ['SquaredDifference', 'squared_difference', 'upcast'],
  ['Atan2', 'atan2', 'float32'],
  ['Prelu', 'prelu', 'float32'],
  ['Equal', 'equal', 'bool'],
  ['NotEqual', 'not_equal', 'bool'],
  ['Less', 'less', 'bool'],
  ['LessEqual', 'less_equal', 'bool'],
  ['Greater', 'greater', 'bool'],
  ['GreaterEqual', 'greater_equal', 'bool'],
  ['LogicalAnd', 'logical_and', 'bool'],
  ['LogicalOr', 'logical_or', 'bool'],
  ['LogicalXor', 'logical_xor', 'bool'],
];
for (const [name, op, dt] of binary) {
  const inputs = name === 'Prelu' ? ['x', 'alpha'] : ['a', 'b'];
  def(name, inputs, (b, [x, y]) =>
    b.run1(op, [x!, y!], [], dt === 'upcast' ? upcast(x!.dtype, y!.dtype) : dt),
  );
}

// Tensors are immutable: a clone shares the data (as the cpu backend does), and TF.js counts a
// new data id inside a custom gradient's forward pass as a leak.
def('Identity', ['x'], (b, [x]) => {
  b.incRef(x!.dataId);
  return { dataId: x!.dataId, shape: [...x!.shape], dtype: x!.dtype };
});

def('Cast', ['x'], (b, [x], a) => {
  const dtype = a['dtype'] as tf.DataType;
  return b.run1('cast', [x!], [dtype], dtype);
});
def('AddN', [], (b, inputs) => b.run1('add_n', inputs, [], inputs[0]!.dtype));
def('ClipByValue', ['x'], (b, [x], a) =>
  b.run1('clip', [x!], [a['clipValueMin'], a['clipValueMax']], x!.dtype),
);
def('LeakyRelu', ['x'], (b, [x], a) => b.run1('leaky_relu', [x!], [a['alpha']], 'float32'));
def('Step', ['x'], (b, [x], a) => b.run1('step', [x!], [a['alpha']], x!.dtype));

// Reductions: [TF.js name, reduction, output dtype rule].
const reductions: [string, string, (d: tf.DataType) => tf.DataType][] = [
  ['Sum', 'sum', (d) => upcast(d, 'int32')],
  ['Prod', 'prod', (d) => upcast(d, 'int32')],
  ['Mean', 'mean', () => 'float32'],
  ['Max', 'max', (d) => d],
  ['Min', 'min', (d) => d],
  ['Any', 'any', () => 'bool'],
  ['All', 'all', () => 'bool'],
];
for (const [name, kind, dt] of reductions) {
  // Max names its axes `reductionIndices`.
  def(name, ['x'], (b, [x], a) =>
    b.run1(
      'reduce',
      [x!],
      [kind, axes(a['axis'] ?? a['reductionIndices'], x!.shape), !!a['keepDims']],
      dt(x!.dtype),
    ),
  );
}
for (const [name, op] of [
  ['ArgMax', 'argmax'],
  ['ArgMin', 'argmin'],
] as const) {
  def(name, ['x'], (b, [x], a) => b.run1(op, [x!], [axes(a['axis'], x!.shape)[0]!], 'int32'));
}
def('Softmax', ['logits'], (b, [x], a) =>
  b.run1('softmax', [x!], [axes(a['dim'], x!.shape)[0]!], 'float32'),
);
def('LogSoftmax', ['logits'], (b, [x], a) =>
  b.run1('log_softmax', [x!], [axes(a['axis'], x!.shape)[0]!], 'float32'),
);

def('Reshape', ['x'], (b, [x], a) => {
  const shape = tf.util.inferFromImplicitShape(
    a['shape'] as number[],
    tf.util.sizeFromShape(x!.shape),
  );
  if (x!.dtype === 'string') {
    b.incRef(x!.dataId);
    return { dataId: x!.dataId, shape, dtype: 'string' };
  }
  return b.run1('reshape', [x!], [shape]);
});
def('Transpose', ['x'], (b, [x], a) => b.run1('transpose', [x!], [a['perm']]));
def('Slice', ['x'], (b, [x], a) => {
  const [begin, size] = tf.slice_util.parseSliceParams(
    x as tf.Tensor,
    a['begin'] as number[],
    a['size'] as number[],
  );
  return b.run1('slice', [x!], [begin, size]);
});
def('StridedSlice', ['x'], (b, [x], a) => {
  const n = (k: string): number => (a[k] as number | undefined) ?? 0;
  const info = tf.slice_util.sliceInfo(
    x!.shape,
    a['begin'] as number[],
    a['end'] as number[],
    a['strides'] as number[],
    n('beginMask'),
    n('endMask'),
    n('ellipsisMask'),
    n('newAxisMask'),
    n('shrinkAxisMask'),
  );
  return b.run1('strided_slice', [x!], [info.begin, info.end, info.strides, info.finalShape]);
});
def('Concat', [], (b, inputs, a) => {
  const axis = axes(a['axis'], inputs[0]!.shape)[0]!;
  tf.backend_util.assertParamsConsistent(
    inputs.map((t) => t.shape),
    axis,
  );
  const nonEmpty = inputs.filter((t) => tf.util.sizeFromShape(t.shape) > 0);
  const shape = tf.backend_util.computeOutShape(
    inputs.map((t) => t.shape),
    axis,
  );
  if (nonEmpty.length === 0) return b.run1('fill', [], [shape, 0, inputs[0]!.dtype]);
  const dtype = inputs.map((t) => t.dtype).reduce(upcast);
  return b.run1('concat', nonEmpty, [axis], dtype);
});
def('Pack', [], (b, inputs, a) => {
  tf.util.assert(
    inputs.every((t) => t.dtype === inputs[0]!.dtype),
    () => 'All tensors passed to stack must have matching dtypes',
  );
  return b.run1('stack', inputs, [axes(a['axis'], [...inputs[0]!.shape, 1])[0]!], inputs[0]!.dtype);
});
def('Unpack', ['value'], (b, [x], a) => b.run('unstack', [x!], [axes(a['axis'], x!.shape)[0]!]));
def('SplitV', ['x'], (b, [x], a) => {
  const axis = axes(a['axis'], x!.shape)[0]!;
  const sizes = tf.backend_util.prepareSplitSize(
    x as tf.Tensor,
    a['numOrSizeSplits'] as number | number[],
    axis,
  );
  return b.run('split', [x!], [sizes, axis]);
});
def('Tile', ['x'], (b, [x], a) => b.run1('tile', [x!], [a['reps']]));
def('Reverse', ['x'], (b, [x], a) => b.run1('reverse', [x!], [axes(a['dims'], x!.shape)]));
def('PadV2', ['x'], (b, [x], a) =>
  b.run1('pad', [x!], [(a['paddings'] as number[][]).flat(), a['constantValue'] ?? 0]),
);
def('GatherV2', ['x', 'indices'], (b, [x, idx], a) => {
  const axis = axes(a['axis'], x!.shape)[0]!;
  let bd = (a['batchDims'] as number | undefined) ?? 0;
  if (bd < 0) bd += idx!.shape.length;
  // Shape checks (and TF.js' messages) only; indices are not read back.
  tf.backend_util.segment_util.collectGatherOpShapeInfo(x!, idx!, axis, bd);
  return b.run1('gather', [x!, idx!], [axis, bd]);
});
def('GatherNd', ['params', 'indices'], (b, [x, idx]) => b.run1('gather_nd', [x!, idx!], []));
def('ScatterNd', ['indices', 'updates'], (b, [idx, upd], a) =>
  b.run1('scatter_nd', [idx!, upd!], [a['shape']], upd!.dtype),
);
def('UnsortedSegmentSum', ['x', 'segmentIds'], (b, [x, ids], a) =>
  b.run1('unsorted_segment_sum', [x!, ids!], [a['numSegments']], x!.dtype),
);
def('OneHot', ['indices'], (b, [idx], a) =>
  b.run1(
    'one_hot',
    [idx!],
    [a['depth'], a['onValue'] ?? 1, a['offValue'] ?? 0],
    (a['dtype'] as tf.DataType | undefined) ?? 'int32',
  ),
);
def('Select', ['condition', 't', 'e'], (b, [c, t, e]) =>
  b.run1('select', [c!, t!, e!], [], upcast(t!.dtype, e!.dtype)),
);
def('BatchMatMul', ['a', 'b'], (b, [x, y], a) => {
  tf.util.assert(
    x!.shape.length >= 2 && y!.shape.length >= 2,
    () =>
      `Error in matMul: inputs must have rank >= 2, got ranks ${x!.shape.length} and ${y!.shape.length}.`,
  );
  return b.run1(
    'matmul',
    [x!, y!],
    [!!a['transposeA'], !!a['transposeB']],
    upcast(x!.dtype, y!.dtype),
  );
});
def('Einsum', [], (b, inputs, a) => {
  const equation = a['equation'] as string;
  const { allDims, idDims } = tf.backend_util.decodeEinsumEquation(equation, inputs.length);
  tf.backend_util.checkEinsumDimSizes(allDims.length, idDims, inputs as tf.Tensor[]);
  return b.run1('einsum', inputs, [equation], inputs.map((t) => t.dtype).reduce(upcast));
});
def('Fill', [], (b, _i, a) => {
  const dtype = (a['dtype'] as tf.DataType | undefined) ?? 'float32';
  return b.run1('fill', [], [a['shape'], Number(a['value']), dtype], dtype);
});
def('Range', [], (b, _i, a) => {
  const { start, stop } = a as { start: number; stop: number };
  let step = a['step'] as number;
  const dtype = (a['dtype'] as tf.DataType | undefined) ?? 'float32';
  // TF.js' rule: a range going down with step 1 steps by -1; a step against the direction is empty.
  const empty = start === stop || (start < stop && step < 0) || (stop < start && step > 1);
  if (stop < start && step === 1) step = -1;
  const n = empty ? 0 : Math.abs(Math.ceil((stop - start) / step));
  const values = dtype === 'int32' ? new Int32Array(n) : new Float32Array(n);
  for (let i = 0; i < n; i++) values[i] = start + i * step;
  return { dataId: b.write(values, [n], dtype), shape: [n], dtype };
});
for (const [name, op] of [
  ['Cumsum', 'cumsum'],
  ['Cumprod', 'cumprod'],
] as const) {
  def(name, ['x'], (b, [x], a) => {
    const axis = axes(a['axis'], x!.shape)[0]!;
    return b.run1(op, [x!], [axis, !!a['exclusive'], !!a['reverse']], upcast(x!.dtype, 'int32'));
  });
}
def('TopK', ['x'], (b, [x], a) => {
  const [values, indices] = b.run('topk', [x!], [a['k'], a['sorted'] ?? true]);
  return [values!, indices!];
});

// The model's fused attention (see ../../attention.ts and ./attention.ts).
const attnInputs = ['q', 'k', 'v', 'cos', 'sin', 'bias'];
const heads = (a: Attrs): number[] => [
  a['H'] as number,
  a['KV'] as number,
  a['hd'] as number,
  (a['maxScores'] as number | undefined) ?? 0,
];
def('RtjobTorchAttention', attnInputs, (b, inputs, a) =>
  b.run1('attention', inputs, heads(a), 'float32'),
);
def('RtjobTorchAttentionCache', attnInputs, (b, inputs, a) =>
  b.run('attention_cache', inputs, heads(a)),
);
def('RtjobTorchAttentionPast', [...attnInputs, 'pastK', 'pastV'], (b, inputs, a) =>
  b.run('attention_past', inputs, heads(a)),
);
def('RtjobTorchAttentionGrad', [...attnInputs, 'dy'], (b, inputs, a) =>
  b.run('attention_grad', inputs, heads(a)),
);

// The trainer's AdamW update in one kernel (../../training.ts, ./attention.ts). Where p, m and v
// are each held by one tensor alone (the trainer's variables), it updates them in place and
// returns them (as Identity does: the trainer's assign then keeps the same data); otherwise it
// computes new tensors, as TF.js kernels do.
def('RtjobTorchAdamW', ['p', 'm', 'v', 'g'], (b, inputs, a) => {
  const args = ['lr', 'beta1', 'beta2', 'eps', 'weightDecay', 'bc1', 'bc2', 'gs'].map((k) => a[k]);
  const [p, m, v] = inputs as [Info, Info, Info, Info];
  const alone = [p, m, v].every((t) => b.refCount(t.dataId) === 1);
  if (!alone || new Set([p.dataId, m.dataId, v.dataId]).size < 3)
    return b.run('adamw', inputs, args);
  b.run('adamw_', inputs, args);
  return [p, m, v].map((t) => {
    b.incRef(t.dataId);
    return { dataId: t.dataId, shape: [...t.shape], dtype: t.dtype };
  });
});

// The trainer's squared global gradient norm (../../training.ts): one kernel over all gradients.
def('RtjobTorchSumSquares', [], (b, inputs) => b.run1('sum_squares', inputs, [], 'float32'));

// The next-token logprob and its gradient (../../training.ts, ./attention.ts).
def('RtjobTorchTargetLogprob', ['x', 't'], (b, inputs) =>
  b.run1('target_logprob', inputs, [], 'float32'),
);
def('RtjobTorchTargetLogprobGrad', ['x', 't', 'dy'], (b, inputs) =>
  b.run1('target_logprob_grad', inputs, [], 'float32'),
);

/** Every TF.js kernel the `torch` backend registers. */
export const torchKernelNames: readonly string[] = [...kernels.keys()];

let cpu: tf.KernelBackend | undefined;

/**
 * A kernel over string tensors, which stay in JS on this backend: run by the `cpu` backend's own
 * kernel on copies, outputs written back here (strings stay strings, bools and numbers go to
 * libtorch).
 */
function onCpuNamed(
  kernelName: string,
  b: TorchBackend,
  named: Record<string, Info>,
  attrs: Attrs,
): Info | Info[] {
  const names = Object.keys(named);
  const inputs = names.map((n) => named[n]!);
  const kernel = tf.getKernel(kernelName, 'cpu');
  if (!kernel) throw new TorchBackendError(`torch backend: no string kernel '${kernelName}'`);
  cpu ??= tf.findBackendFactory('cpu')!() as tf.KernelBackend;
  const copies = inputs.map((t) => ({
    dataId: cpu!.write(b.readSync(t.dataId), t.shape, t.dtype),
    shape: t.shape,
    dtype: t.dtype,
  }));
  const asArray = Array.isArray(named);
  const out = kernel.kernelFunc({
    inputs: (asArray
      ? copies
      : Object.fromEntries(names.map((n, i) => [n, copies[i]!]))) as tf.NamedTensorInfoMap,
    backend: cpu,
    attrs: attrs as tf.NamedAttrMap,
  });
  const back = (o: Info): Info => {
    const r = {
      dataId: b.write(cpu!.readSync(o.dataId), o.shape, o.dtype),
      shape: o.shape,
      dtype: o.dtype,
    };
    cpu!.disposeData(o.dataId, true);
    return r;
  };
  const result = Array.isArray(out) ? out.map(back) : back(out);
  copies.forEach((c) => cpu!.disposeData(c.dataId, true));
  return result;
}

/** Registers every kernel for `backendName` (once per process). */
export function registerTorchKernels(backendName: string): void {
  for (const [kernelName, { inputs: names, fn }] of kernels) {
    if (tf.getKernel(kernelName, backendName)) continue;
    tf.registerKernel({
      kernelName,
      backendName,
      kernelFunc: ({ inputs, backend, attrs }) => {
        const named = inputs as unknown as Record<string, Info>;
        if (kernelName !== 'Identity' && Object.values(named).some((t) => t.dtype === 'string')) {
          // Keyed as TF.js passed them, so the cpu kernel finds its inputs by name.
          const b = backend as TorchBackend;
          return onCpuNamed(kernelName, b, named, (attrs ?? {}) as Attrs);
        }
        // Variadic kernels (Concat, AddN, Pack, Einsum) take their inputs in order.
        const list = names.length ? names.map((n) => named[n]!) : Object.values(named);
        return fn(backend as TorchBackend, list, (attrs ?? {}) as Attrs, named);
      },
    });
  }
}
