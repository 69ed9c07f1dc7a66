/**
 * Resource accounting for one node or one placement-group bundle: scalar resources (`CPU`,
 * `memory`, custom names) and GPUs by index, where a fractional request shares an index with
 * others and a whole request takes whole indices.
 *
 * @module
 */
import type { ResourceMap } from '../protocol.ts';

const eps = 1e-9;

/** What a successful `take` reserved, to be handed back with `give`. */
export interface Allocation {
  readonly resources: ResourceMap;
  readonly gpuIds: number[];
  /** Fraction taken from each GPU in `gpuIds`. */
  readonly gpuShare: number;
}

/** Available and total amounts of one node or bundle. */
export class ResourcePool {
  readonly total: ResourceMap;
  readonly available: ResourceMap;
  /** Free fraction of each GPU index this pool holds. */
  readonly gpuFree: Map<number, number>;

  constructor(total: ResourceMap, gpuIds?: number[]) {
    this.total = { ...total };
    this.available = { ...total };
    this.gpuFree = new Map();
    const ids = gpuIds ?? [...Array(Math.floor(total.GPU ?? 0)).keys()];
    for (const id of ids) this.gpuFree.set(id, 1);
  }

  clone(): ResourcePool {
    const p = new ResourcePool(this.total, []);
    Object.assign(p.available, this.available);
    for (const [k, v] of this.gpuFree) p.gpuFree.set(k, v);
    return p;
  }

  /** True when `req` could fit in this pool were it empty. */
  couldEverFit(req: ResourceMap): boolean {
    return fitsIn(req, this.total) && this.pickGpus(req.GPU ?? 0, true) !== undefined;
  }

  canFit(req: ResourceMap): boolean {
    return fitsIn(req, this.available) && this.pickGpus(req.GPU ?? 0, false) !== undefined;
  }

  /** Reserves `req`; undefined when it does not fit now. */
  take(req: ResourceMap): Allocation | undefined {
    if (!fitsIn(req, this.available)) return undefined;
    const gpu = req.GPU ?? 0;
    const gpuIds = this.pickGpus(gpu, false);
    if (gpuIds === undefined) return undefined;
    for (const [k, v] of Object.entries(req))
      if (v > 0) this.available[k] = round(this.available[k]! - v);
    const share = gpu >= 1 ? 1 : gpu;
    for (const id of gpuIds) this.gpuFree.set(id, round(this.gpuFree.get(id)! - share));
    return { resources: { ...req }, gpuIds, gpuShare: share };
  }

  /**
   * Re-reserves what a running actor already holds, on the GPU indices it was given (a restarted
   * head re-attaching it). Never refuses: the process exists whether or not it fits.
   */
  takeExact(req: ResourceMap, gpuIds: readonly number[]): Allocation {
    for (const [k, v] of Object.entries(req))
      if (v > 0) this.available[k] = round((this.available[k] ?? 0) - v);
    const gpu = req.GPU ?? 0;
    const share = gpu >= 1 ? 1 : gpu;
    const ids = gpuIds.filter((id) => this.gpuFree.has(id));
    for (const id of ids) this.gpuFree.set(id, round(this.gpuFree.get(id)! - share));
    return { resources: { ...req }, gpuIds: ids, gpuShare: share };
  }

  give(a: Allocation): void {
    for (const [k, v] of Object.entries(a.resources)) {
      if (v > 0)
        this.available[k] = round(Math.min(this.total[k] ?? 0, (this.available[k] ?? 0) + v));
    }
    for (const id of a.gpuIds) {
      const cur = this.gpuFree.get(id);
      if (cur !== undefined) this.gpuFree.set(id, round(Math.min(1, cur + a.gpuShare)));
    }
  }

  /** Fraction of this pool in use, averaged over the resources it has (for spreading). */
  utilisation(): number {
    let used = 0;
    let n = 0;
    for (const [k, t] of Object.entries(this.total)) {
      if (t <= 0) continue;
      used += 1 - (this.available[k] ?? 0) / t;
      n++;
    }
    return n === 0 ? 0 : used / n;
  }

  private pickGpus(gpu: number, empty: boolean): number[] | undefined {
    if (gpu <= 0) return [];
    const free = (id: number) => (empty ? 1 : this.gpuFree.get(id)!);
    if (gpu < 1) {
      // Best fit: the index with the least free room that still holds the fraction.
      let best: number | undefined;
      let bestFree = Infinity;
      for (const id of this.gpuFree.keys()) {
        const f = free(id);
        if (f + eps >= gpu && f < bestFree) {
          best = id;
          bestFree = f;
        }
      }
      return best === undefined ? undefined : [best];
    }
    const whole = [...this.gpuFree.keys()].filter((id) => free(id) >= 1 - eps);
    return whole.length >= gpu ? whole.slice(0, gpu) : undefined;
  }
}

/** True when every amount in `req` is within `avail`. */
export function fitsIn(req: ResourceMap, avail: ResourceMap): boolean {
  for (const [k, v] of Object.entries(req)) if (v > 0 && (avail[k] ?? 0) + eps < v) return false;
  return true;
}

/** Sum of resource maps. */
export function sumResources(maps: ResourceMap[]): ResourceMap {
  const out: ResourceMap = {};
  for (const m of maps) for (const [k, v] of Object.entries(m)) out[k] = round((out[k] ?? 0) + v);
  return out;
}

function round(x: number): number {
  return Math.round(x * 1e9) / 1e9;
}
