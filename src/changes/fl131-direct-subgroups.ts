import type { ApiChange } from './types.js';

/** A user group with `direct_subgroup_ids: []` where it has none (an older server has no subgroups). */
export function withDirectSubgroups(group: unknown): unknown {
  if (typeof group !== 'object' || group === null || Array.isArray(group) || 'direct_subgroup_ids' in group) return group;
  return { ...group, direct_subgroup_ids: [] };
}

/**
 * Feature level 131 (Zulip 6.0): a user group's `direct_subgroup_ids` (127 brought subgroups as
 * `subgroups`; 131 renamed them). A 5.x server has no subgroups: `[]`, in register's
 * `realm_user_groups` and in `user_group add` events' `group`, which the app's parsers require
 * (a group without it fails the whole `/events` batch).
 */
export const directSubgroups: ApiChange = {
  featureLevel: 131,
  feature: 'user_group_direct_subgroup_ids',
  register: {
    fields: [],
    edit(answer) {
      const groups = answer.realm_user_groups;
      if (!Array.isArray(groups)) return false;
      const edited = groups.map(withDirectSubgroups);
      answer.realm_user_groups = edited;
      return edited.some((g, i) => g !== groups[i]);
    },
  },
  answer: {
    messageFields: [],
    eventFields: { user_group: ['group'] },
    marker: '"user_group"',
    up: withDirectSubgroups,
  },
};
