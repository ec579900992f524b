/**
 * S3 in one wording: what presence does while the shared store (Redis) cannot be reached, as the
 * log lines (store/redis-health.ts, presence/ledger-io.ts), the store-errors metric's help, the
 * README and docs/deployment.md say it (test/store-away.test.ts holds them to it). "Full data":
 * a modern poll is answered from the upstream's answer itself, never a delta from a ledger copy
 * that misses it; "no new ids": it carries the client's own `last_update_id` back (-1 if it sent
 * none), so clients go on from their id once the store is back.
 */
export const STORE_AWAY_PRESENCE = 'presence polls get full data and no new ids until it is back';
