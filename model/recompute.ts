/**
 * The backward pass of a recomputed piece of the model (a checkpointed decoder layer, one chunk
 * of the LM head): `f` runs again under a tape of its own inside the outer pass's backward, and
 * its gradients are taken by a walk over that tape that frees as it goes. TF.js's own
 * `engine.gradients` keeps every tensor the forward saved and every gradient it computed until
 * the whole walk ends, so a layer's activations and their gradients were all alive at once; here
 * a node's saved tensors are released as soon as its gradient ran, and a tensor's gradient as
 * soon as the node that made the tensor has used it. The walk calls the same gradient kernels in
 * the same order, summing a tensor's gradients in the same order, so the gradients are the ones
 * `engine.gradients` gives.
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
 * The gradients of `f()` with respect to `xs`, given the gradient `dy` of its output, computed
 * inside another gradient's backward pass (see the module note). TF.js keeps one tape per
 * engine, so the outer pass's tape is put back when done. A gradient no path reaches is zeros.
 */
export function recomputeGrads(f: () => tf.Tensor, xs: tf.Tensor[], dy: tf.Tensor): tf.Tensor[] {
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
      const keep = new Set(xs.map((x) => x.id));
      const grads = new Map<number, tf.Tensor>([[y.id, dy]]);
      const nodes = pathNodes(tape, xs, y);
      for (let i = nodes.length - 1; i >= 0; i--) {
        const node = nodes[i]!;
        if (!node.gradient)
          throw new ModelError('MODEL_BACKEND', 'recomputed pass: a taped op has no gradient');
        const inputGrads = node.gradient(node.outputs.map((o) => grads.get(o.id) ?? null));
        for (const [name, x] of Object.entries(node.inputs)) {
          const dx = tf.tidy(() => inputGrads[name]!());
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
      return xs.map((x) => grads.get(x.id) ?? tf.zerosLike(x));
    });
  } finally {
    for (const node of tape) node.saved?.forEach((t) => t.dispose());
    engine.state.activeTape = outer;
  }
}
