/**
 * LLM judges for reward functions: a model grades an episode against a rubric through any
 * OpenAI-compatible endpoint (`rtjob serve` of another checkpoint, vLLM, SGLang, a hosted API),
 * with the `openai` client an agent's own calls use, so a judge's request is timed out and retried
 * the same way (the client's `timeout`; `maxRetries` after a connection error, a timeout, 408,
 * 409, 429 or 5xx, backing off), and at most `maxConcurrency` grades are in flight per judge.
 *
 * The judge is asked to end its reply with `Score: N` (an integer from 0 to `scale`); the grade
 * is read from that, or failing it from `N/scale`, `\boxed{N}`, a JSON `"score"`, or a reply that
 * is only a number (the last such mark wins; a `<think>` block is ignored). A reply with no
 * grade in range, or a request that still fails after the retries, rejects with a
 * {@link JudgeError}: thrown from an agent, the episode counts as failed
 * (`--agent-error-budget`), never as a made-up reward.
 *
 * @example
 * import { judge } from 'rtjob/rewards';
 * const { reward } = await judge(
 *   { prompt: sample.prompt, response: answer, reference: sample.label },
 *   { baseURL: 'http://127.0.0.1:8001/v1', apiKey: process.env.JUDGE_KEY!, model: 'judge' },
 * );
 *
 * @module
 */
import type OpenAI from 'openai';
import { Semaphore } from '../runtime/semaphore.ts';
import { JudgeError } from './errors.ts';

/** Options of {@link Judge}. */
export interface JudgeOptions {
  /** The endpoint's base URL, `…/v1`. */
  baseURL: string;
  apiKey: string;
  /** The model the endpoint serves. */
  model: string;
  /** What a good response is; the judge grades against it. @default correctness and clarity */
  rubric?: string;
  /** The top grade: the judge answers 0..scale, the reward is grade / scale. @default 10 */
  scale?: number;
  /** Grades in flight at once; more wait their turn. @default 4 */
  maxConcurrency?: number;
  /** Limit on one request, as the `openai` client's `timeout`. @default 60_000 */
  timeoutMs?: number;
  /** Requests sent again after a retryable failure (the `openai` client's). @default 2 */
  maxRetries?: number;
  /** Tokens the judge may reply with. @default 256 */
  maxTokens?: number;
  /** @default 0 */
  temperature?: number;
}

/** Defaults of {@link JudgeOptions}. */
export const judgeDefaults = {
  rubric:
    'Grade whether the response correctly and clearly answers the question. A wrong final answer scores low however well it is written.',
  scale: 10,
  maxConcurrency: 4,
  timeoutMs: 60_000,
  maxRetries: 2,
  maxTokens: 256,
  temperature: 0,
} as const;

/** What is graded. */
export interface JudgeInput {
  /** The task as the policy saw it. */
  prompt: string;
  /** The policy's answer (or the episode's transcript). */
  response: string;
  /** A reference answer the judge may compare with. */
  reference?: string | undefined;
}

/** The judge's verdict. */
export interface JudgeVerdict {
  /** grade / scale, in [0, 1]. */
  reward: number;
  /** The grade as the judge gave it, 0..scale. */
  grade: number;
  /** The judge's whole reply. */
  reply: string;
}

/**
 * Grades episodes with one judge model; share one instance across episodes so the concurrency
 * bound holds (or call {@link judge}, which keeps one per endpoint and model).
 */
export class Judge {
  private readonly o: Required<Omit<JudgeOptions, 'baseURL' | 'apiKey' | 'model'>> & JudgeOptions;
  /** Made on the first grade: `openai` is the agent project's package, not rtjob's. */
  private client: Promise<OpenAI> | undefined;
  private readonly slots: Semaphore;

  constructor(o: JudgeOptions) {
    this.o = { ...judgeDefaults, ...o };
    if (!Number.isInteger(this.o.scale) || this.o.scale < 1)
      throw new JudgeError(`judge: scale must be an integer >= 1, got ${this.o.scale}`, o.model);
    this.slots = new Semaphore(this.o.maxConcurrency);
  }

  /** The `openai` client, imported from the caller's project on first use. */
  private openai(): Promise<OpenAI> {
    this.client ??= import('openai').then(
      ({ default: OpenAI }) =>
        new OpenAI({
          baseURL: this.o.baseURL,
          apiKey: this.o.apiKey,
          timeout: this.o.timeoutMs,
          maxRetries: this.o.maxRetries,
        }),
      (err: unknown) => {
        throw new JudgeError(
          `judge: the 'openai' package could not be loaded (${(err as Error).message.split('\n')[0]}); install it in your project: npm install openai`,
          this.o.model,
        );
      },
    );
    return this.client;
  }

  /** Grades in flight now, and waiting for a slot. */
  get load(): { inFlight: number; waiting: number } {
    return { inFlight: this.slots.inUse, waiting: this.slots.waiting };
  }

  /** The messages the judge is sent for `input`. */
  messages(input: JudgeInput): { role: 'system' | 'user'; content: string }[] {
    const { scale, rubric } = this.o;
    return [
      {
        role: 'system',
        content: `You are a strict grader. ${rubric}\nGive one short sentence of reasons, then end with a line "Score: N" where N is an integer from 0 (worst) to ${scale} (best).`,
      },
      {
        role: 'user',
        content:
          `Question:\n${input.prompt}\n\n` +
          (input.reference !== undefined ? `Reference answer:\n${input.reference}\n\n` : '') +
          `Response to grade:\n${input.response}`,
      },
    ];
  }

  /** Asks the judge; rejects with a {@link JudgeError} when it fails or gives no grade. */
  async grade(input: JudgeInput, opts: { signal?: AbortSignal } = {}): Promise<JudgeVerdict> {
    const reply = await this.slots.with(async () => {
      const client = await this.openai();
      try {
        const r = await client.chat.completions.create(
          {
            model: this.o.model,
            messages: this.messages(input),
            max_tokens: this.o.maxTokens,
            temperature: this.o.temperature,
          },
          opts.signal ? { signal: opts.signal } : {},
        );
        return r.choices[0]?.message.content ?? '';
      } catch (e) {
        throw new JudgeError(
          `judge ${this.o.model} at ${this.o.baseURL} failed: ${e instanceof Error ? e.message : String(e)}`,
          this.o.model,
          e,
        );
      }
    });
    const grade = parseGrade(reply, this.o.scale);
    if (grade === undefined)
      throw new JudgeError(
        `judge ${this.o.model} gave no grade 0-${this.o.scale}: ${JSON.stringify(reply.slice(0, 200))}`,
        this.o.model,
      );
    return { reward: grade / this.o.scale, grade, reply };
  }
}

const judges = new Map<string, Judge>();

/**
 * Grades `input` with the judge `o` names: one {@link Judge} per endpoint, key, model and
 * settings is kept for the process, so calls from concurrent episodes share its concurrency bound.
 */
export function judge(
  input: JudgeInput,
  o: JudgeOptions & { signal?: AbortSignal },
): Promise<JudgeVerdict> {
  const { signal, ...options } = o;
  const key = JSON.stringify(Object.entries(options).sort(([a], [b]) => a.localeCompare(b)));
  let j = judges.get(key);
  if (!j) judges.set(key, (j = new Judge(options)));
  return j.grade(input, signal ? { signal } : {});
}

/**
 * The grade in a judge's reply, 0..scale, or undefined when there is none in range. The last
 * mark of the first kind found wins: `Score: N` (also Grade/Rating, `N/scale` after it), then a
 * bare `N/scale`, `\boxed{N}`, a JSON `"score": N`, a reply that is only a number.
 */
export function parseGrade(reply: string, scale: number): number | undefined {
  const text = reply.replace(/<think>[\s\S]*?(<\/think>|$)/g, ' ');
  const num = String.raw`(-?\d+(?:\.\d+)?)`;
  const kinds = [
    new RegExp(String.raw`\b(?:score|grade|rating)\s*[:=]?\s*\**\s*${num}`, 'gi'),
    new RegExp(String.raw`${num}\s*/\s*${scale}\b`, 'g'),
    new RegExp(String.raw`\\boxed\{\s*${num}\s*\}`, 'g'),
    new RegExp(String.raw`"score"\s*:\s*${num}`, 'g'),
    new RegExp(String.raw`^\s*${num}\s*\.?\s*$`, 'g'),
  ];
  for (const re of kinds) {
    const marks = [...text.matchAll(re)];
    if (marks.length === 0) continue;
    const g = Number(marks[marks.length - 1]![1]);
    return g >= 0 && g <= scale ? g : undefined;
  }
  return undefined;
}
