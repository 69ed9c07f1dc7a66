/**
 * How the job page lays out train_ppo's metrics, sent with the run's report: reward first, then
 * the policy, timing and system groups, the key charts of each first, the step time split as one
 * chart with a line per phase. The dashboard knows no metric by name; this table does.
 *
 * @module
 */
import type { JobReport } from '../../runtime/metrics.ts';

/** train_ppo's chart layout (`report.charts`). */
export const trainPpoCharts: NonNullable<JobReport['charts']> = {
  groups: [
    {
      title: 'Reward',
      first: ['reward_mean', 'eval_accuracy', 'reward_std', 'zero_std_groups', 'pass_rate'],
      match: '^(reward|eval_|pass_rate|zero_std|info/)',
    },
    {
      title: 'Policy',
      first: [
        'kl',
        'policy_loss',
        'entropy',
        'clip_fraction',
        'grad_norm',
        'response_length',
        'response_length_max',
        'response_clip_ratio',
        'value_loss',
      ],
      match:
        '^(kl|policy_|value_|entropy|clip|grad|response_|staleness|version_span|loss|is_|importance|logprob)',
    },
    {
      title: 'Timing',
      first: ['step_time_split', 'step_s', 'tokens_per_s', 'samples_per_s', 'episodes_per_s'],
      match: '(_s|_per_s|_fraction)$|^step_time_split$',
    },
    {
      title: 'System',
      first: ['buffer_fill', 'version', 'samples', 'episodes', 'episodes_failed', 'groups_dropped'],
    },
  ],
  multi: {
    step_time_split: {
      title: 'step time split (s): generate / experience / train / sync',
      members: ['generate_s', 'experience_s', 'train_s', 'weight_sync_s'],
    },
  },
  neverFolded: ['reward_mean', 'eval_accuracy'],
};
