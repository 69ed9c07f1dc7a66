/**
 * The dashboard's calls to the head: JSON over `/api/` (the login cookie carries the token) and
 * one EventSource for live updates.
 *
 * @module
 */

import { RtjobError } from '../../errors.ts';

export interface NodeView {
  nodeId: string;
  hostname: string;
  address: string;
  state: string;
  isHead: boolean;
  resourcesTotal: Record<string, number>;
  resourcesAvailable: Record<string, number>;
  memoryTotalBytes: number;
  memoryUsedBytes: number;
  workers: number;
  startedAt: number;
}

export interface ActorView {
  actorId: string;
  className: string;
  name: string | null;
  state: string;
  nodeId: string | null;
  pid: number | null;
  jobId: string | null;
  restarts: number;
  /** -1: unlimited. */
  maxRestarts?: number;
  detached: boolean;
  startedAt: number | null;
  endedAt: number | null;
  deathCause: string | null;
}

export interface JobInfo {
  jobId: string;
  status: string;
  entrypoint: string[];
  workingDir: string | null;
  env: Record<string, string>;
  inheritedEnvCount?: number;
  metadata: Record<string, string>;
  entrypointNumCpus: number;
  entrypointNumGpus: number;
  submittedAt: number;
  startedAt: number | null;
  endedAt: number | null;
  exitCode: number | null;
  message: string;
  /** How far it is (from its metrics and report). */
  progress?: JobProgress;
  /** What its driver said about itself (only on `GET /api/jobs/:id`). */
  report?: JobReport;
}

export interface JobProgress {
  step: number | null;
  totalSteps: number | null;
  etaMs: number | null;
  headline: { name: string; first: number | null; last: number | null } | null;
}

export interface ConfigRow {
  name: string;
  value: string;
  default?: string;
  source: 'flag' | 'env' | 'default';
  section?: string;
  help?: string;
}

export interface JobReport {
  totalSteps?: number;
  headline?: string;
  config?: ConfigRow[];
  outputs?: Record<string, string>;
}

/** One kept sample (train_ppo's episode fields; other jobs may send any fields). */
export interface SampleView {
  step: number;
  seq: number;
  key?: string;
  pick?: string;
  reward?: number;
  prompt?: string;
  label?: string;
  turns?: { role: string; text: string; tokens: number; toolCalls?: { name: string; arguments: string }[] }[];
  extraInfo?: Record<string, string | number | boolean>;
  versionMin?: number;
  versionMax?: number;
  staleness?: number;
  stopReason?: string;
  promptTokens?: number;
  responseTokens?: number;
  groupRewardMean?: number;
  error?: string;
}

export interface SamplesPage {
  steps: number[];
  step: number | null;
  samples: SampleView[];
}

/** `GET /api/version`: `readOnly` is set when a finished session is served. */
export interface VersionInfo {
  version: string;
  readOnly: { sessionDir: string } | null;
}

export interface ActorPage {
  total: number;
  offset: number;
  limit: number;
  rows: ActorView[];
  states: Record<string, number>;
}

export interface ClusterStatus {
  headAddress: string | null;
  nodes: NodeView[];
  resources: { total: Record<string, number>; used: Record<string, number> };
  actorsByState: Record<string, number>;
  jobsByStatus: Record<string, number>;
}

export interface MetricsTable {
  columns: string[];
  rows: (number | null)[][];
}

/** Thrown for a non-2xx answer, with the API's message and error code (`HTTP_<status>` if none). */
export class ApiError extends RtjobError {
  constructor(
    readonly status: number,
    message: string,
    code = `HTTP_${status}`,
  ) {
    super(code, message);
  }
}

export async function get<T>(path: string): Promise<T> {
  const res = await fetch(path, { credentials: 'same-origin' });
  if (!res.ok) throw new ApiError(res.status, ((await res.json().catch(() => ({}))) as { message?: string }).message ?? res.statusText);
  return (await res.json()) as T;
}

export async function post<T>(path: string, body: unknown = {}): Promise<T> {
  const res = await fetch(path, {
    method: 'POST',
    credentials: 'same-origin',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  if (!res.ok) throw new ApiError(res.status, ((await res.json().catch(() => ({}))) as { message?: string }).message ?? res.statusText);
  return (await res.json()) as T;
}

type Listener = (event: string, data: unknown) => void;
const listeners = new Set<Listener>();

/** Subscribes to live events (`job`, `metrics`, `cluster`); returns an unsubscribe function. */
export function onLive(fn: Listener): () => void {
  listeners.add(fn);
  return () => listeners.delete(fn);
}

/** Opens the event stream; `status` reports connected/reconnecting for the header. */
export function connectLive(status: (connected: boolean) => void): void {
  const es = new EventSource('/api/events');
  es.onopen = () => status(true);
  es.onerror = () => status(false);
  for (const name of ['job', 'metrics', 'cluster']) {
    es.addEventListener(name, (e) => {
      const data = JSON.parse((e as MessageEvent<string>).data) as unknown;
      for (const l of listeners) l(name, data);
    });
  }
}
