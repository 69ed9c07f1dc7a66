/**
 * A math agent rewarded by an LLM judge with a rubric instead of a rule: each answer is graded
 * 0–10 by a model behind any OpenAI-compatible endpoint (another checkpoint under `rtjob serve`,
 * vLLM, SGLang, a hosted API), and the reward is grade / 10. The judge's requests are bounded,
 * timed out and retried (`judge` in `rtjob/rewards`); a judge that fails or gives no grade fails
 * the episode (counted against `--agent-error-budget`), never a made-up reward.
 *
 *   npx rtjob serve --pretrain ./judge-model --port 8001 --api-key judge-key-123
 *   JUDGE_BASE_URL=http://127.0.0.1:8001/v1 JUDGE_API_KEY=judge-key-123 JUDGE_MODEL=judge-model \
 *     npx rtjob submit -- train_ppo --agent-func ./examples/judged-agent.ts
 */
import { judge } from 'rtjob/rewards';

/** What the judge grades against; the reference answer is the dataset's label. */
const rubric =
  'The response must solve the arithmetic and end with "The answer is N". ' +
  'Give 10 when N equals the reference answer, at most 2 when it differs, ' +
  'and take 1 off for reasoning that does not lead to N.';

export async function step(
  _observation: string,
  action: string,
  label: string | undefined,
  ctx: { sample: { prompt: string } },
) {
  const verdict = await judge(
    { prompt: ctx.sample.prompt, response: action, reference: label },
    {
      baseURL: process.env.JUDGE_BASE_URL ?? 'http://127.0.0.1:8001/v1',
      apiKey: process.env.JUDGE_API_KEY ?? '',
      model: process.env.JUDGE_MODEL ?? 'judge',
      rubric,
      maxConcurrency: 8,
      timeoutMs: 30_000,
    },
  );
  return { reward: verdict.reward, done: true, extraInfo: { judge_grade: verdict.grade } };
}
