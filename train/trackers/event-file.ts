/**
 * TensorBoard's event-file format, written from its specification: a file of TFRecords (each a
 * little-endian uint64 length, the masked CRC-32C of those 8 bytes, the payload, and the masked
 * CRC-32C of the payload), each payload one `tensorboard.Event` protocol buffer. The first event
 * names the file version (`brain.Event:2`); the others carry a `Summary` of scalar values
 * (`simple_value`) or a text summary (the text plugin's `DT_STRING` tensor).
 *
 * Only the fields rtjob writes are encoded, in field order and without defaults, as a protobuf
 * library serialises them; the field numbers are those of TensorBoard's `event.proto`,
 * `summary.proto`, `tensor.proto` and `tensor_shape.proto`.
 *
 * @module
 */
import { Message } from './protobuf.ts';

/** The CRC-32C (Castagnoli) table, reflected polynomial 0x82F63B78. */
const table = (() => {
  const t = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0x82f63b78 ^ (c >>> 1) : c >>> 1;
    t[n] = c >>> 0;
  }
  return t;
})();

/** CRC-32C of `bytes`. */
export function crc32c(bytes: Uint8Array): number {
  let c = 0xffffffff;
  for (const b of bytes) c = table[(c ^ b) & 0xff]! ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

/** TFRecord's masked CRC: rotated right by 15 bits plus a constant, so a CRC of CRCs is not trivial. */
export function maskedCrc32c(bytes: Uint8Array): number {
  const c = crc32c(bytes);
  return (((c >>> 15) | (c << 17)) + 0xa282ead8) >>> 0;
}

/** One payload framed as a TFRecord. */
export function tfRecord(payload: Uint8Array): Buffer {
  const out = Buffer.alloc(8 + 4 + payload.length + 4);
  out.writeBigUInt64LE(BigInt(payload.length), 0);
  out.writeUInt32LE(maskedCrc32c(out.subarray(0, 8)), 8);
  out.set(payload, 12);
  out.writeUInt32LE(maskedCrc32c(payload), 12 + payload.length);
  return out;
}

/** `Event { wall_time = 1; step = 2; oneof what { file_version = 3; summary = 5 } }`. */
function event(wallTime: number, step: number, what: (e: Message) => void): Buffer {
  // As proto3 writes it: a zero step is left out, like every default.
  const e = new Message().double(1, wallTime);
  if (step !== 0) e.int(2, step);
  what(e);
  return e.end();
}

/** The first event of every file: `file_version: "brain.Event:2"`. */
export function fileVersionEvent(wallTime: number): Buffer {
  return event(wallTime, 0, (e) => e.bytes(3, 'brain.Event:2'));
}

/**
 * One step's scalars: `Summary { repeated Value value = 1 }`, each `Value { tag = 1;
 * simple_value = 2 }`. Non-finite values are written as they are (float32 NaN and ±Inf).
 */
export function scalarsEvent(
  wallTime: number,
  step: number,
  values: Readonly<Record<string, number>>,
): Buffer {
  const summary = new Message();
  for (const [tag, v] of Object.entries(values))
    summary.bytes(1, new Message().bytes(1, tag).float(2, v));
  return event(wallTime, step, (e) => e.bytes(5, summary));
}

/** `DataType.DT_STRING` of tensor.proto. */
const DT_STRING = 7;

/**
 * A text summary, as the text plugin reads it: `Value { tag = 1; metadata = 9 { plugin_data = 1
 * { plugin_name = 1: "text"; content = 2: TextPluginData{} } }; tensor = 8 { dtype = 1:
 * DT_STRING; tensor_shape = 2 { dim = 2 { size = 1: 1 } }; string_val = 8 } }`. The text is
 * Markdown.
 */
export function textEvent(wallTime: number, step: number, tag: string, markdown: string): Buffer {
  // The plugin's content, TextPluginData with version 0, encodes to no bytes at all.
  const metadata = new Message().bytes(1, new Message().bytes(1, 'text'));
  const tensor = new Message()
    .int(1, DT_STRING)
    .bytes(2, new Message().bytes(2, new Message().int(1, 1)))
    .bytes(8, markdown);
  const value = new Message().bytes(1, tag).bytes(8, tensor).bytes(9, metadata);
  return event(wallTime, step, (e) => e.bytes(5, new Message().bytes(1, value)));
}
