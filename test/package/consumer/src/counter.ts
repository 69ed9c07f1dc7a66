/** An actor class of the user's project. */
export class Counter {
  constructor(private n: number) {}

  incr(by: number): number {
    this.n += by;
    return this.n;
  }
}
