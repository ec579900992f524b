/**
 * Small memory budgets (`memory.*`, 7.4 MiB in all) for the flood scripts run in processes of
 * their own (memory-flood.ts, realm-flood-heap.ts): a flood fills them in seconds, so the
 * heap's growth shows whether anything is held outside them.
 */
export const SMALL_BUDGETS = {
  featureLevelsBytes: 128 * 1024,
  userDirectoriesBytes: 1024 * 1024,
  snapshotsBytes: 4 * 1024 * 1024,
  answersBytes: 1024 * 1024,
  ledgersBytes: 1024 * 1024,
  lookupsBytes: 128 * 1024,
  callersBytes: 128 * 1024,
};
