/**
 * One collective operation on a ring, as a stream: every member writes a fixed sequence of byte
 * segments to its right neighbour and reads one from its left. What arrives is added into (or
 * copied over) a region of the member's flat float32 buffer and, where the algorithm says so,
 * forwarded to the right as soon as it is done, so chunks flow around the ring in pieces of
 * whatever size the socket delivers (chunked and pipelined without a step barrier).
 *
 * All-reduce is reduce-scatter then all-gather (2(N-1) steps of 1/N of the data each). Each
 * element is summed exactly once, in a fixed ring order, by the member that ends up owning its
 * chunk (which also divides by N for a mean); every other member receives those bytes verbatim.
 * So the result is deterministic and bit-identical on every rank.
 *
 * @module
 */
import type { Socket } from 'node:net';
import { RtjobError } from '../errors.ts';

/** What a received segment does to the buffer. */
type Mode = 'header' | 'add' | 'copy';

interface Segment {
  mode: Mode;
  /** Byte range of the flat buffer this segment covers (`header`: none). */
  start: number;
  end: number;
  /** Forward the processed bytes to the right neighbour. */
  forward: boolean;
  /** Divide each finished element by this (the mean, on the chunk's owner). */
  divideBy: number;
}

/** The 16-byte header every member sends before an operation's data, checked by its neighbour. */
export interface OpHeader {
  seq: number;
  /** 1 allreduce sum, 2 allreduce mean, 3 broadcast, 4 barrier. */
  kind: number;
  /** Elements; for broadcast the root rank rides in the upper bits of `kind`. */
  count: number;
}

const MAGIC = 0x52544331; // 'RTC1'

/** Encodes a header. */
export function encodeHeader(h: OpHeader): Buffer {
  const b = Buffer.allocUnsafe(16);
  b.writeUInt32LE(MAGIC, 0);
  b.writeUInt32LE(h.seq >>> 0, 4);
  b.writeUInt32LE(h.kind >>> 0, 8);
  b.writeUInt32LE(h.count >>> 0, 12);
  return b;
}

function decodeHeader(b: Buffer): OpHeader | undefined {
  if (b.readUInt32LE(0) !== MAGIC) return undefined;
  return { seq: b.readUInt32LE(4), kind: b.readUInt32LE(8), count: b.readUInt32LE(12) };
}

/** Element range `[start, end)` of chunk `i` when `count` elements are cut into `n` chunks. */
export function chunkRange(count: number, n: number, i: number): [number, number] {
  return [Math.floor((i * count) / n), Math.floor(((i + 1) * count) / n)];
}

/** How an operation failed inside the stream (the group turns it into a `CollectiveError`). */
export class RingMismatch extends RtjobError<'RING_MISMATCH'> {
  override get name(): string {
    return 'RingMismatch';
  }

  constructor(message: string) {
    super('RING_MISMATCH', message);
  }
}

/**
 * Receives one operation's segments from the left neighbour and forwards what it must to the
 * right. Created per operation; `feed` is given every chunk the left socket delivers.
 */
export class RingOp {
  private readonly segments: Segment[] = [];
  private seg = 0;
  /** Bytes of the current segment received so far. */
  private got = 0;
  /** Whole float32 elements of the current segment processed so far (`add`). */
  private floatsDone = 0;
  private readonly carry = new Uint8Array(4);
  private readonly carryF32 = new Float32Array(this.carry.buffer);
  private carryLen = 0;
  private readonly headerBytes = Buffer.allocUnsafe(16);
  private writesPending = 0;
  private received = 0;
  private readonly bytes: Buffer;
  private settled = false;

  /**
   * @param data the member's flat buffer, reduced in place
   * @param expected the header this member's own call implies; the left neighbour's must match
   * @param onDone called once everything is received and every forwarded byte has been handed
   *   to the kernel (so the caller may reuse `data`), or with the reason it cannot complete
   */
  constructor(
    private readonly data: Float32Array,
    private readonly right: Socket | undefined,
    private readonly expected: OpHeader,
    private readonly onDone: (err?: Error) => void,
  ) {
    this.bytes = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  }

  /** Bytes received from the left so far in this operation (for progress and tests). */
  get bytesReceived(): number {
    return this.received;
  }

  /** Plans an all-reduce for `rank` of `n`: reduce-scatter, then all-gather. */
  static allreduce(op: RingOp, rank: number, n: number, mean: boolean): RingOp {
    const count = op.data.length;
    const range = (i: number) =>
      chunkRange(count, n, ((i % n) + n) % n).map((e) => e * 4) as [number, number];
    op.segments.push({ mode: 'header', start: 0, end: 16, forward: false, divideBy: 1 });
    for (let k = 0; k < n - 1; k++) {
      const [start, end] = range(rank - k - 1);
      // The last reduce-scatter step finishes this member's own chunk: divide for the mean there.
      const last = k === n - 2;
      op.segments.push({ mode: 'add', start, end, forward: true, divideBy: last && mean ? n : 1 });
    }
    for (let k = 0; k < n - 1; k++) {
      const [start, end] = range(rank - k);
      op.segments.push({ mode: 'copy', start, end, forward: k < n - 2, divideBy: 1 });
    }
    const [s0, e0] = range(rank);
    op.start([encodeHeader(op.expected), op.bytes.subarray(s0, e0)]);
    return op;
  }

  /** Plans a broadcast of the whole buffer from `root`, passed along the ring. */
  static broadcast(op: RingOp, rank: number, n: number, root: number): RingOp {
    op.segments.push({ mode: 'header', start: 0, end: 16, forward: false, divideBy: 1 });
    if (rank === root) {
      op.start([encodeHeader(op.expected), op.bytes]);
    } else {
      const forward = (rank + 1) % n !== root;
      op.segments.push({ mode: 'copy', start: 0, end: op.bytes.length, forward, divideBy: 1 });
      op.start([encodeHeader(op.expected)]);
    }
    return op;
  }

  private start(initial: Buffer[]): void {
    for (const b of initial) this.write(b);
    this.advance();
  }

  /**
   * Consumes bytes from the left neighbour; returns what belongs to the next operation (a
   * neighbour may run ahead by one operation's first segment).
   */
  feed(chunk: Buffer): Buffer | undefined {
    let b = chunk;
    while (b.length > 0 && this.seg < this.segments.length) {
      const s = this.segments[this.seg]!;
      const take = Math.min(s.end - s.start - this.got, b.length);
      const piece = take === b.length ? b : b.subarray(0, take);
      this.received += take;
      if (s.mode === 'header') this.headerBytes.set(piece, this.got);
      else if (s.mode === 'copy') this.copy(s, piece);
      else this.add(s, piece);
      this.got += take;
      b = b.subarray(take);
      if (this.settled) return undefined;
      this.advance();
    }
    return b.length > 0 ? b : undefined;
  }

  /** Fails the operation (the group is going down). */
  fail(err: Error): void {
    if (this.settled) return;
    this.settled = true;
    this.onDone(err);
  }

  /** Moves past finished segments (including empty ones) and completes when all are done. */
  private advance(): void {
    while (this.seg < this.segments.length) {
      const s = this.segments[this.seg]!;
      if (this.got < s.end - s.start) return;
      if (s.mode === 'header') this.checkHeader();
      if (this.settled) return;
      this.seg++;
      this.got = 0;
      this.floatsDone = 0;
    }
    this.maybeDone();
  }

  private checkHeader(): void {
    const h = decodeHeader(this.headerBytes);
    const e = this.expected;
    if (!h) return this.fail(new RingMismatch('the left neighbour sent a malformed header'));
    if (h.seq !== e.seq || h.kind !== e.kind || h.count !== e.count) {
      this.fail(
        new RingMismatch(
          `the left neighbour called ${describe(h)} while this member called ${describe(e)}`,
        ),
      );
    }
  }

  private copy(s: Segment, piece: Buffer): void {
    const at = s.start + this.got;
    this.bytes.set(piece, at);
    if (s.forward) this.write(this.bytes.subarray(at, at + piece.length));
  }

  private add(s: Segment, piece: Buffer): void {
    const base = s.start / 4;
    const first = this.floatsDone;
    let p = 0;
    if (this.carryLen > 0) {
      p = Math.min(4 - this.carryLen, piece.length);
      this.carry.set(piece.subarray(0, p), this.carryLen);
      this.carryLen += p;
      if (this.carryLen === 4) {
        const i = base + this.floatsDone;
        this.data[i] = this.data[i]! + this.carryF32[0]!;
        this.floatsDone++;
        this.carryLen = 0;
      }
    }
    const whole = (piece.length - p) >>> 2;
    if (whole > 0) {
      const off = piece.byteOffset + p;
      // Socket reads are usually 8-byte aligned; a piece cut after a header or a carry may not be.
      const src =
        off % 4 === 0
          ? new Float32Array(piece.buffer, off, whole)
          : new Float32Array(piece.buffer.slice(off, off + whole * 4));
      const d = this.data;
      const o = base + this.floatsDone;
      for (let i = 0; i < whole; i++) d[o + i] = d[o + i]! + src[i]!;
      this.floatsDone += whole;
      p += whole * 4;
    }
    if (p < piece.length) {
      this.carry.set(piece.subarray(p), 0);
      this.carryLen = piece.length - p;
    }
    if (this.floatsDone === first) return;
    if (s.divideBy !== 1) {
      const d = this.data;
      for (let i = base + first; i < base + this.floatsDone; i++) d[i] = d[i]! / s.divideBy;
    }
    if (s.forward)
      this.write(this.bytes.subarray(s.start + first * 4, s.start + this.floatsDone * 4));
  }

  private write(b: Buffer): void {
    if (b.length === 0 || !this.right) return;
    this.writesPending++;
    this.right.write(b, (err) => {
      this.writesPending--;
      if (err) this.fail(err);
      else this.maybeDone();
    });
  }

  private maybeDone(): void {
    if (this.settled || this.seg < this.segments.length || this.writesPending > 0) return;
    this.settled = true;
    this.onDone();
  }
}

/** Op kinds as they travel in the header. */
export const opKind = { sum: 1, mean: 2, broadcast: 3, barrier: 4 } as const;

function describe(h: OpHeader): string {
  const kind = h.kind & 0xff;
  const name =
    kind === opKind.sum
      ? 'allreduce(sum)'
      : kind === opKind.mean
        ? 'allreduce(mean)'
        : kind === opKind.broadcast
          ? `broadcast(root ${h.kind >>> 8})`
          : kind === opKind.barrier
            ? 'barrier'
            : `operation ${kind}`;
  return `${name} #${h.seq} on ${h.count} elements`;
}
