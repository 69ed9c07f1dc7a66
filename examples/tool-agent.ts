/**
 * A tool-using math agent, written as any TypeScript developer writes one: the official `openai`
 * client, chat completions with a `calculator` tool, and a loop that runs the tool calls the model
 * makes and sends their results back. It knows nothing of training: `train_ppo` points `baseURL`
 * at its gateway, which records the exact tokens of every turn.
 *
 *   npx rtjob submit -- train_ppo --agent-func ./examples/tool-agent.ts --pretrain model/pretrained/rtjob-tiny-tool
 *
 * The shipped tool model knows the call format but answers directly almost always; calling the
 * calculator is right far more often, and RL finds that out (README, "A tool-use run").
 */
import OpenAI from 'openai';
import type {
  ChatCompletionMessageParam,
  ChatCompletionTool,
} from 'openai/resources/chat/completions';
import { gsm8kReward } from 'rtjob/rewards';

/** The tool as the model is offered it. */
export const calculator: ChatCompletionTool = {
  type: 'function',
  function: {
    name: 'calculator',
    description: 'Evaluates an arithmetic expression with + - * / and parentheses.',
    parameters: {
      type: 'object',
      properties: { expression: { type: 'string', description: 'e.g. 47+38' } },
      required: ['expression'],
    },
  },
};

/** Model calls per episode: a tool call, then the answer (one more call allowed). */
const maxTurns = 3;

/** An answer cut off by the token limit: worse than a wrong one, so answers keep ending. */
const truncatedReward = -1;

/**
 * One episode: ask, run every tool call, ask again, until the model answers without calling a
 * tool; the answer is scored by the math reward against the gold `#### N`.
 */
export async function agent(
  sample: { prompt: string; label?: string },
  env: { baseURL: string; apiKey: string; model: string; signal?: AbortSignal },
) {
  const client = new OpenAI({ baseURL: env.baseURL, apiKey: env.apiKey });
  const messages: ChatCompletionMessageParam[] = [{ role: 'user', content: sample.prompt }];
  let toolCalls = 0;
  let badCalls = 0;
  for (let turn = 1; turn <= maxTurns; turn++) {
    const res = await client.chat.completions.create(
      { model: env.model, messages, tools: [calculator] },
      { signal: env.signal },
    );
    const choice = res.choices[0]!;
    const extraInfo = {
      used_tool: toolCalls > 0 ? 1 : 0,
      tool_calls: toolCalls,
      bad_calls: badCalls,
      turns: turn,
    };
    if (choice.finish_reason === 'length') return { reward: truncatedReward, extraInfo };
    messages.push(choice.message);
    if (!choice.message.tool_calls?.length) {
      return { reward: gsm8kReward(choice.message.content ?? '', sample.label ?? ''), extraInfo };
    }
    for (const call of choice.message.tool_calls) {
      toolCalls++;
      const content =
        call.type === 'function'
          ? runCalculator(call.function.name, call.function.arguments)
          : 'error: unknown tool';
      if (content.startsWith('error')) badCalls++;
      messages.push({ role: 'tool', tool_call_id: call.id, content });
    }
  }
  return {
    reward: 0,
    extraInfo: { used_tool: 1, tool_calls: toolCalls, bad_calls: badCalls, turns: maxTurns },
  };
}

/** The tool: `{"expression": "47+38"}` → `85`; anything else → `error: ...` for the model to read. */
export function runCalculator(name: string, args: string): string {
  if (name !== 'calculator') return `error: unknown tool ${name}`;
  try {
    const { expression } = JSON.parse(args) as { expression?: unknown };
    if (typeof expression !== 'string') return 'error: expected {"expression": "..."}';
    const value = evaluate(expression);
    return Number.isFinite(value) ? String(Math.round(value * 1e6) / 1e6) : 'error: not a number';
  } catch (e) {
    return `error: ${e instanceof Error ? e.message : String(e)}`;
  }
}

/** + - * / and parentheses over decimal numbers, by recursive descent (no `eval`). */
export function evaluate(expression: string): number {
  const tokens = expression.match(/\d+(?:\.\d+)?|[-+*/()]|\S/g) ?? [];
  let i = 0;
  const peek = (): string | undefined => tokens[i];
  const atom = (): number => {
    const t = tokens[i++];
    if (t === '-') return -atom();
    if (t === '(') {
      const v = sum();
      if (tokens[i++] !== ')') throw new Error('missing )');
      return v;
    }
    if (t === undefined || !/^\d/.test(t)) throw new Error(`unexpected ${t ?? 'end'}`);
    return Number(t);
  };
  const product = (): number => {
    let v = atom();
    while (peek() === '*' || peek() === '/') v = tokens[i++] === '*' ? v * atom() : v / atom();
    return v;
  };
  const sum = (): number => {
    let v = product();
    while (peek() === '+' || peek() === '-')
      v = tokens[i++] === '+' ? v + product() : v - product();
    return v;
  };
  const v = sum();
  if (i < tokens.length) throw new Error(`unexpected ${tokens[i]}`);
  return v;
}
