/**
 * The agent gateway: an OpenAI- and Anthropic-compatible HTTP endpoint (`/v1/chat/completions`,
 * `/v1/responses`, `/v1/messages`, `/v1/models`) in front of the run's inference engine. Each agent episode gets
 * its own random key, valid only while the episode runs; the key selects the episode's token
 * session, so one episode can never read or extend another's. Bound to loopback by default.
 * Every route is one entry of the gateway's route table, dispatched in one place.
 *
 * @module
 */
import { createHash, randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { ChatTokenizer } from '../model/tokenizer.ts';
import type { AgentTrace } from '../runtime/agent-trace.ts';
import { ChatCompletionStream, chatCompletionBody, chatCompletionId } from './chat-completions.ts';
import { parseChatRequest } from './chat-request.ts';
import {
  complete,
  renderPrompt,
  type CompletionContext,
  type CompletionResult,
  type GatewayEngine,
} from './completion.ts';
import { EpisodeTrace, traceLimits } from './episode-trace.ts';
import { GatewayError } from './errors.ts';
import { MessagesStream, messageId, parseMessagesRequest, sendMessage } from './messages.ts';
import { spansFromAgentsSdk } from './agents-sdk-traces.ts';
import { protobufResponse, spansFromJson, spansFromProtobuf } from './otlp.ts';
import { ResponseStore } from './response-store.ts';
import { handleResponses } from './responses.ts';
import { sendJson } from './sse.ts';
import { TokenSession } from './token-session.ts';
import { parseTraceparent, type TraceParent } from './trace-context.ts';
import { forcedOpening } from './tool-choice.ts';
import { toolCallParser } from './tool-parsers.ts';
import * as v from './validate.ts';

/** How a gateway is built. */
export interface GatewayOptions {
  engine: GatewayEngine;
  tokenizer: ChatTokenizer;
  /** The model name clients pass (`/v1/models` lists it). */
  model: string;
  /** Prompt + completion cap in tokens. */
  contextLength: number;
  /** Completion cap and default `max_tokens`. @default contextLength */
  maxNewTokens?: number;
  /** @default 'hermes' */
  toolCallParser?: string;
  /** Sampling that overrides the client's (training: the run's settings). */
  fixedSampling?: { temperature: number; topP: number };
  /**
   * Bridge mode: a turn whose re-rendered prompt no longer extends its trajectory continues it
   * where provably safe (`bridge.ts`); off, it starts a new trajectory. @default true
   */
  bridge?: boolean;
  /** Compare every turn's rendered prompt with the recorded tokens and keep drift reports. @default false */
  checkDrift?: boolean;
  /** @default '127.0.0.1' */
  host?: string;
  /** @default 0 (a free port) */
  port?: number;
  /** Request bodies above this are refused with 413. @default 16 MiB */
  maxBodyBytes?: number;
}

/** A key and what it opens: a recording session (agent episodes) or none (`rtjob serve`). */
interface KeyEntry {
  session: TokenSession | undefined;
  /** The episode's spans and model calls (agent episodes only). */
  trace?: EpisodeTrace;
  /** Responses stored with this key (`previous_response_id` finds only these). */
  responses: ResponseStore;
  /** This key's completions are generated with these settings (evaluation: greedy). */
  ctx?: CompletionContext;
}

/** An open session handed to one agent episode. */
export interface GatewaySession {
  apiKey: string;
  session: TokenSession;
  /** The spans its agent exported (`POST /v1/traces`) and its model calls. */
  trace: EpisodeTrace;
  /** The two joined, as a kept sample carries them; undefined when the agent sent no trace. */
  agentTrace(): AgentTrace | undefined;
  /** Revokes the key; requests in flight finish but record nothing more. */
  close(): void;
}

/** One request as its route's handler sees it. */
interface RouteCall {
  req: IncomingMessage;
  res: ServerResponse;
  /** The path, normalised (no trailing slash, the doubled `/v1` of some clients removed). */
  path: string;
  entry: KeyEntry;
  ctx: CompletionContext;
  /** Aborted when the client goes away. */
  signal: AbortSignal;
  /** The client's SDK says this is a retry of an earlier attempt. */
  retry: boolean;
  /** Keeps a model call for the episode's trace. */
  note(id: string, r: CompletionResult): void;
  /** The JSON body, for routes that take one (its `model` checked). */
  body: unknown;
  /** Set by a handler whose stream is under way: ends it with the error, true if it could. */
  failStream?: (e: GatewayError) => boolean;
  /** The engine's share of the answer's time (the gateway's own overhead is the rest). */
  engineMs?: number;
}

/** One entry of the gateway's route table. */
interface Route {
  method: 'GET' | 'POST';
  /** Also serves the paths under it (`/v1/models/{id}`). */
  prefix?: boolean;
  /** Takes a JSON body whose `model` must be the served one. */
  json?: boolean;
  /** Errors in Anthropic's shape (`/v1/messages`). */
  anthropic?: boolean;
  /** Carries no W3C `traceparent` to note (the trace export routes themselves). */
  untraced?: boolean;
  run(c: RouteCall): Promise<void> | void;
}

/** Anthropic's token counting route. */
const countTokens = '/v1/messages/count_tokens';

/** How many recent requests {@link Gateway.overheadMs} keeps. */
const overheadWindow = 4096;

/** The OpenAI-compatible endpoint; start it with {@link Gateway.start}. */
export class Gateway {
  private readonly keys = new Map<string, KeyEntry>();
  /** A server of fixed keys (`rtjob serve`) rather than of agent episodes: errors say so. */
  private serving = false;
  private readonly overhead: number[] = [];

  private readonly ctx: CompletionContext;
  private readonly maxBodyBytes: number;
  private constructor(
    private readonly server: Server,
    private readonly o: GatewayOptions,
  ) {
    this.ctx = {
      engine: o.engine,
      tokenizer: o.tokenizer,
      parser: toolCallParser(o.toolCallParser ?? 'hermes'),
      contextLength: o.contextLength,
      maxNewTokens: o.maxNewTokens ?? o.contextLength,
      bridge: o.bridge ?? true,
      ...(o.fixedSampling ? { fixedSampling: o.fixedSampling } : {}),
    };
    this.maxBodyBytes = o.maxBodyBytes ?? 16 << 20;
  }

  /** Starts listening (loopback, a free port unless told otherwise). */
  static async start(o: GatewayOptions): Promise<Gateway> {
    const server = createServer();
    const g = new Gateway(server, o);
    server.on('request', (req, res) => void g.handle(req, res));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(o.port ?? 0, o.host ?? '127.0.0.1', () => resolve());
    });
    return g;
  }

  /** `http://host:port/v1`, what agents pass as `baseURL`. */
  get baseURL(): string {
    const a = this.server.address() as AddressInfo;
    const host = a.family === 'IPv6' ? `[${a.address}]` : a.address;
    return `http://${host}:${a.port}/v1`;
  }

  get model(): string {
    return this.o.model;
  }

  /** Sessions open now. */
  get openSessions(): number {
    let n = 0;
    for (const e of this.keys.values()) if (e.session) n++;
    return n;
  }

  /**
   * Milliseconds each recent completion spent in the gateway itself: from the request's first
   * byte to the response's last, less the time waiting for the engine (bench/gateway.ts).
   */
  get overheadMs(): readonly number[] {
    return this.overhead;
  }

  /**
   * Opens a recording session with a fresh key for one episode; `fixedSampling` overrides the
   * gateway's for this session (evaluation episodes decode greedily: `{ temperature: 0, topP: 1 }`).
   */
  openSession(o: { fixedSampling?: { temperature: number; topP: number } } = {}): GatewaySession {
    const apiKey = `rtj-${randomBytes(24).toString('base64url')}`;
    const session = new TokenSession(
      this.o.checkDrift
        ? (ids) => this.o.tokenizer.decode(ids, { skipSpecialTokens: false })
        : undefined,
    );
    const h = hashKey(apiKey);
    const trace = new EpisodeTrace();
    this.keys.set(h, {
      session,
      trace,
      responses: new ResponseStore(),
      ...(o.fixedSampling ? { ctx: { ...this.ctx, fixedSampling: o.fixedSampling } } : {}),
    });
    return {
      apiKey,
      session,
      trace,
      agentTrace: () =>
        trace.build((id) => this.o.tokenizer.decode([id], { skipSpecialTokens: false })),
      close: () => {
        session.close();
        this.keys.delete(h);
      },
    };
  }

  /** Accepts `apiKey` for requests that record nothing (`rtjob serve`). */
  addStaticKey(apiKey: string): void {
    this.serving = true;
    this.keys.set(hashKey(apiKey), { session: undefined, responses: new ResponseStore() });
  }

  /** Stops listening and drops every key. */
  async close(): Promise<void> {
    this.keys.clear();
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  /**
   * Every route of the gateway, dispatched in one place ({@link handle}): its method, whether it
   * also serves the paths under it, whether it takes a JSON body naming the model, whether its
   * errors take Anthropic's shape, and its handler. A new route is one entry.
   */
  private readonly routes: Readonly<Record<string, Route>> = {
    '/v1/chat/completions': { method: 'POST', json: true, run: (c) => this.chat(c) },
    '/v1/responses': { method: 'POST', json: true, run: (c) => this.responses(c) },
    '/v1/messages': { method: 'POST', json: true, anthropic: true, run: (c) => this.messages(c) },
    [countTokens]: { method: 'POST', json: true, anthropic: true, run: (c) => this.countTokens(c) },
    '/v1/models': { method: 'GET', prefix: true, run: (c) => this.models(c.res, c.path) },
    '/v1/traces': { method: 'POST', untraced: true, run: (c) => this.traces(c, false) },
    '/v1/traces/ingest': { method: 'POST', untraced: true, run: (c) => this.traces(c, true) },
  };

  /** The route of `path`: its own, or the one whose `prefix` covers it. */
  private route(path: string): Route | undefined {
    const exact = Object.hasOwn(this.routes, path) ? this.routes[path] : undefined;
    if (exact) return exact;
    const base = Object.keys(this.routes).find((p) => path.startsWith(`${p}/`));
    return base && this.routes[base]!.prefix ? this.routes[base] : undefined;
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const t0 = performance.now();
    // Aborted when the client goes away before the answer is complete (a timeout, an abort).
    const gone = new AbortController();
    res.once('close', () => {
      if (!res.writableFinished) gone.abort();
    });
    let path = (req.url ?? '/').split('?')[0]!.replace(/\/+$/, '');
    // `new Anthropic({ baseURL })` with the agent's `…/v1` base asks for `/v1/v1/messages`.
    path = path.replace(/^\/v1\/v1\/messages/, '/v1/messages');
    // An OTLP exporter given the agent's base URL (`…/v1`) as its endpoint appends `/v1/traces`.
    path = path.replace(/^\/v1\/v1\/traces$/, '/v1/traces');
    const route = this.route(path);
    const anthropic = route?.anthropic ?? path.startsWith('/v1/messages');
    let call: RouteCall | undefined;
    res.once('finish', () => {
      if (call?.engineMs === undefined) return;
      if (this.overhead.push(performance.now() - t0 - call.engineMs) > overheadWindow)
        this.overhead.shift();
    });
    try {
      const entry = this.authorize(req);
      if (!route) throw new GatewayError(404, 'not_found', `no route ${req.method} ${path}`);
      if (req.method !== route.method) throw methodNotAllowed(req.method);
      const trace = route.untraced ? undefined : parseTraceparent(req.headers.traceparent);
      if (trace) entry.session?.noteTrace(trace.traceId);
      const startMs = performance.timeOrigin + t0;
      call = {
        req,
        res,
        path,
        entry,
        ctx: entry.ctx ?? this.ctx,
        signal: gone.signal,
        // Stainless SDKs (openai, @anthropic-ai/sdk) number their attempts; > 0 is a retry.
        retry: Number(req.headers['x-stainless-retry-count'] ?? 0) > 0,
        note: (id, r) => this.noteCall(entry, trace, id, r, startMs),
        body: undefined,
      };
      if (route.json) {
        call.body = await this.readJson(req);
        this.checkModel(call.body);
      }
      await route.run(call);
    } catch (err) {
      const e =
        err instanceof GatewayError
          ? err
          : new GatewayError(500, 'engine_error', err instanceof Error ? err.message : String(err));
      // A stream already under way ends with an error event, which the client raises.
      if (call?.failStream?.(e)) return;
      if (res.headersSent) res.end();
      else sendJson(res, e.status, anthropic ? e.toAnthropicBody() : e.toBody());
    }
  }

  /** `POST /v1/chat/completions`, streamed or not. */
  private async chat(c: RouteCall): Promise<void> {
    const chat = parseChatRequest(c.body);
    const id = chatCompletionId();
    const stream = chat.stream
      ? new ChatCompletionStream(c.res, chat, this.o.tokenizer, this.o.model, id)
      : undefined;
    if (stream) c.failStream = (e) => stream.fail(e.toBody());
    const result = await complete(c.ctx, chat, c.entry.session, c.signal, stream, {
      retry: c.retry,
    });
    c.engineMs = result.engineMs;
    c.note(id, result);
    if (stream) return stream.end(result);
    sendJson(c.res, 200, chatCompletionBody(chat, result, this.o.tokenizer, this.o.model, id));
  }

  /** `POST /v1/responses` (`responses.ts`). */
  private async responses(c: RouteCall): Promise<void> {
    const { entry } = c;
    const r = await handleResponses(
      c.res,
      c.body,
      c.ctx,
      this.o.model,
      entry.session,
      c.signal,
      entry.responses,
      c.retry,
    );
    c.engineMs = r.engineMs;
    if (r.responseId !== undefined) c.note(r.responseId, r);
  }

  /** `POST /v1/messages` (Anthropic), streamed or not. */
  private async messages(c: RouteCall): Promise<void> {
    const m = parseMessagesRequest(c.body);
    const id = messageId();
    const stream = m.stream ? new MessagesStream(c.res, this.o.model, id) : undefined;
    if (stream) c.failStream = (e) => stream.fail(e);
    const result = await complete(c.ctx, m.req, c.entry.session, c.signal, stream, {
      retry: c.retry,
    });
    c.engineMs = result.engineMs;
    c.note(id, result);
    if (stream) return stream.end(result);
    sendMessage(c.res, this.o.model, result, id);
  }

  /** `POST /v1/messages/count_tokens` (Anthropic): the prompt's length as this model renders it. */
  private countTokens(c: RouteCall): void {
    const { req: r } = parseMessagesRequest(c.body, true);
    const opening = forcedOpening(this.o.tokenizer, c.ctx.parser, r.tools, r.toolChoice);
    const ids = renderPrompt(this.o.tokenizer, r, opening);
    sendJson(c.res, 200, { input_tokens: ids.length });
  }

  /** Keeps a model call of an agent episode for its trace (`episode-trace.ts`). */
  private noteCall(
    entry: KeyEntry,
    trace: TraceParent | undefined,
    responseId: string,
    r: CompletionResult,
    startMs: number,
  ): void {
    entry.trace?.addCall({
      responseId,
      ...(trace ? { traceId: trace.traceId, parentSpanId: trace.parentId } : {}),
      startMs,
      endMs: performance.timeOrigin + performance.now(),
      promptTokens: r.promptTokens,
      completions: r.choices.map((c) => ({
        ids: c.ids,
        logprobs: c.logprobs,
        versions: c.versions,
      })),
    });
  }

  /**
   * `POST /v1/traces`: an OTLP/HTTP trace export (JSON or protobuf) from an episode's agent, kept
   * with the episode's model calls. Spans over the episode's limit are refused in the answer's
   * `partialSuccess`, as OTLP specifies; a key that opens no episode (`rtjob serve`) keeps nothing.
   * `POST /v1/traces/ingest` takes the OpenAI Agents SDK exporter's JSON the same way
   * (`agents-sdk-traces.ts`).
   */
  private async traces(c: RouteCall, agentsSdk: boolean): Promise<void> {
    const { req, res, entry } = c;
    const type = (req.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
    const protobuf =
      !agentsSdk && (type === 'application/x-protobuf' || type === 'application/protobuf');
    if (!protobuf && type !== 'application/json') {
      throw new GatewayError(
        415,
        'unsupported_media_type',
        agentsSdk
          ? `Agents SDK traces come as application/json, not '${type}'`
          : `OTLP traces come as application/json or application/x-protobuf, not '${type}'`,
      );
    }
    const raw = await this.readBody(req, traceLimits.maxBodyBytes);
    let spans;
    if (protobuf) spans = spansFromProtobuf(raw);
    else if (agentsSdk) spans = spansFromAgentsSdk(parseJson(raw));
    else spans = spansFromJson(parseJson(raw));
    const partial = entry.trace
      ? entry.trace.addSpans(spans)
      : { rejectedSpans: spans.length, errorMessage: 'this key opens no agent episode' };
    if (protobuf) {
      res.writeHead(200, { 'content-type': 'application/x-protobuf' });
      res.end(protobufResponse(partial));
      return;
    }
    sendJson(res, 200, partial ? { partialSuccess: partial } : {});
  }

  /** The key of `Authorization: Bearer` (OpenAI) or `x-api-key` (Anthropic). */
  private authorize(req: IncomingMessage): KeyEntry {
    const bearer = /^Bearer\s+(\S+)\s*$/i.exec(req.headers.authorization ?? '')?.[1];
    const header = req.headers['x-api-key'];
    const key = bearer ?? (typeof header === 'string' && header !== '' ? header : undefined);
    if (key === undefined) {
      throw new GatewayError(
        401,
        'invalid_api_key',
        'You did not provide an API key: send Authorization: Bearer <key> or x-api-key: <key>.',
      );
    }
    const entry = this.keys.get(hashKey(key));
    if (!entry) {
      throw new GatewayError(
        401,
        'invalid_api_key',
        this.serving
          ? 'Incorrect API key provided: use the key the server printed when it started (--api-key or RTJOB_SERVE_API_KEY sets one).'
          : "Incorrect API key provided: an agent's key is env.apiKey, valid only while its episode runs (build the client from env.baseURL and env.apiKey, not from OPENAI_API_KEY).",
      );
    }
    return entry;
  }

  private models(res: ServerResponse, path: string): void {
    const card = { id: this.o.model, object: 'model', created: 0, owned_by: 'rtjob' };
    if (path === '/v1/models') return sendJson(res, 200, { object: 'list', data: [card] });
    const id = decodeURIComponent(path.slice('/v1/models/'.length));
    if (id !== this.o.model) throw this.unknownModel(id);
    sendJson(res, 200, card);
  }

  private checkModel(body: unknown): void {
    const model = v.string(v.object(body, 'body')['model'], 'model');
    if (model !== this.o.model) throw this.unknownModel(model);
  }

  private unknownModel(id: string): GatewayError {
    return new GatewayError(
      404,
      'model_not_found',
      `The model '${id}' does not exist; this gateway serves one model, '${this.o.model}'` +
        (this.serving ? ' (see GET /v1/models).' : ': pass env.model as the model.'),
      'model',
    );
  }

  private async readJson(req: IncomingMessage): Promise<unknown> {
    return parseJson(await this.readBody(req, this.maxBodyBytes));
  }

  private async readBody(req: IncomingMessage, max: number): Promise<Buffer> {
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const c of req) {
      size += (c as Buffer).length;
      if (size > max) {
        throw new GatewayError(413, 'request_too_large', `request body over ${max} bytes`);
      }
      chunks.push(c as Buffer);
    }
    return Buffer.concat(chunks);
  }
}

function parseJson(raw: Buffer): unknown {
  try {
    return JSON.parse(raw.toString('utf8'));
  } catch (err) {
    throw new GatewayError(
      400,
      'invalid_json',
      `body is not valid JSON: ${(err as Error).message}`,
      'body',
    );
  }
}

// Keys are kept hashed: a lookup never compares secrets character by character.
function hashKey(key: string): string {
  return createHash('sha256').update(key).digest('hex');
}

function methodNotAllowed(method: string | undefined): GatewayError {
  return new GatewayError(405, 'method_not_allowed', `method ${method ?? '?'} not allowed here`);
}
