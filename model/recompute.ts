/**
 * The backward walk every training pass takes: `f` runs under a tape of its own, and the
 * gradients are taken by a walk back over that tape that frees as it goes. TF.js's own
 * `engine.gradients` (behind `tf.variableGrads`) keeps every tensor the forward created, every
 * tensor it saved and every gradient it computed until the whole walk ends, so a pass's
 * activations and all their gradients were alive at once (about three times what the gradient
 * needs). Here the forward's intermediates go when the forward ends, except those an op saved for
 * its gradient; a node's saved tensors are released as soon as its gradient ran, and a tensor's
 * gradient as soon as the node that made the tensor has used it. The walk calls the same gradient
 * kernels in the same order, summing a tensor's gradients in the same order, so the gradients are
 * the ones `engine.gradients` gives.
 *
 * Two callers: the trainer's whole pass (`freeingGrads`, model/training.ts), and a recomputed
 * piece of the model inside that pass's backward (`recomputeGrads`: a checkpointed decoder
 * layer, one chunk of the LM head).
 *
 * @module
 */
import { tf } from './backend.ts';
import { ModelError } from './errors.ts';

/** One recorded op of the engine's tape (TF.js's `TapeNode`, internal to tfjs-core). */
interface TapeNode {
  inputs: Record<string, tf.Tensor>;
  outputs: tf.Tensor[];
  saved?: tf.Tensor[];
  gradient?: (dys: (tf.Tensor | null)[]) => Record<string, () => tf.Tensor>;
}

/** The engine's tape and the calls that record one (internal to tfjs-core). */
interface TapeEngine {
  state: { activeTape: TapeNode[] | null };
  startTape(): void;
  endTape(): void;
  scopedRun<T>(start: () => void, end: () => void, f: () => T): T;
}

/** The nodes of `tape` on a path from `xs` to `y`, each with only its inputs that depend on `xs`. */
function pathNodes(tape: TapeNode[], xs: tf.Tensor[], y: tf.Tensor): TapeNode[] {
  const fromX = new Set(xs.map((x) => x.id));
  const reachedFromX = tape.map((node) => {
    const hit = Object.values(node.inputs).some((t) => fromX.has(t.id));
    if (hit) node.outputs.forEach((o) => fromX.add(o.id));
    return hit;
  });
  const toY = new Set([y.id]);
  const leadsToY = new Array<boolean>(tape.length).fill(false);
  for (let i = tape.length - 1; i >= 0; i--) {
    const node = tape[i]!;
    if (!node.outputs.some((o) => toY.has(o.id))) continue;
    leadsToY[i] = true;
    Object.values(node.inputs).forEach((t) => toY.add(t.id));
  }
  return tape
    .filter((_, i) => reachedFromX[i] && leadsToY[i])
    .map((node) => ({
      ...node,
      inputs: Object.fromEntries(Object.entries(node.inputs).filter(([, t]) => fromX.has(t.id))),
    }));
}

/**
 * Walks `nodes` back from `y` (whose gradient is `dy`), freeing each node's saved tensors and
 * its outputs' gradients once used; returns the gradients of `xs` (undefined where no path
 * reaches). Runs inside the caller's `tf.tidy`.
 */
function walkBack(
  nodes: TapeNode[],
  xs: tf.Tensor[],
  y: tf.Tensor,
  dy: tf.Tensor,
): (tf.Tensor | undefined)[] {
  const keep = new Set(xs.map((x) => x.id));
  const grads = new Map<number, tf.Tensor>([[y.id, dy]]);
  for (let i = nodes.length - 1; i >= 0; i--) {
    const node = nodes[i]!;
    if (!node.gradient)
      throw new ModelError('MODEL_BACKEND', 'training pass: a taped op has no gradient');
    const gradient = node.gradient;
    const dys = node.outputs.map((o) => grads.get(o.id) ?? null);
    // A custom op computes every input's gradient at once: those of inputs off the path (a
    // frozen weight, an attention bias) go with this tidy, not at the end of the pass. A
    // gradient that is an output's gradient passed through gets a handle of its own.
    const inputs = Object.entries(node.inputs);
    const dxs = tf.tidy(() => {
      const inputGrads = gradient(dys);
      return inputs.map(([name]) => {
        const dx = inputGrads[name]!();
        return dys.includes(dx) ? dx.clone() : dx;
      });
    });
    for (const [k, [, x]] of inputs.entries()) {
      const dx = dxs[k]!;
      const prev = grads.get(x.id);
      if (!prev) grads.set(x.id, dx);
      else {
        grads.set(x.id, tf.add(prev, dx));
        tf.dispose([prev, dx]);
      }
    }
    // Nothing reads this node's saved tensors or its outputs' gradients again.
    for (const o of node.outputs) {
      const g = grads.get(o.id);
      if (!g || keep.has(o.id)) continue;
      if (g !== dy) g.dispose();
      grads.delete(o.id);
    }
    node.saved?.forEach((t) => t.dispose());
  }
  return xs.map((x) => grads.get(x.id));
}

/**
 * Runs `f` under a tape of its own and walks back over it (see the module note). TF.js keeps one
 * tape per engine, so a tape already recording (the outer pass's, when this runs inside its
 * backward) is put back when done. `keepValue`: the output survives, else it is freed as soon as
 * the tape is read.
 */
function taped(
  f: () => tf.Tensor,
  xs: tf.Tensor[],
  dy: tf.Tensor | undefined,
  keepValue: boolean,
): { value?: tf.Tensor; grads: (tf.Tensor | undefined)[] } {
  const engine = tf.engine() as unknown as TapeEngine;
  const outer = engine.state.activeTape;
  let tape: TapeNode[] = [];
  try {
    return tf.tidy(() => {
      const y = engine.scopedRun(
        () => engine.startTape(),
        () => engine.endTape(),
        () => tf.tidy('forward', f),
      );
      tape = engine.state.activeTape ?? [];
      const nodes = pathNodes(tape, xs, y);
      const seed = dy ?? tf.onesLike(y);
      if (!keepValue && !xs.includes(y)) y.dispose();
      const grads = walkBack(nodes, xs, y, seed);
      return { ...(keepValue ? { value: y } : {}), grads };
    });
  } finally {
    for (const node of tape) node.saved?.forEach((t) => t.dispose());
    engine.state.activeTape = outer;
  }
}

/**
 * The scalar `f()` and its gradients with respect to `xs` (undefined where no path from an `x`
 * reaches it): what `tf.variableGrads` gives, with the pass's memory freed as the walk goes.
 *
 * @throws ModelError `MODEL_INPUT` when `f` returns a tensor that is not a scalar, or one no `x`
 *   reaches (as `tf.variableGrads` refuses it)
 */
export function freeingGrads(
  f: () => tf.Scalar,
  xs: tf.Tensor[],
): { value: tf.Scalar; grads: (tf.Tensor | undefined)[] } {
  let rank = 0;
  const { value, grads } = taped(
    () => {
      const y = f();
      rank = y.rank;
      return y;
    },
    xs,
    undefined,
    true,
  );
  const why =
    rank !== 0
      ? `a training loss must be a scalar, got rank ${rank}`
      : xs.length > 0 && grads.every((g) => g === undefined)
        ? 'the training loss does not depend on any trained parameter'
        : undefined;
  if (why) {
    tf.dispose([value!, ...grads.filter((g) => g !== undefined)]);
    throw new ModelError('MODEL_INPUT', why);
  }
  return { value: value as tf.Scalar, grads };
}

/**
 * The gradients of `f()` with respect to `xs`, given the gradient `dy` of its output, computed
 * inside another gradient's backward pass (a recomputed piece of the model). A gradient no path
 * reaches is zeros. `dy` stays the caller's.
 */
export function recomputeGrads(f: () => tf.Tensor, xs: tf.Tensor[], dy: tf.Tensor): tf.Tensor[] {
  const { grads } = taped(f, xs, dy, false);
  return xs.map((x, i) => grads[i] ?? tf.zerosLike(x));
}
