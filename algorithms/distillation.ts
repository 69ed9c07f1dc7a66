/**
 * On-policy distillation (`--teacher-pretrain`): the student samples, a teacher scores the
 * student's own tokens, and the per-token reverse KL on the sampled token, log π_T − log π_S,
 * becomes a per-token advantage (Thinking Machines' "On-Policy Distillation", 2025; verl, NeMo-RL
 * and TRL's GKD ship the same signal). Each token's advantage is its own reverse-KL term
 * (discount 0): the teacher grades every token, so no credit has to flow back from the end.
 *
 * @module
 */
import { AlgorithmError, invalidOption } from './errors.ts';

/** Options of {@link distillAdvantages}. */
export interface DistillOptions {
  /** Weight of the reverse-KL advantage (`--teacher-kl-coef`). @default 1 */
  teacherKlCoef?: number;
  /** Weight of the task's own advantage; 0 distils alone (`--task-reward-coef`). @default 1 */
  taskRewardCoef?: number;
}

/** Defaults of {@link DistillOptions}. */
export const distillDefaults = { teacherKlCoef: 1, taskRewardCoef: 1 };

/** Validates {@link DistillOptions}; errors name the flag. */
export function resolveDistillOptions(o: DistillOptions = {}): Required<DistillOptions> {
  const r = {
    teacherKlCoef: o.teacherKlCoef ?? distillDefaults.teacherKlCoef,
    taskRewardCoef: o.taskRewardCoef ?? distillDefaults.taskRewardCoef,
  };
  if (!(r.teacherKlCoef >= 0 && Number.isFinite(r.teacherKlCoef)))
    throw invalidOption('--teacher-kl-coef', `must be >= 0 (got ${r.teacherKlCoef})`);
  if (!(r.taskRewardCoef >= 0 && Number.isFinite(r.taskRewardCoef)))
    throw invalidOption('--task-reward-coef', `must be >= 0 (got ${r.taskRewardCoef})`);
  return r;
}

type Rows = readonly ArrayLike<number>[];

/**
 * Per-token advantages `A'_t = c_task·A_t + c_T·(log π_T(a_t) − log π_S(a_t))` on action tokens
 * (0 elsewhere), with the mean reverse KL `log π_S − log π_T` over action tokens: how far the
 * student still is from the teacher on its own samples. Rows are aligned like the samples'
 * (`algorithms/experience.ts`).
 *
 * @example
 * const { advantages, reverseKl } = distillAdvantages(batch.advantages, masks, oldLogprobs, teacher);
 */
export function distillAdvantages(
  taskAdvantages: Rows,
  masks: Rows,
  studentLogprobs: Rows,
  teacherLogprobs: Rows,
  opts: DistillOptions = {},
): { advantages: Float32Array[]; reverseKl: number } {
  const o = resolveDistillOptions(opts);
  let sum = 0;
  let n = 0;
  const advantages = masks.map((m, r) => {
    const a = taskAdvantages[r];
    const s = studentLogprobs[r];
    const t = teacherLogprobs[r];
    if (!a || !s || !t || a.length !== m.length || s.length !== m.length || t.length !== m.length) {
      throw new AlgorithmError(
        'SHAPE_MISMATCH',
        `row ${r}: advantages, student and teacher logprobs must match the mask's length ${m.length}`,
        { field: 'teacherLogprobs', index: r },
      );
    }
    const out = new Float32Array(m.length);
    for (let i = 0; i < m.length; i++) {
      if (!m[i]) continue;
      const rkl = (s[i] as number) - (t[i] as number);
      if (!Number.isFinite(rkl)) {
        throw new AlgorithmError(
          'NON_FINITE_INPUT',
          `teacher or student logprob of row ${r} token ${i} is not finite`,
          { field: 'teacherLogprobs', index: r },
        );
      }
      out[i] = o.taskRewardCoef * (a[i] as number) - o.teacherKlCoef * rkl;
      sum += rkl;
      n++;
    }
    return out;
  });
  return { advantages, reverseKl: n > 0 ? sum / n : 0 };
}
