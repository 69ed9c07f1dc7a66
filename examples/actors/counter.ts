/** The actor of the runtime quick start: a counter that keeps its state between calls. */
export class Counter {
  private n: number;

  constructor(start: number) {
    this.n = start;
  }

  incr(by = 1): number {
    this.n += by;
    return this.n;
  }

  /** Async methods work the same; with `maxConcurrency > 1` several run at once. */
  async total(values: Float32Array): Promise<number> {
    return values.reduce((a, b) => a + b, this.n);
  }
}
