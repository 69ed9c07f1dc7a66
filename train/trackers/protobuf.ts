/**
 * A protocol-buffer message writer for the trackers' binary formats (TensorBoard's event files,
 * W&B's `.wandb` datastore): fields are appended in the order written, so a caller writes them in
 * field order and leaves defaults out, as a protobuf library serialises them.
 *
 * @module
 */

/**
 * A protocol-buffer message being written: fields appended in order.
 *
 * @example
 * const step = new Message().int(1, 7).end(); // HistoryStep { num: 7 }
 */
export class Message {
  readonly #parts: Buffer[] = [];

  #varint(n: bigint | number): void {
    let v = BigInt(n);
    if (v < 0n) v &= (1n << 64n) - 1n; // negative int64s are ten-byte two's complement
    const bytes: number[] = [];
    do {
      let b = Number(v & 0x7fn);
      v >>= 7n;
      if (v > 0n) b |= 0x80;
      bytes.push(b);
    } while (v > 0n);
    this.#parts.push(Buffer.from(bytes));
  }

  #key(field: number, wireType: 0 | 1 | 2 | 5): void {
    this.#varint((field << 3) | wireType);
  }

  /** A varint field (int32, int64, enum). */
  int(field: number, n: number | bigint): this {
    this.#key(field, 0);
    this.#varint(n);
    return this;
  }

  /** A `double` field (wire type 1, little-endian). */
  double(field: number, x: number): this {
    this.#key(field, 1);
    const b = Buffer.alloc(8);
    b.writeDoubleLE(x);
    this.#parts.push(b);
    return this;
  }

  /** A `float` field (wire type 5, little-endian float32). */
  float(field: number, x: number): this {
    this.#key(field, 5);
    const b = Buffer.alloc(4);
    b.writeFloatLE(x);
    this.#parts.push(b);
    return this;
  }

  /** A length-delimited field: bytes, a UTF-8 string, or an embedded message. */
  bytes(field: number, v: Uint8Array | string | Message): this {
    const b = typeof v === 'string' ? Buffer.from(v, 'utf8') : v instanceof Message ? v.end() : v;
    this.#key(field, 2);
    this.#varint(b.length);
    this.#parts.push(Buffer.from(b));
    return this;
  }

  /** The message's bytes. */
  end(): Buffer {
    return Buffer.concat(this.#parts);
  }
}
