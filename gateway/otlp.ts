/**
 * OTLP/HTTP trace export requests (`ExportTraceServiceRequest` of opentelemetry-proto's
 * `collector/trace/v1`), read from either encoding an exporter sends: JSON (`application/json`:
 * hex ids, enums as numbers, 64-bit integers as strings or numbers) or binary protobuf
 * (`application/x-protobuf`), decoded here with a small wire-format reader, since only these few
 * messages are read. Both give the same {@link OtlpSpan}s.
 *
 * @module
 */
import { GatewayError } from './errors.ts';

/** An attribute value, flattened: arrays and key-value lists become JSON text. */
export type OtlpValue = string | number | boolean;

/** One span as the gateway reads it. */
export interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  /** Unix time in milliseconds. */
  startMs: number;
  endMs: number;
  /** `STATUS_CODE_ERROR` (2). */
  error: boolean;
  statusMessage: string;
  attributes: Record<string, OtlpValue>;
  events: { name: string; attributes: Record<string, OtlpValue> }[];
}

/** The answer's `partialSuccess`, when spans were rejected. */
export interface PartialSuccess {
  rejectedSpans: number;
  errorMessage: string;
}

/** Reads an OTLP/HTTP JSON body (already parsed). */
export function spansFromJson(body: unknown): OtlpSpan[] {
  const out: OtlpSpan[] = [];
  for (const rs of list(field(body, 'resourceSpans', 'resource_spans'), 'resourceSpans')) {
    for (const ss of list(field(rs, 'scopeSpans', 'scope_spans'), 'scopeSpans')) {
      for (const s of list(field(ss, 'spans'), 'spans')) out.push(jsonSpan(s));
    }
  }
  return out;
}

function jsonSpan(s: unknown): OtlpSpan {
  const status = field(s, 'status');
  const code = field(status, 'code');
  const parent = id(field(s, 'parentSpanId', 'parent_span_id'), 'parentSpanId', true);
  return {
    traceId: id(field(s, 'traceId', 'trace_id'), 'traceId')!,
    spanId: id(field(s, 'spanId', 'span_id'), 'spanId')!,
    ...(parent ? { parentSpanId: parent } : {}),
    name: typeof field(s, 'name') === 'string' ? (field(s, 'name') as string) : '',
    startMs: nanosToMs(field(s, 'startTimeUnixNano', 'start_time_unix_nano')),
    endMs: nanosToMs(field(s, 'endTimeUnixNano', 'end_time_unix_nano')),
    error: code === 2 || code === 'STATUS_CODE_ERROR',
    statusMessage: String(field(status, 'message') ?? ''),
    attributes: jsonAttributes(field(s, 'attributes')),
    events: list(field(s, 'events'), 'events').map((e) => ({
      name: String(field(e, 'name') ?? ''),
      attributes: jsonAttributes(field(e, 'attributes')),
    })),
  };
}

function jsonAttributes(kvs: unknown): Record<string, OtlpValue> {
  const out: Record<string, OtlpValue> = {};
  for (const kv of list(kvs, 'attributes')) {
    const key = field(kv, 'key');
    if (typeof key === 'string') out[key] = flatten(jsonValue(field(kv, 'value')));
  }
  return out;
}

type Any = OtlpValue | Any[] | { [k: string]: Any } | undefined;

function jsonValue(v: unknown): Any {
  if (v === null || typeof v !== 'object') return undefined;
  const o = v as Record<string, unknown>;
  if ('stringValue' in o) return String(o['stringValue']);
  if ('boolValue' in o) return o['boolValue'] === true;
  if ('intValue' in o) return Number(o['intValue']);
  if ('doubleValue' in o) return Number(o['doubleValue']);
  if ('bytesValue' in o) return String(o['bytesValue']);
  if ('arrayValue' in o) return list(field(o['arrayValue'], 'values'), 'values').map(jsonValue);
  if ('kvlistValue' in o) {
    const m: Record<string, Any> = {};
    for (const kv of list(field(o['kvlistValue'], 'values'), 'values'))
      m[String(field(kv, 'key'))] = jsonValue(field(kv, 'value'));
    return m;
  }
  return undefined;
}

function flatten(v: Any): OtlpValue {
  if (v === undefined) return '';
  return typeof v === 'object' ? JSON.stringify(v) : v;
}

function field(o: unknown, ...names: string[]): unknown {
  if (o === null || typeof o !== 'object') return undefined;
  for (const n of names) if (n in o) return (o as Record<string, unknown>)[n];
  return undefined;
}

function list(v: unknown, name: string): unknown[] {
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v)) throw invalid(`${name} must be an array`);
  return v;
}

/** A hex id (OTLP/JSON spells ids in hex, not base64); empty is none. */
function id(v: unknown, name: string, optional = false): string | undefined {
  if ((v === undefined || v === '') && optional) return undefined;
  if (typeof v !== 'string' || !/^[0-9a-fA-F]+$/.test(v) || (v.length !== 16 && v.length !== 32))
    throw invalid(`${name} must be a hex trace or span id, got ${JSON.stringify(v)}`);
  return v.toLowerCase();
}

function nanosToMs(v: unknown): number {
  if (typeof v === 'number') return v / 1e6;
  if (typeof v === 'string' && /^\d+$/.test(v)) return Number(BigInt(v) / 1000n) / 1000;
  return 0;
}

function invalid(message: string): GatewayError {
  return new GatewayError(400, 'invalid_request', `OTLP traces: ${message}`, 'body');
}

/** A field of a protobuf message: its number and its value by wire type. */
interface PbField {
  no: number;
  /** Varint (0) as a bigint, fixed64 (1) as a bigint, bytes (2), fixed32 (5). */
  value: bigint | Uint8Array | number;
}

/** The fields of one protobuf message, in order; malformed input is a 400. */
function pbFields(buf: Uint8Array): PbField[] {
  const view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  const out: PbField[] = [];
  let at = 0;
  const varint = (): bigint => {
    let x = 0n;
    for (let shift = 0n; shift < 70n; shift += 7n) {
      if (at >= buf.length) throw invalid('truncated protobuf varint');
      const b = buf[at++]!;
      x |= BigInt(b & 0x7f) << shift;
      if ((b & 0x80) === 0) return x;
    }
    throw invalid('protobuf varint too long');
  };
  while (at < buf.length) {
    const key = Number(varint());
    const no = key >>> 3;
    const wire = key & 7;
    if (wire === 0) out.push({ no, value: varint() });
    else if (wire === 1) {
      if (at + 8 > buf.length) throw invalid('truncated protobuf fixed64');
      out.push({ no, value: view.getBigUint64(at, true) });
      at += 8;
    } else if (wire === 2) {
      const n = Number(varint());
      if (at + n > buf.length) throw invalid('truncated protobuf field');
      out.push({ no, value: buf.subarray(at, at + n) });
      at += n;
    } else if (wire === 5) {
      if (at + 4 > buf.length) throw invalid('truncated protobuf fixed32');
      out.push({ no, value: view.getUint32(at, true) });
      at += 4;
    } else throw invalid(`unsupported protobuf wire type ${wire}`);
  }
  return out;
}

const utf8 = new TextDecoder();
const bytesOf = (f: PbField): Uint8Array =>
  f.value instanceof Uint8Array ? f.value : new Uint8Array();
const hex = (b: Uint8Array): string => Buffer.from(b).toString('hex');

/** Reads an OTLP/HTTP protobuf body (`ExportTraceServiceRequest`). */
export function spansFromProtobuf(body: Uint8Array): OtlpSpan[] {
  const out: OtlpSpan[] = [];
  for (const rs of pbFields(body)) {
    if (rs.no !== 1) continue; // resource_spans
    for (const ss of pbFields(bytesOf(rs))) {
      if (ss.no !== 2) continue; // scope_spans
      for (const s of pbFields(bytesOf(ss))) if (s.no === 2) out.push(pbSpan(bytesOf(s)));
    }
  }
  return out;
}

function pbSpan(buf: Uint8Array): OtlpSpan {
  const s: OtlpSpan = {
    traceId: '',
    spanId: '',
    name: '',
    startMs: 0,
    endMs: 0,
    error: false,
    statusMessage: '',
    attributes: {},
    events: [],
  };
  for (const f of pbFields(buf)) {
    if (f.no === 1) s.traceId = hex(bytesOf(f));
    else if (f.no === 2) s.spanId = hex(bytesOf(f));
    else if (f.no === 4 && bytesOf(f).length > 0) s.parentSpanId = hex(bytesOf(f));
    else if (f.no === 5) s.name = utf8.decode(bytesOf(f));
    else if (f.no === 7 && typeof f.value === 'bigint') s.startMs = Number(f.value / 1000n) / 1000;
    else if (f.no === 8 && typeof f.value === 'bigint') s.endMs = Number(f.value / 1000n) / 1000;
    else if (f.no === 9) addPbAttribute(s.attributes, bytesOf(f));
    else if (f.no === 11) {
      const e = { name: '', attributes: {} as Record<string, OtlpValue> };
      for (const g of pbFields(bytesOf(f))) {
        if (g.no === 2) e.name = utf8.decode(bytesOf(g));
        else if (g.no === 3) addPbAttribute(e.attributes, bytesOf(g));
      }
      s.events.push(e);
    } else if (f.no === 15) {
      for (const g of pbFields(bytesOf(f))) {
        if (g.no === 2) s.statusMessage = utf8.decode(bytesOf(g));
        else if (g.no === 3) s.error = g.value === 2n;
      }
    }
  }
  if (s.traceId.length !== 32 || s.spanId.length !== 16)
    throw invalid('a span without a 16-byte trace id and an 8-byte span id');
  return s;
}

function addPbAttribute(into: Record<string, OtlpValue>, kv: Uint8Array): void {
  let key: string | undefined;
  let value: Any;
  for (const f of pbFields(kv)) {
    if (f.no === 1) key = utf8.decode(bytesOf(f));
    else if (f.no === 2) value = pbValue(bytesOf(f));
  }
  if (key !== undefined) into[key] = flatten(value);
}

function pbValue(buf: Uint8Array): Any {
  let v: Any;
  for (const f of pbFields(buf)) {
    if (f.no === 1) v = utf8.decode(bytesOf(f));
    else if (f.no === 2) v = f.value === 1n;
    else if (f.no === 3) v = Number(BigInt.asIntN(64, f.value as bigint));
    else if (f.no === 4 && typeof f.value === 'bigint') {
      const b = new DataView(new ArrayBuffer(8));
      b.setBigUint64(0, f.value, true);
      v = b.getFloat64(0, true);
    } else if (f.no === 5) {
      v = pbFields(bytesOf(f))
        .filter((g) => g.no === 1)
        .map((g) => pbValue(bytesOf(g)));
    } else if (f.no === 6) {
      const m: Record<string, Any> = {};
      for (const g of pbFields(bytesOf(f))) {
        if (g.no !== 1) continue;
        let k = '';
        let x: Any;
        for (const h of pbFields(bytesOf(g))) {
          if (h.no === 1) k = utf8.decode(bytesOf(h));
          else if (h.no === 2) x = pbValue(bytesOf(h));
        }
        m[k] = x;
      }
      v = m;
    } else if (f.no === 7) v = hex(bytesOf(f));
  }
  return v;
}

/** `ExportTraceServiceResponse` in protobuf: empty, or with its `partial_success`. */
export function protobufResponse(p: PartialSuccess | undefined): Uint8Array {
  if (!p) return new Uint8Array();
  const msg = Buffer.from(p.errorMessage, 'utf8');
  const inner = Buffer.concat([
    Buffer.from([0x08]),
    varintBytes(BigInt(p.rejectedSpans)),
    Buffer.from([0x12]),
    varintBytes(BigInt(msg.length)),
    msg,
  ]);
  return Buffer.concat([Buffer.from([0x0a]), varintBytes(BigInt(inner.length)), inner]);
}

function varintBytes(x: bigint): Buffer {
  const out: number[] = [];
  do {
    const b = Number(x & 0x7fn);
    x >>= 7n;
    out.push(x > 0n ? b | 0x80 : b);
  } while (x > 0n);
  return Buffer.from(out);
}
