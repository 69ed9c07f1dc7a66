/**
 * W3C Trace Context (`traceparent`): the header an OpenTelemetry-instrumented agent (the AI SDK,
 * VoltAgent, the OpenAI Agents SDK's exporters; not Mastra 1.x) sends with each model call,
 * naming the trace and span the call belongs to. The gateway records the trace ids an episode's
 * calls carry, so a kept sample names the agent's own trace (`extraInfo.trace_id`) beside its exact
 * tokens.
 *
 * @module
 */

/** A parsed `traceparent`. */
export interface TraceParent {
  /** 32 lowercase hex digits. */
  traceId: string;
  /** The caller's span: 16 lowercase hex digits. */
  parentId: string;
  sampled: boolean;
}

/**
 * Parses a `traceparent` header as the W3C recommendation reads it: `version-traceid-parentid-
 * flags`, lowercase hex; version `ff` and all-zero ids are invalid; version 00 has exactly four
 * fields, a later version may add more after them. Anything invalid is ignored (undefined), as the
 * recommendation asks of a receiver.
 */
export function parseTraceparent(header: string | string[] | undefined): TraceParent | undefined {
  if (typeof header !== 'string') return undefined;
  const parts = header.trim().split('-');
  const [version, traceId, parentId, flags] = parts;
  if (!version || !/^[0-9a-f]{2}$/.test(version) || version === 'ff') return undefined;
  if (version === '00' ? parts.length !== 4 : parts.length < 4) return undefined;
  if (!traceId || !/^[0-9a-f]{32}$/.test(traceId) || /^0+$/.test(traceId)) return undefined;
  if (!parentId || !/^[0-9a-f]{16}$/.test(parentId) || /^0+$/.test(parentId)) return undefined;
  if (!flags || !/^[0-9a-f]{2}$/.test(flags)) return undefined;
  return { traceId, parentId, sampled: (parseInt(flags, 16) & 1) === 1 };
}
