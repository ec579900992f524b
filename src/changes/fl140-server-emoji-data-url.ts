import type { ApiChange } from './types.js';

/**
 * Where the shim serves the emoji names, on the realm's URL: the path (unhashed) at which a 6.0
 * or later server serves the same data itself (`generated/emoji/emoji_api.json`).
 */
export const EMOJI_DATA_PATH = '/static/generated/emoji/emoji_api.json';

/**
 * The upstream's own emoji codes, which every server since 2.x writes at build time
 * (tools/setup/emoji/build_emoji) and serves among its static files (prod-static/serve, where
 * its own zerver/lib/emoji.py reads them): `codepoint_to_name` (code → canonical name) and
 * `name_to_codepoint` (every name, canonical or alias → code), both from the same EMOJI_NAME_MAPS
 * a 6.0 server builds `code_to_names` from.
 */
export const EMOJI_CODES_PATH = '/static/generated/emoji/emoji_codes.json';

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * Pure: `{"code_to_names": {code: [canonical, ...aliases]}}`, as a 6.0 server's
 * generate_codepoint_to_names_map writes it, from a server's emoji_codes.json; undefined when the
 * file does not hold both maps. Aliases keep the order the file lists them in.
 */
export function emojiDataOf(emojiCodes: unknown): { code_to_names: Record<string, string[]> } | undefined {
  if (!isObject(emojiCodes)) return undefined;
  const { codepoint_to_name: canonical, name_to_codepoint: every } = emojiCodes;
  if (!isObject(canonical) || !isObject(every)) return undefined;
  const names = new Map<string, string[]>();
  for (const [code, name] of Object.entries(canonical)) if (typeof name === 'string') names.set(code, [name]);
  for (const [name, code] of Object.entries(every)) {
    const list = typeof code === 'string' ? names.get(code) : undefined;
    if (list && !list.includes(name)) list.push(name);
  }
  return names.size === 0 ? undefined : { code_to_names: Object.fromEntries(names) };
}

/**
 * Feature level 140 (Zulip 6.0): register's `server_emoji_data_url`, the URL of the server's
 * Unicode emoji names, which the app requires (zulip-flutter d2d5613c) and fetches for its emoji
 * picker and autocomplete. An older server has the same names only in its static emoji codes
 * file: the shim serves them, built from that file (so the names are the server's own), at
 * EMOJI_DATA_PATH on the realm's URL.
 */
export const serverEmojiDataUrl: ApiChange = {
  featureLevel: 140,
  feature: 'server_emoji_data_url',
  staticData: {
    field: 'server_emoji_data_url',
    path: EMOJI_DATA_PATH,
    source: EMOJI_CODES_PATH,
    build: emojiDataOf,
  },
};
